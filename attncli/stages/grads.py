"""The backward pass's per-head stages, defined once: name (JSON per-head key, answer key in
`attn check`, `--stages` word, first word of the table title), table title and what the columns
are; attncli/base/names.py holds the names for the commands' start-up. The math is attncli/compute/backward.py.
"""

from __future__ import annotations

from collections import namedtuple

from attncli.base.names import GRADS  # noqa: F401  (the top-level JSON key, read as grads.GRADS)
from attncli.stages import table as stages

# name (the JSON key …), title (also the plain formula, after "= ") and latex, as templates filled
# for a problem by `title`; rows ("queries" or "keys"), columns ("keys", or "" for numbered columns;
# D has one: a number per query); of: what it is the gradient of in the backward pass's loop (a
# stage, a block input Q, K, V, or what a vjp reports: D); via: the stage whose vjp the title's
# formula is. In the templates $chain is what the vjps between `of` and `via` add (attncli/stages/table.py's
# `vjp_title`, `vjp_latex` in LaTeX), and $k, $q ($ktex, $qtex) are the stage table's fields for `via`
# (K_rope with RoPE).
Gradient = namedtuple("Gradient", "name title latex rows columns of via", defaults=(None,))


GRADIENTS: tuple[Gradient, ...] = (
    Gradient("d_output", "d_output = dO split into heads", r"dO \text{ split into heads}", "queries", "", "output"),
    Gradient("d_V", "d_V = weightsᵀ d_output", r"\text{weights}^\top\, dO", "keys", "", "V"),
    Gradient("d_weights", "d_weights = d_output Vᵀ", r"dO\, V^\top", "queries", "keys", "weights"),
    Gradient("D", "D = rowsum(d_output ∘ output)", r"\operatorname{rowsum}(dO \circ \text{output})", "queries", "", "D"),
    Gradient("d_scores", "d_scores = weights ∘ (d_weights − D)$chain, 0 where masked",
             r"\text{weights} \circ (dP - D)$chain", "queries", "keys", "scaled", "weights"),
    Gradient("d_Q", "d_Q = scale · d_scores $k$chain", r"\text{scale} \cdot dS\, $ktex$chain", "queries", "",
             "Q", "scores"),
    Gradient("d_K", "d_K = scale · d_scoresᵀ $q$chain", r"\text{scale} \cdot dS^\top $qtex$chain", "keys", "",
             "K", "scores"),
)


def names() -> tuple[str, ...]:
    return tuple(g.name for g in GRADIENTS)


def get(name: str) -> Gradient | None:
    return next((g for g in GRADIENTS if g.name == name), None)


def title(gradient: Gradient, problem, latex: bool = False) -> str:
    """A gradient's table title for this problem (`latex`: its formula in LaTeX): its template, with
    the stages whose vjps lie between `via` and `of` written in (backward order): through a softcap
    d_scores has the factor 1 − tanh²; with RoPE d_Q and d_K are by K_rope and Q_rope, rotated back.
    Every view titles a gradient's table with it."""
    template = gradient.latex if latex else gradient.title
    if gradient.via is None:
        return template
    present = stages.present(problem)
    order = [stage.name for stage in present]
    end = order.index(gradient.via)
    if gradient.of in order:  # a stage: the ones after it, up to `via`
        between = present[order.index(gradient.of) + 1:end]
    else:  # a block input: the stages that stand in for it
        between = [stage for stage in present[:end] if stage.replaces == gradient.of]
    chain = "".join(stages.fill(stages.chain_part(stage, latex), problem, stage.name) for stage in reversed(between))
    return stages.fill(template, problem, gradient.via, chain=chain)
