"""The output alone, without keeping the (Lq × Lk) stages: queries are processed in blocks, so
peak memory is O(block × Lk) per head instead of O(Lq × Lk), and blocks can run on several
threads (numpy releases the GIL in matrix products and ufuncs). Mask rules are asked per block
(attncli/masks.py): only the keys some row of the block may see are multiplied (causal skips the
upper triangle, a window everything outside its band), and the mask is applied only on the
columns where some row may be hidden; overflow is still checked on every key, as the full trace does.

Each block goes through the stage table's own compute functions and overflow checks for the
stages before the softmax (attncli/stages.py: scores, scaled, masked), in place (`Block.reuse`).
The softmax and `output = weights V` are fused here for speed: e^(x − row max), then one product
with V and a column of ones, so the weights never exist as their own array. So it accepts and
refuses the same inputs as `attention.attend`, with the same overflow rules (scores, scaled,
scaled + bias and output overflow the dtype; e^x never does, and nothing underflows that the
full trace keeps); a stage added before the softmax is computed here with no change to this
module, one added after it needs one here (sinks did: the sink logit joins each row's max and sum). One difference in order: the row sums divide weights·V rather than the weights (the sums come
from a column of ones beside V, in the same product), unless weights·V overflows before the
division; the results agree with `attend` to rounding (the tests hold them to 1e-12 of
Σ weights·|V| in float64, over scaled scores of ±700 and values from 1e-300 to 1e300).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from attncli import masks, stages
from attncli.arrays import cannot_overflow, check_finite
from attncli.attention import head_inputs, masked_rows_warnings, project_output, scale_of
from attncli.softmax import row_policy
from attncli.trace import Problem, Trace

BLOCK_BYTES = 16 << 20  # one block's scores: large enough for BLAS, small enough for the cache


def block_rows(heads: int, lk: int, itemsize: int, budget: int = BLOCK_BYTES) -> int:
    return max(1, budget // (heads * lk * itemsize))


def attend_output(problem: Problem, block: int | None = None, workers: int = 1, progress=None) -> Trace:
    """A Trace with the per-head and final outputs only (`stages` holds only "output").
    `workers` threads process blocks; give more than one only when BLAS runs one thread each.
    `progress(rows_done)` is called as blocks finish."""
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        Q, K, V = head_inputs(problem)  # (H, Lq, d_k), (H, Lk, d_k), (H, Lk, d_v)
        stages.refuse_unfused(problem)
        heads, lq, d_k = Q.shape
        lk = K.shape[1]
        scale = scale_of(problem, d_k)
        # Stages that stand in for Q and K (Q_rope, K_rope) run once, up front: O(L · d_k).
        ready = stages.inputs(problem)
        rotated = ready[-1].name if ready else None  # the blocks' stages start after it
        if ready:
            values = stages.run(stages.Block(problem, Q, K, V, scale), stop=rotated)
            replaced = {stage.replaces: values[stage.name] for stage in ready}
            Q, K = replaced.get("Q", Q), replaced.get("K", K)
        logits = [stage for stage in stages.logits(problem) if stage.replaces is None]
        safe = cannot_overflow(Q, K, scale)  # (Lq,): those queries skip the overflow check of their scores
        V1 = np.concatenate([V, np.ones(V.shape[:2] + (1,), V.dtype)], axis=-1)  # (H, Lk, d_v + 1)
        output = np.empty((heads, lq, V.shape[2]), Q.dtype)  # (H, Lq, d_v)
        dead = np.zeros((heads, lq), bool)
        lse = np.full((heads, lq), -np.inf, Q.dtype)  # ln Σ e^x = row max + ln Σ e^(x − max); −∞ when dead
        step = block or block_rows(heads, K.shape[1], Q.dtype.itemsize)
        sink = None if problem.sinks is None else problem.sinks.astype(Q.dtype)[:, None, None]  # (H, 1, 1)

        def run(start: int) -> int:
            with np.errstate(over="ignore", invalid="ignore", under="ignore"):  # per thread: errstate is not inherited
                return one_block(start)

        def one_block(start: int) -> int:
            rows = slice(start, min(start + step, lq))
            if not safe[rows].all():  # overflow is an error on every key, hidden or not, as in the full trace
                stages.run(stages.Block(problem, Q[:, rows], K, V, scale, rows=rows), rotated, stop="scaled")
            first, stop = masks.key_span(problem, rows)  # keys outside it are hidden from every row
            if first == stop:  # every key is masked for every row of the block
                return _dead_block(rows)
            keys = slice(first, stop)
            block = stages.Block(problem, Q[:, rows], K[:, keys], V[:, keys], scale, rows=rows, cols=keys,
                                 reuse=True, bounded=True)
            x = None
            for stage in logits:  # scores, scaled, masked: the stage table's functions, in place
                x = stage.compute(block, x)  # (H, b, c)
                if stage.check is not None:
                    stage.check(block, x)
            # (H, b, 1) each: the row max (or the sink, or 0 for a row whose every key is masked: gone)
            shift, gone, fill = row_policy(x.max(axis=-1, keepdims=True), sink, problem.masked_rows, lk)
            x -= shift  # ≤ 0: e^x ≤ 1 never overflows, and the largest is 1, so no row sum underflows
            np.exp(x, out=x)  # unnormalised weights
            both = x @ V1[:, keys]  # (H, b, d_v + 1): the weighted values, and the row sums from V's ones column
            out, sums = both[..., :-1], both[..., -1:]
            if sink is not None:
                sums += np.exp(sink - shift)  # the sink's share of each row, dropped from the weights
            with np.errstate(divide="ignore"):  # ln Σ e^x (and the sink) = shift + ln sums; −∞ when dead
                lse[:, rows] = (shift + np.log(sums) if sink is not None else
                                np.where(gone, -np.inf, shift + np.log(sums)))[..., 0]  # (H, b)
            sums[gone] = 1.0  # 0 / 1: their output is 0 (with a sink too: the sink takes the whole row)
            out /= sums
            lost = ~np.isfinite(out).all(axis=-1)  # (H, b): Σ e^x V overflowed before ÷ Σ e^x
            for h in np.flatnonzero(lost.any(axis=-1)):  # normalise first, as the full trace does
                out[h, lost[h]] = (x[h, lost[h]] / sums[h, lost[h]]) @ V[h, keys]  # (rows, d_v)
            if gone.any():
                dead[:, rows] = gone[..., 0]
                if fill:
                    out = np.where(gone, filled(fill), out)
            output[:, rows] = out
            return rows.stop

        def filled(fill: float) -> np.ndarray:
            """(H, 1, d_v): a dead row's output, its weights (`fill` for ALL keys) times V, as the full trace does."""
            return np.full((heads, 1, lk), fill, Q.dtype) @ V

        def _dead_block(rows: slice) -> int:
            dead[:, rows] = True
            shift, _, fill = row_policy(np.full((heads, rows.stop - rows.start, 1), -np.inf, Q.dtype), sink,
                                               problem.masked_rows, lk)
            output[:, rows] = filled(fill) if fill else 0.0
            lse[:, rows] = -np.inf if sink is None else shift[..., 0]  # only the sink is left in the sum: lse = sink
            return rows.stop

        with ThreadPoolExecutor(workers) as pool:
            for stop in pool.map(run, range(0, lq, step)):
                if progress:
                    progress(stop)
        warnings = masked_rows_warnings(problem, dead)  # before the output check, as in `attend`
        check_finite(output, "output = weights V", ("head", "query", "column"))
        concat, final = project_output(problem, output)  # (Lq, H·d_v), (Lq, d_out)
    return Trace(problem=problem, scale=float(scale), Q=Q, K=K, V=V, stages={"output": output},
                 concat=concat, final=final, fully_masked=tuple((int(h), int(i)) for h, i in np.argwhere(dead)),
                 warnings=tuple(warnings), lse=lse)
