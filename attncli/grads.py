"""The backward pass's per-head stages, defined once: name (JSON per-head key, answer key in
`attn check`, `--stages` word, first word of the table title), table title and what the columns
are. Light (no numpy): every command's start-up reads the names. The math is attncli/backward.py.
"""

from __future__ import annotations

from collections import namedtuple

# name (the JSON key …), title (also the plain formula, after "= "), latex, rows ("queries" or
# "keys"), columns ("keys", or "" for numbered columns; D has one: a number per query). Immutable,
# and cheap to define at every start-up (the names are --stages words).
Gradient = namedtuple("Gradient", "name title latex rows columns")


GRADIENTS: tuple[Gradient, ...] = (
    Gradient("d_output", "d_output = dO split into heads", r"dO \text{ split into heads}", "queries", ""),
    Gradient("d_V", "d_V = weightsᵀ d_output", r"\text{weights}^\top\, dO", "keys", ""),
    Gradient("d_weights", "d_weights = d_output Vᵀ", r"dO\, V^\top", "queries", "keys"),
    Gradient("D", "D = rowsum(d_output ∘ output)", r"\operatorname{rowsum}(dO \circ \text{output})", "queries", ""),
    Gradient("d_scores", "d_scores = weights ∘ (d_weights − D), 0 where masked",
             r"\text{weights} \circ (dP - D)", "queries", "keys"),
    Gradient("d_Q", "d_Q = scale · d_scores K", r"\text{scale} \cdot dS\, K", "queries", ""),
    Gradient("d_K", "d_K = scale · d_scoresᵀ Q", r"\text{scale} \cdot dS^\top Q", "keys", ""),
)
GRADS = "grads"  # the top-level JSON key (and --stages word): one gradient per input, in its given shape


def names() -> tuple[str, ...]:
    return tuple(g.name for g in GRADIENTS)


def get(name: str) -> Gradient | None:
    return next((g for g in GRADIENTS if g.name == name), None)


def title(gradient: Gradient, problem) -> str:
    """A gradient's table title for this problem: through a softcap d_scores has the factor
    1 − tanh²; with RoPE d_Q and d_K are rotated back from Q_rope's and K_rope's."""
    if gradient.name == "d_scores" and getattr(problem, "softcap", None) is not None:
        return "d_scores = weights ∘ (d_weights − D) ∘ (1 − (capped / c)²), 0 where masked"
    if gradient.name in ("d_Q", "d_K") and getattr(problem, "rope", None) is not None:
        other = "K_rope" if gradient.name == "d_Q" else "Q_rope"
        product = f"d_scores {other}" if gradient.name == "d_Q" else f"d_scoresᵀ {other}"
        return f"{gradient.name} = scale · {product}, rotated back (RoPE⁻¹)"
    return gradient.title

