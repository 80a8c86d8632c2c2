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
from dataclasses import dataclass

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
        run = _Blocks.prepare(problem, block)
        with ThreadPoolExecutor(workers) as pool:
            for stop in pool.map(run.in_thread, range(0, problem.lq, run.step)):
                if progress:
                    progress(stop)
        warnings = masked_rows_warnings(problem, run.dead)  # before the output check, as in `attend`
        check_finite(run.output, "output = weights V", ("head", "query", "column"))
        concat, final = project_output(problem, run.output)  # (Lq, H·d_v), (Lq, d_out)
    return Trace(problem=problem, scale=float(run.scale), Q=run.Q, K=run.K, V=run.V, stages={"output": run.output},
                 concat=concat, final=final, fully_masked=tuple((int(h), int(i)) for h, i in np.argwhere(run.dead)),
                 warnings=tuple(warnings), lse=run.lse)


@dataclass(eq=False)
class _Blocks:
    """What every block of queries reads, and the arrays the blocks fill (each its own rows, so
    threads share them): the output (H, Lq, d_v), the rows whose every key is masked (H, Lq) and
    ln Σ e^x per row (H, Lq: row max + ln Σ e^(x − max); −∞ when dead)."""

    problem: Problem
    Q: np.ndarray  # (H, Lq, d_k): Q_rope with RoPE
    K: np.ndarray  # (H, Lk, d_k): K_rope with RoPE
    V: np.ndarray  # (H, Lk, d_v)
    V1: np.ndarray  # (H, Lk, d_v + 1): V and a column of ones, whose product gives the row sums
    scale: float
    rotated: str | None  # the last stage that stands in for Q or K: the blocks' stages start after it
    logits: list  # the stages before the softmax that each block computes (scores, scaled, masked)
    safe: np.ndarray  # (Lq,): those queries skip the overflow check of their scores
    sink: np.ndarray | None  # (H, 1, 1) in the dtype
    step: int  # queries per block
    output: np.ndarray
    dead: np.ndarray
    lse: np.ndarray

    @classmethod
    def prepare(cls, problem: Problem, block: int | None) -> _Blocks:
        Q, K, V = head_inputs(problem)  # (H, Lq, d_k), (H, Lk, d_k), (H, Lk, d_v)
        stages.refuse_unfused(problem)
        heads, lq, d_k = Q.shape
        scale = scale_of(problem, d_k)
        # Stages that stand in for Q and K (Q_rope, K_rope) run once, up front: O(L · d_k).
        ready = stages.inputs(problem)
        rotated = ready[-1].name if ready else None
        if ready:
            values = stages.run(stages.Block(problem, Q, K, V, scale), stop=rotated)
            replaced = {stage.replaces: values[stage.name] for stage in ready}
            Q, K = replaced.get("Q", Q), replaced.get("K", K)
        return cls(problem, Q, K, V, V1=np.concatenate([V, np.ones(V.shape[:2] + (1,), V.dtype)], axis=-1),
                   scale=scale, rotated=rotated,
                   logits=[stage for stage in stages.logits(problem) if stage.replaces is None],
                   safe=cannot_overflow(Q, K, scale), step=block or block_rows(heads, K.shape[1], Q.dtype.itemsize),
                   sink=None if problem.sinks is None else problem.sinks.astype(Q.dtype)[:, None, None],
                   output=np.empty((heads, lq, V.shape[2]), Q.dtype), dead=np.zeros((heads, lq), bool),
                   lse=np.full((heads, lq), -np.inf, Q.dtype))

    def in_thread(self, start: int) -> int:
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):  # per thread: errstate is not inherited
            return self.one_block(start)

    def one_block(self, start: int) -> int:
        """The output of queries start … start + step, through the stage table's functions for the
        stages before the softmax (in place), then the fused softmax and · V. Returns where it stops."""
        p, rows = self.problem, slice(start, min(start + self.step, self.problem.lq))
        if not self.safe[rows].all():  # overflow is an error on every key, hidden or not, as in the full trace
            stages.run(stages.Block(p, self.Q[:, rows], self.K, self.V, self.scale, rows=rows), self.rotated,
                       stop="scaled")
        first, stop = masks.key_span(p, rows)  # keys outside it are hidden from every row
        if first == stop:  # every key is masked for every row of the block
            return self.dead_block(rows)
        keys = slice(first, stop)
        block = stages.Block(p, self.Q[:, rows], self.K[:, keys], self.V[:, keys], self.scale, rows=rows, cols=keys,
                             reuse=True, bounded=True)
        x = None
        for stage in self.logits:  # scores, scaled, masked: the stage table's functions, in place
            x = stage.compute(block, x)  # (H, b, c)
            if stage.check is not None:
                stage.check(block, x)
        self.output[:, rows] = self.weighted(x, rows, keys)
        return rows.stop

    def weighted(self, x: np.ndarray, rows: slice, keys: slice) -> np.ndarray:
        """softmax(x) V for a block's logits x (H, b, c), without the weights as their own array:
        e^(x − shift) in place, then one product with V and its ones column. Fills the block's lse
        and dead rows."""
        # (H, b, 1) each: the row max (or the sink, or 0 for a row whose every key is masked: gone)
        shift, gone, fill = row_policy(x.max(axis=-1, keepdims=True), self.sink, self.problem.masked_rows,
                                       self.problem.lk)
        x -= shift  # ≤ 0: e^x ≤ 1 never overflows, and the largest is 1, so no row sum underflows
        np.exp(x, out=x)  # unnormalised weights
        both = x @ self.V1[:, keys]  # (H, b, d_v + 1): the weighted values, and the row sums from V's ones column
        out, sums = both[..., :-1], both[..., -1:]
        if self.sink is not None:
            sums += np.exp(self.sink - shift)  # the sink's share of each row, dropped from the weights
        with np.errstate(divide="ignore"):  # ln Σ e^x (and the sink) = shift + ln sums; −∞ when dead
            self.lse[:, rows] = (shift + np.log(sums) if self.sink is not None else
                                 np.where(gone, -np.inf, shift + np.log(sums)))[..., 0]  # (H, b)
        sums[gone] = 1.0  # 0 / 1: their output is 0 (with a sink too: the sink takes the whole row)
        out /= sums
        lost = ~np.isfinite(out).all(axis=-1)  # (H, b): Σ e^x V overflowed before ÷ Σ e^x
        for h in np.flatnonzero(lost.any(axis=-1)):  # normalise first, as the full trace does
            out[h, lost[h]] = (x[h, lost[h]] / sums[h, lost[h]]) @ self.V[h, keys]  # (rows, d_v)
        if gone.any():
            self.dead[:, rows] = gone[..., 0]
            if fill:
                out = np.where(gone, self.filled(fill), out)
        return out

    def filled(self, fill: float) -> np.ndarray:
        """(H, 1, d_v): a dead row's output, its weights (`fill` for ALL keys) times V, as the full trace does."""
        return np.full((self.V.shape[0], 1, self.problem.lk), fill, self.V.dtype) @ self.V

    def dead_block(self, rows: slice) -> int:
        self.dead[:, rows] = True
        shift, _, fill = row_policy(np.full((self.Q.shape[0], rows.stop - rows.start, 1), -np.inf, self.Q.dtype),
                                    self.sink, self.problem.masked_rows, self.problem.lk)
        self.output[:, rows] = self.filled(fill) if fill else 0.0
        self.lse[:, rows] = -np.inf if self.sink is None else shift[..., 0]  # only the sink is left: lse = sink
        return rows.stop
