"""Mark a learner's stages against a trace, as an examiner does.

Each cell is one of `STATUSES`:
- correct: the exact value rounded to the decimals written (±1 in the last place; at an exact tie
  either rounding); a value with fewer than `Rule.decimals` decimals must equal the exact value.
  Also correct: the textbook's method, each earlier stage rounded to the decimals written (at
  least `Rule.decimals`) and carried forward, and a stage that follows from the learner's own
  earlier stage when that stage was all correct.
- carried: wrong against the exact values, but right when recomputed from the learner's own
  earlier stage that had a mistake (error carried forward).
- imprecise: fewer decimals than `Rule.decimals`, right at the decimals written, not exact.
- wrong; missing: a required stage not answered.
`right` = correct + carried. Wrong cells are diagnosed by recomputing the stage under common
mistakes (`attncli.marking.mistakes`). Pure numpy: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from attncli.base.arrays import round_finite
from attncli.base.errors import InputError, plural, quote
from attncli.base.names import GRADIENTS
from attncli.document.readback import verify_echoes
from attncli.marking.answer_files import npz_heads
from attncli.marking.answer_keys import sort_keys
from attncli.marking.answers import NoAnswers, read_answers, same_problem
from attncli.marking.grading import DECIMALS, Answer, Rule, StageMark, grade, mark_cells, missing
from attncli.marking.marking_backward import mark_gradients
from attncli.marking.mistakes import (
    FINAL_MISTAKES,
    MISTAKES,
    ROUNDED_EARLY,
    TRANSPOSED,
    TRANSPOSED_TEXT,
    chain,
    made_at,
    present,
    rounded_scales,
    rounding_text,
    roundings,
    span,
)
from attncli.marking.tile_marks import mark_tiles
from attncli.problem.trace import Trace

FINEST_ROUNDING = 10  # the most decimals tried for a rounded-and-carried intermediate stage


@dataclass(frozen=True)
class _Basis:
    """The learner's latest earlier stage: where recomputation starts."""

    stage: str | None = None  # None: from Q and K
    values: np.ndarray | None = None
    sound: bool = True  # every cell correct: following from it is the textbook's method
    precision: int = 0
    earlier: tuple[_Basis, ...] = ()  # the learner's stages before this one, first first
    # some cell imprecise (too few decimals) and no mistake to explain it: following from it is
    # rounding early (a diagnosed stage, whose few decimals are the mistake's, is carried from)
    coarse: bool = False


def _own(basis: _Basis) -> dict[str, np.ndarray]:
    """The learner's stages up to `basis`, by name: those that stand in for Q or K (Q_rope,
    K_rope) are carried into the stages after them."""
    return {b.stage: b.values for b in basis.earlier + (basis,) if b.stage is not None}


def _followings(trace: Trace, head: int, stage: str, answer: Answer, basis: _Basis, rule: Rule):
    """(target, status, note): the values a learner reaches legitimately from `basis`, their
    own earlier stage as written, or with intermediate stages rounded to k ≥ rule.decimals."""
    status = "correct" if basis.sound else "carried"
    # From the latest stage as written; then from each earlier one, carried at full precision (a
    # calculator keeps the unrounded weights while the page shows them to 4 decimals).
    for start in (basis,) + basis.earlier[::-1] if basis.stage is not None else ():
        if start.coarse:
            continue  # written with too few decimals: what follows from it was rounded early, not carried
        note = f"rounded {start.stage} carried ({plural(start.precision, 'decimal')})" if start.sound else None
        yield (chain(trace, head, start.stage, start.values, stage, own=_own(start)),
               "correct" if start.sound else "carried", note)
    # Rounded and carried from the learner's basis; then from Q and K (right whatever they wrote before).
    starts = ([(basis, status)] if not basis.coarse else []) \
        + ([(_Basis(), "correct")] if basis.stage is not None else [])
    for start, outcome in starts:
        steps = span(trace, start.stage, stage)
        for k in range(min(answer.precision, FINEST_ROUNDING), rule.decimals - 1, -1):
            for stages in roundings(steps):
                yield (chain(trace, head, start.stage, start.values, stage, rounded=(stages, k), own=_own(start)),
                       outcome,
                       f"rounded {rounding_text(stages)} carried ({plural(k, 'decimal')})")


