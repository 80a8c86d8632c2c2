"""Mark a learner's stages against a trace, as an examiner does: exact, carried, or wrong.

A cell is correct when it equals the exact value rounded to the decimals the learner wrote
(±1 in the last place when they wrote decimals), or within `tol` when one is given. A wrong
stage that is right when recomputed from the learner's own earlier stage is *carried*
(error carried forward). Wrong stages are diagnosed by recomputing them under common mistakes.
Pure numpy: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attncli.attention import mask_scores, softmax
from attncli.trace import Trace, head_slice, round_finite

ORDER = ("scores", "scaled", "masked", "weights", "output")
MISTAKES = {
    "no_scale": ("scaled", "forgot to divide the scores by √d_k"),
    "scale_by_dk": ("scaled", "divided the scores by d_k instead of √d_k"),
    "scale_multiplied": ("scaled", "multiplied the scores by √d_k instead of dividing"),
    "mask_ignored": ("masked", "did not apply the mask"),
    "mask_inverted": ("masked", "inverted the mask: kept the positions that should be blocked"),
    "no_exp": ("weights", "normalised the scores by their sum without taking e^x first"),
    "softmax_wrong_axis": ("weights", "normalised each column (over queries) instead of each row (over keys)"),
    "no_softmax": ("weights", "used the scaled scores as weights without a softmax"),
    "transposed_k": ("scores", "multiplied Q by K where Kᵀ was needed"),
    "values_transposed": ("output", "multiplied the weights by Vᵀ instead of V"),
}
# A cell's mark. `right` counts correct and carried; imprecise (too few decimals) and missing
# (a required stage left unanswered) earn nothing, as wrong does.
STATUSES = ("correct", "carried", "wrong", "imprecise", "missing")
ROUNDING = (0, 1, 2, 3)  # decimals tried for `rounded_early`


@dataclass(frozen=True)
class Answer:
    """One stage of one head as the learner gave it."""

    values: np.ndarray  # float, −∞ allowed in `masked`
    decimals: np.ndarray  # decimals written per cell; -1 when unknown (then 4 are assumed)


@dataclass(frozen=True)
class StageMark:
    given: Answer
    cells: np.ndarray  # "correct" / "carried" / "wrong" per cell
    expected: np.ndarray
    diagnosis: tuple[str, ...]  # mistake ids; `rounded_early` may carry detail in `notes`
    notes: tuple[str, ...]  # one line per diagnosis

    def count(self, mark: str) -> int:
        return int((self.cells == mark).sum())

    @property
    def right(self) -> int:
        """Cells that earn the mark: correct, or carried from the learner's own earlier stage."""
        return self.count("correct") + self.count("carried")


def cell_ok(given: np.ndarray, decimals: np.ndarray, target: np.ndarray, tol: float | None) -> np.ndarray:
    """Per cell: does `given` match `target` under the marking rule?"""
    both_inf = np.isneginf(given) & np.isneginf(target)
    finite = np.isfinite(given) & np.isfinite(target)
    g, t = np.where(finite, given, 0.0), np.where(finite, target, 0.0)
    if tol is not None:
        close = np.abs(g - t) <= tol
    else:
        d = np.where(decimals < 0, 4, decimals)
        unit = 10.0 ** -d
        allowance = np.where(d > 0, unit, 0.0)  # ±1 in the last place; whole numbers must round exactly
        with np.errstate(over="ignore", invalid="ignore"):  # d up to values.MAX_DECIMALS
            shifted = t * 10.0 ** d
            # Where t · 10^d overflows, t has no digits left to round at d decimals.
            rounded = np.where(np.isfinite(shifted), np.round(shifted) / 10.0 ** d, t)
        close = np.abs(g - rounded) <= allowance * (1 + 1e-9) + 1e-12 * np.abs(t)
    return both_inf | (finite & close)


def step(trace: Trace, head: int, stage: str, previous: np.ndarray | None, mistake: str | None = None):
    """Stage `stage` of one head from the stage before it, optionally with a mistake."""
    p = trace.problem
    Q, K, V = trace.Q[head], trace.K[head], trace.V[head]  # (Lq, d_k), (Lk, d_k), (Lk, d_v)
    d_k = Q.shape[-1]
    with np.errstate(all="ignore"):
        if stage == "scores":
            if mistake == "transposed_k":
                return Q @ K if Q.shape[1] == K.shape[0] == K.shape[1] else None
            return Q @ K.T
        if stage == "scaled":
            factor = {"no_scale": 1.0, "scale_by_dk": 1.0 / d_k, "scale_multiplied": np.sqrt(d_k)}
            return previous * factor.get(mistake, trace.scale)
        if stage == "masked":
            mask = head_slice(p.mask, head)
            if mistake in ("mask_ignored", "mask_inverted") and mask is None:
                return None
            mask = None if mistake == "mask_ignored" else (~mask if mistake == "mask_inverted" else mask)
            return mask_scores(previous, mask, head_slice(p.bias, head))
        if stage == "weights":
            if mistake == "no_softmax":
                return previous
            if mistake == "no_exp":
                plain = np.where(np.isneginf(previous), 0.0, previous)
                return plain / plain.sum(axis=-1, keepdims=True)
            if mistake == "softmax_wrong_axis":
                return softmax(previous.T, p.masked_rows)[0].T
            return softmax(previous, p.masked_rows)[0]
        if stage == "output":
            if mistake == "values_transposed":
                return previous @ V.T if previous.shape[1] == V.shape[1] == V.shape[0] else None
            return previous @ V
    raise ValueError(stage)


