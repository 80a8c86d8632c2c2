"""The hand steps of `Q_rope` and `K_rope` (see attncli/hand/stage_steps.py): the explained query's q
and every key's k rotated, pair by pair, in either carry, and the lines that show it (one step:
K_rope's lines continue Q_rope's).

For each pair (a, b) of dims: angle = position × θ_i, cos and sin of the printed angle, then
(x_a cos − x_b sin, x_b cos + x_a sin) from the printed numbers. cos and sin of a printed angle
are computed with the decimal context's precision (Taylor series after reducing by 2π), so a
printed result is checked against the exact value of its printed operands, as every other line.

With RoPE scaling (attncli/problem/rope_scaling.py) the step shows θ_i before and θ'_i after the scaling,
turns by θ'_i, and, when the attention factor af is not 1, prints af·cos and af·sin (the printed af
times cos and sin of the printed angle), as transformers multiplies cos and sin by it.
"""

from __future__ import annotations

import math
from collections import namedtuple
from decimal import Decimal, getcontext
from functools import cache

from attncli.hand.hand_backward import Back, BackStep
from attncli.hand.handwriting import more_keys
from attncli.hand.stage_steps import HandStep, Page, Row, values
from attncli.problem.rope import LIBRARIES, length


class Turn(namedtuple("Turn", "dims position angle cos sin before after")):
    """One pair of one vector, as printed."""
    # dims: tuple[int, int]
    # position: int
    # angle: Decimal
    # cos: Decimal
    # sin: Decimal
    # before: tuple[Decimal, Decimal]
    # after: tuple[Decimal, Decimal]
    __slots__ = ()


class Rotated(namedtuple("Rotated", "name theta turns pairs before factor", defaults=(None, None))):
    """The explained row's q (Q_rope), or every key's k (K_rope), rotated pair by pair, as printed."""
    # name: str
    # theta: list[Decimal]  # θ_i (θ'_i, after the scaling, with RoPE scaling)
    # turns: list[list[Turn]]  # one list of turns per vector: q alone, or each key
    # pairs: list  # the rotated vector (Q_rope) or one per key (K_rope), as (true, printed) pairs
    # before: list[Decimal] | None  # θ_i before the scaling (None: no scaling)
    # factor: Decimal | None  # the attention factor as printed (None: 1)
    __slots__ = ()


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


def _theta(row: Row) -> tuple[list, list[Decimal]]:
    """θ'_i (θ_i without scaling): true and printed."""
    theta_true = row.trace.problem.rope.frequencies(length(row.trace.problem))
    return theta_true, [row.w.result(("theta", i), Decimal(float(t)), float(t)) for i, t in enumerate(theta_true)]


def _scaling(row: Row) -> tuple[list[Decimal] | None, tuple[float, Decimal] | None]:
    """θ_i before the scaling (printed, for the reader), and the attention factor (true, printed)
    when it is not 1; (None, None) without scaling."""
    rope = row.trace.problem.rope
    if rope.scaling is None:
        return None, None
    before = [Decimal(float(t)) for t in rope.theta()]
    af = rope.attention_factor
    return before, None if af == 1.0 else (af, row.w.result(("attention_factor", 0), Decimal(af), af))


def _turn(row: Row, key, xs: list, position: int, exact, theta_true, theta: list[Decimal], factor=None):
    """One vector rotated by `position`: `xs` its (true, printed) pairs, `exact` the stage's true
    values, `factor` the attention factor (true, printed) or None; returns the turns and the
    rotated vector's pairs."""
    w, out, turns = row.w, list(xs), []
    af_true, af = factor or (1.0, None)
    for i, (a, b) in enumerate(row.trace.problem.rope.pairs()):
        angle_true = float(position * theta_true[i])  # as rope.angles computes it
        angle = w.result((key, a), Decimal(position) * theta[i], angle_true, [(float(theta_true[i]), theta[i])])
        c_true, s_true = math.cos(angle_true) * af_true, math.sin(angle_true) * af_true  # as rope.rotate
        if af is None:
            c = w.result((key, a), cos(angle), c_true, [(angle_true, angle)])
            s = w.result((key, a), sin(angle), s_true, [(angle_true, angle)])
        else:
            c = w.result((key, a), af * cos(angle), c_true, [(angle_true, angle), factor])
            s = w.result((key, a), af * sin(angle), s_true, [(angle_true, angle), factor])
        (xa_true, xa), (xb_true, xb) = xs[a], xs[b]
        operands = [(xa_true, xa), (xb_true, xb), (c_true, c), (s_true, s)]
        ra = w.result((key, a), xa * c - xb * s, exact[a], operands)
        rb = w.result((key, a), xb * c + xa * s, exact[b], operands)
        out[a], out[b] = (float(exact[a]), ra), (float(exact[b]), rb)
        turns.append(Turn((a, b), position, angle, c, s, (xa, xb), (ra, rb)))
    for j in range(len(out)):  # dims past rope.dims keep their value; the true one is the stage's
        out[j] = (float(exact[j]), out[j][1])
    return turns, out


