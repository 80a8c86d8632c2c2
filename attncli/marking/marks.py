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
mistakes (`attncli.marking.mistakes`). One head's stages are marked by `stage_marks.py`, a
projected problem's Q, K, V by `projections.py`; this module puts a document's together. Pure
numpy: no I/O.
"""

from __future__ import annotations

from dataclasses import replace

from attncli.base.errors import AttnError, InputError, quote
from attncli.base.names import GRADIENTS, PROJECTED, stage_of
from attncli.document.readback import verify_echoes
from attncli.marking.answer_files import npz_heads
from attncli.marking.answer_keys import sort_keys
from attncli.marking.answers import NoAnswers, read_answers, read_stage, same_problem
from attncli.marking.grading import DECIMALS, Answer, Rule, StageMark, grade, missing
from attncli.marking.marking_backward import mark_gradients
from attncli.marking.mistakes import present
from attncli.marking.projections import mark_projections, without_projections
from attncli.marking.stage_marks import mark_final, mark_head
from attncli.marking.tile_marks import mark_tiles
from attncli.problem.trace import Trace


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
    for h, head_answers in enumerate(answers):
        prefix = f"heads[{h}]." if several else ""
        per_head = head_required(require, h, several, p.heads)
        own, sound = (projected[0][h], projected[1][h]) if projected else ({}, True)
        head_marks = mark_head(trace, h, head_answers, rule, per_head, own, sound)
        if trace.gradients is not None:
            head_marks.update(mark_gradients(trace, h, head_answers, rule, head_marks, per_head))
        marks.update({prefix + stage: m for stage, m in head_marks.items()})
        outputs.append(head_marks.get("output") if "output" in head_answers else None)
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
