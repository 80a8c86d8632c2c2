"""One query row's backward pass as a hand calculation prints it (see attncli/steps.py for the
forward half).

Every number is computed from the numbers printed before it (the forward half's printed weights,
values, output, q and keys, and dO as printed), then rounded: every printed equation holds at the
printed decimals, whichever carry the forward half used. The exact gradients (attncli/backward.py)
are shown beside the carried d_q at the end, as rounded carry does for the output.

For query row i of head h, with P the weights row, O the output row and dO the row of d_output:

    d_weights_j = dO · v_j            D = dO · O
    d_scores_j  = P_j (d_weights_j − D)              0 for a masked key
    d_q         = scale · Σ_j d_scores_j k_j          (÷ √d_k for the default scale)
    this row's share of d_v_j = P_j dO, of d_k_j = scale · d_scores_j q
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from attncli.steps import Written, _exactly, _round, printed
from attncli.trace import Trace


@dataclass(frozen=True)
class WrittenBackward:
    """The numbers one row's backward narration prints, each with `places` decimals."""

    dO: list[Decimal]  # (d_v,) this head's columns of dO for the row
    d_weights: list[Decimal | None]  # (Lk,) None for a masked key
    D: Decimal
    d_scores: list[Decimal]  # (Lk,) 0 for a masked key (and every key of a fully masked row)
    sums: list[Decimal]  # (d_k,) Σ_j d_scores_j k_j before the scale
    d_q: list[Decimal]  # (d_k,)
    d_v: list[list[Decimal]]  # (Lk, d_v) this row's share: P_j dO
    d_k: list[list[Decimal]]  # (Lk, d_k) this row's share: scale · d_scores_j q
    exact_d_q: list[Decimal]  # the exact d_q (backward.py's) as printed
    dead: bool  # every key masked: no gradient reaches the scores


@_exactly
def written_backward(trace: Trace, w: Written) -> WrittenBackward:
    """The backward narration of the row `w` (the forward half, as printed) explains."""
    places, h, i = w.places, w.head, w.row
    r = lambda value: _round(value, places)  # noqa: E731
    dO = [printed(x, places) for x in trace.gradients.heads["d_output"][h, i]]
    live = [j for j, allowed in enumerate(w.allowed) if allowed]
    dead = not live
    d_weights = [r(_dot(dO, w.V[j])) if w.allowed[j] else None for j in range(len(w.V))]
    D = r(_dot(dO, w.output))
    d_scores = [Decimal(0) if dead or not w.allowed[j] else r(w.weights[j] * (d_weights[j] - D))
                for j in range(len(w.V))]
    sums = [r(sum((d_scores[j] * w.K[j][c] for j in live), Decimal(0))) for c in range(len(w.q))]
    d_q = [r(s / w.divisor) if w.divisor is not None else r(s * w.scale) for s in sums]
    d_v = [[r(w.weights[j] * x) for x in dO] for j in range(len(w.V))]
    d_k = [[r(d_scores[j] * x / w.divisor) if w.divisor is not None else r(d_scores[j] * w.scale * x)
            for x in w.q] for j in range(len(w.V))]
    exact = [printed(x, places) for x in trace.gradients.heads["d_Q"][h, i]]
    return WrittenBackward(dO=dO, d_weights=d_weights, D=D, d_scores=d_scores, sums=sums, d_q=d_q,
                           d_v=d_v, d_k=d_k, exact_d_q=exact, dead=dead)


def _dot(xs: list[Decimal], ys: list[Decimal]) -> Decimal:
    return sum((x * y for x, y in zip(xs, ys)), Decimal(0))
