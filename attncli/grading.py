"""When one written cell is right: the rule `attn check` marks by, in one place.

A cell is correct when it is the exact value rounded to the decimals written, ±1 in the last place
(either rounding at an exact tie); with fewer than `Rule.decimals` decimals it must equal the
exact value, and a value right only at its few decimals is *near* (marked imprecise).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attncli.mistakes import plural

DECIMALS = 2  # the default least number of decimals a value needs unless it is exact
UNKNOWN_DECIMALS = 4  # assumed when the written form is unknown (an .npy file)


@dataclass(frozen=True)
class Rule:
    """When a cell is correct: at the decimals written (with at least `decimals` unless exact),
    or within `tol` of the right value when a tolerance is given."""

    decimals: int = DECIMALS
    tol: float | None = None

    def text(self) -> str:
        """The rule in words, for the table footer (`--help` and the README say the same)."""
        if self.tol is not None:
            return f"correct: within ±{self.tol:g} of the exact value"
        return (f"correct: the exact value rounded to the decimals you wrote (±1 in the last place, "
                f"either way at a tie); with fewer than {plural(self.decimals, 'decimal')} only an exact "
                "value is correct, others are imprecise")


def grade(given: np.ndarray, decimals: np.ndarray, target: np.ndarray, rule: Rule) -> tuple[np.ndarray, np.ndarray]:
    """Per cell (correct, near): correct under `rule`; near = right at the decimals written, which
    is correct unless fewer than `rule.decimals` were written (then the cell is imprecise)."""
    # |given − target| overflows to inf for a learner's ±1e308: such a cell is simply not close.
    with np.errstate(over="ignore", invalid="ignore"):
        return _grade(given, decimals, target, rule)


def _grade(given, decimals, target, rule):
    both_inf = np.isneginf(given) & np.isneginf(target)
    finite = np.isfinite(given) & np.isfinite(target)
    g, t = np.where(finite, given, 0.0), np.where(finite, target, 0.0)
    if rule.tol is not None:
        close = finite & (np.abs(g - t) <= rule.tol * (1 + 1e-9))
        return both_inf | close, both_inf | close
    d = np.where(decimals < 0, max(UNKNOWN_DECIMALS, rule.decimals), decimals)
    unit = 10.0 ** -d
    noise = 1e-9 * unit + 1e-12 * np.abs(t)
    shifted = t * 10.0 ** d  # d goes up to values.MAX_DECIMALS
    # Where t · 10^d overflows, t has no digits left to round at d decimals.
    rounded = np.where(np.isfinite(shifted), np.round(shifted) / 10.0 ** d, t)
    # ±1 in the last written place (whole numbers must round exactly); at a tie both ways.
    near = (np.abs(g - rounded) <= np.where(d > 0, unit, 0.0) + noise) | (np.abs(g - t) <= 0.5 * unit + noise)
    exact = np.abs(g - t) <= 1e-9 * np.maximum(1.0, np.abs(t))
    correct = np.where(d >= rule.decimals, near, exact)
    return both_inf | (finite & correct), both_inf | (finite & near)
