"""Nested lists (from JSON, CSV or inline text) or arrays (from .npy) to checked numpy arrays.

Every error names the field and the offending element, e.g. `Q[1] has 1 entry, Q[0] has 2`.
"""

from __future__ import annotations

import json
import math

import numpy as np

from attncli.base.errors import InputError, plural, quote

FLOAT_MAX = float(np.finfo(np.float64).max)  # a Python float: int comparisons stay exact
FLOAT_DIGITS = 309  # FLOAT_MAX has 309 digits: an integer with more is always too large for float64
MAX_DECIMALS = 308  # decimals a `Typed` number remembers at most: 10^308 is the last finite power


class HugeInt:
    """A JSON integer with more digits than any float64 can hold, kept as its digit count only:
    Python refuses int() of very long digit strings (sys.set_int_max_str_digits), and the number
    is an error wherever it appears, with the field named by `_number` or `describe`."""

    __slots__ = ("digits",)

    def __init__(self, digits: int):
        self.digits = digits


def json_int(token: str):
    """json.loads' parse_int: an int, or a HugeInt for one with more than FLOAT_DIGITS digits."""
    digits = len(token.lstrip("-"))
    return HugeInt(digits) if digits > FLOAT_DIGITS else int(token)


def excerpt(token: str, quoted: bool = False, limit: int = 40) -> str:
    """A token for a message, shortened when long: `99999999999999999999…99999 (5000 characters)`
    (with `quoted`, the token part is quoted and escaped)."""
    short = token if len(token) <= limit else f"{token[:limit // 2]}…{token[-5:]}"
    text = quote(short) if quoted else short
    return text if len(token) <= limit else f"{text} ({len(token)} characters)"


