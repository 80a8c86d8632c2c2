"""The backward pass's per-head stages, defined once: name (JSON per-head key, answer key in
`attn check`, `--stages` word, first word of the table title), table title and what the columns
are; attncli/base/names.py holds the names for the commands' start-up. The math is attncli/compute/backward.py.
"""

from __future__ import annotations

from collections import namedtuple

from attncli.base.names import GRADS  # noqa: F401  (the top-level JSON key, read as grads.GRADS)
from attncli.stages import table as stages

# name (the JSON key …), title (also the plain formula, after "= "), latex, rows ("queries" or
# "keys"), columns ("keys", or "" for numbered columns; D has one: a number per query); of: what it
# is the gradient of in the backward pass's loop (a stage, a block input Q, K, V, or what a vjp
# reports: D); via and template: the stage whose vjp the title's formula is, and the title for a
# problem, with $chain for the vjps between `of` and `via` (attncli/stages/table.py's `vjp_title`) and
# $q, $k as the stage table fills them.
Gradient = namedtuple("Gradient", "name title latex rows columns of via template", defaults=(None, None))


GRADIENTS: tuple[Gradient, ...] = (
    Gradient("d_output", "d_output = dO split into heads", r"dO \text{ split into heads}", "queries", "", "output"),
    Gradient("d_V", "d_V = weightsᵀ d_output", r"\text{weights}^\top\, dO", "keys", "", "V"),
    Gradient("d_weights", "d_weights = d_output Vᵀ", r"dO\, V^\top", "queries", "keys", "weights"),
    Gradient("D", "D = rowsum(d_output ∘ output)", r"\operatorname{rowsum}(dO \circ \text{output})", "queries", "", "D"),
    Gradient("d_scores", "d_scores = weights ∘ (d_weights − D), 0 where masked",
             r"\text{weights} \circ (dP - D)", "queries", "keys", "scaled", "weights",
             "d_scores = weights ∘ (d_weights − D)$chain, 0 where masked"),
    Gradient("d_Q", "d_Q = scale · d_scores K", r"\text{scale} \cdot dS\, K", "queries", "", "Q", "scores",
             "d_Q = scale · d_scores $k$chain"),
    Gradient("d_K", "d_K = scale · d_scoresᵀ Q", r"\text{scale} \cdot dS^\top Q", "keys", "", "K", "scores",
             "d_K = scale · d_scoresᵀ $q$chain"),
)


def names() -> tuple[str, ...]:
    return tuple(g.name for g in GRADIENTS)


def get(name: str) -> Gradient | None:
    return next((g for g in GRADIENTS if g.name == name), None)


def title(gradient: Gradient, problem) -> str:
    """A gradient's table title for this problem: its template, with the stages whose vjps lie
    between `via` and `of` written in (backward order): through a softcap d_scores has the factor
    1 − tanh²; with RoPE d_Q and d_K are by K_rope and Q_rope, rotated back."""
    if gradient.template is None:
        return gradient.title
    present = stages.present(problem)
    order = [stage.name for stage in present]
    end = order.index(gradient.via)
    if gradient.of in order:  # a stage: the ones after it, up to `via`
        between = present[order.index(gradient.of) + 1:end]
    else:  # a block input: the stages that stand in for it
        between = [stage for stage in present[:end] if stage.replaces == gradient.of]
    chain = "".join(stages.fill(f" (through {stage.name})" if stage.vjp_title is None else stage.vjp_title,
                                problem, stage.name) for stage in reversed(between))
    return stages.fill(gradient.template, problem, gradient.via, chain=chain)
