"""Nested lists (from JSON, CSV or inline text) or arrays (from .npy) to checked numpy arrays.

Every error names the field and the offending element, e.g. `Q[1] has 1 entry, Q[0] has 2`.
"""

from __future__ import annotations

import math

import numpy as np

from attncli.errors import InputError, quote

FLOAT_MAX = float(np.finfo(np.float64).max)  # a Python float: int comparisons stay exact


def describe(value) -> str:
    """A short, user-facing name for what was found."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and abs(value) >= 10**20:
        return f"a {len(str(abs(value)))}-digit number"
    if isinstance(value, (int, float)):
        return f"the number {value!r}" if math.isfinite(value) else f"the number {value}"
    if isinstance(value, str):
        return f"the string {quote(value if len(value) <= 20 else value[:17] + '...')}"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _entries(n: int) -> str:
    return f"{n} entr{'y' if n == 1 else 'ies'}"


def _shape(value, field: str, max_dims: int, depth: int = 0) -> tuple[int, ...]:
    """The rectangular shape of nested lists; raise on ragged or too deep nesting."""
    if not isinstance(value, list):
        return ()
    if depth == max_dims:
        raise InputError(f"{field} is nested more than {max_dims} levels deep; "
                         f"expected at most {max_dims} dimensions")
    if not value:
        raise InputError(f"{field} is empty; expected numbers")
    first = _shape(value[0], f"{field}[0]", max_dims, depth + 1)
    for i, item in enumerate(value[1:], start=1):
        if isinstance(item, list) != isinstance(value[0], list):
            raise InputError(f"{field}[{i}] is {describe(item)} but {field}[0] is "
                             f"{describe(value[0])}: every row must have the same shape")
        if isinstance(item, list) and len(item) != len(value[0]):
            raise InputError(f"{field}[{i}] has {_entries(len(item))}, "
                             f"{field}[0] has {len(value[0])}")
        if len(first) > 1:
            shape = _shape(item, f"{field}[{i}]", max_dims, depth + 1)
            if shape != first:
                raise InputError(f"{field}[{i}] has shape {shape}, {field}[0] has {first}")
    return (len(value),) + first


def _leaves(value, path: str, depth: int):
    """Yield (path, leaf) for every element `depth` levels down."""
    if depth == 0:
        yield path, value
    else:
        for i, item in enumerate(value):
            yield from _leaves(item, f"{path}[{i}]", depth - 1)


def _number(x, where: str, kind: str):
    """One checked scalar of the given kind: 'number', 'bias' (-inf allowed) or 'mask'."""
    if kind == "mask":
        if isinstance(x, (bool, int, float)) and x in (0, 1):  # floats include `Written` ones
            return bool(x)
        raise InputError(f"{where} is {describe(x)}; expected true/false or 1/0")
    if kind == "bias" and (x is None or (isinstance(x, str) and x.strip().lower() in ("-inf", "-∞", "−∞"))):
        return -math.inf
    if type(x) is int:
        if abs(x) > FLOAT_MAX:
            raise InputError(f"{where} is a {len(str(abs(x)))}-digit integer, too large for float64")
        return float(x)
    if isinstance(x, float):  # a float, or a `Written` float that remembers its decimals
        if math.isfinite(x):
            return x
        if kind == "bias" and x == -math.inf:
            return x
        raise InputError(f"{where} is {x}; expected a finite number")
    expected = "a number, null or \"-inf\"" if kind == "bias" else "a number"
    raise InputError(f"{where} is {describe(x)}; expected {expected}")


def _fast_numbers(value) -> bool:
    """True when every leaf is a plain int or float (the common case, checked cheaply)."""
    if not isinstance(value, list):
        return type(value) is int or isinstance(value, float)
    if value and not isinstance(value[0], list):
        return all(type(x) is int or isinstance(x, float) for x in value)
    return all(_fast_numbers(v) for v in value)


def as_array(value, field: str, kind: str = "number", max_dims: int = 3) -> np.ndarray:
    """Check and convert one matrix-like value; 1-D and scalars keep their dimensions."""
    if isinstance(value, np.ndarray):
        return _checked_ndarray(value, field, kind, max_dims)
    if not isinstance(value, list):
        raise InputError(f"{field} is {describe(value)}; expected "
                         + ("true/false values in nested lists" if kind == "mask"
                            else "numbers in nested lists"))
    shape = _shape(value, field, max_dims)
    dtype = bool if kind == "mask" else np.float64
    if kind == "number" and _fast_numbers(value):
        try:
            array = np.array(value, dtype=np.float64)
        except OverflowError:
            array = None  # a huge int: fall through to the element-wise check that names it
        if array is not None and np.isfinite(array).all():
            return array
    flat = [_number(x, where, kind) for where, x in _leaves(value, field, len(shape))]
    return np.array(flat, dtype=dtype).reshape(shape)


def _checked_ndarray(array: np.ndarray, field: str, kind: str, max_dims: int) -> np.ndarray:
    if array.ndim > max_dims:
        raise InputError(f"{field} has {array.ndim} dimensions; expected at most {max_dims}")
    if array.ndim == 0:
        raise InputError(f"{field} is a single number; expected a matrix")
    if array.size == 0:
        raise InputError(f"{field} is empty (shape {array.shape}); expected numbers")
    if kind == "mask":
        if array.dtype == bool:
            return array
        if array.dtype.kind in "iuf" and np.isin(array, (0, 1)).all():
            return array.astype(bool)
        raise InputError(f"{field} holds {array.dtype} values other than 0 and 1; "
                         "expected a boolean mask")
    if array.dtype.kind not in "iuf":
        raise InputError(f"{field} has dtype {array.dtype}; expected real numbers")
    array = array.astype(np.float64)
    bad = ~np.isfinite(array)
    if kind == "bias":
        bad &= array != -np.inf
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        where = field + "".join(f"[{i}]" for i in index)
        raise InputError(f"{where} is {array[index]}; expected a finite number")
    return array


class Written(float):
    """A number as a learner wrote it: the float, and how many decimals the text had
    (`0.0454` → 4, `4.54e-2` → 4, `3` → 0). `attn check` marks at that precision."""

    __slots__ = ("decimals",)

    @classmethod
    def parse(cls, token: str) -> "Written":
        value = cls(token)
        mantissa, _, exponent = token.strip().lower().partition("e")
        value.decimals = max(0, len(mantissa.partition(".")[2]) - int(exponent or 0))
        return value

    def __repr__(self) -> str:
        return float.__repr__(self)


def decimals_of(value, shape: tuple[int, ...]) -> np.ndarray:
    """The written decimals of every leaf of nested lists (-1 where unknown: ints give 0)."""
    flat = []

    def walk(v):
        if isinstance(v, list):
            for item in v:
                walk(item)
        else:
            flat.append(getattr(v, "decimals", 0 if type(v) is int else -1))
    walk(value)
    return np.array(flat, dtype=int).reshape(shape) if len(flat) == int(np.prod(shape)) else np.full(shape, -1)