def _write_q(row: Row, name: str) -> Rotated:
    (theta_true, theta), (before, factor) = _theta(row), _scaling(row)
    position = int(row.trace.problem.q_positions[row.row])
    turns, pairs = _turn(row, (name.lower(), 0), row.inputs["Q"], position, row.exact(name), theta_true, theta,
                         factor)
    return Rotated(name, theta, [turns], pairs, before, factor and factor[1])


def _write_k(row: Row, name: str) -> Rotated:
    (theta_true, theta), (before, factor) = _theta(row), _scaling(row)
    exact, positions = row.trace.stage(name)[row.head], row.trace.problem.k_positions  # (Lk, d_k)
    done = [_turn(row, (name.lower(), j), k, int(positions[j]), exact[j], theta_true, theta, factor)
            for j, k in enumerate(row.inputs["K"])]
    return Rotated(name, theta, [turns for turns, _ in done], [pairs for _, pairs in done], before,
                   factor and factor[1])


def _pair_lines(page: Page, r: Rotated, turns: list[Turn], key) -> list[str]:
    n, short, out = page.n, page.short, []
    af = "" if r.factor is None else "af·"
    for i, t in enumerate(turns):  # pair i turns by θ_i
        (a, b), (xa, xb), (ra, rb) = t.dims, t.before, t.after
        c, s = n(t.cos), n(t.sin)
        out.append(f"    dims {a}, {b}:   angle = {t.position} × {n(r.theta[i])}"
                   f" = {n(t.angle)}   {af}cos = {c}   {af}sin = {s}   "
                   f"({short(xa)})({c}) − ({short(xb)})({s}) = {n(ra)}   "
                   f"({short(xb)})({c}) + ({short(xa)})({s}) = {n(rb)}{page.note((key, a))}")
    return out


def _q_lines(page: Page, r: Rotated, step: int) -> list[str]:
    rope, d_k = page.trace.problem.rope, page.trace.d_k
    part = "" if rope.dims == d_k else f"; dims {rope.dims}–{d_k - 1} are not rotated (partial rotary)"
    base = f"{rope.base:g}" if rope.base < 1e16 else repr(rope.base)
    scaled = "" if rope.scaling is None else f", scaled by {rope.scaling.rope_type}"
    lines = [f"Step {step}: rotate q and every k by its position (RoPE {rope.style}, "
             f"{LIBRARIES[rope.style]}; θ_i = {base}^(−2i/{rope.dims}){scaled}{part})"]
    lines += _theta_lines(page, r) + [f"  q at position {r.turns[0][0].position}:"]
    lines += _pair_lines(page, r, r.turns[0], (r.name.lower(), 0))
    return lines + [f"    {r.name.lower()} = {page.vector(values(r.pairs))}"]


def _theta_lines(page: Page, r: Rotated) -> list[str]:
    """θ; with scaling θ before and θ' after it, and the attention factor."""
    if r.before is None:
        return ["  θ = " + page.vector(r.theta)]
    problem = page.trace.problem
    scaling, rope = problem.rope.scaling, problem.rope
    lines = ["  θ  = " + page.vector(r.before) + "   before scaling",
             "  θ' = " + page.vector(r.theta) + f"   {scaling.rope_type}: "
             f"{scaling.applied(rope.base, rope.dims, length(problem))}"]
    if r.factor is not None:
        lines.append(f"  af = {page.n(r.factor)}   attention factor ({scaling.rope_type}): cos and sin are "
                     "multiplied by it")
    return lines


