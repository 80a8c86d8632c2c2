"""The backward pass of attention in plain numpy: given dO, the gradient of a loss with respect to
the final output, every gradient back to the inputs as given. Reads a full `Trace` (its weights
and output); no I/O.

Per head (FlashAttention-2's notation, P = weights, O = output, S = the logits the softmax read):

    d_output = dO split into heads (through W_O first: d concat = dO W_Oᵀ)    (H, Lq, d_v)
    d_V      = Pᵀ d_output                                                      (H, Lk, d_v)
    d_weights = d_output Vᵀ                          (dP)                       (H, Lq, Lk)
    D        = rowsum(d_output ∘ O)                                             (H, Lq)
    d_scores = P ∘ (d_weights − D)                   (dS, the gradient of the   (H, Lq, Lk)
               scaled scores: 0 where masked and on rows whose every key is masked)
    d_Q      = scale · d_scores K                                               (H, Lq, d_k)
    d_K      = scale · d_scoresᵀ Q                                              (H, Lk, d_k)

D = rowsum(dP ∘ P) = rowsum(dO ∘ O): the softmax's Jacobian applied without the Lk × Lk matrix.
Per-head d_K and d_V are what that query head sends to its keys and values; with grouped-query
attention a kv head's gradient (in `grads`) is the sum over its query group. `grads` holds one
gradient per input as given: Q, K, V, or X, X_kv, W_Q, W_K, W_V, b_Q, b_K, b_V, and W_O, b_O.
With sinks (gpt-oss), `grads` also holds `sinks`, one per head: −Σ_rows (1 − Σ_j P_j) · D. The
mask, bias, positions, scale and softcap get none: they are not differentiable inputs here.

Each step is one function of the step before, so that a variant is one more step: a softcap
multiplies d_scores by 1 − tanh², RoPE rotates d_Q and d_K back.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

import numpy as np

from attncli import stages
from attncli.attention import check_finite, merge_heads, split_heads
from attncli.errors import AttnError
from attncli.trace import Trace, frozen

HANDLED = ("Q_rope", "K_rope", "scores", "scaled", "capped", "masked", "weights", "output")


@dataclass(frozen=True, eq=False)
class Gradients:
    """Every gradient of one backward pass; read-only arrays. `heads` maps each name of
    `grads.GRADIENTS` to its (H, …) array; `grads` maps each input's name to its gradient."""

    heads: Mapping[str, np.ndarray]
    grads: Mapping[str, np.ndarray]

    def __post_init__(self):
        for name in ("heads", "grads"):
            object.__setattr__(self, name, MappingProxyType({k: frozen(v) for k, v in getattr(self, name).items()}))


def final_shape(inputs: Mapping[str, np.ndarray], heads: int, lq: int) -> tuple[int, int]:
    """The shape of the final output, which dO must have: (Lq, d_out) with W_O, else the heads'
    outputs side by side (Lq, H·d_v)."""
    if "W_O" in inputs:
        return lq, inputs["W_O"].shape[1]
    if "X" in inputs:
        return lq, inputs["W_V"].shape[1]
    Q, V = inputs["Q"], inputs["V"]
    return lq, V.shape[1] if Q.ndim == V.ndim == 2 else heads * V.shape[-1]


def backward(trace: Trace) -> Gradients:
    """Every gradient of `trace` for its problem's dO (which must be given)."""
    for stage in stages.present(trace.problem):  # a stage this pass does not know would give wrong numbers
        if stage.name not in HANDLED:
            raise AttnError(f"the backward pass has no rule for the stage {stage.name}: its gradients "
                            "cannot be computed", field="dO")
    with np.errstate(over="ignore", invalid="ignore"):
        return _backward(trace)


def _backward(trace: Trace) -> Gradients:
    problem = trace.problem
    given = problem.inputs
    dtype = trace.final.dtype
    dO = problem.dO.astype(dtype)  # (Lq, d_out)
    P, O = trace.weights, trace.output  # (H, Lq, Lk), (H, Lq, d_v)
    grads: dict[str, np.ndarray] = {}
    d_concat = dO
    if "W_O" in given:
        W_O = given["W_O"].astype(dtype)
        d_concat = dO @ W_O.T  # (Lq, H·d_v)
        grads["W_O"] = trace.concat.T @ dO  # (H·d_v, d_out)
        if "b_O" in given:
            grads["b_O"] = dO.sum(axis=0)  # (d_out,)
    d_output = split_heads(d_concat, problem.heads)  # (H, Lq, d_v)
    d_V = P.transpose(0, 2, 1) @ d_output  # (H, Lk, d_v)
    d_weights = d_output @ trace.V.transpose(0, 2, 1)  # (H, Lq, Lk)
    D = (d_output * O).sum(axis=-1)  # (H, Lq)
    d_scores = P * (d_weights - D[..., None])  # (H, Lq, Lk), 0 where P is 0 (masked)
    for head, row in trace.fully_masked:  # uniform weights do not depend on the scores
        d_scores[head, row] = 0.0
    d_scores = through_softcap(trace, d_scores)
    d_Q, d_K = through_rope(trace, trace.scale * d_scores)  # (H, Lq, d_k), (H, Lk, d_k)
    heads = {"d_output": d_output, "d_V": d_V, "d_weights": d_weights, "D": D, "d_scores": d_scores,
             "d_Q": d_Q, "d_K": d_K}
    grads.update(_input_grads(problem, d_Q, d_K, d_V, dtype))
    if getattr(problem, "sinks", None) is not None:
        # The sink's weight is what the keys leave of 1; ∂weights_j/∂sink = −weights_j · sink weight,
        # so ∂loss/∂sink = −Σ_rows sink weight · D.
        grads["sinks"] = -((1 - P.sum(axis=-1)) * D).sum(axis=-1)  # (H,)
    for name, array in list(heads.items()) + list(grads.items()):  # overflow past the dtype's range
        check_finite(array, f"the gradient {name}", ("head", "row", "column") if name in heads else ("row", "column"))
    order = [name for name in given if name in grads] + [name for name in grads if name not in given]
    return Gradients(heads=heads, grads={name: grads[name] for name in order})  # the inputs' order, then sinks


