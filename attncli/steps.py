"""One query row's hand calculation: the intermediate numbers a person writes down."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attncli.trace import Trace, head_slice


@dataclass(frozen=True)
class RowSteps:
    """One query row of one head, with the intermediate numbers a hand calculation writes down."""

    head: int
    row: int
    q: np.ndarray  # (d_k,)
    K: np.ndarray  # (Lk, d_k)
    scores: np.ndarray  # (Lk,)
    scaled: np.ndarray  # (Lk,)
    bias: np.ndarray | None  # (Lk,)
    allowed: np.ndarray  # (Lk,) bool: False where masked (bias −∞ or mask)
    masked: np.ndarray  # (Lk,) the softmax's input
    shift: float  # subtracted before e^x: 0, or the row max when e^x would overflow
    exps: np.ndarray  # (Lk,) e^(masked − shift), 0 where masked
    total: float  # Σ exps
    weights: np.ndarray  # (Lk,)
    V: np.ndarray  # (Lk, d_v)
    contributions: np.ndarray  # (Lk, d_v) weight_j · v_j
    output: np.ndarray  # (d_v,)


def row_steps(trace: Trace, head: int, row: int) -> RowSteps:
    """The hand calculation of one query row, read from the trace (exponentials recomputed)."""
    masked = (trace.scaled if trace.masked is None else trace.masked)[head, row]  # (Lk,)
    allowed = masked != -np.inf
    top = masked[allowed].max() if allowed.any() else 0.0
    # e^x overflows beyond log(max float): only then does the hand calculation need the shift.
    shift = float(top) if top > np.log(np.finfo(masked.dtype).max) else 0.0
    with np.errstate(under="ignore"):
        exps = np.where(allowed, np.exp(np.where(allowed, masked - shift, 0.0)), 0.0)  # (Lk,)
    weights = trace.weights[head, row]  # (Lk,)
    bias = head_slice(trace.problem.bias, head)
    return RowSteps(head=head, row=row, q=trace.Q[head, row], K=trace.K[head], scores=trace.scores[head, row],
                    scaled=trace.scaled[head, row], bias=None if bias is None else bias[row],
                    allowed=allowed, masked=masked, shift=shift, exps=exps, total=float(exps.sum()),
                    weights=weights, V=trace.V[head], contributions=weights[:, None] * trace.V[head],
                    output=trace.output[head, row])
