"""The values of the mask rules' input keys, validated: positions, a window, a key mask, a length, a flag
(attncli/problem/rules.py reads each rule with them).

Every error carries the key it is about as its `field`, and starts with it
(`q_positions[2] is 1.5; expected …`).
"""

from __future__ import annotations

import math

import numpy as np

from attncli.base.errors import InputError, plural
from attncli.base.values import HugeInt, as_array, describe

# Positions and window bounds up to 2^53: exact in JSON's doubles, and q_pos ± bound stays far from
# int64's limits.
LIMIT = 2**53


def _whole(value, field: str, low: int, expected: str) -> int:
    """One whole number from `low` to LIMIT; 4.0 counts, 4.5, true and "4" do not."""
    if isinstance(value, bool) or not isinstance(value, (int, float, HugeInt, np.integer)):
        raise InputError(f"{field} is {describe(value)}; expected {expected}", field=field)
    if isinstance(value, HugeInt) or (isinstance(value, float) and not math.isfinite(value)) \
            or not low <= value <= LIMIT:
        if low == 0 and not isinstance(value, HugeInt) and value < 0:
            raise InputError(f"{field} is {describe(value)}; expected a whole number ≥ 0 or null "
                             "(use null for unbounded, not -1)", field=field)
        raise InputError(f"{field} is {describe(value)}; expected {expected} from "
                         f"{'-2^53' if low == -LIMIT else low} to 2^53", field=field)
    if value != int(value):
        raise InputError(f"{field} is {describe(value)}; expected {expected}", field=field)
    return int(value)


def _entries(n: int) -> str:
    return plural(n, "entry")


def _list(value, field: str, length: int, of: str) -> list:
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if not isinstance(value, list):
        raise InputError(f"{field} is {describe(value)}; expected a list of {length} ({of})", field=field)
    if len(value) != length:
        raise InputError(f"{field} has {_entries(len(value))}; expected {length}, {of}", field=field)
    return value


def positions(value, field: str, length: int, axis: str) -> np.ndarray:
    """(L,) int64, read-only: whole numbers, any order, gaps and repeats allowed."""
    items = _list(value, field, length, f"one position per {axis}")
    array = np.array([_whole(p, f"{field}[{i}]", -LIMIT, "a whole number") for i, p in enumerate(items)],
                     dtype=np.int64)
    array.flags.writeable = False
    return array


def window(value, field: str = "window") -> tuple[int | None, int | None]:
    """[left, right]: whole numbers ≥ 0 or null (unbounded); in an array (.npz), NaN is null."""
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        value = [None if math.isnan(b) else b for b in value.tolist()]
    items = _list(value, field, 2, "[left, right]: keys before and after the query, null = unbounded")
    left, right = (None if b is None else _whole(b, f"{field}[{i}]", 0, "a whole number ≥ 0 or null")
                   for i, b in enumerate(items))
    return left, right


def key_mask(value, field: str, lk: int) -> np.ndarray:
    """(Lk,) bool, read-only, true = a real key."""
    if isinstance(value, list) and len(value) != lk:
        raise InputError(f"{field} has {_entries(len(value))}; expected {lk}, one true/false per key", field=field)
    array = as_array(value, field, kind="mask", max_dims=1)
    if array.ndim != 1 or array.shape[0] != lk:
        raise InputError(f"{field} has shape {array.shape}; expected {plural(lk, 'entry')}, one true/false per key", field=field)
    array = array.copy()
    array.flags.writeable = False
    return array


def length(value, field: str) -> int:
    """A whole number ≥ 0 (a prefix's length): 2 or 2.0, not 2.5, true or "2"."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool) and value < 0:
        raise InputError(f"{field} is {describe(value)}; expected a whole number ≥ 0", field=field)
    return _whole(value, field, 0, "a whole number ≥ 0")


def flag(value, field: str) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{field} is {describe(value)}; expected true or false", field=field)
    return value