def describe(value) -> str:
    """A short, user-facing name for what was found."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, HugeInt):
        return f"a {value.digits}-digit number"
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
    if hasattr(value, "shape") and hasattr(value, "dtype"):  # a numpy array (an .npz's member)
        return f"an array of {value.dtype} with shape {tuple(value.shape)}"
    return type(value).__name__


def _entries(n: int) -> str:
    return plural(n, "entry")


def _shape(value, field: str, max_dims: int, depth: int = 0) -> tuple[int, ...]:
    """The rectangular shape of nested lists; raise on ragged or too deep nesting."""
    if not isinstance(value, list):
        return ()
    if depth == max_dims:
        raise InputError(f"{field} is nested more than {max_dims} levels deep; "
                         f"expected at most {max_dims} dimensions", field=field)
    if not value:
        raise InputError(f"{field} is empty; expected numbers", field=field)
    first = _shape(value[0], f"{field}[0]", max_dims, depth + 1)
    for i, item in enumerate(value[1:], start=1):
        if isinstance(item, list) != isinstance(value[0], list):
            raise InputError(f"{field}[{i}] is {describe(item)} but {field}[0] is "
                             f"{describe(value[0])}: every row must have the same shape", field=f"{field}[{i}]")
        if isinstance(item, list) and len(item) != len(value[0]):
            raise InputError(f"{field}[{i}] has {_entries(len(item))}, "
                             f"{field}[0] has {len(value[0])}", field=f"{field}[{i}]")
        if len(first) > 1:
            shape = _shape(item, f"{field}[{i}]", max_dims, depth + 1)
            if shape != first:
                raise InputError(f"{field}[{i}] has shape {shape}, {field}[0] has {first}", field=f"{field}[{i}]")
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
        if isinstance(x, (bool, int, float)) and x in (0, 1):  # floats include `Typed` ones
            return bool(x)
        raise InputError(f"{where} is {describe(x)}; expected true/false or 1/0", field=where)
    if kind == "bias" and (x is None or (isinstance(x, str) and x.strip().lower() in ("-inf", "-∞", "−∞"))):
        return -math.inf
    if isinstance(x, HugeInt) or (type(x) is int and abs(x) > FLOAT_MAX):
        digits = x.digits if isinstance(x, HugeInt) else len(str(abs(x)))
        raise InputError(f"{where} is a {digits}-digit integer, too large for float64", field=where)
    if type(x) is int:
        return float(x)
    if isinstance(x, float):  # a float, or a `Typed` float that remembers its decimals
        if math.isfinite(x):
            return x
        if kind == "bias" and x == -math.inf:
            return x
        raise InputError(f"{where} is {x}; expected a finite number", field=where)
    expected = "a number, null or \"-inf\"" if kind == "bias" else "a number"
    raise InputError(f"{where} is {describe(x)}; expected {expected}", field=where)


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
                            else "numbers in nested lists"), field=field)
    shape = _shape(value, field, max_dims)
    dtype = bool if kind == "mask" else np.float64
    if kind == "number" and _fast_numbers(value):
        try:
            array = np.array(value, dtype=np.float64)
        except (OverflowError, ValueError):
            # A huge int, or a list where a number belongs ([[1, 2], [[3], 4]]: _shape checks
            # only the first row's leaves): the element-wise check below names the element.
            array = None
        if array is not None and np.isfinite(array).all():
            return array
    flat = [_number(x, where, kind) for where, x in _leaves(value, field, len(shape))]
    return np.array(flat, dtype=dtype).reshape(shape)


def scalar(value, field: str) -> float:
    """A setting such as `scale`: a finite number (a JSON integer of any length is measured,
    never converted, so a 401-digit one is an error rather than an OverflowError)."""
    if isinstance(value, HugeInt) or (type(value) is int and abs(value) > FLOAT_MAX):
        return _number(value, field, "number")  # raises: "scale is a 401-digit integer, …"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{field} is {describe(value)}; expected a finite number", field=field)
    return float(value)


def whole_count(value, field: str) -> int:
    """A count such as `heads` or `kv_heads`: a whole number ≥ 1 (4.0 counts; 4.5, true, "4" and
    a 401-digit integer do not)."""
    if isinstance(value, bool) or isinstance(value, HugeInt) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value != int(value) or value < 1:
        raise InputError(f"{field} is {describe(value)}; expected a whole number ≥ 1", field=field)
    return int(value)


def _checked_ndarray(array: np.ndarray, field: str, kind: str, max_dims: int) -> np.ndarray:
    if array.ndim > max_dims:
        raise InputError(f"{field} has {array.ndim} dimensions; expected at most {max_dims}", field=field)
    if array.ndim == 0:
        raise InputError(f"{field} is a single number; expected a matrix", field=field)
    if array.size == 0:
        raise InputError(f"{field} is empty (shape {array.shape}); expected numbers", field=field)
    if kind == "mask":
        if array.dtype == bool:
            return array
        if array.dtype.kind in "iuf" and np.isin(array, (0, 1)).all():
            return array.astype(bool)
        raise InputError(f"{field} holds {array.dtype} values other than 0 and 1; "
                         "expected a boolean mask", field=field)
    if array.dtype.kind not in "iuf":
        raise InputError(f"{field} has dtype {array.dtype}; expected real numbers", field=field)
    # Read like JSON numbers: each value rounded to the nearest float64 (longdouble included);
    # one that overflows float64 is an error naming it, never a RuntimeWarning beside it.
    with np.errstate(over="ignore"):
        converted = array.astype(np.float64)
    bad = ~np.isfinite(converted)
    if kind == "bias":
        bad &= converted != -np.inf
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        where = field + "".join(f"[{i}]" for i in index)
        if np.isfinite(array[index]):
            raise InputError(f"{where} is {str(array[index])}, "
                             f"too large for float64 (the file's dtype is {array.dtype})", field=where)
        raise InputError(f"{where} is {converted[index]}; expected a finite number", field=where)
    return converted


class Typed(float):
    """A number as a learner typed it: the float, and how many decimals the text had
    (`0.0454` → 4, `4.54e-2` → 4, `3` → 0). `attn check` marks at that precision."""

    __slots__ = ("decimals",)

    @classmethod
    def parse(cls, token: str) -> "Typed":
        value = cls(token)
        mantissa, _, exponent = token.strip().lower().partition("e")
        places = len(mantissa.partition(".")[2])
        # An exponent's digits are counted before int() reads them: "0e-99999999999999999999"
        # is a valid zero whose decimals are capped, not an overflow (or a refused long int).
        shift = int(exponent or 0) if len(exponent.lstrip("+-")) <= 6 else (
            -10**6 if exponent.startswith("-") else 10**6)
        value.decimals = min(MAX_DECIMALS, max(0, places - shift))
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


class RepeatedKey(ValueError):
    """A JSON object with a key given twice."""


def unique_keys(pairs: list) -> dict:
    """json.loads' object_pairs_hook: an object whose keys are all different (JSON would
    otherwise keep the last one silently); a key given twice is a RepeatedKey saying which."""
    obj = {}
    for key, value in pairs:
        if key in obj:
            raise RepeatedKey(f"the key {quote(key)} appears twice in one object")
        obj[key] = value
    return obj


def object_text(value, field: str):
    """An object key (rope, q_norm, …) as an .npz holds it, whose arrays hold no objects: its JSON
    text, read back to the object, where a key given twice is an error naming `field`, as in any
    JSON attncli reads. Anything else (text that is not a JSON object included) is returned as it
    is, for the key's reader to refuse."""
    if isinstance(value, str) and value.startswith("{"):
        try:
            return json.loads(value, object_pairs_hook=unique_keys)
        except RepeatedKey as error:
            raise InputError(f"{field}, given as JSON text: {error}", field=field) from None
        except ValueError:
            pass
    return value
