"""RoPE in one row's hand calculation: the query's and each key's rotation, pair by pair, as
`steps.written` prints it (exact or rounded carry; see attncli/steps.py).

For each pair (a, b) of dims: angle = position × θ_i, cos and sin of the printed angle, then
(x_a cos − x_b sin, x_b cos + x_a sin) from the printed numbers. cos and sin of a printed angle
are computed with the decimal context's precision (Taylor series after reducing by 2π), so a
printed result is checked against the exact value of its printed operands, as every other line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal, getcontext
from functools import cache

import numpy as np


@dataclass(frozen=True)
class Turn:
    """One pair of one vector, as printed."""

    dims: tuple[int, int]
    position: int
    angle: Decimal
    cos: Decimal
    sin: Decimal
    before: tuple[Decimal, Decimal]
    after: tuple[Decimal, Decimal]


@dataclass(frozen=True)
class Rotation:
    """The explained row's q and every key's k, rotated (per pair), as printed."""

    theta: list[Decimal]  # θ_i
    q: list[Turn]
    keys: list[list[Turn]]  # one list of turns per key
    q_rope: list[Decimal]
    K_rope: list[list[Decimal]]


@cache
def _pi(digits: int) -> Decimal:
    """π to the context's precision (the decimal module's recipe)."""
    getcontext().prec += 2
    three = Decimal(3)
    lasts, t, s, n, na, d, da = 0, three, 3, 1, 0, 0, 24
    while s != lasts:
        lasts = s
        n, na = n + na, na + 8
        d, da = d + da, da + 32
        t = (t * n) / d
        s += t
    getcontext().prec -= 2
    return +s


def _series(x: Decimal, start: int) -> Decimal:
    """Σ (−1)^k x^(2k+start) / (2k+start)!: cos (start 0) or sin (start 1), for |x| ≤ π."""
    getcontext().prec += 2
    term = x if start else Decimal(1)
    total, n, lasts = term, start, None
    while total != lasts:
        lasts = total
        term = -term * x * x / ((n + 1) * (n + 2))
        n += 2
        total += term
    getcontext().prec -= 2
    return +total


def _reduced(x: Decimal) -> Decimal:
    """x − 2πk in [−π, π]."""
    two_pi = 2 * _pi(getcontext().prec)
    return x - two_pi * (x / two_pi).to_integral_value()


def cos(x: Decimal) -> Decimal:
    return _series(_reduced(x), 0)


def sin(x: Decimal) -> Decimal:
    return _series(_reduced(x), 1)


def rotation(w, trace, steps, q: list, K: list) -> tuple[Rotation, list, list]:
    """The rotation of the explained row's q and of every k (`q`, `K`: (true, printed) pairs), with
    `w` a steps._Writer; returns it and the rotated q and K as (true, printed) pairs."""
    p = trace.problem
    rope = p.rope
    theta_true = rope.theta()
    theta = [w.result(("theta", i), Decimal(float(t)), float(t)) for i, t in enumerate(theta_true)]

    def turn(key, xs, position: int, exact: np.ndarray):
        out, turns = list(xs), []
        for i, (a, b) in enumerate(rope.pairs()):
            angle_true = float(position * theta_true[i])  # as rope.angles computes it
            angle = w.result((key, a), Decimal(position) * theta[i], angle_true, [(float(theta_true[i]), theta[i])])
            c_true, s_true = math.cos(angle_true), math.sin(angle_true)
            c = w.result((key, a), cos(angle), c_true, [(angle_true, angle)])
            s = w.result((key, a), sin(angle), s_true, [(angle_true, angle)])
            (xa_true, xa), (xb_true, xb) = xs[a], xs[b]
            operands = [(xa_true, xa), (xb_true, xb), (c_true, c), (s_true, s)]
            ra = w.result((key, a), xa * c - xb * s, exact[a], operands)
            rb = w.result((key, a), xb * c + xa * s, exact[b], operands)
            out[a], out[b] = (float(exact[a]), ra), (float(exact[b]), rb)
            turns.append(Turn((a, b), position, angle, c, s, (xa, xb), (ra, rb)))
        for j in range(len(out)):  # dims past rope.dims keep their value; the true one is the stage's
            out[j] = (float(exact[j]), out[j][1])
        return turns, out

    h, row = steps.head, steps.row
    q_turns, q_rope = turn(("q_rope", 0), q, int(p.q_positions[row]), trace.Q_rope[h, row])
    key_turns, K_rope = [], []
    for j, k in enumerate(K):
        turns, rotated = turn(("k_rope", j), k, int(p.k_positions[j]), trace.K_rope[h, j])
        key_turns.append(turns)
        K_rope.append(rotated)
    return (Rotation(theta=theta, q=q_turns, keys=key_turns, q_rope=[d for _, d in q_rope],
                     K_rope=[[d for _, d in k] for k in K_rope]), q_rope, K_rope)
