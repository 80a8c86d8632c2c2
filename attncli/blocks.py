"""The output alone, without keeping the (Lq × Lk) stages: queries are processed in blocks, so
peak memory is O(block × Lk) per head instead of O(Lq × Lk), and blocks can run on several
threads (numpy releases the GIL in matrix products and ufuncs).

Each block goes through the arithmetic of `attention.attend`, in place: scores = (Q · scale) Kᵀ,
+ bias, −∞ where masked, e^(x − shift), weights V, then ÷ the row sums. The results agree with
`attend` to rounding (the tests hold them to 1e-12 in float64).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from attncli.attention import HQK, check_finite, head_inputs, masked_rows_warnings, project_output, scale_of
from attncli.errors import NumericError
from attncli.trace import Problem, Trace

BLOCK_BYTES = 16 << 20  # one block's scores: large enough for BLAS, small enough for the cache
SAFE_EXP = {np.dtype(np.float64): 600.0, np.dtype(np.float32): 40.0}  # |x| below which Σ e^x cannot overflow


def block_rows(heads: int, lk: int, itemsize: int, budget: int = BLOCK_BYTES) -> int:
    return max(1, budget // (heads * lk * itemsize))


def _blocked(problem: Problem, rows: slice, gone: np.ndarray) -> bool:
    """Are the rows whose weights all vanished really blocked by the mask or a −∞ bias?"""
    blocked = np.zeros(gone.shape[:2] + (problem.lk,), bool)
    if problem.mask is not None:
        blocked |= ~problem.mask[:, rows]
    if problem.bias is not None:
        blocked |= np.isneginf(problem.bias[:, rows])
    return bool(blocked.all(axis=-1)[gone[..., 0]].all())


def attend_output(problem: Problem, block: int | None = None, workers: int = 1, progress=None) -> Trace:
    """A Trace with the per-head and final outputs only (scores … weights are None).
    `workers` threads process blocks; give more than one only when BLAS runs one thread each.
    `progress(rows_done)` is called as blocks finish."""
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        Q, K, V = head_inputs(problem)  # (H, Lq, d_k), (H, Lk, d_k), (H, Lk, d_v)
        heads, lq, d_k = Q.shape
        scale = scale_of(problem, d_k)
        Qs = Q * Q.dtype.type(scale)  # (H, Lq, d_k): scaling Q is scaling every score
        Kt = np.ascontiguousarray(K.transpose(0, 2, 1))  # (H, d_k, Lk)
        # |q·k| ≤ |q| |k|: when that bound is small, e^x needs no max subtracted (softmax is shift-free).
        k_norm = np.sqrt((K.astype(np.float64) ** 2).sum(axis=-1)).max(axis=-1)[:, None]  # (H, 1)
        q_bound = np.sqrt((Qs.astype(np.float64) ** 2).sum(axis=-1)) * k_norm  # (H, Lq)
        V1 = np.concatenate([V, np.ones(V.shape[:2] + (1,), V.dtype)], axis=-1)  # (H, Lk, d_v + 1)
        output = np.empty((heads, lq, V.shape[2]), Q.dtype)  # (H, Lq, d_v)
        dead = np.zeros((heads, lq), bool)
        step = block or block_rows(heads, K.shape[1], Q.dtype.itemsize)

        def run(start: int) -> int:
            with np.errstate(over="ignore", invalid="ignore", under="ignore"):  # per thread: errstate is not inherited
                return one_block(start)

        def one_block(start: int) -> int:
            rows = slice(start, min(start + step, lq))
            x = Qs[:, rows] @ Kt  # (H, b, Lk) scaled scores; overflow shows up in the sums below
            if problem.bias is not None:
                bias = problem.bias[:, rows]
                x += bias
                check_finite(x, "scaled + bias", HQK, allow_neg_inf=np.isneginf(bias), offset=(0, start, 0))
            if problem.mask is not None:
                np.putmask(x, ~np.broadcast_to(problem.mask[:, rows], x.shape), -np.inf)
            if problem.bias is not None or q_bound[:, rows].max() > SAFE_EXP[x.dtype]:
                shift = x.max(axis=-1, keepdims=True)  # (H, b, 1)
                shift[shift == -np.inf] = 0.0  # rows with every key masked stay all −∞
                x -= shift
            np.exp(x, out=x)  # unnormalised weights
            both = x @ V1  # (H, b, d_v + 1): the weighted values, and the row sums from V's ones column
            out, sums = both[..., :-1], both[..., -1:]
            gone = sums == 0  # every key masked (otherwise some e^x ≥ e^−SAFE_EXP > 0)
            if not np.isfinite(sums).all() or (gone.any() and not _blocked(problem, rows, gone)):
                bad = np.argwhere(~np.isfinite(sums[..., 0]) | gone[..., 0])[0]
                raise NumericError(f"scaled = scores · scale overflows {x.dtype} at head {bad[0]}, "
                                   f"query {start + bad[1]}; scale the inputs down")
            if gone.any():
                dead[:, rows] = gone[..., 0]
                sums[gone] = 1.0  # 0 / 1: their output is 0
            out /= sums
            if gone.any() and problem.masked_rows == "uniform":
                out = np.where(gone, V.mean(axis=1, keepdims=True), out)  # equal weights: the mean of V
            output[:, rows] = out
            return rows.stop

        with ThreadPoolExecutor(workers) as pool:
            for stop in pool.map(run, range(0, lq, step)):
                if progress:
                    progress(stop)
        check_finite(output, "output = weights V", ("head", "query", "column"))
        warnings = masked_rows_warnings(problem, dead)
        concat, final = project_output(problem, output)  # (Lq, H·d_v), (Lq, d_out)
    return Trace(problem=problem, scale=float(scale), Q=Q, K=K, V=V, scores=None, scaled=None, masked=None,
                 weights=None, output=output, concat=concat, final=final,
                 masked_rows=tuple((int(h), int(i)) for h, i in np.argwhere(dead)), warnings=tuple(warnings))