def _diagnose(trace: Trace, head: int, stage: str, answer: Answer, cells: np.ndarray, basis: _Basis,
              rule: Rule) -> tuple[list[str], list[str]]:
    """Mistakes consistent with every cell: the recomputation, from the learner's latest earlier
    stage, agrees with every right cell and reproduces wrong ones. The ones that explain the most
    wrong cells (more than half of them) are named; an early rounding coarser than rule.decimals
    is `rounded_early`."""
    # A mistake must reproduce the learner's numbers at their precision: it may not contradict a
    # right cell, nor an imprecise one (the exact value rounded to the few decimals written).
    wrong, right = cells == "wrong", (cells == "correct") | (cells == "carried") | (cells == "imprecise")
    steps = span(trace, basis.stage, stage)
    exact = trace.stage(stage)[head]
    own = _own(basis)
    candidates = [(m, f"{m}: {mistake.text}", chain(trace, head, basis.stage, basis.values, stage, m, own=own))
                  for m, mistake in MISTAKES.items() if any(made_at(m, name) for name in steps)]
    candidates.append((TRANSPOSED, f"{TRANSPOSED}: {TRANSPOSED_TEXT}", exact.T))
    if "scaled" in steps:
        candidates += [(ROUNDED_EARLY, f"{ROUNDED_EARLY}: right method, but {text}",
                        chain(trace, head, basis.stage, basis.values, stage, scale=scale, own=own))
                       for scale, text in rounded_scales(trace)]
    if basis.coarse:  # carried on from the learner's own too-coarse stage: an early rounding
        candidates.append((ROUNDED_EARLY, f"{ROUNDED_EARLY}: right method, but {basis.stage} was written with "
                           f"{plural(basis.precision, 'decimal')} and carried on",
                           chain(trace, head, basis.stage, basis.values, stage, own=own)))
    for k in range(min(rule.decimals, answer.precision + 1) - 1, -1, -1):
        for stages in roundings(steps):
            verb = "was" if len(stages) == 1 else "were"
            candidates.append((ROUNDED_EARLY, f"{ROUNDED_EARLY}: right method, but {rounding_text(stages)} {verb} "
                               f"rounded to {plural(k, 'decimal')} before the next step",
                               chain(trace, head, basis.stage, basis.values, stage, rounded=(stages, k),
                                     own=own)))
    best, named = 0, []
    for mistake, note, prediction in candidates:
        if prediction is None or prediction.shape != answer.values.shape:
            continue
        _, near = grade(answer.values, answer.decimals, prediction, rule)
        if not near[right].all():
            continue  # contradicts a cell the learner got right
        explained = int((near & wrong).sum())
        if explained > best:
            best, named = explained, [(mistake, note)]
        elif explained == best and explained and mistake not in [m for m, _ in named]:
            named.append((mistake, note))  # equally good; one rounded_early note at most
    total = int(wrong.sum())
    if 2 * best <= total:
        return [], []  # agreeing on half the wrong cells or fewer is as likely a coincidence
    suffix = f" (explains {best} of {total} wrong cells)" if named and best < total else ""
    return [m for m, _ in named], [note + suffix for _, note in named]


