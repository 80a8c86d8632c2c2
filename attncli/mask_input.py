"""Input keys for the mask rules (attncli/masks.py evaluates them) to validated fields of `Problem`:
`mask` (a word or a true/false matrix), `causal`, `window`, `key_mask`, `q_positions`, `k_positions`.

Every error carries the key it is about as its `field`, and starts with it
(`q_positions[2] is 1.5; expected …`).
"""

from __future__ import annotations

import math

import numpy as np

from attncli.errors import InputError, did_you_mean, quote
from attncli.masks import MASK_WORDS, default_positions, lower_right_positions
from attncli.values import HugeInt, as_array, describe

RULE_KEYS = ("causal", "window", "key_mask", "q_positions", "k_positions")
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
    return f"{n} entr{'y' if n == 1 else 'ies'}"


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
        raise InputError(f"{field} has shape {array.shape}; expected {lk} entries, one true/false per key", field=field)
    array = array.copy()
    array.flags.writeable = False
    return array


def _flag(value, field: str) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{field} is {describe(value)}; expected true or false", field=field)
    return value


def read_rules(doc: dict, grid, heads: int, lq: int, lk: int, invert: bool) -> dict:
    """The `Problem` fields of the mask rules. `grid(value, field, kind, heads, lq, lk)` reads a
    given matrix (problem.py's reader, shared with the bias)."""
    mask, rule, causal = None, None, False
    value = doc.get("mask")
    if isinstance(value, str):
        if value not in MASK_WORDS:
            hint = did_you_mean(value, MASK_WORDS, 0.4)
            raise InputError(f'mask is {quote(value)}{hint}; expected {" or ".join(MASK_WORDS)} '
                             "or a true/false matrix", field="mask")
        rule, causal = value, True
    elif value is not None:
        mask = grid(value, "mask", "mask", heads, lq, lk)
        mask = ~mask if invert else mask
        rule = "matrix"
    if doc.get("causal") is not None:
        causal = _flag(doc["causal"], "causal") or causal
    q = None if doc.get("q_positions") is None else positions(doc["q_positions"], "q_positions", lq, "query")
    if rule == "causal_lower_right":
        if q is not None:
            raise InputError("q_positions is given with mask causal_lower_right, which sets them to "
                             f"Lk − Lq … Lk − 1 ({lk - lq} … {lk - 1}); give mask causal with the "
                             "positions, or drop q_positions", field="q_positions")
        q = lower_right_positions(lq, lk)
    k = None if doc.get("k_positions") is None else positions(doc["k_positions"], "k_positions", lk, "key")
    q = default_positions(lq) if q is None else q
    k = default_positions(lk) if k is None else k
    for array in (q, k):
        array.flags.writeable = False
    if mask is not None:
        mask.flags.writeable = False
    return {"mask": mask, "mask_rule": rule, "causal": causal, "q_positions": q, "k_positions": k,
            "window": None if doc.get("window") is None else window(doc["window"]),
            "key_mask": None if doc.get("key_mask") is None else key_mask(doc["key_mask"], "key_mask", lk)}
