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

import itertools
from dataclasses import replace

import numpy as np

from attncli.base.arrays import round_finite
from attncli.base.errors import AttnError, InputError, quote
from attncli.base.names import GRADIENTS, PROJECTED, stage_of
from attncli.document.readback import verify_echoes
from attncli.marking.answer_files import npz_heads
from attncli.marking.answer_keys import sort_keys
from attncli.marking.answers import NoAnswers, read_answers, read_stage, same_problem
from attncli.marking.diagnosis import Basis, Diagnosis, candidates, diagnose
from attncli.marking.diagnosis import given as given_of
from attncli.marking.grading import DECIMALS, Answer, Rule, StageMark, grade, imprecise_note, mark_cells, missing
from attncli.marking.marking_backward import mark_gradients
from attncli.marking.mistakes import (
    FINAL_MISTAKES,
    TRANSPOSED,
    TRANSPOSED_TEXT,
    chain,
    plural,
    present,
    rounding_text,
    roundings,
    span,
)
from attncli.marking.projections import mark_projections, without_projections
from attncli.marking.tile_marks import mark_tiles
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
        yield (chain(trace, head, start.stage, start.values, stage, given=given_of(start)),
               "correct" if start.sound else "carried", note)
    # Rounded and carried from the learner's basis; then from Q and K (right whatever they wrote before).
    starts = [(basis, status)] + ([(Basis(), "correct")] if basis.stage is not None or basis.inputs else [])
    for start, outcome in starts:
        steps = span(trace, start.stage, stage)
        for k in range(min(answer.precision, FINEST_ROUNDING), rule.decimals - 1, -1):
            for stages in roundings(steps):
                yield (chain(trace, head, start.stage, start.values, stage, rounded=(stages, k), given=given_of(start)),
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
        yield _shifted(chain(trace, head, basis.stage, basis.values, stage, given=given_of(basis))), "carried", \
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
    return _diagnosed(StageMark(given=answer, cells=cells, expected=exact, diagnosis=(), notes=answer.notes + notes,
                                followed=followed), found, rule)


def _diagnosed(mark: StageMark, found: Diagnosis, rule: Rule) -> StageMark:
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
    return _diagnosed(StageMark(given=answer, cells=cells, expected=trace.final, diagnosis=(),
                                notes=answer.notes + notes, followed=followed), found, rule)


def mark_all(trace: Trace, answers: list[dict[str, Answer]], final: Answer | None, tol: float | None = None,
             decimals: int = DECIMALS, require: tuple[str, ...] = (),
             projected: tuple[list[dict], list[bool]] | None = None) -> dict[str, StageMark]:
    """Every given (or required) stage, keyed `weights` (one head) or `heads[1].weights`;
    `output` is the final output. `answers` has one dict per head (empty when not answered);
    `projected`: per head the learner's own Q, K, V and whether they are right (projections.py)."""
    rule = Rule(decimals, tol)
    p = trace.problem
    several = p.heads > 1 or "W_O" in p.inputs
    if trace.gradients is None and {stage_of(s) for s in require} & set(GRADIENTS):
        raise InputError(f"{', '.join(s for s in require if stage_of(s) in GRADIENTS)} required, but the problem "
                         "has no dO (no backward pass)", field="require")
    marks, outputs = {}, []
    for h, given in enumerate(answers):
        prefix = f"heads[{h}]." if several else ""
        per_head = head_required(require, h, several, p.heads)
        own, sound = (projected[0][h], projected[1][h]) if projected else ({}, True)
        head_marks = mark_head(trace, h, given, rule, per_head, own, sound)
        if trace.gradients is not None:
            head_marks.update(mark_gradients(trace, h, given, rule, head_marks, per_head))
        marks.update({prefix + stage: m for stage, m in head_marks.items()})
        outputs.append(head_marks.get("output") if "output" in given else None)
    if several and final is not None:
        marks["output"] = mark_final(trace, final, outputs if None not in outputs else None, rule)
    elif several and "output" in require:
        marks["output"] = missing(trace.final)
    return marks


def head_required(require: tuple[str, ...], head: int, several: bool, heads: int = 1) -> tuple[str, ...]:
    """The stages of head `head` that `require` names: each stage named alone (for every head; with
    several heads `output` is the final output, a head's own is `heads[h].output`) and each path
    `heads[h].stage` of this head. A path naming a head the problem does not have is an error."""
    out = []
    for path in require:
        stage = stage_of(path)
        if stage != path:
            number = int(path[len("heads["):path.index("]")])
            if number >= heads:
                raise InputError(f"{path} is required, but the problem has {heads} head{'s' * (heads != 1)}, "
                                 "numbered from 0", field="require")
            if number == head:
                out.append(stage)
        elif not (several and stage == "output"):
            out.append(stage)
    return tuple(out)


def stage_keys(trace: Trace) -> list[str]:
    """Every stage key a complete answer has, in order: a projected problem's Q, K, V first."""
    p = trace.problem
    first = list(PROJECTED) if p.projected else []
    if p.heads == 1 and "W_O" not in p.inputs:
        return first + list(present(trace))
    return first + [f"heads[{h}].{s}" for h in range(p.heads) for s in present(trace)] + ["output"]


def unanswered(trace: Trace, marks: dict[str, StageMark]) -> list[str]:
    """The stage keys neither answered nor required (listed as "not answered"; they do not fail)."""
    heads = range(trace.problem.heads)  # a projection answered head by head is answered
    return [key for key in stage_keys(trace)
            if key not in marks and not (key in PROJECTED and all(f"heads[{h}].{key}" in marks for h in heads))]


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
    keys = sort_keys(doc, before_weights(trace), strict, fit=_fitter(trace))
    if isinstance(keys.doc, dict):  # a file's own echoes must be its problem's, as attn compute checks them
        same_problem(keys.doc, trace)  # its top-level Q, K, V first: the plainest message
        verify_echoes(without_projections(keys.doc, trace), trace, ECHO_HINT)
    marks = _mark_sorted(trace, keys.doc, tol, decimals, require, tile_size)
    for path, key in keys.aliases.items():
        name = path if path in marks else path.rpartition(".")[2]
        if name in marks:
            note = f"read {quote(key)} as {path.rpartition('.')[2]}"
            marks[name] = replace(marks[name], notes=(note,) + marks[name].notes)
    return marks


def _fitter(trace: Trace):
    """fit(candidates, value, prefix): the stage whose exact values the most cells of `value` are
    (an ambiguous word, `attention_scores`, read by what it holds); the first on a tie."""
    def fit(candidates, value, prefix):
        head = int(prefix[len("heads["):-2]) if prefix else 0
        found = []
        for stage in candidates:
            exact = trace.stage(stage)
            if exact is None or head >= exact.shape[0]:
                continue
            try:
                answer = read_stage(value, stage, exact[head].shape, "")
            except AttnError:
                continue
            found.append((int(grade(answer.values, answer.decimals, exact[head], Rule())[1].sum()), stage))
        return max(found, key=lambda f: f[0])[1] if found else candidates[0]
    return fit


def _mark_sorted(trace: Trace, doc, tol: float | None, decimals: int, require: tuple[str, ...],
                 tile_size: tuple[int, int] | None = None):
    projections, *own = mark_projections(trace, doc, Rule(decimals, tol), require)
    try:
        answers = read_answers(doc, trace)
    except NoAnswers:
        if not projections:
            answers = None
        else:  # only Q, K or V answered: the required stages are still missing
            answers = [{} for _ in range(trace.problem.heads)], None
    marks = {} if answers is None else projections | mark_all(trace, *answers, tol, decimals, require, own)
    marks |= mark_tiles(trace, doc, Rule(decimals, tol), "tiles" in require, tile_size)
    if not marks:
        raise NoAnswers()
    return marks