def mark_stage(trace: Trace, head: int, stage: str, answer: Answer, basis: _Basis, rule: Rule) -> StageMark:
    exact = trace.stage(stage)[head]
    if answer.transposed:
        cells = np.full(exact.shape, "wrong")
        return StageMark(given=answer, cells=cells, expected=exact, diagnosis=(TRANSPOSED,),
                         notes=answer.notes + (f"{TRANSPOSED}: {TRANSPOSED_TEXT}",))
    cells, notes = mark_cells(answer, exact, _followings(trace, head, stage, answer, basis, rule), rule)
    ids, diagnosis_notes = _diagnose(trace, head, stage, answer, cells, basis, rule) if (cells == "wrong").any() \
        else ([], [])
    return StageMark(given=answer, cells=cells, expected=exact, diagnosis=tuple(ids),
                     notes=answer.notes + notes + tuple(diagnosis_notes))


def mark_head(trace: Trace, head: int, answers: dict[str, Answer], rule: Rule = Rule(),
              require: tuple[str, ...] = ()) -> dict[str, StageMark]:
    """Mark the given stages of one head in order, carrying the learner's own values forward."""
    marks = {}
    basis = _Basis()
    for stage in present(trace):
        if stage not in answers:
            if stage in require:
                marks[stage] = missing(trace.stage(stage)[head])
            continue
        answer = answers[stage]
        mark = marks[stage] = mark_stage(trace, head, stage, answer, basis, rule)
        earlier = basis.earlier + ((basis,) if basis.stage is not None else ())
        basis = _Basis(stage, answer.values, bool((mark.cells == "correct").all()), answer.precision, earlier,
                       coarse=bool((mark.cells == "imprecise").any()) and not mark.diagnosis)
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
    if heads is not None and not any((m.cells == "imprecise").any() for m in heads):
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


def mark_final(trace: Trace, answer: Answer, heads: list[StageMark] | None, rule: Rule = Rule()) -> StageMark:
    """The final output (heads side by side, times W_O): carried when it follows from the
    learner's own per-head outputs (`heads`: their marks, when every head's output was given)."""
    if answer.transposed:
        return StageMark(given=answer, cells=np.full(trace.final.shape, "wrong"), expected=trace.final,
                         diagnosis=(TRANSPOSED,), notes=answer.notes + (f"{TRANSPOSED}: {TRANSPOSED_TEXT}",))
    cells, notes = mark_cells(answer, trace.final, _final_followings(trace, answer, heads, rule), rule)
    ids, more = [], []
    if (cells == "wrong").any():
        inputs = trace.problem.inputs
        outputs = [m.given.values for m in heads] if heads is not None else list(trace.output)
        candidates = {TRANSPOSED: (trace.final.T, TRANSPOSED_TEXT)}
        if "W_O" in inputs:
            concat = np.concatenate(outputs, axis=1)  # (Lq, H·d_v)
            candidates["no_output_projection"] = (concat, FINAL_MISTAKES["no_output_projection"])
            if "b_O" in inputs:
                candidates["no_output_bias"] = (concat @ inputs["W_O"], FINAL_MISTAKES["no_output_bias"])
        for mistake, (prediction, text) in candidates.items():
            if prediction.shape == answer.values.shape \
                    and grade(answer.values, answer.decimals, prediction, rule)[1].all():
                ids, more = ids + [mistake], more + [f"{mistake}: {text}"]
    return StageMark(given=answer, cells=cells, expected=trace.final, diagnosis=tuple(ids),
                     notes=answer.notes + notes + tuple(more))


def mark_all(trace: Trace, answers: list[dict[str, Answer]], final: Answer | None, tol: float | None = None,
             decimals: int = DECIMALS, require: tuple[str, ...] = ()) -> dict[str, StageMark]:
    """Every given (or required) stage, keyed `weights` (one head) or `heads[1].weights`;
    `output` is the final output. `answers` has one dict per head (empty when not answered)."""
    rule = Rule(decimals, tol)
    p = trace.problem
    several = p.heads > 1 or "W_O" in p.inputs
    per_head = tuple(s for s in require if s != "output") if several else tuple(require)
    if trace.gradients is None and set(require) & set(GRADIENTS):
        raise InputError(f"{', '.join(s for s in require if s in GRADIENTS)} required, but the problem has no "
                         "dO (no backward pass)", field="require")
    marks, outputs = {}, []
    for h, head_answers in enumerate(answers):
        prefix = f"heads[{h}]." if several else ""
        head_marks = mark_head(trace, h, head_answers, rule, per_head)
        if trace.gradients is not None:
            head_marks.update(mark_gradients(trace, h, head_answers, rule, head_marks, per_head))
        marks.update({prefix + stage: m for stage, m in head_marks.items()})
        outputs.append(head_marks.get("output") if "output" in head_answers else None)
    if several and final is not None:
        marks["output"] = mark_final(trace, final, outputs if None not in outputs else None, rule)
    elif several and "output" in require:
        marks["output"] = missing(trace.final)
    return marks


