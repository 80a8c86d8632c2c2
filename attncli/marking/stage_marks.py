"""One head's stages marked in order, and the final output, as an examiner marks them: each cell
against the exact value, then against every way the learner may legitimately have reached their
numbers (their own earlier stages, the textbook's rounding, the max-subtracted logits), then the
diagnosis (`attncli.marking.diagnosis`). `marks.py` puts the heads and the final output together.
Pure numpy: no I/O.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np

from attncli.base.arrays import round_finite
from attncli.base.errors import plural
from attncli.marking.diagnosis import Basis, Diagnosis, candidates, diagnose
from attncli.marking.diagnosis import own as own_of
from attncli.marking.grading import Answer, Rule, StageMark, imprecise_note, mark_cells, missing
from attncli.marking.mistakes import (
    FINAL_MISTAKES,
    TRANSPOSED,
    TRANSPOSED_TEXT,
    chain,
    present,
    rounding_text,
    roundings,
    span,
)
from attncli.problem.trace import Trace

FINEST_ROUNDING = 10  # the most decimals tried for a rounded-and-carried intermediate stage


def _followings(trace: Trace, head: int, stage: str, answer: Answer, basis: Basis, rule: Rule):
    """(target, status, note): the values a learner reaches legitimately from `basis`, their
    own earlier stage as written (also one written with too few decimals: that cost its own
    stage, and what follows from it is carried), or with intermediate stages rounded to
    k ≥ rule.decimals."""
    status = "correct" if basis.sound else "carried"
    # From the latest stage as written; then from each earlier one, carried at full precision (a
    # calculator keeps the unrounded weights while the page shows them to 4 decimals).
    for start in (basis,) + basis.earlier[::-1] if basis.stage is not None or basis.inputs else ():
        note = f"rounded {start.stage} carried ({plural(start.precision, 'decimal')})" \
            if start.sound and start.stage else None
        yield (chain(trace, head, start.stage, start.values, stage, own=own_of(start)),
               "correct" if start.sound else "carried", note)
    # Rounded and carried from the learner's basis; then from Q and K (right whatever they wrote before).
    starts = [(basis, status)] + ([(Basis(), "correct")] if basis.stage is not None or basis.inputs else [])
    for start, outcome in starts:
        steps = span(trace, start.stage, stage)
        for k in range(min(answer.precision, FINEST_ROUNDING), rule.decimals - 1, -1):
            for stages in roundings(steps):
                yield (chain(trace, head, start.stage, start.values, stage, rounded=(stages, k), own=own_of(start)),
                       outcome,
                       f"rounded {rounding_text(stages)} carried ({plural(k, 'decimal')})")


MAX_SUBTRACTED = ("max_subtracted: each row minus its largest value, as a stable softmax computes it; the "
                  "softmax gives the same weights, so this form is accepted and what follows is carried from it")


def _shifted(x: np.ndarray | None) -> np.ndarray | None:
    """Each row minus its largest finite value (a row with none is kept)."""
    if x is None:
        return None
    finite = np.isfinite(x)
    top = np.where(finite, x, -np.inf).max(axis=-1, keepdims=True)
    return x - np.where(np.isfinite(top), top, 0.0)


def _max_subtracted(trace: Trace, head: int, stage: str, basis: Basis):
    """The max-subtracted forms of a stage the softmax reads through shifts alone (scaled or masked,
    and capped when it is the last: the softcap's tanh is not shift-invariant): from the exact
    values and from the learner's own earlier stage."""
    names = present(trace)
    if stage not in ("scaled", "capped", "masked") or "weights" not in names \
            or "capped" in names[names.index(stage) + 1:names.index("weights")]:
        return
    yield _shifted(trace.stage(stage)[head]), "carried", MAX_SUBTRACTED
    if basis.stage is not None or basis.inputs:
        yield _shifted(chain(trace, head, basis.stage, basis.values, stage, own=own_of(basis))), "carried", \
            MAX_SUBTRACTED


def mark_stage(trace: Trace, head: int, stage: str, answer: Answer, basis: Basis, rule: Rule) -> StageMark:
    exact = trace.stage(stage)[head]
    if answer.transposed:
        cells = np.full(exact.shape, "wrong")
        return StageMark(given=answer, cells=cells, expected=exact, diagnosis=(TRANSPOSED,),
                         notes=answer.notes + (f"{TRANSPOSED}: {TRANSPOSED_TEXT}",), cause=TRANSPOSED)
    followings = itertools.chain(_followings(trace, head, stage, answer, basis, rule),
                                 _max_subtracted(trace, head, stage, basis))
    cells, notes, followed = mark_cells(answer, exact, followings, rule)
    found = Diagnosis()
    if ((cells == "wrong") | (cells == "imprecise")).any():
        found = diagnose(answer, cells, exact, candidates(trace, head, stage, basis, answer.precision, rule), rule)
    return diagnosed(StageMark(given=answer, cells=cells, expected=exact, diagnosis=(), notes=answer.notes + notes,
                                followed=followed), found, rule)


def diagnosed(mark: StageMark, found: Diagnosis, rule: Rule) -> StageMark:
    """`mark` with its diagnosis: the imprecise cells the mistake gives are wrong, and the advice to
    write more decimals goes when no imprecise cell is left."""
    cells = mark.cells if found.flipped is None else np.where(found.flipped, "wrong", mark.cells)
    notes = mark.notes if (cells == "imprecise").any() else tuple(n for n in mark.notes if n != imprecise_note(rule))
    return replace(mark, cells=cells, diagnosis=found.ids, notes=notes + found.notes, cause=found.cause)


def mark_head(trace: Trace, head: int, answers: dict[str, Answer], rule: Rule = Rule(),
              require: tuple[str, ...] = (), inputs: dict | None = None, inputs_sound: bool = True) \
        -> dict[str, StageMark]:
    """Mark the given stages of one head in order, carrying the learner's own values forward (from
    their own Q, K, V of a projected problem: `inputs`, all correct or not)."""
    marks = {}
    basis = Basis(sound=inputs_sound, inputs=dict(inputs or {}), inputs_sound=inputs_sound)
    for stage in present(trace):
        if stage not in answers:
            if stage in require:
                marks[stage] = missing(trace.stage(stage)[head])
            continue
        answer = answers[stage]
        mark = marks[stage] = mark_stage(trace, head, stage, answer, basis, rule)
        earlier = basis.earlier + ((basis,) if basis.stage is not None else ())
        # following from it is the textbook's method when every cell is correct (and the learner's Q, K, V)
        sound = bool((mark.cells == "correct").all()) and basis.inputs_sound
        basis = Basis(stage, answer.values, sound, answer.precision, earlier, basis.inputs, basis.inputs_sound)
    return marks


def project(trace: Trace, outputs: list[np.ndarray]) -> np.ndarray:
    """The final output from per-head outputs: side by side, then times W_O plus b_O."""
    concat = np.concatenate(outputs, axis=1)  # (Lq, H·d_v)
    inputs = trace.problem.inputs
    if "W_O" in inputs:
        concat = concat @ inputs["W_O"] + inputs.get("b_O", 0.0)
    return concat


def _final_followings(trace: Trace, answer: Answer, heads: list[StageMark] | None, rule: Rule):
    """As `_followings`, for the final output: from the learner's own head outputs, or from every
    head's stages rounded to k decimals on the way."""
    if heads is not None:
        sound = all((m.cells == "correct").all() for m in heads)
        precision = max(m.given.precision for m in heads)
        yield (project(trace, [m.given.values for m in heads]), "correct" if sound else "carried",
               f"rounded head outputs carried ({plural(precision, 'decimal')})" if sound else None)
    steps = present(trace) + ("final",)
    for k in range(min(answer.precision, FINEST_ROUNDING), rule.decimals - 1, -1):
        for stages in roundings(steps):
            outputs = [chain(trace, h, None, None, "output", rounded=(stages, k)) for h in range(trace.problem.heads)]
            if "output" in stages:
                outputs = [round_finite(o, k) for o in outputs]
            yield project(trace, outputs), "correct", f"rounded {rounding_text(stages)} carried ({plural(k, 'decimal')})"


def _final_candidates(trace: Trace, heads: list[StageMark] | None):
    """(id, note, prediction) of the final output's own mistakes, from the learner's head outputs."""
    inputs = trace.problem.inputs
    outputs = [m.given.values for m in heads] if heads is not None else list(trace.output)
    yield TRANSPOSED, f"{TRANSPOSED}: {TRANSPOSED_TEXT}", trace.final.T
    if "W_O" in inputs:
        concat = np.concatenate(outputs, axis=1)  # (Lq, H·d_v)
        yield "no_output_projection", f"no_output_projection: {FINAL_MISTAKES['no_output_projection']}", concat
        if "b_O" in inputs:
            yield "no_output_bias", f"no_output_bias: {FINAL_MISTAKES['no_output_bias']}", concat @ inputs["W_O"]


def mark_final(trace: Trace, answer: Answer, heads: list[StageMark] | None, rule: Rule = Rule()) -> StageMark:
    """The final output (heads side by side, times W_O): carried when it follows from the
    learner's own per-head outputs (`heads`: their marks, when every head's output was given)."""
    if answer.transposed:
        return StageMark(given=answer, cells=np.full(trace.final.shape, "wrong"), expected=trace.final,
                         diagnosis=(TRANSPOSED,), notes=answer.notes + (f"{TRANSPOSED}: {TRANSPOSED_TEXT}",),
                         cause=TRANSPOSED)
    cells, notes, followed = mark_cells(answer, trace.final, _final_followings(trace, answer, heads, rule), rule)
    found = Diagnosis()
    if ((cells == "wrong") | (cells == "imprecise")).any():
        found = diagnose(answer, cells, trace.final, _final_candidates(trace, heads), rule)
    return diagnosed(StageMark(given=answer, cells=cells, expected=trace.final, diagnosis=(),
                                notes=answer.notes + notes, followed=followed), found, rule)
