"""Scaled dot-product attention in plain numpy: the inputs per head, then every stage of the stage
table (attncli/stages/table.py: scores, scaled, masked, weights, output) on one block that holds
everything, then the heads merged and projected.

Heads are computed together as batched matrix products; no Python loop over heads or rows.
No I/O here: `attend` takes a validated `Problem` and returns a `Trace`.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from attncli.base.arrays import cannot_overflow, check_finite, merge_heads, split_heads
from attncli.compute import precision
from attncli.compute.backward import backward
from attncli.compute.births import MASKED_ROWS_POLICY, masked_rows_warnings  # noqa: F401  (read from here too)
from attncli.compute.limits import backward_bytes, check_fits, score_arrays, stage_bytes
from attncli.problem import groups, recipes
from attncli.problem.trace import Problem, Trace
from attncli.stages import table as stages


def head_inputs(problem: Problem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-head Q (H, Lq, d_k), K (H, Lk, d_k), V (H, Lk, d_v), projecting X when given and
    repeating kv heads for grouped-query attention."""
    dtype = np.dtype(problem.dtype)
    given = {name: array.astype(dtype, copy=False) for name, array in problem.inputs.items()}
    for name, array in given.items():
        check_finite(array, name, ("index",) * array.ndim)  # float32 holds less than float64
    if problem.projected:
        X = given["X"]
        X_kv = given.get("X_kv", X)
        qkv = []
        for name, x in (("Q", X), ("K", X_kv), ("V", X_kv)):
            projected = x @ given[f"W_{name}"]  # (L, d_out)
            if f"b_{name}" in given:
                projected = projected + given[f"b_{name}"]
            check_finite(projected, f"the projection {name} = X W_{name}", ("row", "column"))
            qkv.append(projected)
    else:
        qkv = [given[name] for name in "QKV"]
    # 2-D matrices are split: Q into `heads`, K and V into the kv heads (beside a 3-D Q, a 2-D K or
    # V is one shared kv head); grouped-query attention: query head h uses kv head h // group.
    Q, K, V = (np.ascontiguousarray(m if m.ndim == 3 else split_heads(m, n))
               for m, n in zip(qkv, (problem.heads,) + (groups.count(problem),) * 2))
    return Q, groups.repeat(K, Q.shape[0]), groups.repeat(V, Q.shape[0])


def scale_of(problem: Problem, d_k: int) -> float:
    """The scale actually used: the given one, or 1/√d_k."""
    return problem.scale if problem.scale is not None else 1.0 / np.sqrt(d_k)


def project_output(problem: Problem, output: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(heads side by side (Lq, H·d_v), final output: that times W_O plus b_O when given)."""
    concat = merge_heads(output)
    final = concat
    if "W_O" in problem.inputs:
        final = concat @ problem.inputs["W_O"].astype(output.dtype)  # (Lq, d_out)
        if "b_O" in problem.inputs:
            final = final + problem.inputs["b_O"].astype(output.dtype)
        check_finite(final, "output = concat W_O", ("query", "column"))
    return concat, final


def attend(problem: Problem, progress=None, lab: str | None = None) -> Trace:
    """Compute every stage of softmax(Q Kᵀ · scale + bias) V for every head.
    `progress(rows)` is told, after each stage, how far along (in query rows) the work is.
    A problem of the precision lab (a low dtype, a finite mask fill, no max subtraction) is
    computed by attncli/compute/precision.py; so is any float32 problem when `lab` (what asked for
    it, `--error`: the lab measures each stage against float64)."""
    if recipes.lab(problem) or lab is not None:
        check_fits(stage_bytes(problem.heads, problem.lq, problem.lk, 8, score_arrays(problem) + 8))
        return precision.attend(problem, tuple(stage.name for stage in stages.present(problem)),
                                None if recipes.lab(problem) else lab)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported by check_finite
        trace = _attend(problem, progress or (lambda rows: None))
    if problem.dO is None:
        return trace
    check_fits(backward_bytes(problem, np.dtype(problem.dtype).itemsize))
    return replace(trace, gradients=backward(trace))  # the backward pass reads the whole trace


def _attend(problem: Problem, progress) -> Trace:
    itemsize = np.dtype(problem.dtype).itemsize
    present = stages.present(problem)
    check_fits(stage_bytes(problem.heads, problem.lq, problem.lk, itemsize, score_arrays(problem)))
    Q, K, V = head_inputs(problem)  # (H, Lq, d_k), (H, Lk, d_k), (H, Lk, d_v)
    scale = scale_of(problem, Q.shape[-1])
    bounded = not stages.inputs(problem) and bool(cannot_overflow(Q, K, scale).all())  # RoPE: checked as computed
    block = stages.Block(problem, Q, K, V, scale, bounded=bounded, found={})  # found: the softmax's lse, dead rows
    done = {stage.name: problem.lq * (i + 1) // (len(present) + 1) for i, stage in enumerate(present)}

    def after(name: str) -> None:
        progress(done[name])  # each stage's share of the rows, roughly

    values = stages.run(block, stop=stages.SOFTMAX, after=after)  # scores … weights, (H, Lq, Lk) each
    lse, dead = block.found["lse"], block.found["dead"]  # (H, Lq) each: −∞ / every key masked (with a sink: lse = sink)
    warnings = masked_rows_warnings(problem, dead)  # before the output check: the policy speaks first
    values.update(stages.run(block, stages.SOFTMAX, values[stages.SOFTMAX], after=after))  # output

    concat, final = project_output(problem, values["output"])  # (Lq, H·d_v), (Lq, d_out)
    return Trace(problem=problem, scale=float(block.scale), Q=Q, K=K, V=V, stages=values,
                 concat=concat, final=final, fully_masked=tuple((int(h), int(i)) for h, i in np.argwhere(dead)),
                 warnings=tuple(warnings), lse=lse)
