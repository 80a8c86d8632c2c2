"""The backward pass of attention in plain numpy: given dO, the gradient of a loss with respect to
the final output, every gradient back to the inputs as given. Reads a full `Trace` (every stage's
value); no I/O.

It mirrors the forward loop (`stages.run`): the problem's present stages in reverse order, each
turning the gradient of its value into the gradients of what it read with its own `vjp`
(attncli/stages/table.py: RoPE's rotation back, scores' products, `scale ·`, the softcap's 1 − tanh²,
the mask's zeros, the softmax's P ∘ (dP − D), output's products). Nothing here names a stage; a
stage without a vjp is refused (AttnError naming it), never given a silently wrong gradient.

The per-head gradients shown (`grads.GRADIENTS`, FlashAttention-2's notation, P = weights) are
gradients of the loop, each named by `Gradient.of`:

    d_output  = dO split into heads (through W_O first: d concat = dO W_Oᵀ)   the output stage's   (H, Lq, d_v)
    d_V       = Pᵀ d_output                                                    V's, per query head  (H, Lk, d_v)
    d_weights = d_output Vᵀ                       (dP)                         the weights stage's  (H, Lq, Lk)
    D         = rowsum(d_weights ∘ weights) = rowsum(d_output ∘ output)        the softmax reports  (H, Lq)
    d_scores  = the gradient of `scaled` (dS, S = scale · Q Kᵀ):                                    (H, Lq, Lk)
                P ∘ (dP − D), through every stage between `scaled` and the softmax (× 1 − tanh²
                for a softcap, 0 where masked and on rows whose every key is masked)
    d_Q, d_K  = Q's and K's, per query head (scale · d_scores K, scale · d_scoresᵀ Q; rotated
                back from Q_rope's and K_rope's with RoPE)                                          (H, L, d_k)

Decision: d_scores stays the gradient of the *scaled* logits (the stage `scaled`), as
FlashAttention's dS is the gradient of S = scale · Q Kᵀ; the gradient of `scores` (= scale ·
d_scores) and those of the stages after `scaled` (capped, masked, a stage added there) are
computed but not kept. D = rowsum(dP ∘ P) is the softmax's own form (it needs nothing after the
softmax); it equals the title's rowsum(d_output ∘ output) while output = weights V.

Per-head d_K and d_V are what that query head sends to its keys and values; with grouped-query
attention a kv head's gradient (in `grads`) is the sum over its query group. `grads` holds one
gradient per input as given: Q, K, V, or X, X_kv, W_Q, W_K, W_V, b_Q, b_K, b_V, and W_O, b_O,
then what the stages' vjps give of the problem's parameters (the sinks, one per head). The
mask, bias, positions, scale and softcap get none: they are not differentiable inputs here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Mapping

import numpy as np

from attncli.base.arrays import check_finite, merge_heads, split_heads
from attncli.base.errors import AttnError
from attncli.problem import groups
from attncli.problem.trace import Trace, frozen
from attncli.stages import table as stages
from attncli.stages.grads import GRADIENTS, get

INPUTS = ("Q", "K", "V")  # the block's inputs a vjp may give gradients of


@dataclass(frozen=True, eq=False)
class Gradients:
    """Every gradient of one backward pass; read-only arrays. `heads` maps each name of
    `grads.GRADIENTS` to its (H, …) array; `grads` maps each input's name to its gradient."""

    heads: Mapping[str, np.ndarray]
    grads: Mapping[str, np.ndarray]

    def __post_init__(self):
        for name in ("heads", "grads"):
            object.__setattr__(self, name, MappingProxyType({k: frozen(v) for k, v in getattr(self, name).items()}))


def final_shape(inputs: Mapping[str, np.ndarray], heads: int, lq: int, kv_heads: int) -> tuple[int, int]:
    """The shape of the final output, which dO must have: (Lq, d_out) with W_O, else the heads'
    outputs side by side (Lq, H·d_v)."""
    if "W_O" in inputs:
        return lq, inputs["W_O"].shape[1]
    return lq, groups.value_width(inputs, heads, kv_heads)


def refuse_unknown(problem) -> None:
    """Raise AttnError for a present stage that has no vjp: its gradients would be wrong."""
    for stage in stages.present(problem):
        if stage.vjp is None:
            raise AttnError(f'the backward pass has no rule for stage "{stage.name}" (its entry in the stage '
                            "table has no vjp): its gradients cannot be computed", field="dO")


def backward(trace: Trace) -> Gradients:
    """Every gradient of `trace` for its problem's dO (which must be given)."""
    refuse_unknown(trace.problem)
    with np.errstate(over="ignore", invalid="ignore"):
        return _backward(trace)


def _backward(trace: Trace) -> Gradients:
    problem = trace.problem
    given = problem.inputs
    dtype = trace.final.dtype
    dO = problem.dO.astype(dtype)  # (Lq, d_out)
    grads: dict[str, np.ndarray] = {}
    d_concat = dO
    if "W_O" in given:
        W_O = given["W_O"].astype(dtype)
        d_concat = dO @ W_O.T  # (Lq, H·d_v)
        grads["W_O"] = trace.concat.T @ dO  # (H·d_v, d_out)
        if "b_O" in given:
            grads["b_O"] = dO.sum(axis=0)  # (d_out,)
    last = stages.present(problem)[-1].name  # the per-head output
    found = back(trace, split_heads(d_concat, problem.heads), last, keep={g.of for g in GRADIENTS})
    heads = {g.name: found[g.of] for g in GRADIENTS}
    grads.update(_input_grads(problem, found["Q"], found["K"], found["V"], dtype))
    names = stages.names()
    shown = {g.of for g in GRADIENTS}
    grads.update({name: d for name, d in found.items() if name not in names and name not in shown})  # sinks
    for name, array in list(heads.items()) + list(grads.items()):  # overflow past the dtype's range
        check_finite(array, f"the gradient {name}", ("head", "row", "column") if name in heads else ("row", "column"))
    order = [name for name in given if name in grads] + [name for name in grads if name not in given]
    return Gradients(heads=heads, grads={name: grads[name] for name in order})  # the inputs' order, then sinks


