"""The output alone, without keeping the (Lq × Lk) stages: queries are processed in blocks, so
peak memory is O(block × Lk) per head instead of O(Lq × Lk), and blocks run on `threads` workers
(attncli/compute/pool.py: numpy releases the GIL in matrix products and ufuncs; BLAS runs one thread in
each, and each worker has its scores buffer of its own, made once). Every block is computed the
same way whichever worker takes it, with the same rows, keys and order of reduction, so the
output is the same bit for bit with any number of threads (tests/test_threads.py). Mask rules are asked per block
(attncli/problem/masks.py): only the keys some row of the block may see are multiplied (causal skips the
upper triangle, a window everything outside its band), and the mask is applied only on the
columns where some row may be hidden; overflow is still checked on every key, as the full trace does.

Each block goes through the stage table's own compute functions and overflow checks for the
stages before the softmax (attncli/stages/table.py: scores, scaled, masked), in place (`Block.reuse`):
the first (Q Kᵀ) as one matrix product for the whole block (many rows keep BLAS fast), the others
and e^x on runs of rows small enough to stay in a core's L2 cache (`CHUNK_BYTES`), so each
element comes from main memory twice (after Q Kᵀ, and for · V) rather than once per stage.
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

from dataclasses import dataclass, replace

import numpy as np

from attncli.base.arrays import cannot_overflow, check_finite
from attncli.base.softmax import row_policy
from attncli.compute import pool
from attncli.compute.attention import head_inputs, masked_rows_warnings, project_output, scale_of
from attncli.compute.threads import workers
from attncli.problem import masks
from attncli.problem.trace import Problem, Trace
from attncli.stages import table as stages

BLOCK_BYTES = 64 << 20  # at most one block's scores, per thread: many rows keep BLAS's products fast
MIN_BLOCKS = 8  # a long problem is cut into at least this many blocks, to share among the threads
MASKED_ROWS = 256  # at most this many rows per block under mask rules: less of a causal diagonal is wasted
MIN_ROWS = 64  # a block narrowed for a band of keys keeps at least this many rows
CHUNK_BYTES = 2 << 20  # the rows the stages after Q Kᵀ and e^x run on at a time: about a core's L2 cache


def block_rows(heads: int, lq: int, lk: int, itemsize: int, budget: int = BLOCK_BYTES) -> int:
    """Queries per block: as many as `budget` bytes of scores hold, and at most an eighth of them.
    It depends on the problem alone, never on the threads, so that every thread count computes
    the same blocks."""
    return max(1, min(budget // (heads * lk * itemsize), -(-lq // MIN_BLOCKS)))


def narrowed(problem: Problem, step: int) -> int:
    """Fewer rows per block under mask rules, whose blocks multiply keys some of their rows may not
    see: at most MASKED_ROWS (a causal block of r rows wastes r²/2 products on its diagonal), and
    when the rules leave each query a narrow band of keys (a window), half the band (at least
    MIN_ROWS): a block of r rows multiplies about band + r keys, so about a third of them are
    hidden, and fewer, smaller blocks cost more in Python and BLAS calls than they save (measured
    at 16384², --window 511,0, two threads: blocks of 256 rows 0.085× of no mask, of 127 rows
    0.11×; docs/performance.md). The band is measured on the block in the middle of the queries; like the rest, it
    depends on the problem alone."""
    if not masks.has_rules(problem):
        return step
    step = min(step, MASKED_ROWS)
    if step <= MIN_ROWS:
        return step
    middle = slice(problem.lq // 2, min(problem.lq // 2 + step, problem.lq))
    first, stop = masks.key_span(problem, middle)
    band = stop - first - (middle.stop - middle.start)
    return step if band >= 2 * step else max(MIN_ROWS, band // 2)


def attend_output(problem: Problem, block: int | None = None, threads: int | None = None, progress=None) -> Trace:
    """A Trace with the per-head and final outputs only (`stages` holds only "output").
    `threads` workers process blocks (None: every core; 1: the calling thread alone); BLAS runs
    one thread in each. `progress(rows_done)` is called as blocks finish, in order."""
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        run = _Blocks.prepare(problem, block)
        starts = range(0, problem.lq, run.step)  # no more workers than blocks: each has its own scratch
        for stop in pool.run(run.in_thread, starts, min(workers(threads), len(starts)), run.scratch):
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
                   safe=cannot_overflow(Q, K, scale), step=min(block or narrowed(problem, block_rows(heads, lq, K.shape[1], Q.dtype.itemsize)), lq),
                   sink=None if problem.sinks is None else problem.sinks.astype(Q.dtype)[:, None, None],
                   output=np.empty((heads, lq, V.shape[2]), Q.dtype), dead=np.zeros((heads, lq), bool),
                   lse=np.full((heads, lq), -np.inf, Q.dtype))

    def scratch(self) -> dict[str, np.ndarray]:
        """One worker's buffers, made once and reused for every block it takes: the block's
        scores (then logits, then e^x; flat, viewed as (H, b, c) for each block's key span), its
        products with V and the ones column, and its row maxima."""
        heads, width = self.Q.shape[0], self.V1.shape[2]
        return {"scores": np.empty(heads * self.step * self.K.shape[1], self.Q.dtype),
                "both": np.empty(heads * self.step * width, self.Q.dtype),
                "row_max": np.empty(heads * self.step, self.Q.dtype)}

    def in_thread(self, start: int, buffers: dict[str, np.ndarray]) -> int:
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):  # per thread: errstate is not inherited
            return self.one_block(start, buffers)

    def one_block(self, start: int, buffers: dict[str, np.ndarray]) -> int:
        """The output of queries start … start + step, through the stage table's functions for the
        stages before the softmax (in place), then the fused softmax and · V. Returns where it stops."""
        p, rows = self.problem, slice(start, min(start + self.step, self.problem.lq))
        if not self.safe[rows].all():  # overflow is an error on every key, hidden or not, as in the full trace
            stages.run(stages.Block(p, self.Q[:, rows], self.K, self.V, self.scale, rows=rows), self.rotated,
                       stop="scaled")
        first, stop = masks.key_span(p, rows)  # keys outside it are hidden from every row
        if first == stop:  # every key is masked for every row of the block
            return self.dead_block(rows)
        keys, shape = slice(first, stop), (self.Q.shape[0], rows.stop - rows.start, stop - first)  # (H, b, c)
        block = stages.Block(p, self.Q[:, rows], self.K[:, keys], self.V[:, keys], self.scale, rows=rows, cols=keys,
                             reuse=True, bounded=True, out=_view(buffers["scores"], shape))
        row_max = _view(buffers["row_max"], shape[:2] + (1,))  # (H, b, 1)
        x = self.logits[0].compute(block, None)  # Q Kᵀ: one matrix product for the whole block
        _check(self.logits[0], block, x)
        chunk = max(1, CHUNK_BYTES // (shape[0] * shape[2] * x.itemsize))  # rows that fit a core's L2 cache
        for at in range(0, shape[1], chunk):
            part = slice(at, min(at + chunk, shape[1]))
            self.numerators(replace(block, Q=block.Q[:, part], out=None,
                                    rows=slice(rows.start + part.start, rows.start + part.stop)),
                            x[:, part], row_max[:, part])
        self.output[:, rows] = self.weighted(x, row_max, rows, keys, _view(buffers["both"], shape[:2] + (self.V1.shape[2],)))
        return rows.stop

    def numerators(self, block: stages.Block, x: np.ndarray, row_max: np.ndarray) -> None:
        """For a run of the block's rows, in place in x (H, rows, c): the stages after Q Kᵀ (scaled,
        capped, masked: the stage table's functions), then e^(x − shift), the softmax's numerators;
        each row's max goes to row_max (H, rows, 1)."""
        for stage in self.logits[1:]:
            found = stage.compute(block, x)
            if found is not x:  # a stage that did not work in place
                x[...] = found
            _check(stage, block, x)
        np.max(x, axis=-1, keepdims=True, out=row_max)
        x -= row_policy(row_max, self.sink, self.problem.masked_rows, self.problem.lk)[0]  # ≤ 0: e^x ≤ 1
        np.exp(x, out=x)  # unnormalised weights; the largest is 1, so no row sum underflows

    def weighted(self, x: np.ndarray, row_max: np.ndarray, rows: slice, keys: slice, both: np.ndarray) -> np.ndarray:
        """softmax V for a block whose numerators e^(x − shift) are in x (H, b, c), without the
        weights as their own array: one product with V and its ones column (into `both`, (H, b,
        d_v + 1)). Fills the block's lse and dead rows."""
        # (H, b, 1) each: the row max (or the sink, or 0 for a row whose every key is masked: gone)
        shift, gone, fill = row_policy(row_max, self.sink, self.problem.masked_rows, self.problem.lk)
        np.matmul(x, self.V1[:, keys], out=both)  # the weighted values, and the row sums from V's ones column
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


def _view(buffer: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The first elements of a flat scratch buffer as a contiguous array of `shape`."""
    return buffer[:int(np.prod(shape))].reshape(shape)


def _check(stage: stages.Stage, block: stages.Block, x: np.ndarray) -> None:
    if stage.check is not None:
        stage.check(block, x)