def _k_lines(page: Page, r: Rotated, step: int) -> list[str]:
    keys, lines = page.keys, []
    shown = page.shown
    for place, j in enumerate(shown):
        if j is None:
            lines.append(more_keys(shown, place, len(keys)))
            continue
        lines.append(f"  {keys[j] + ':':<{page.width}} k at position {r.turns[j][0].position}:")
        lines += _pair_lines(page, r, r.turns[j], (r.name.lower(), j))
        lines.append(f"    {r.name.lower()} = {page.vector(values(r.pairs[j]))}")
    return lines


# --- the backward halves ----------------------------------------------------------------------------

class RotatedBack(namedtuple("RotatedBack", "name before turns pairs scaled", defaults=(False,))):
    """d q = d q_rope rotated back by the query's angle, pair by pair: (a, b) → (a cos + b sin,
    b cos − a sin), cos and sin as the forward half printed them."""
    # name: str
    # before: list[Decimal]  # d q_rope as printed
    # turns: list[Turn]  # the query's turns (their dims, cos and sin)
    # pairs: Pairs  # d q
    # scaled: bool  # cos and sin are af·cos and af·sin (the attention factor of RoPE scaling)
    __slots__ = ()


def _write_q_back(back: Back, name: str) -> RotatedBack:
    w, rotated = back.w, back.read(name)
    turns, problem = rotated.turns[0], back.trace.problem
    theta, af = problem.rope.frequencies(length(problem)), problem.rope.attention_factor
    before = back.found[name]  # this row's d q_rope, (true, printed) pairs
    exact = back.exact(back.holders.get("Q", "Q"))  # (d_k,) d q
    out = [(float(exact[c]), d) for c, (_, d) in enumerate(before)]  # dims past rope.dims keep theirs
    for i, t in enumerate(turns):
        (a, b), angle = t.dims, float(t.position * theta[i])  # as rope.angles computes it
        (ta, da), (tb, db) = before[a], before[b]
        operands = [(ta, da), (tb, db), (math.cos(angle) * af, t.cos), (math.sin(angle) * af, t.sin)]
        out[a] = (float(exact[a]), w.result(("d_q", a), da * t.cos + db * t.sin, exact[a], operands))
        out[b] = (float(exact[b]), w.result(("d_q", a), db * t.cos - da * t.sin, exact[b], operands))
    back.give("Q", out)
    return RotatedBack(name, values(before), turns, out, rotated.factor is not None)


def _q_back_lines(page: Page, r: RotatedBack, steps) -> list[str]:
    n = page.n
    o = lambda x: f"({n(x)})" if x < 0 else n(x)  # a negative operand after a sign  # noqa: E731
    af = " (af·cos and af·sin, as forward)" if r.scaled else ""
    lines = [f"  d_{r.name.lower()} = {page.vector(r.before)}; rotated back by the query's angle{af}, pair by pair:"]
    for t in r.turns:
        (a, b), da, db = t.dims, r.before[t.dims[0]], r.before[t.dims[1]]
        lines.append(f"  ({a}, {b}): {n(da)} × {o(t.cos)} + {o(db)} × {o(t.sin)} = {n(r.pairs[a][1])}"
                     f"   {n(db)} × {o(t.cos)} − {o(da)} × {o(t.sin)} = {n(r.pairs[b][1])}{page.note(('d_q', a))}")
    return lines


def _write_k_back(back: Back, name: str) -> None:
    """The row's shares of d k are by the rotated keys: d K rotates their sum back, key by key."""
    share = back.found.pop(name)
    back.give("K", share._replace(notes=share.notes + (
        f"; with RoPE this d_{share.name} is by {name.lower()}, and d_K rotates it back by each key's angle",)))


Q_ROPE = HandStep(_write_q, _q_lines, backward=BackStep(_write_q_back, _q_back_lines))
K_ROPE = HandStep(_write_k, _k_lines, numbered=False, backward=BackStep(_write_k_back, lambda page, r, steps: []))
