"""What a variant's reader (attncli/problem/variants.py) needs besides its key's value: the document,
the query heads, and the readers of values that need numpy (the records themselves load none).

Every error carries the key it is about as its `field`, and starts with it
(`sinks[1] is "a"; expected …`).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from attncli.base.errors import InputError, plural
from attncli.base.values import HugeInt, describe


def _number(value, field: str, expected: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, HugeInt, np.integer, np.floating)) \
            or isinstance(value, HugeInt) or not math.isfinite(float(value)):
        raise InputError(f"{field} is {describe(value)}; expected {expected}", field=field)
    return float(value)


class Reading:
    """A variant reader's second argument. `doc`: the whole document (a variant may read a key
    written beside its own, as ALiBi reads alibi_slopes); `heads`: the query heads; `decimals(x)`:
    the decimals a JSON number was written with (attncli/document/json_text.py)."""

    def __init__(self, doc: dict, heads: int, decimals: Callable[[object], int]):
        self.doc, self.heads, self.decimals = doc, heads, decimals

    describe = staticmethod(describe)

    def number(self, value, field: str, expected: str, above: float | None = None, why: str = "") -> float:
        """One finite number (above `above` when given; `why` ends the message then)."""
        found = _number(value, field, expected)
        if above is not None and not found > above:
            raise InputError(f"{field} is {describe(value)}; expected {expected}{why}", field=field)
        return found

    def per_head(self, value, field: str, one_for_all: bool = False) -> np.ndarray:
        """(H,) float64, read-only: a list of one number per query head (or one number for all)."""
        heads = self.heads
        if isinstance(value, np.ndarray):
            value = value.tolist()
        if one_for_all and not isinstance(value, list):
            value = [_number(value, field, "a number or a list of one number per query head")] * heads
        if not isinstance(value, list):
            raise InputError(f"{field} is {describe(value)}; expected a list of {plural(heads, 'number')}, one per query head",
                             field=field)
        if len(value) != heads:
            raise InputError(f"{field} has {plural(len(value), 'entry')}; expected {heads}, "
                             "one per query head", field=field)
        array = np.array([_number(x, f"{field}[{i}]", "a finite number") for i, x in enumerate(value)], np.float64)
        array.flags.writeable = False
        return array
