"""One query row's hand calculation: the intermediate numbers a person writes down.

`row_steps` reads the exact numbers of one row from the trace. `written` turns them into the
numbers an explanation prints, each a `Decimal` with `places` decimals, under one of two carries:

- "exact" (the textbook's convention): every number is the exact value rounded for display. A
  line whose printed operands do not give its printed result records the operands that were
  rounded (`Written.unrounded`), so the writer can say why.
- "rounded" (a pocket calculator): every number is computed from the numbers printed before it,
  then rounded, so every printed equation holds for the printed numbers.

"Holds" (`holds`): the printed result equals the printed operands' exact result rounded to the
printed decimals; at an exact tie either neighbour holds. Lines with a number of E_NOTATION_FROM
or more are exempt: such numbers are written in e-notation, rounded to significant digits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from decimal import ROUND_HALF_EVEN, Context, Decimal, localcontext

import numpy as np

from attncli.trace import Trace, head_slice

if TYPE_CHECKING:
    from attncli.rope_steps import Rotation

# Exact results of the printed operands: 60 digits decide every tie and near-tie of numbers with
# at most 17 decimals; quantizing e^709 to 17 decimals needs ~330 digits, hence WIDE.
WORK = Context(prec=60)
WIDE = Context(prec=1000)
PERCENT_PLACES = 1  # "(76.8%)"
# Numbers this large are written in e-notation; e^x would be one, so the hand calculation
# subtracts the row's largest score first (it would overflow the dtype soon after anyway).
E_NOTATION_FROM = 1e15
CARRIES = ("exact", "rounded")


@dataclass(frozen=True)
class RowSteps:
    """One query row of one head, with the intermediate numbers a hand calculation writes down."""

    head: int
    row: int
    q: np.ndarray  # (d_k,)
    K: np.ndarray  # (Lk, d_k)
    scores: np.ndarray  # (Lk,)
    scaled: np.ndarray  # (Lk,)
    capped: np.ndarray | None  # (Lk,) c · tanh(scaled / c), with a softcap
    bias: np.ndarray | None  # (Lk,) the given bias
    alibi: np.ndarray | None  # (Lk,) −slope · |q_pos − k_pos|, with ALiBi
    slope: float | None  # this head's ALiBi slope
    sink: float | None  # this head's sink logit
    sink_exp: float  # e^(sink − shift), 0 without a sink
    allowed: np.ndarray  # (Lk,) bool: False where masked (bias −∞ or mask)
    masked: np.ndarray  # (Lk,) the softmax's input
    shift: float  # subtracted before e^x: 0, or the row max when e^max is too large to write
    shift_reason: str | None  # "overflow" (e^max beyond the dtype), "large" (≥ E_NOTATION_FROM) or None
    exps: np.ndarray  # (Lk,) e^(masked − shift), 0 where masked
    total: float  # Σ exps (+ sink_exp)
    weights: np.ndarray  # (Lk,)
    V: np.ndarray  # (Lk, d_v)
    contributions: np.ndarray  # (Lk, d_v) weight_j · v_j
    output: np.ndarray  # (d_v,)


def row_steps(trace: Trace, head: int, row: int) -> RowSteps:
    """The hand calculation of one query row, read from the trace (exponentials recomputed)."""
    p = trace.problem
    masked = next(x for x in (trace.masked, trace.capped, trace.scaled) if x is not None)[head, row]  # (Lk,)
    allowed = masked != -np.inf
    sink = None if p.sinks is None else float(p.sinks[head])
    logits = masked[allowed] if sink is None else np.append(masked[allowed], sink)  # a sink is one more logit
    top = logits.max() if logits.size else 0.0
    # e^x overflows beyond log(max float), and is written in e-notation from E_NOTATION_FROM on:
    # only then does the hand calculation need the shift.
    reason = ("overflow" if top > np.log(np.finfo(masked.dtype).max) else
              "large" if top >= np.log(E_NOTATION_FROM) else None)
    shift = float(top) if reason else 0.0
    with np.errstate(under="ignore"):
        exps = np.where(allowed, np.exp(np.where(allowed, masked - shift, 0.0)), 0.0)  # (Lk,)
        sink_exp = 0.0 if sink is None else float(np.exp(sink - shift))
    weights = trace.weights[head, row]  # (Lk,)
    bias = head_slice(p.bias, head)
    slope = None if p.alibi_slopes is None else float(p.alibi_slopes[head])
    alibi = None if slope is None else -slope * np.abs(p.k_positions - p.q_positions[row]).astype(np.float64)
    return RowSteps(head=head, row=row, q=trace.Q[head, row], K=trace.K[head], scores=trace.scores[head, row],
                    scaled=trace.scaled[head, row], capped=None if trace.capped is None else trace.capped[head, row],
                    bias=None if bias is None else bias[row], alibi=alibi, slope=slope, sink=sink, sink_exp=sink_exp,
                    allowed=allowed, masked=masked, shift=shift, shift_reason=reason, exps=exps,
                    total=float(exps.sum()) + sink_exp,
                    weights=weights, V=trace.V[head], contributions=weights[:, None] * trace.V[head],
                    output=trace.output[head, row])


def printed(x: float, places: int) -> Decimal:
    """x as written with `places` decimals: its exact binary value rounded half-even (as Python's
    `format` rounds), never −0."""
    return _round(Decimal(float(x)), places)


def _round(value: Decimal, places: int) -> Decimal:
    d = value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_EVEN, context=WIDE)
    return abs(d) if d == 0 else d


def holds(shown: Decimal, value: Decimal, places: int) -> bool:
    """The printed result `shown` is `value` (the printed operands' exact result) rounded to
    `places` decimals: within half a unit of the last place (so at an exact tie both hold)."""
    return WORK.abs(WORK.subtract(shown, value)) <= Decimal(5).scaleb(-places - 1)


@dataclass(frozen=True)
class Projection:
    """x W (+ b) for one row and one head's columns: q, or a key's k and v."""

    x: list[Decimal]  # (d_in,) the input row as printed
    W: list[list[Decimal]]  # (d_in, d) the head's columns as printed
    b: list[Decimal] | None  # (d,)
    result: list[Decimal]  # (d,)


@dataclass(frozen=True)
class Written:
    """One row of one head as an explanation prints it; every number has `places` decimals
    (percentages PERCENT_PLACES). Masked keys hold None in `masked` and 0 in `exps`/`weights`."""

    head: int
    row: int
    places: int
    carry: str
    projection: Projection | None  # q = x W_Q (+ b_Q), for problems given as X and W
    keys: list[tuple[list[Decimal], list[Decimal]]] | None  # projected (k, v) per key
    q: list[Decimal]
    K: list[list[Decimal]]
    divisor: Decimal | None  # √d_k as printed (default scale), or None
    scale: Decimal | None  # a given scale as printed, or None
    scores: list[Decimal]
    scaled: list[Decimal]
    capped: list[Decimal] | None
    bias: list[Decimal | None] | None
    alibi: list[Decimal] | None  # −slope · |q_pos − k_pos| per key, as printed
    allowed: list[bool]
    masked: list[Decimal | None]
    shift: Decimal | None
    shift_reason: str | None  # RowSteps.shift_reason, or "underflow" (rounded carry: every e^x prints 0)
    exps: list[Decimal]
    sink: Decimal | None  # the sink logit as printed
    sink_exp: Decimal | None  # e^(sink − shift) as printed
    total: Decimal
    weights: list[Decimal]
    percents: list[Decimal]
    V: list[list[Decimal]]
    contributions: list[list[Decimal]]
    output: list[Decimal]
    exact_output: list[Decimal]  # the exact output rounded: what "rounded" carry compares with
    # Exact carry: (line, index) → the rounded operands' unrounded values, for each line whose
    # printed operands do not give its printed result ("scores", j), ("exps", j), ("total", 0)…;
    # an empty tuple when every operand is a rounded result printed on an earlier line.
    unrounded: dict[tuple[str, int], tuple[float, ...]] = field(default_factory=dict)
    rotation: Rotation | None = None  # RoPE: q and every k rotated, pair by pair (attncli/rope_steps.py)


class _Writer:
    """Prints one result at a time: exact carry rounds the exact value, rounded carry rounds the
    value of the printed operands; both record a line whose operands do not give its result."""

    def __init__(self, places: int, carry: str):
        self.places, self.carry, self.unrounded = places, carry, {}

    def result(self, key, value: Decimal, exact: float, operands=(), places: int | None = None) -> Decimal:
        """`value`: the printed operands' exact result; `exact`: the true value; `operands`:
        (true value, printed) pairs, named in the note when they were rounded."""
        places = self.places if places is None else places
        shown = _round(value, places) if self.carry == "rounded" else printed(exact, places)
        huge = max([abs(shown)] + [abs(d) for _, d in operands]) >= E_NOTATION_FROM  # e-notation: exempt
        if not huge and not holds(shown, value, places):
            rounded = tuple(float(x) for x, d in operands if Decimal(repr(float(x))) != d)
            self.unrounded[key] = self.unrounded.get(key, ()) + tuple(
                x for x in rounded if x not in self.unrounded.get(key, ()))
        return shown

    def dot(self, key, xs, ws, bias, exact: float) -> Decimal:
        """Σ x_i w_i (+ b): xs, ws and bias are (true, printed) pairs."""
        value = sum((a[1] * b[1] for a, b in zip(xs, ws)), bias[1] if bias is not None else Decimal(0))
        return self.result(key, value, exact, [*xs, *ws] + ([bias] if bias is not None else []))


def _pairs(values, places: int) -> list[tuple[float, Decimal]]:
    return [(float(x), printed(x, places)) for x in values]


def _project(w: _Writer, key: str, x: np.ndarray, W: np.ndarray, b: np.ndarray | None,
             exact: np.ndarray) -> Projection:
    """One row of x W (+ b) over the given columns of W, with `exact` the trace's values."""
    xs = _pairs(x, w.places)
    Ws = [_pairs(column, w.places) for column in W.T]  # (d, d_in)
    bs = None if b is None else _pairs(b, w.places)
    result = [w.dot((key, j), xs, Ws[j], None if bs is None else bs[j], exact[j]) for j in range(len(Ws))]
    return Projection(x=[d for _, d in xs], W=[[c[i][1] for c in Ws] for i in range(len(xs))],
                      b=None if bs is None else [d for _, d in bs], result=result)


def _exactly(function):
    """Run with WORK as the decimal context: sums and products of printed numbers are exact."""
    def run(*args, **kwargs):
        with localcontext(WORK):
            return function(*args, **kwargs)
    run.__doc__, run.__name__ = function.__doc__, function.__name__
    return run


def _tanh(x: Decimal) -> Decimal:
    """tanh in the working precision: (e^2x − 1) / (e^2x + 1); ±1 beyond |x| = 80, where it is 1 to
    more than 60 digits (and e^2x would overflow the context for a tiny softcap)."""
    if abs(x) > 80:
        return Decimal(1).copy_sign(x)
    e = (2 * x).exp()
    return (e - 1) / (e + 1)


@_exactly
def written(trace: Trace, steps: RowSteps, places: int, carry: str = "exact") -> Written:
    """The numbers the explanation of `steps` prints, under `carry` ("exact" or "rounded")."""
    p, w = trace.problem, _Writer(places, carry)
    h, lk = steps.head, len(steps.scores)

    # q, k and v: projected from X when the problem gives X and W, else given.
    projection = keys = None
    if p.projected:
        inputs = p.inputs
        x_kv = inputs.get("X_kv", inputs["X"])
        d_k, d_v = trace.d_k, trace.d_v
        cq, cv = slice(h * d_k, (h + 1) * d_k), slice(h * d_v, (h + 1) * d_v)
        bias_of = lambda name, cols: inputs[name][cols] if name in inputs else None  # noqa: E731
        projection = _project(w, "q", inputs["X"][steps.row], inputs["W_Q"][:, cq], bias_of("b_Q", cq), steps.q)
        keys = [(_project(w, "k", x_kv[j], inputs["W_K"][:, cq], bias_of("b_K", cq), steps.K[j]).result,
                 _project(w, "v", x_kv[j], inputs["W_V"][:, cv], bias_of("b_V", cv), steps.V[j]).result)
                for j in range(lk)]
    if projection is not None and carry == "rounded":
        q = list(zip(steps.q.tolist(), projection.result))
        K = [list(zip(steps.K[j].tolist(), keys[j][0])) for j in range(lk)]
        V = [list(zip(steps.V[j].tolist(), keys[j][1])) for j in range(lk)]
    else:
        q, K, V = _pairs(steps.q, places), [_pairs(k, places) for k in steps.K], [_pairs(v, places) for v in steps.V]

    # Step (RoPE): rotate q and every k by their positions; the scores read the rotated ones.
    rotation, q_scored, K_scored = None, q, K
    if p.rope is not None:
        from attncli.rope_steps import rotation as rotate_row

        rotation, q_scored, K_scored = rotate_row(w, trace, steps, q, K)

    # Step: raw scores, then scaling.
    scores = [w.dot(("scores", j), q_scored, K_scored[j], None, steps.scores[j]) for j in range(lk)]
    divisor = scale = None
    if trace.default_scale:
        root = math.sqrt(trace.d_k)
        divisor = printed(root, places)
        scaled = [w.result(("scaled", j), scores[j] / divisor, steps.scaled[j],
                           [(steps.scores[j], scores[j]), (root, divisor)]) for j in range(lk)]
    else:
        scale = printed(trace.scale, places)
        scaled = [w.result(("scaled", j), scores[j] * scale, steps.scaled[j],
                           [(steps.scores[j], scores[j]), (trace.scale, scale)]) for j in range(lk)]

    # Step: softcap, c · tanh(x / c) = c (e^(2x/c) − 1) / (e^(2x/c) + 1).
    capped = None
    if steps.capped is not None:
        cap = Decimal(repr(p.softcap))
        capped = []
        for j in range(lk):
            capped.append(w.result(("capped", j), cap * _tanh(scaled[j] / cap), steps.capped[j],
                                   [(steps.scaled[j], scaled[j])]))
    before = scaled if capped is None else capped  # what the bias, ALiBi and masks change
    exact_before = steps.scaled if steps.capped is None else steps.capped

    # Step: bias, ALiBi and mask.
    allowed = steps.allowed.tolist()
    bias = None if steps.bias is None else [None if b == -np.inf else printed(b, places) for b in steps.bias]
    alibi = None if steps.alibi is None else [printed(a, places) for a in steps.alibi]
    masked = []
    for j in range(lk):
        if not allowed[j]:
            masked.append(None)
        elif bias is None and alibi is None:
            masked.append(before[j])
        else:
            terms = [(exact_before[j], before[j])]
            terms += [] if bias is None else [(steps.bias[j], bias[j])]
            terms += [] if alibi is None else [(steps.alibi[j], alibi[j])]
            masked.append(w.result(("masked", j), sum((d for _, d in terms), Decimal(0)), steps.masked[j], terms))

    # Step: softmax. Rounded carry also shifts when every printed e^x would be 0 (no weights).
    live = [j for j in range(lk) if allowed[j]]
    sink = None if steps.sink is None else printed(steps.sink, places)
    logits = [masked[j] for j in live] + ([sink] if sink is not None else [])  # the sink is one more logit
    shift, reason = None, None
    if steps.shift:
        shift = printed(steps.shift, places) if carry == "exact" else max(logits)
        reason = steps.shift_reason
    elif logits and carry == "rounded" and all(_round(x.exp(), places) == 0 for x in logits):
        shift, reason = max(logits), "underflow"
    exps = []
    for j in range(lk):
        if not allowed[j]:
            exps.append(Decimal(0))
            continue
        power = masked[j] if shift is None else masked[j] - shift
        operands = [(steps.masked[j], masked[j])] + ([(steps.shift, shift)] if shift is not None else [])
        exps.append(w.result(("exps", j), power.exp(), steps.exps[j], operands))
    sink_exp = None
    if sink is not None:
        operands = [(steps.sink, sink)] + ([(steps.shift, shift)] if shift is not None else [])
        sink_exp = w.result(("sink", 0), (sink if shift is None else sink - shift).exp(), steps.sink_exp, operands)
    total = w.result(("total", 0), sum((exps[j] for j in live), sink_exp or Decimal(0)), steps.total)

    weights, percents = [], []
    dead = not live
    for j in range(lk):
        if dead or not allowed[j]:
            weights.append(printed(steps.weights[j], places))
            percents.append(printed(steps.weights[j] * 100, PERCENT_PLACES))
            continue
        operands = [(steps.exps[j], exps[j]), (steps.total, total)]
        quotient = exps[j] / total if total else Decimal("Infinity")
        weights.append(w.result(("weights", j), quotient, steps.weights[j], operands))
        percents.append(w.result(("weights", j), quotient * 100, steps.weights[j] * 100, operands,
                                 places=PERCENT_PLACES))

    # Step: weighted sum of values.
    contributions = []
    for j in range(lk):
        row = []
        for i, (v_true, v) in enumerate(V[j]):
            row.append(w.result(("contributions", j), weights[j] * v, steps.contributions[j, i],
                                [(steps.weights[j], weights[j]), (v_true, v)]))
        contributions.append(row)
    exact_output = [printed(x, places) for x in steps.output]
    if dead:
        output = exact_output
    else:
        output = [w.result(("output", 0), sum((contributions[j][i] for j in live), Decimal(0)), steps.output[i])
                  for i in range(len(steps.output))]

    return Written(head=h, row=steps.row, places=places, carry=carry, projection=projection, keys=keys,
                   q=[d for _, d in q], K=[[d for _, d in k] for k in K], divisor=divisor, scale=scale,
                   scores=scores, scaled=scaled, capped=capped, bias=bias, alibi=alibi, allowed=allowed,
                   masked=masked, shift=shift, shift_reason=reason, exps=exps, sink=sink, sink_exp=sink_exp,
                   total=total, weights=weights, percents=percents,
                   V=[[d for _, d in v] for v in V], contributions=contributions, output=output,
                   exact_output=exact_output, unrounded=w.unrounded, rotation=rotation)


@dataclass(frozen=True)
class WrittenFinal:
    """One query row's heads side by side and, with W_O, that times W_O (+ b_O), as printed."""

    row: int
    concat: list[Decimal]  # (H·d_v,) the heads' printed outputs
    projection: Projection | None  # concat W_O (+ b_O)
    exact_final: list[Decimal]
    unrounded: dict[tuple[str, int], tuple[float, ...]]


@_exactly
def written_final(trace: Trace, rows: list[Written]) -> WrittenFinal:
    """The output projection of one query row from its heads' written rows (every head, in order)."""
    first = rows[0]
    w = _Writer(first.places, first.carry)
    i = first.row
    concat = [d for r in rows for d in r.output]
    inputs = trace.problem.inputs
    projection = None
    if "W_O" in inputs:
        if first.carry == "rounded":
            xs = list(zip(trace.concat[i].tolist(), concat))
        else:
            xs = _pairs(trace.concat[i], first.places)
        Ws = [_pairs(column, first.places) for column in inputs["W_O"].T]
        bs = _pairs(inputs["b_O"], first.places) if "b_O" in inputs else None
        result = [w.dot(("final", j), xs, Ws[j], None if bs is None else bs[j], trace.final[i, j])
                  for j in range(len(Ws))]
        projection = Projection(x=concat, W=[[c[k][1] for c in Ws] for k in range(len(concat))],
                                b=None if bs is None else [d for _, d in bs], result=result)
    return WrittenFinal(row=i, concat=concat, projection=projection,
                        exact_final=[printed(x, first.places) for x in trace.final[i]], unrounded=w.unrounded)
