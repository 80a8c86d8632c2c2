"""When one written cell is right, and what a marked stage is: the rule `attn check` marks by,
in one place, and the records every marking module shares (an `Answer`, a `StageMark`, the cell
statuses), below marking.py, marking_backward.py and tile_marks.py and the answers reader.

A cell is correct when it is the exact value rounded to the decimals written, ±1 in the last place
(either rounding at an exact tie); with fewer than `Rule.decimals` decimals it must equal the
exact value, and a value right only at its few decimals is *near* (marked imprecise).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attncli.base.errors import plural

DECIMALS = 2  # the default least number of decimals a value needs unless it is exact
TYPED_DECIMALS = 6  # a number with at most this many decimals was written by hand; more, it was computed
UNKNOWN_DECIMALS = 4  # the precision noted for a cell whose written form is unknown (an array, an .npy file)
STATUSES = ("correct", "carried", "wrong", "imprecise", "missing")
SYMBOLS = {"correct": "✓", "carried": "↪", "wrong": "✗", "imprecise": "~", "missing": "?"}  # in tables


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
    d = np.where(decimals < 0, rule.decimals, decimals)  # an array's cells: at the problem's decimals
    unit = 10.0 ** -d
    noise = 1e-9 * unit + 1e-12 * np.abs(t)
    shifted = t * 10.0 ** d  # d goes up to values.MAX_DECIMALS
    # Where t · 10^d overflows, t has no digits left to round at d decimals.
    rounded = np.where(np.isfinite(shifted), np.round(shifted) / 10.0 ** d, t)
    # ±1 in the last written place (whole numbers must round exactly); at a tie both ways. With
    # fewer than rule.decimals decimals, only the exact value correctly rounded (a tie either way) is
    # near: 0.4 for 0.2775 is wrong, not imprecise.
    rounds = np.abs(g - t) <= 0.5 * unit + noise
    slack = np.where((d > 0) & (d >= rule.decimals), unit, 0.0)
    near = (np.abs(g - rounded) <= slack + noise) | rounds
    exact = np.abs(g - t) <= 1e-9 * np.maximum(1.0, np.abs(t))
    correct = np.where(d >= rule.decimals, near, exact)
    return both_inf | (finite & correct), both_inf | (finite & near)


@dataclass(frozen=True)
class Answer:
    """One stage of one head as the learner gave it."""

    values: np.ndarray  # float, −∞ allowed in `masked`; NaN where a required stage is missing
    decimals: np.ndarray  # decimals written per cell; -1 when unknown
    notes: tuple[str, ...] = ()  # how it was read, e.g. a large negative taken as −∞
    transposed: bool = False  # written keys × queries; `values` are turned back to queries × keys

    @property
    def precision(self) -> int:
        """The most decimals written in any finite cell (a −∞ cell has none; unknown counts as
        UNKNOWN_DECIMALS); 0 when no cell is finite."""
        finite = np.isfinite(self.values)
        if not finite.any():
            return 0
        return int(np.where(self.decimals < 0, UNKNOWN_DECIMALS, self.decimals)[finite].max())


@dataclass(frozen=True)
class StageMark:
    given: Answer
    cells: np.ndarray  # one of STATUSES per cell
    expected: np.ndarray
    diagnosis: tuple[str, ...]  # mistake ids (`attncli.marking.mistakes`), `transposed` or `rounded_early`
    notes: tuple[str, ...]  # one line per diagnosis or note
    rows: tuple[str, ...] | None = None  # row and column labels when not the stage's (a tile's), as given
    columns: tuple[str, ...] | None = None
    followed: np.ndarray | None = None  # what the learner's own earlier stage gives: shown beside a carried cell
    cause: str | None = None  # the one diagnosis explaining every cell not right (scoring.COSTS may price it)

    def count(self, status: str) -> int:
        return int((self.cells == status).sum())

    def __repr__(self) -> str:
        """One line: `<StageMark 2/3 right (1 wrong; no_scale)>`."""
        others = ", ".join(f"{self.count(s)} {s}" for s in STATUSES[1:] if self.count(s))
        diagnosis = "; ".join(self.diagnosis)
        detail = "; ".join(part for part in (others, diagnosis) if part)
        return f"<StageMark {self.right}/{self.cells.size} right" + (f" ({detail})>" if detail else ">")

    @property
    def right(self) -> int:
        """Cells that earn the mark: correct, or carried from the learner's own earlier stage."""
        return self.count("correct") + self.count("carried")


def mark_cells(answer: Answer, exact: np.ndarray, followings, rule: Rule) \
        -> tuple[np.ndarray, tuple[str, ...], np.ndarray | None]:
    """Cell statuses against the exact values and the one following that makes most cells right,
    the notes, and that following's values (None when none was used). `followings`: (target,
    status, note) of each way the learner may legitimately have reached their numbers (their own
    earlier stages, rounded intermediates), tried in order."""
    ok, near = grade(answer.values, answer.decimals, exact, rule)
    best = None
    if not ok.all():
        for target, status, note in followings:
            if target is None or target.shape != exact.shape:
                continue
            ok2, near2 = grade(answer.values, answer.decimals, target, rule)
            gain = int((ok2 & ~ok).sum())
            if gain and (best is None or gain > best[0]):
                best = (gain, ok2, near2, status, note, target)
                if (ok | ok2).all():
                    break
    if best is None:
        cells, notes, followed = np.where(ok, "correct", np.where(near, "imprecise", "wrong")), (), None
    else:
        _, ok2, near2, status, note, followed = best
        cells = np.where(ok, "correct", np.where(ok2, status, np.where(near | near2, "imprecise", "wrong")))
        notes = (note,) if note else ()
    if (cells == "imprecise").any():
        notes += (imprecise_note(rule),)
    return cells, notes, followed


def imprecise_note(rule: Rule) -> str:
    return f"imprecise: write at least {plural(rule.decimals, 'decimal')} (or the exact value)"


def marked_gradient(trace, head: int, name: str) -> np.ndarray:
    """A gradient stage of one head as it is marked: 2-D, D as a column (Lq × 1)."""
    value = trace.gradients.heads[name][head]
    return value[:, None] if value.ndim == 1 else value


MISSING_NOTE = "missing: a required stage, not answered"


def missing(expected: np.ndarray, rows: tuple[str, ...] | None = None,
            columns: tuple[str, ...] | None = None) -> StageMark:
    """A required stage (or tile, or slip) the learner did not answer: every cell missing."""
    blank = Answer(values=np.full(expected.shape, np.nan), decimals=np.full(expected.shape, -1))
    return StageMark(given=blank, cells=np.full(expected.shape, "missing"), expected=expected, diagnosis=(),
                     notes=(MISSING_NOTE,), rows=rows, columns=columns)
