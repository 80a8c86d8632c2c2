"""The backward half of the stage table (attncli/stages/table.py): each stage's vector-Jacobian
product, the `vjp` of its `Stage` record. attncli/compute/backward.py runs them in reverse order, mirroring
`stages.run`.

A vjp takes the `stages.Block` the stage was computed on (for scores, Q_rope's and K_rope's values
stand in for its Q and K), what the stage read (`x`, the stage before it; None for the first), the
stage's value `y` and the gradient `d` of a loss by `y`, and returns the gradients of what the stage
read, by name: PREVIOUS for x, a block input ("Q", "K", "V"), a problem parameter ("sinks"), and
any number it reports on the way ("D"). Arrays are (H, b, …) for a block of b queries and c keys.
"""

from __future__ import annotations

import numpy as np

from attncli.base.errors import AttnError
from attncli.base.softmax import row_policy
from attncli.problem import qk_norm
from attncli.problem.rope import length, rotate

PREVIOUS = "x"  # the key of the gradient of the stage before


def normed(which: str):
    """Q_normed or K_normed = norm(Q or K) per row: d Q (d K) = the norm's vjp (attncli/problem/qk_norm.py),
    and the gradients of its weight (and bias) as `q_norm.weight`, …. Over "all" a row's every
    head takes part: one head's block (marking) cannot have it, and is refused."""
    def vjp(block, x, y: np.ndarray, d: np.ndarray) -> dict[str, np.ndarray]:
        norm = getattr(block.problem, qk_norm.NAMES[which])
        if block.head is not None and norm.over == "all" and block.problem.heads > 1:
            raise AttnError(f'{norm.name} over "all" normalises a row of every head together: the gradient of '
                            f"one head's {which} needs every head's, so it is not computed for one head alone "
                            f"(marking one head's d_{which}, or the backward hand calculation of one row); the "
                            "full backward pass computes it", field=norm.name)
        d_x, found = qk_norm.vjp(norm, getattr(block, which), d)
        return {which: d_x, **found}  # (H, b or c, d_k), the parameters' gradients
    return vjp


def q_rope(block, x, y: np.ndarray, d: np.ndarray) -> dict[str, np.ndarray]:
    """Q_rope = Q rotated by q_positions: d Q = d Q_rope rotated back (a rotation's inverse is its transpose;
    with RoPE scaling, times the attention factor, as cos and sin are)."""
    p = block.problem
    return {"Q": rotate(d, -p.q_positions[block.rows], p.rope, length(p))}  # (H, b, d_k)


def k_rope(block, x, y: np.ndarray, d: np.ndarray) -> dict[str, np.ndarray]:
    """K_rope = K rotated by k_positions: d K = d K_rope rotated back."""
    p = block.problem
    return {"K": rotate(d, -p.k_positions[block.cols], p.rope, length(p))}  # (H, c, d_k)


def scores(block, x, y: np.ndarray, d: np.ndarray) -> dict[str, np.ndarray]:
    """scores = Q Kᵀ: d Q = d scores K, d K = d scoresᵀ Q (Q_rope and K_rope with RoPE)."""
    return {"Q": d @ block.K, "K": d.transpose(0, 2, 1) @ block.Q}  # (H, b, d_k), (H, c, d_k)


def scaled(block, x: np.ndarray, y: np.ndarray, d: np.ndarray) -> dict[str, np.ndarray]:
    """scaled = x · scale: d x = scale · d scaled."""
    return {PREVIOUS: block.scale * d}  # (H, b, c)


def capped(block, x: np.ndarray, y: np.ndarray, d: np.ndarray) -> dict[str, np.ndarray]:
    """capped = c · tanh(x / c): d x = d capped ∘ (1 − tanh²) = d capped ∘ (1 − (capped / c)²)."""
    factor = y / block.problem.softcap  # tanh(x / c), (H, b, c)
    factor *= factor
    np.subtract(1, factor, out=factor)  # 1 − tanh²
    factor *= d
    return {PREVIOUS: factor}


def masked(block, x: np.ndarray, y: np.ndarray, d: np.ndarray) -> dict[str, np.ndarray]:
    """masked = x + bias, −∞ where the mask blocks: d x = d masked, and 0 where masked is −∞ (a
    hidden key, or a −∞ bias: −∞ whatever x is). The bias is not a differentiable input here."""
    return {PREVIOUS: np.where(np.isneginf(y), 0.0, d)}  # (H, b, c)


def weights(block, x: np.ndarray, y: np.ndarray, d: np.ndarray) -> dict[str, np.ndarray]:
    """weights = softmax(x): d x = P ∘ (d P − D), the softmax's Jacobian applied without the (Lk × Lk)
    matrix per row, D = rowsum(d P ∘ P), which equals rowsum(d_output ∘ output) when output =
    weights V (FlashAttention-2's form); 0 on a row whose every key is masked (its weights, 0 or
    uniform, do not depend on x). With sinks, d sink = −Σ_rows (1 − Σ_j P_j) · D, per head."""
    D = np.einsum("hqk,hqk->hq", d, y)  # (H, b)
    found = {PREVIOUS: softmax_back(x, y, d, D), "D": D}
    if block.problem.sinks is not None:
        # The sink's weight is what the keys leave of 1; ∂weights_j/∂sink = −weights_j · sink weight,
        # so ∂loss/∂sink = −Σ_rows sink weight · D.
        found["sinks"] = -((1 - y.sum(axis=-1)) * D).sum(axis=-1)  # (H,)
    return found


def softmax_back(x: np.ndarray, y: np.ndarray, d: np.ndarray, D: np.ndarray) -> np.ndarray:
    """The weights vjp's d x = P ∘ (d P − D) for weights `y` of logits `x`, given D (H, b): 0 on a
    row whose every key is masked. Marking calls it with a learner's own P, dP and D."""
    out = np.subtract(d, D[..., None])  # (H, b, c)
    out *= y
    dead = row_policy(x.max(axis=-1))[1]  # (H, b): uniform weights do not depend on the logits
    if dead.any():
        out[dead] = 0.0
    return out


def output(block, x: np.ndarray, y: np.ndarray, d: np.ndarray) -> dict[str, np.ndarray]:
    """output = x V: d x = d output Vᵀ, d V = xᵀ d output."""
    return {PREVIOUS: d @ block.V.transpose(0, 2, 1), "V": x.transpose(0, 2, 1) @ d}  # (H, b, c), (H, c, d_v)
