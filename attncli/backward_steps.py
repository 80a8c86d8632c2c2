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

Through a softcap, d_scores is multiplied by 1 − tanh²(scaled / c) (printed per key). With RoPE the
scores read q_rope and k_rope: d_q_rope = scale · Σ_j d_scores_j k_rope_j, then rotated back pair by
pair, (a, b) → (a cos + b sin, b cos − a sin) at the query's angle; the d_k shares are by k_rope.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal

from attncli.carry import exactly, printed, round_to
from attncli.errors import AttnError
from attncli.rope import angles
from attncli.stage_steps import values
from attncli.stages import SOFTMAX, present
from attncli.steps import Written
from attncli.trace import Trace


@dataclass(frozen=True)
class WrittenBackward:
    """The numbers one row's backward narration prints, each with `places` decimals."""

    dO: list[Decimal]  # (d_v,) this head's columns of dO for the row
    weights: list[Decimal]  # (Lk,) the forward half's printed weights and output, which it reads
    output: list[Decimal]  # (d_v,)
    divisor: Decimal | None  # √d_k as printed (default scale), or None
    scale: Decimal | None  # a given scale as printed, or None
    d_weights: list[Decimal | None]  # (Lk,) None for a masked key
    D: Decimal
    d_scores: list[Decimal]  # (Lk,) 0 for a masked key (and every key of a fully masked row)
    sums: list[Decimal]  # (d_k,) Σ_j d_scores_j k_j before the scale
    d_q: list[Decimal]  # (d_k,)
    d_v: list[list[Decimal]]  # (Lk, d_v) this row's share: P_j dO
    d_k: list[list[Decimal]]  # (Lk, d_k) this row's share: scale · d_scores_j q
    exact_d_q: list[Decimal]  # the exact d_q (backward.py's) as printed
    dead: bool  # every key masked: no gradient reaches the scores
    # A softcap: (1 − tanh²) per key as printed, and d_scores before it (None without a softcap).
    cap_factor: list[Decimal] | None = None
    d_capped: list[Decimal] | None = None
    # RoPE: the rotated keys as printed, d_q by Q_rope, and per pair (i, i′, cos, sin) of the
    # query's angle; d_q is d_q_rope rotated back (None without RoPE).
    K_rope: list[list[Decimal]] | None = None
    d_q_rope: list[Decimal] | None = None
    pairs: list[tuple[int, int, Decimal, Decimal]] | None = None


def refuse_unnarrated(problem) -> None:
    """The backward narration is written for the built-in stages: a stage whose hand step does not
    say it is covered (`HandStep.backward`) is refused, not skipped."""
    missing = [stage.name for stage in present(problem) if stage.hand is None or not stage.hand.backward]
    if missing:
        raise AttnError("the backward hand calculation has no step for stage "
                        + ", ".join(f'"{name}"' for name in missing)
                        + ": it narrates the built-in stages only (attncli/backward_steps.py)")


@exactly
def written_backward(trace: Trace, w: Written) -> WrittenBackward:
    """The backward narration of the row `w` (the forward half, as printed) explains."""
    refuse_unnarrated(trace.problem)
    places, h, i = w.places, w.head, w.row
    r = lambda value: round_to(value, places)  # noqa: E731
    weights, output = values(w.stages[SOFTMAX].pairs), w.result
    divisor = printed(math.sqrt(trace.d_k), places) if trace.default_scale else None
    scale = None if trace.default_scale else printed(trace.scale, places)
    dO = [printed(x, places) for x in trace.gradients.heads["d_output"][h, i]]
    live = [j for j, allowed in enumerate(w.allowed) if allowed]
    dead = not live
    d_weights = [r(_dot(dO, w.V[j])) if w.allowed[j] else None for j in range(len(w.V))]
    D = r(_dot(dO, output))
    d_scores = [Decimal(0) if dead or not w.allowed[j] else r(weights[j] * (d_weights[j] - D))
                for j in range(len(w.V))]
    cap_factor = d_capped = None
    cap = getattr(trace.problem, "softcap", None)
    if cap is not None:  # d scaled = d capped · (1 − tanh²(scaled / c))
        tanh = trace.stage("capped")[h, i] / cap
        cap_factor = [printed(1 - t * t, places) for t in tanh]
        d_capped = d_scores
        d_scores = [r(d_capped[j] * cap_factor[j]) for j in range(len(w.V))]
    rope = getattr(trace.problem, "rope", None)
    K = w.K if rope is None else [[printed(x, places) for x in row] for row in trace.stage("K_rope")[h]]
    sums = [r(sum((d_scores[j] * K[j][c] for j in live), Decimal(0))) for c in range(len(w.q))]
    d_q = [r(s / divisor) if divisor is not None else r(s * scale) for s in sums]
    q = w.q if rope is None else [printed(x, places) for x in trace.stage("Q_rope")[h, i]]
    d_k = [[r(d_scores[j] * x / divisor) if divisor is not None else r(d_scores[j] * scale * x)
            for x in q] for j in range(len(w.V))]
    d_q_rope = pairs = None
    if rope is not None:  # rotate back: the inverse rotation is the rotation by −angle
        angle = angles(rope, trace.problem.q_positions[i:i + 1])[0]  # (dims/2,)
        pairs = [(a, b, printed(math.cos(t), places), printed(math.sin(t), places))
                 for (a, b), t in zip(rope.pairs(), angle)]
        d_q_rope, d_q = d_q, list(d_q)
        for a, b, cos, sin in pairs:
            d_q[a] = r(d_q_rope[a] * cos + d_q_rope[b] * sin)
            d_q[b] = r(d_q_rope[b] * cos - d_q_rope[a] * sin)
    d_v = [[r(weights[j] * x) for x in dO] for j in range(len(w.V))]
    exact = [printed(x, places) for x in trace.gradients.heads["d_Q"][h, i]]
    return WrittenBackward(dO=dO, weights=weights, output=output, divisor=divisor, scale=scale,
                           d_weights=d_weights, D=D, d_scores=d_scores, sums=sums, d_q=d_q,
                           d_v=d_v, d_k=d_k, exact_d_q=exact, dead=dead, cap_factor=cap_factor,
                           d_capped=d_capped, K_rope=None if rope is None else K, d_q_rope=d_q_rope, pairs=pairs)


def _dot(xs: list[Decimal], ys: list[Decimal]) -> Decimal:
    return sum((x * y for x, y in zip(xs, ys)), Decimal(0))