def _forward_blocks(trace: Trace, head: int | None) -> tuple[list[stages.Block], list[dict[str, str]]]:
    """For each present stage, the block it was computed on (Q and K replaced by Q_rope and K_rope
    after those) and which stage holds each block input there ({"Q": "Q_rope", …})."""
    pick = (lambda a: a) if head is None else (lambda a: a[head:head + 1])
    block = stages.Block(trace.problem, pick(trace.Q), pick(trace.K), pick(trace.V), trace.scale, head=head)
    holder = {name: name for name in INPUTS}
    blocks, holders = [], []
    for stage in stages.present(trace.problem):
        blocks.append(block)
        holders.append(dict(holder))
        if stage.replaces is not None:
            block = replace(block, **{stage.replaces: pick(trace.stage(stage.name))})
            holder[stage.replaces] = stage.name
    return blocks, holders


def back(trace: Trace, d: np.ndarray, start: str, stop: str | None = None, head: int | None = None,
         keep=None) -> dict[str, np.ndarray]:
    """The reverse of `stages.run`: the vjps of the present stages from `start` (the gradient of its
    value is `d`) down to the first stage, or to `stop` (not run: its gradient is returned).
    Returns the gradients by name: of the stages (only those in `keep` and `stop`, when `keep` is
    given), of the block inputs Q, K, V, and whatever the vjps report (D, sinks).
    `head`: one head's arrays (1, …), as marking recomputes them."""
    order = stages.present(trace.problem)
    names = [stage.name for stage in order]
    blocks, holders = _forward_blocks(trace, head)
    pick = (lambda a: a) if head is None else (lambda a: a[head:head + 1])
    found: dict[str, np.ndarray] = {start: d}
    for i in range(names.index(start), -1, -1):
        stage = order[i]
        if stage.name == stop:
            break
        if stage.vjp is None:
            refuse_unknown(trace.problem)
        if stage.name not in found:  # nothing after it read it
            continue
        x = pick(trace.stage(names[i - 1])) if i else None
        gradient = found[stage.name] if keep is None or stage.name in keep else found.pop(stage.name)
        for name, g in stage.vjp(blocks[i], x, pick(trace.stage(stage.name)), gradient).items():
            name = names[i - 1] if name == stages.PREVIOUS else holders[i].get(name, name)
            found[name] = found[name] + g if name in found else g
    return found


def to_d_scores(trace: Trace, d: np.ndarray, head: int | None = None) -> np.ndarray:
    """d_scores from `d`, the gradient of what the softmax read (P ∘ (dP − D)): through the vjps of
    the stages between (softcap, mask). (H, Lq, Lk) arrays, or (1, Lq, Lk) for one `head`."""
    gradient = get("d_scores")
    return back(trace, d, stages.previous(trace.problem, gradient.via), gradient.of, head)[gradient.of]


def to_inputs(trace: Trace, d: np.ndarray, head: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(d_Q, d_K) from `d`, the gradient of the scores (scale · d_scores): through the scores' vjp
    and, with RoPE, the rotations back. (H, …) arrays, or (1, …) for one `head`."""
    d_Q, d_K = get("d_Q"), get("d_K")
    found = back(trace, d, d_Q.via, head=head)
    return found[d_Q.of], found[d_K.of]



def _as_given(d: np.ndarray, given: np.ndarray, query_3d: bool, heads: int) -> np.ndarray:
    """A per-query-head gradient (H, L, w) in the shape its input was given, with its `heads`
    (kv heads summed over their query group): 3-D, 2-D heads side by side, or 2-D beside a 3-D Q
    (one kv head shared by every query head)."""
    summed = groups.fold(d, heads)  # (heads, L, w)
    if given.ndim == 3:
        return summed
    return summed[0] if query_3d else merge_heads(summed)


def _input_grads(problem, d_Q, d_K, d_V, dtype) -> dict[str, np.ndarray]:
    given, kv_heads = problem.inputs, groups.count(problem)
    if not problem.projected:
        query_3d = given["Q"].ndim == 3
        return {name: _as_given(d, given[name], query_3d, n)
                for name, d, n in (("Q", d_Q, problem.heads), ("K", d_K, kv_heads), ("V", d_V, kv_heads))}
    X = given["X"].astype(dtype)
    X_kv = given["X_kv"].astype(dtype) if "X_kv" in given else X
    grads = {}
    d_in = {"X": np.zeros_like(X), "X_kv": np.zeros_like(X_kv)}
    for name, d, x, source in (("Q", d_Q, X, "X"), ("K", d_K, X_kv, "X_kv"), ("V", d_V, X_kv, "X_kv")):
        d_projected = merge_heads(groups.fold(d, problem.heads if name == "Q" else kv_heads))  # (L, d_out)
        W = given[f"W_{name}"].astype(dtype)
        grads[f"W_{name}"] = x.T @ d_projected  # (d_model, d_out)
        if f"b_{name}" in given:
            grads[f"b_{name}"] = d_projected.sum(axis=0)  # (d_out,)
        d_in[source if "X_kv" in given else "X"] += d_projected @ W.T  # (L, d_model)
    grads["X"] = d_in["X"]
    if "X_kv" in given:
        grads["X_kv"] = d_in["X_kv"]
    return grads