def stage_keys(trace: Trace) -> list[str]:
    """Every stage key a complete answer has, in order."""
    p = trace.problem
    if p.heads == 1 and "W_O" not in p.inputs:
        return list(present(trace))
    return [f"heads[{h}].{s}" for h in range(p.heads) for s in present(trace)] + ["output"]


def unanswered(trace: Trace, marks: dict[str, StageMark]) -> list[str]:
    """The stage keys neither answered nor required (listed as "not answered"; they do not fail)."""
    return [key for key in stage_keys(trace) if key not in marks]


def missing_stages(marks: dict[str, StageMark]) -> list[str]:
    """Required stages not answered."""
    return [key for key, mark in marks.items() if mark.count("missing")]


def all_correct(marks: dict[str, StageMark]) -> bool:
    """Every cell earns the mark: nothing wrong, imprecise or missing (and something was marked)."""
    return bool(marks) and all(mark.right == mark.cells.size for mark in marks.values())


def before_weights(trace: Trace) -> str:
    """The stage the softmax reads in this problem (what a learner calls the logits)."""
    stages = present(trace)
    return stages[stages.index("weights") - 1] if "weights" in stages and stages.index("weights") else "scaled"


ECHO_HINT = "a file's own Q, K and V must be its problem's; answers to another problem are not marked against this one"


def mark_document(trace: Trace, doc, tol: float | None = None, decimals: int = DECIMALS,
                  require: tuple[str, ...] = (), strict: bool = True,
                  tile_size: tuple[int, int] | None = None) -> dict[str, StageMark]:
    """An answers document's stages (`mark_all`) and tile tables (`attncli.marking.tile_marks`); raises
    NoAnswers when it answers neither. `tile_size`: the problem's, for tiles required and not
    answered (else the answers' own). Metadata keys are set aside and aliases read as their
    stage (`attncli.marking.answer_keys`); an unknown key is refused when `strict`, else set aside."""
    doc = npz_heads(doc, trace)  # an .npz's heads/<stage> members: per-head answers, as JSON's heads
    keys = sort_keys(doc, before_weights(trace), strict)
    if isinstance(keys.doc, dict):  # a file's own echoes must be its problem's, as attn compute checks them
        same_problem(keys.doc, trace)  # its top-level Q, K, V first: the plainest message
        verify_echoes(keys.doc, trace, ECHO_HINT)
    marks = _mark_sorted(trace, keys.doc, tol, decimals, require, tile_size)
    for path, key in keys.aliases.items():
        name = path if path in marks else path.rpartition(".")[2]
        if name in marks:
            note = f"read {quote(key)} as {path.rpartition('.')[2]}"
            marks[name] = replace(marks[name], notes=(note,) + marks[name].notes)
    return marks


def _mark_sorted(trace: Trace, doc, tol: float | None, decimals: int, require: tuple[str, ...],
                 tile_size: tuple[int, int] | None = None):
    try:
        marks = mark_all(trace, *read_answers(doc, trace), tol, decimals, require)
    except NoAnswers:
        marks = {}
    marks |= mark_tiles(trace, doc, Rule(decimals, tol), "tiles" in require, tile_size)
    if not marks:
        raise NoAnswers()
    return marks
