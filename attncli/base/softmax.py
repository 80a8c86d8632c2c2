"""The softmax of the stage table's `weights` stage and its rules, written once for every path
that computes a softmax: the full trace (`stages.compute_weights`, and the log-sum-exp beside it),
the output-only path's fused softmax (attncli/compute/blocks.py), the tiles' online softmax
(attncli/compute/tiles.py) and the backward pass (`stages.vjp_weights`): `row_policy` says what a stable
softmax subtracts from each row (its max, or its head's sink), which rows have every key masked,
and what weights those get (the `masked_rows` policy: 0 or 1/Lk; with sinks, 0).
"""

from __future__ import annotations

import numpy as np


def row_policy(row_max: np.ndarray, sinks: np.ndarray | None = None, masked_rows: str = "zero",
               lk: int = 1) -> tuple[np.ndarray, np.ndarray, float]:
    """The softmax's rules for its rows, written once for every path that computes it (`softmax`
    here, the output-only path's fused softmax in blocks.py, the tiles' online
    softmax in tiles.py): (shift, dead, fill) for the rows' maxima `row_max` (..., b[, 1]).
    shift: what a stable softmax subtracts from each row: its max, or its head's sink logit when
      that is larger (`sinks` broadcast against row_max); 0 for a row whose every logit is −∞ and
      that has no sink, so that e^(−∞ − 0) = 0 keeps it all zero;
    dead: the rows whose every logit is −∞ (every key masked);
    fill: the weight each of the `lk` keys of a dead row gets: 1/Lk under the "uniform" policy,
      else 0 ("zero"; and with sinks whatever the policy: the sink takes the whole row)."""
    dead = row_max == -np.inf
    shift = np.maximum(row_max, sinks) if sinks is not None else np.where(dead, 0.0, row_max)
    fill = 1.0 / lk if masked_rows == "uniform" and sinks is None else 0.0
    return shift, dead, fill


def softmax(x: np.ndarray, masked_rows: str = "zero", out: np.ndarray | None = None,
            sinks: np.ndarray | None = None, lse: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Stable softmax over the last axis. Returns (weights, dead) where `dead` marks rows whose
    every entry is −∞; their weights follow `row_policy` (0, or 1/Lk for "uniform").
    `sinks` ((H or 1, 1, 1) logits): each row's softmax also runs over its head's sink, which is
    then dropped, weights = e^x / (e^sink + Σ e^x): the max includes the sink (stable for a sink or
    scores of 1000), rows sum to less than 1, and a dead row's weights are 0 whatever the policy.
    `lse` ((..., b)): also write each row's log-sum-exp there, from the same sums: ln Σ_j e^(x_j)
    (and e^sink), m + ln Σ e^(x − m) so nothing overflows, −∞ for a dead row without a sink
    (natural log, as flash-attn's softmax_lse; kernels that keep base 2 hold lse / ln 2)."""
    shift, dead, fill = row_policy(x.max(axis=-1, keepdims=True), sinks, masked_rows, x.shape[-1])  # (..., b, 1)
    weights = np.subtract(x, shift, out=out)  # x − max ≤ 0, so e^(x − max) ≤ 1 never overflows
    np.exp(weights, out=weights)
    sums = weights.sum(axis=-1, keepdims=True)
    if sinks is not None:
        sums += np.exp(sinks - shift)  # the sink's share, dropped from the weights
    if lse is not None:
        with np.errstate(divide="ignore"):  # a dead row (no sink) sums to 0: ln 0 = −∞
            np.add(shift, np.log(sums), out=lse[..., None])
    if sinks is None:
        sums[dead] = 1.0  # 0 / 1 = 0
    weights /= sums
    if fill and dead.any():
        weights[np.broadcast_to(dead, weights.shape)] = fill
    return weights, dead[..., 0]