def _heads(array: np.ndarray, head: int | None) -> np.ndarray:
    return array if head is None else array[head:head + 1]


def through_softcap(trace: Trace, d_capped: np.ndarray, head: int | None = None) -> np.ndarray:
    """capped = c · tanh(scaled / c), so d scaled = d capped · (1 − tanh²) = d capped · (1 − (capped / c)²).
    Arrays are (H, Lq, Lk), or (1, Lq, Lk) for one `head`."""
    cap = getattr(trace.problem, "softcap", None)
    if cap is None:
        return d_capped
    tanh = _heads(trace.stage("capped"), head) / cap  # (H, Lq, Lk)
    return d_capped * (1 - tanh * tanh)


def through_rope(trace: Trace, d_scores_scaled: np.ndarray, head: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """d_Q = scale · d_scores K and d_K = scale · d_scoresᵀ Q (`d_scores_scaled` = scale · d_scores);
    with RoPE the scores read Q_rope and K_rope, whose gradients rotate back by the opposite angles
    (a rotation's inverse is its transpose). (H, …) arrays, or (1, …) for one `head`."""
    rope = getattr(trace.problem, "rope", None)
    Q = _heads(trace.Q if rope is None else trace.stage("Q_rope"), head)  # (H, Lq, d_k)
    K = _heads(trace.K if rope is None else trace.stage("K_rope"), head)  # (H, Lk, d_k)
    d_Q = d_scores_scaled @ K  # (H, Lq, d_k)
    d_K = d_scores_scaled.transpose(0, 2, 1) @ Q  # (H, Lk, d_k)
    if rope is None:
        return d_Q, d_K
    from attncli.rope import rotate

    p = trace.problem
    return rotate(d_Q, -p.q_positions, rope), rotate(d_K, -p.k_positions, rope)


def _as_given(d: np.ndarray, given: np.ndarray, query_3d: bool) -> np.ndarray:
    """A per-query-head gradient (H, L, w) in the shape its input was given: 3-D with its own
    head count (kv heads summed over their query group), 2-D heads side by side, or 2-D beside a
    3-D Q (one kv head shared by every query head)."""
    heads = d.shape[0]
    kv_heads = given.shape[0] if given.ndim == 3 else (1 if query_3d else heads)
    summed = d.reshape(kv_heads, heads // kv_heads, *d.shape[1:]).sum(axis=1)  # (H_kv, L, w)
    if given.ndim == 3:
        return summed
    return summed[0] if query_3d else merge_heads(summed)


def _input_grads(problem, d_Q, d_K, d_V, dtype) -> dict[str, np.ndarray]:
    given = problem.inputs
    if not problem.projected:
        query_3d = given["Q"].ndim == 3
        return {name: _as_given(d, given[name], query_3d) for name, d in (("Q", d_Q), ("K", d_K), ("V", d_V))}
    X = given["X"].astype(dtype)
    X_kv = given["X_kv"].astype(dtype) if "X_kv" in given else X
    grads = {}
    d_in = {"X": np.zeros_like(X), "X_kv": np.zeros_like(X_kv)}
    for name, d, x, source in (("Q", d_Q, X, "X"), ("K", d_K, X_kv, "X_kv"), ("V", d_V, X_kv, "X_kv")):
        d_projected = merge_heads(d)  # (L, d_out): Q = X W_Q + b_Q, split into heads
        W = given[f"W_{name}"].astype(dtype)
        grads[f"W_{name}"] = x.T @ d_projected  # (d_model, d_out)
        if f"b_{name}" in given:
            grads[f"b_{name}"] = d_projected.sum(axis=0)  # (d_out,)
        d_in[source if "X_kv" in given else "X"] += d_projected @ W.T  # (L, d_model)
    grads["X"] = d_in["X"]
    if "X_kv" in given:
        grads["X_kv"] = d_in["X_kv"]
    return grads
