"""Why a stage is wrong: each common mistake recomputed from the learner's own latest earlier
stage (`attncli.marking.mistakes`), named when it reproduces the learner's numbers. Pure numpy.

A mistake is named only when its recomputation, at the decimals the learner wrote, agrees with
every cell they got right or wrote imprecisely, and reproduces more than half of the cells that
are not right. **A diagnosis wins over precision advice**: a cell written with too few decimals
that is the exact value rounded (imprecise) is the mistake's when the mistake gives that very
number at the decimals asked (`0, 1, 0` is an argmax's, not a softmax rounded to whole numbers),
and is then wrong. An early rounding (`rounded_early`) is itself a precision slip: it never takes
a cell from imprecise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from attncli.base.arrays import round_finite
from attncli.base.errors import plural
from attncli.marking.grading import Answer, Rule, grade
from attncli.marking.mistakes import (
    MISTAKES,
    ROUNDED_EARLY,
    TRANSPOSED,
    TRANSPOSED_TEXT,
    chain,
    made_at,
    rounded_scales,
    rounding_text,
    roundings,
    span,
)
from attncli.problem.trace import Trace


@dataclass(frozen=True)
class Basis:
    """The learner's latest earlier stage: where recomputation starts."""

    stage: str | None = None  # None: from Q and K
    values: np.ndarray | None = None
    sound: bool = True  # every cell correct (and the learner's Q, K, V too): following from it is the textbook's method
    precision: int = 0
    earlier: tuple[Basis, ...] = ()  # the learner's stages before this one, first first
    inputs: dict = field(default_factory=dict)  # the learner's own Q, K, V of this head, when they gave them
    inputs_sound: bool = True  # those all correct


def own(basis: Basis) -> dict[str, np.ndarray]:
    """The learner's own values up to `basis`, by name: their Q, K, V, and the stages that stand in
    for Q or K (Q_rope, K_rope), carried into the stages after them."""
    return dict(basis.inputs) | {b.stage: b.values for b in basis.earlier + (basis,) if b.stage is not None}


@dataclass(frozen=True)
class Diagnosis:
    ids: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    flipped: np.ndarray | None = None  # imprecise cells the named mistake gives: wrong, not imprecise
    cause: str | None = None  # the diagnosis explaining every cell not right, when one does


def candidates(trace: Trace, head: int, stage: str, basis: Basis, precision: int, rule: Rule):
    """(id, note, prediction) of every way this stage may have gone wrong from `basis`."""
    steps = span(trace, basis.stage, stage)
    exact = trace.stage(stage)[head]
    mine = own(basis)
    for m, mistake in MISTAKES.items():
        if any(made_at(m, name) for name in steps):
            yield m, f"{m}: {mistake.text}", chain(trace, head, basis.stage, basis.values, stage, m, own=mine)
            if basis.sound and basis.stage is not None and made_at(m, stage):
                # from the learner's right earlier stage at full precision, as a calculator keeps it
                yield m, f"{m}: {mistake.text}", chain(trace, head, None, None, stage, m)
    yield TRANSPOSED, f"{TRANSPOSED}: {TRANSPOSED_TEXT}", exact.T
    if "scaled" in steps:
        for scale, text in rounded_scales(trace):
            yield (ROUNDED_EARLY, f"{ROUNDED_EARLY}: right method, but {text}",
                   chain(trace, head, basis.stage, basis.values, stage, scale=scale, own=mine))
    if basis.stage is not None:  # their own earlier stage, written well, rounded coarser before the next step
        for k in range(min(rule.decimals, basis.precision) - 1, -1, -1):
            yield (ROUNDED_EARLY, f"{ROUNDED_EARLY}: right method, but {basis.stage} was rounded to "
                   f"{plural(k, 'decimal')} before the next step",
                   chain(trace, head, basis.stage, round_finite(basis.values, k), stage, own=mine))
    for k in range(min(rule.decimals, precision + 1) - 1, -1, -1):
        for stages in roundings(steps):
            verb = "was" if len(stages) == 1 else "were"
            yield (ROUNDED_EARLY, f"{ROUNDED_EARLY}: right method, but {rounding_text(stages)} {verb} rounded to "
                   f"{plural(k, 'decimal')} before the next step",
                   chain(trace, head, basis.stage, basis.values, stage, rounded=(stages, k), own=mine))


def diagnose(answer: Answer, cells: np.ndarray, expected: np.ndarray, found, rule: Rule) -> Diagnosis:
    """The mistakes of `found` ((id, note, prediction), as `candidates` yields them) that agree with
    every right and imprecise cell and explain the most cells not right (more than half of them);
    ties are broken by how many of those cells they give at the decimals asked."""
    wrong, right = cells == "wrong", (cells == "correct") | (cells == "carried")
    asked = np.maximum(answer.decimals, rule.decimals)  # an imprecise cell is a mistake's only at these
    # imprecise, and not the exact value at the decimals asked either (a float's 0.2 may be 0.20)
    loose = (cells == "imprecise") & ~_rounds_to(answer.values, asked, expected)
    best, named = (0, 0), []
    for mistake, note, prediction in found:
        if prediction is None or prediction.shape != answer.values.shape:
            continue
        _, near = grade(answer.values, answer.decimals, prediction, rule)
        if not near[right | (cells == "imprecise")].all():
            continue  # contradicts a cell the learner got right
        exact = _rounds_to(answer.values, asked, prediction)
        flips = exact & loose if mistake != ROUNDED_EARLY else np.zeros_like(loose)
        explained = int((near & wrong).sum() + flips.sum())
        rank = (explained, int((exact & (wrong | loose)).sum()))
        if not explained or 2 * explained <= int(wrong.sum() + flips.sum()):
            continue  # agreeing on half the cells or fewer is as likely a coincidence
        if rank > best:
            best, named = rank, [(mistake, note, flips)]
        elif rank == best and mistake not in [m for m, _, _ in named]:
            named.append((mistake, note, flips))  # equally good; one rounded_early note at most
    if not named:
        return Diagnosis()
    flipped = named[0][2]
    total = int(wrong.sum() + flipped.sum())
    suffix = f" (explains {best[0]} of {total} wrong cells)" if best[0] < total else ""
    ids = tuple(m for m, _, _ in named)
    cause = next((m for m in ids if m != ROUNDED_EARLY), ids[0]) if best[0] == total else None
    return Diagnosis(ids, tuple(note + suffix for _, note, _ in named), flipped if flipped.any() else None, cause)


def _rounds_to(given: np.ndarray, decimals: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Per cell: `given` is `target` rounded to `decimals` (half a unit either way, no slack)."""
    with np.errstate(invalid="ignore", over="ignore"):
        same = np.abs(given - target) <= 0.5 * 10.0 ** -decimals * (1 + 1e-9) + 1e-12 * np.abs(target)
    return (np.isfinite(given) & np.isfinite(target) & same) | (np.isneginf(given) & np.isneginf(target))