def span(trace: Trace, start: str | None, stop: str) -> tuple[str, ...]:
    """The stages recomputed after `start` (None: from Q and K) up to and including `stop`."""
    stages = present(trace)
    return stages[stages.index(start) + 1 if start else 0: stages.index(stop) + 1]


def chain(trace: Trace, head: int, start: str | None, values: np.ndarray | None, stop: str,
          mistake: str | None = None, round_at: tuple[str, int] | None = None) -> np.ndarray | None:
    """Recompute from stage `start` (the learner's `values`; None: from Q and K) up to `stop`,
    making `mistake` at its stage. `round_at` = (stage, k) rounds that intermediate stage to k
    decimals on the way."""
    current = values
    for name in span(trace, start, stop):
        current = step(trace, head, name, current, mistake if MISTAKES.get(mistake, ("",))[0] == name else None)
        if current is None:
            return None
        if round_at and round_at[0] == name and name != stop:
            current = round_finite(current, round_at[1])
    return current


def present(trace: Trace) -> tuple[str, ...]:
    """The stages this problem has (`masked` only with a mask or bias)."""
    return tuple(s for s in ORDER if s != "masked" or trace.masked is not None)


def _diagnose(trace: Trace, head: int, stage: str, answer: Answer, wrong: np.ndarray,
              basis: tuple[str | None, np.ndarray | None], tol: float | None) -> tuple[list[str], list[str]]:
    """Mistakes whose recomputation, from the learner's own latest stage, reproduces every wrong
    cell; failing those, an intermediate stage rounded too coarsely."""
    exact = trace.stage(stage)[head]

    def matches(prediction) -> bool:
        if prediction is None or prediction.shape != answer.values.shape:
            return False
        ok = cell_ok(answer.values, answer.decimals, prediction, tol)
        return bool(ok[wrong].all()) and not bool(cell_ok(prediction, answer.decimals, exact, tol).all())

    start, values = basis
    steps = span(trace, start, stage)
    ids = [m for m, (where, _) in MISTAKES.items()
           if where in steps and matches(chain(trace, head, start, values, stage, m))]
    if ids:
        return ids, [f"{m}: {MISTAKES[m][1]}" for m in ids]
    for name in steps[:-1]:
        for k in ROUNDING:
            if matches(chain(trace, head, start, values, stage, round_at=(name, k))):
                return ["rounded_early"], [f"rounded_early: right method, but {name} was rounded to {k} "
                                           f"decimal{'s' * (k != 1)} before the next step"]
    return [], []


def mark_head(trace: Trace, head: int, answers: dict[str, Answer], tol: float | None = None) -> dict[str, StageMark]:
    """Mark the given stages of one head in order, carrying the learner's own values forward."""
    marks = {}
    basis: tuple[str | None, np.ndarray | None] = (None, None)
    for stage in present(trace):
        if stage not in answers:
            continue
        answer = answers[stage]
        exact = trace.stage(stage)[head]
        correct = cell_ok(answer.values, answer.decimals, exact, tol)
        carried = np.zeros_like(correct)
        if basis[0] is not None:
            recomputed = chain(trace, head, basis[0], basis[1], stage)
            carried = ~correct & cell_ok(answer.values, answer.decimals, recomputed, tol)
        wrong = ~correct & ~carried
        ids, notes = _diagnose(trace, head, stage, answer, wrong, basis, tol) if wrong.any() else ([], [])
        cells = np.where(correct, "correct", np.where(carried, "carried", "wrong"))
        marks[stage] = StageMark(given=answer, cells=cells, expected=exact, diagnosis=tuple(ids), notes=tuple(notes))
        basis = (stage, answer.values)
    return marks


def mark_final(trace: Trace, answer: Answer, head_outputs: list[np.ndarray] | None,
               tol: float | None = None) -> StageMark:
    """The final output (heads side by side, times W_O): carried when it follows from the
    learner's own per-head outputs."""
    correct = cell_ok(answer.values, answer.decimals, trace.final, tol)
    carried = np.zeros_like(correct)
    if head_outputs is not None:
        concat = np.concatenate(head_outputs, axis=1)
        if "W_O" in trace.problem.inputs:
            concat = concat @ trace.problem.inputs["W_O"] + trace.problem.inputs.get("b_O", 0.0)
        carried = ~correct & cell_ok(answer.values, answer.decimals, concat, tol)
    cells = np.where(correct, "correct", np.where(carried, "carried", "wrong"))
    return StageMark(given=answer, cells=cells, expected=trace.final, diagnosis=(), notes=())


def mark_all(trace: Trace, answers: list[dict[str, Answer]], final: Answer | None,
             tol: float | None = None) -> dict[str, StageMark]:
    """Every given stage, keyed `weights` (one head) or `heads[1].weights`; `output` is final."""
    p = trace.problem
    marks = {}
    for h, given in enumerate(answers):
        prefix = f"heads[{h}]." if p.heads > 1 or "W_O" in p.inputs else ""
        marks.update({prefix + stage: m for stage, m in mark_head(trace, h, given, tol).items()})
    if final is not None:
        outputs = [a["output"].values for a in answers] if all("output" in a for a in answers) else None
        marks["output"] = mark_final(trace, final, outputs, tol)
    return marks
