"""Mark a learner's gradients (the backward pass's per-head stages, attncli/stages/grads.py) against the
trace's, with follow-through: a stage recomputed from the learner's own earlier stages (their
d_scores carried into d_Q and d_K, their d_output into d_V, d_weights and D, their weights and
output from the forward half) earns the mark as "carried" when those were wrong, "correct" when
they were right. Pure numpy: no I/O.

    d_V = weightsᵀ d_output      d_weights = d_output Vᵀ      D = rowsum(d_output ∘ output)
    d_scores = weights ∘ (d_weights − D), 0 where masked (× 1 − tanh² through a softcap)
    d_Q = scale · d_scores K     d_K = scale · d_scoresᵀ Q (K_rope, Q_rope, rotated back, with RoPE)

D is marked as a column, one number per query (Lq × 1).
"""

from __future__ import annotations

import numpy as np

from attncli.compute.backward import to_d_scores, to_inputs
from attncli.marking.grading import Answer, Rule, StageMark, grade, mark_cells, missing
from attncli.marking.grading import marked_gradient as expected
from attncli.problem.trace import Trace
from attncli.stages import table as stages
from attncli.stages.grads import GRADIENTS
from attncli.stages.vjps import softmax_back

# Which stages (the learner's, where given) each gradient is computed from.
FROM = {"d_output": (), "d_V": ("weights", "d_output"), "d_weights": ("d_output",), "D": ("d_output", "output"),
        "d_scores": ("weights", "d_weights", "D"), "d_Q": ("d_scores",), "d_K": ("d_scores",)}


def _recompute(trace: Trace, head: int, name: str, own: dict[str, np.ndarray]) -> np.ndarray:
    """Gradient `name` of `head` from the values in `own` (the learner's where given, else exact),
    by the stage table's vjps (output's, the softmax's, and back to d_scores, d_Q and d_K)."""
    pick = slice(head, head + 1)
    if name in ("d_V", "d_weights"):  # output = weights V
        block = stages.Block(trace.problem, trace.Q[pick], trace.K[pick], trace.V[pick], trace.scale, head=head)
        found = stages.get(stages.OUTPUT).vjp(block, own["weights"][None], None, own["d_output"][None])
        return found["V" if name == "d_V" else stages.PREVIOUS][0]
    if name == "D":  # the title's form, from the learner's own d_output and output
        return (own["d_output"] * own["output"]).sum(axis=1, keepdims=True)
    if name == "d_scores":
        logits = trace.stage(stages.previous(trace.problem, stages.SOFTMAX))[pick]
        d = softmax_back(logits, own["weights"][None], own["d_weights"][None], own["D"][None, :, 0])
        return to_d_scores(trace, d, head)[0]
    d_Q, d_K = to_inputs(trace, trace.scale * own["d_scores"][None], head)
    return (d_Q if name == "d_Q" else d_K)[0]


# Slips a learner makes in the backward pass, by stage: (id, what they did, the stage recomputed
# their way from the values in `own`).
MISTAKES = {
    "d_scores": [("softmax_gradient_without_D", "d_scores = weights ∘ d_weights: D = rowsum(dO ∘ output) was "
                  "not subtracted", lambda trace, head, own: own["weights"] * own["d_weights"])],
    "d_Q": [("gradient_without_scale", "d_Q = d_scores K: the scale was left out",
             lambda trace, head, own: _recompute(trace, head, "d_Q", own) / trace.scale)],
    "d_K": [("gradient_without_scale", "d_K = d_scoresᵀ Q: the scale was left out",
             lambda trace, head, own: _recompute(trace, head, "d_K", own) / trace.scale)],
}


def _diagnose(trace: Trace, head: int, name: str, answer: Answer, cells: np.ndarray, own: dict,
              rule: Rule) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The slips (MISTAKES) that reproduce more than half of the wrong cells and no right one wrongly."""
    wrong, right = cells == "wrong", (cells == "correct") | (cells == "carried")
    ids, notes = (), ()
    for mistake, text, predict in MISTAKES.get(name, ()):
        prediction = predict(trace, head, own)
        if prediction.shape != answer.values.shape:
            continue
        _, near = grade(answer.values, answer.decimals, prediction, rule)
        explained = int((near & wrong).sum())
        if 2 * explained > int(wrong.sum()) and near[right].all():
            ids, notes = ids + (mistake,), notes + (f"{mistake}: {text}",)
    return ids, notes


def mark_gradients(trace: Trace, head: int, answers: dict[str, Answer], rule: Rule,
                   forward: dict[str, StageMark], require: tuple[str, ...] = ()) -> dict[str, StageMark]:
    """The given (or required: all missing) gradient stages of one head, in the backward pass's
    order. `answers` holds the learner's stages of this head (forward ones too), `forward` their marks."""
    own = {"weights": trace.weights[head], "output": trace.output[head]}
    own |= {g.name: expected(trace, head, g.name) for g in GRADIENTS}
    sound = {}  # stage → every cell right without carrying: following from it is the method
    for name in ("weights", "output"):
        if name in answers and name in forward:
            own[name] = answers[name].values
            sound[name] = bool((forward[name].cells == "correct").all())
    marks = {}
    for gradient in GRADIENTS:
        name = gradient.name
        if name not in answers:
            if name in require:
                marks[name] = missing(expected(trace, head, name))
            continue
        answer = answers[name]
        used = [stage for stage in FROM[name] if stage in sound]
        followings = []
        if used:
            status = "correct" if all(sound[s] for s in used) else "carried"
            note = f"from your own {', '.join(used)}" if status == "carried" else None
            followings.append((_recompute(trace, head, name, own), status, note))
        exact = expected(trace, head, name)
        cells, notes, followed = mark_cells(answer, exact, followings, rule)
        ids, more = _diagnose(trace, head, name, answer, cells, own, rule) if (cells == "wrong").any() else ((), ())
        marks[name] = StageMark(given=answer, cells=cells, expected=exact, diagnosis=ids,
                                notes=answer.notes + notes + more, followed=followed)
        own[name] = answer.values
        sound[name] = bool((cells == "correct").all())
    return marks
