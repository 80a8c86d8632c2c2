"""The hand steps of `masked` (bias, ALiBi and the mask) and `weights` (the softmax) for one query
row: see attncli/hand/stage_steps.py for how a step is written and read.
"""

from __future__ import annotations

import math
from collections import namedtuple
from decimal import Decimal

import numpy as np

from attncli.base.errors import plural
from attncli.hand import handwriting as hw
from attncli.hand.carry import E_NOTATION_FROM, PERCENT_PLACES, given, printed, round_to
from attncli.hand.hand_backward import Back, BackStep, dot
from attncli.hand.handwriting import elided_at, more_keys
from attncli.hand.stage_steps import HandStep, Page, Row, values
from attncli.problem import visibility


class Masked(namedtuple("Masked", "name before bias alibi slope pairs filled", defaults=(None,))):
    # name: str
    # before: Pairs
    # bias: list[Decimal | None] | None  # the given bias as written (carry.given; None: −∞)
    # alibi: list[Decimal] | None  # −slope · |q_pos − k_pos| per key, as printed
    # slope: str | None  # this head's ALiBi slope as written: 6 significant digits
    # pairs: Pairs  # None printed where the key is masked
    # filled: list[bool] | None  # a finite mask fill (the precision lab): the keys the mask hides, which
    #     take the fill and stay in the softmax
    __slots__ = ()


def _write_masked(row: Row, name: str) -> Masked:
    p, exact, before = row.trace.problem, row.exact(name), row.x
    row.allowed = [x != -math.inf for x in exact.tolist()]
    bias_exact = None if p.bias is None else row.plane(p.bias)
    bias = None if bias_exact is None else [None if b == -math.inf else given(b, row.places) for b in bias_exact]
    alibi_exact = alibi = slope = None
    if p.alibi_slopes is not None:
        m, q_pos = float(p.alibi_slopes[row.head]), int(p.q_positions[row.row])
        alibi_exact = [-m * float(abs(int(k) - q_pos)) for k in p.k_positions]
        alibi, slope = [printed(a, row.places) for a in alibi_exact], f"{m:.6g}"
    fill = getattr(row.trace.precision, "fill", -math.inf)  # the precision lab's, as its dtype holds it
    filled = None if fill == -math.inf else [why is not None for why in visibility.hidden_because(p, row.head, row.row)]
    pairs = []
    for j, (t, d) in enumerate(before):
        if filled is not None and filled[j]:
            pairs.append((float(exact[j]), printed(exact[j], row.places)))
        elif not row.allowed[j]:
            pairs.append((float(exact[j]), None))
        elif bias is None and alibi is None:
            pairs.append((float(exact[j]), d))
        else:
            terms = [(t, d)] + ([] if bias is None else [(bias_exact[j], bias[j])])
            terms += [] if alibi is None else [(alibi_exact[j], alibi[j])]
            rest = sum((d for _, d in terms[1:]), Decimal(0))  # the bias and ALiBi: given, or computed
            pairs.append((float(exact[j]), row.w.result((name, j), row.w.onward(d) + rest, exact[j], terms,
                                                        written=d + rest)))
    return Masked(name, before, bias, alibi, slope, pairs, filled)


def _masked_lines(page: Page, r: Masked, step: int) -> list[str]:
    p, n, w = page.trace.problem, page.n, page.written
    parts = ["add the bias"] * (r.bias is not None)
    if r.alibi is not None:
        parts.append(f"add ALiBi, −{r.slope}·|q_pos − k_pos|")
    what = ", ".join(parts) + (", then apply the mask" if parts and page.has_rules else
                               "apply the mask" if not parts else "")
    q_pos = int(p.q_positions[w.row])
    rule, why = page.rules

    def line(j, key):
        if r.filled is not None and r.filled[j]:
            return f"{key} masked → {n(r.pairs[j][1])}, the fill" + (f" ({why[j]})" if why and why[j] else "")
        if r.pairs[j][1] is None:
            return f"{key} masked → −∞, excluded" + (f" ({why[j]})" if why and why[j] else "")
        if r.bias is None and r.alibi is None:
            return f"{key} {n(r.pairs[j][1])}"
        terms = " + ".join([n(r.before[j][1])] + ([] if r.bias is None else [page.short(r.bias[j])]))
        if r.alibi is None:
            return f"{key} {terms} = {n(r.pairs[j][1])}{page.note((r.name, j))}"
        a = r.alibi[j]
        alibi = f" − {n(abs(a))}" if a <= 0 else f" + {n(a)}"
        return (f"{key} {terms} − {r.slope}·|{q_pos} − {int(p.k_positions[j])}| = {terms}{alibi} = "
                f"{n(r.pairs[j][1])}{page.note((r.name, j))}")
    kept = ("masked keys become −∞ and are excluded" if r.filled is None else
            f"masked keys become the fill, {n(r.pairs[r.filled.index(True)][1]) if any(r.filled) else 'finite'}, "
            "not −∞: they stay in the softmax")
    return [f"Step {step}: {what} ({kept})"] + rule + page.each(line)


class Softmax(namedtuple("Softmax", "name before allowed shift reason exps sink sink_exp total percents "
                                    "pairs true_exps")):
    # name: str
    # before: Pairs  # the logits as printed (None: masked)
    # allowed: list[bool]
    # shift: Decimal | None  # subtracted before e^x, as printed
    # reason: str | None  # "overflow" (e^max beyond the dtype), "large" (≥ E_NOTATION_FROM), "underflow",
    #     "recipe" (a low-precision run subtracts the max, as the recipe does)
    # exps: list[Decimal]  # e^(x − shift), 0 where masked
    # sink: Decimal | None  # the head's sink logit as written (carry.given)
    # sink_exp: Decimal | None  # e^(sink − shift) as printed
    # total: Decimal
    # percents: list[Decimal]
    # pairs: Pairs  # the weights
    # true_exps: list[float]  # each e^(x − max) unrounded (an elided run's sum, exact carry)
    __slots__ = ()


class _Exact(namedtuple("_Exact", "shift reason exps sink sink_exp total")):
    """The softmax's true numbers for the row: the shift, e^(x − shift), the sink's and their sum."""
    # shift: float
    # reason: str | None
    # exps: object  # (Lk,) in the trace's dtype
    # sink: float | None
    # sink_exp: float
    # total: float
    __slots__ = ()


def _exact(row: Row, logits_row, allowed) -> _Exact:
    p = row.trace.problem
    sink = None if p.sinks is None else float(p.sinks[row.head])
    logits = logits_row[allowed] if sink is None else np.append(logits_row[allowed], sink)  # a sink is one more logit
    top = logits.max() if logits.size else 0.0
    lab = getattr(row.trace, "precision", None)
    if lab is not None:  # the precision lab: the run's own e^(x − m) and Σ, as it kept them
        shift = float(top) if p.max_subtraction else 0.0
        exps = np.where(allowed, lab.exps[row.head, row.row], 0.0)
        return _Exact(shift, "recipe" if p.max_subtraction else None, exps, None, 0.0,
                      float(lab.sums[row.head, row.row, 0]))
    # e^x overflows beyond log(max float), and is written in e-notation from E_NOTATION_FROM on:
    # only then does the hand calculation need the shift.
    reason = ("overflow" if top > np.log(np.finfo(logits_row.dtype).max) else
              "large" if top >= np.log(E_NOTATION_FROM) else None)
    shift = float(top) if reason else 0.0
    with np.errstate(under="ignore"):
        exps = np.where(allowed, np.exp(np.where(allowed, logits_row - shift, 0.0)), 0.0)  # (Lk,)
        sink_exp = 0.0 if sink is None else float(np.exp(sink - shift))
    return _Exact(shift, reason, exps, sink, sink_exp, float(exps.sum()) + sink_exp)


def _shift(row: Row, e: _Exact, logits: list[Decimal]) -> tuple[Decimal | None, str | None]:
    """The printed shift and why. Rounded carry also shifts when every printed e^x would be 0."""
    if e.shift:
        return (printed(e.shift, row.places) if row.w.carry == "exact" else max(logits)), e.reason
    if logits and row.w.carry == "rounded" and all(round_to(x.exp(), row.places) == 0 for x in logits):
        return max(logits), "underflow"
    return None, None


def _divide(a: Decimal, b: Decimal) -> Decimal:
    """a / b, NaN for 0/0 and ∞/∞ (a precision lab run's row can hold them), ∞ for a/0."""
    if a.is_nan() or b.is_nan() or (a.is_infinite() and b.is_infinite()) or (a == 0 and b == 0):
        return Decimal("NaN")
    return a / b if b else Decimal("Infinity")


def _write_weights(row: Row, name: str) -> Softmax:
    w, before, weights_exact = row.w, row.x, row.exact(name)
    logits_row = row.exact(row.last)  # (Lk,) the softmax's input in the trace's dtype
    allowed = logits_row != -math.inf
    row.allowed = allowed.tolist()
    e = _exact(row, logits_row, allowed)
    live = [j for j, ok in enumerate(row.allowed) if ok]
    sink = None if e.sink is None else given(e.sink, row.places)
    shift, reason = _shift(row, e, [before[j][1] for j in live] + ([sink] if sink is not None else []))
    shift = None if shift is None else Decimal(shift)  # re-typed: a logit's display holds only its own
    less = [] if shift is None else [(e.shift, shift)]
    exps = [Decimal(0) if not ok else w.result(("exps", j), (w.onward(d) - (shift or 0)).exp(), e.exps[j],
                                               [(logits_row[j], d)] + less, written=(d - (shift or 0)).exp())
            for j, (ok, (_, d)) in enumerate(zip(row.allowed, before))]
    sink_exp = None if sink is None else w.result(("sink", 0), (sink if shift is None else sink - shift).exp(),
                                                  e.sink_exp, [(e.sink, sink)] + less)
    total = w.result(("total", 0), sum((exps[j] for j in live), sink_exp or Decimal(0)), e.total)
    weights, percents = [], []
    for j, x in enumerate(weights_exact):
        if not live or not row.allowed[j]:
            weights.append(printed(x, row.places))
            percents.append(printed(x * 100, PERCENT_PLACES))
            continue
        operands = [(e.exps[j], exps[j]), (e.total, total)]
        quotient = _divide(exps[j], total)
        weights.append(w.result((name, j), quotient, x, operands))
        share = w.ledger[(name, j)][0] if (name, j) in w.rounded else x  # of the line's exact quotient
        percents.append(w.result((name, j), quotient * 100, share * 100, operands, places=PERCENT_PLACES, cell=None))
    return Softmax(name, before, list(row.allowed), shift, reason, exps, sink, sink_exp, total, percents,
                   [(float(x), d) for x, d in zip(weights_exact, weights)], list(e.exps))


def _weights_lines(page: Page, r: Softmax, step: int) -> list[str]:
    return [f"Step {step}: softmax"] + _softmax_lines(page, r)


def _softmax_lines(page: Page, r: Softmax) -> list[str]:
    n, keys, width, places, p = page.n, page.keys, page.width, page.places, page.trace.problem
    if not any(r.allowed) and r.sink is not None:
        sink = page.short(r.sink)
        return [f"  every key is masked: the sink takes the whole row (e^{sink} of e^{sink}), "
                "so every weight is 0"]
    if not any(r.allowed):
        return [f"  every key is masked: {page.policy}"]
    lines = []
    largest = "score" if r.sink is None else "logit, the sink included,"
    constant = "(a constant shift leaves softmax unchanged)"
    if r.reason == "overflow":
        lines.append(f"  the largest {largest} is {n(r.shift)}: e^{n(r.shift)} overflows "
                     f"{page.trace.problem.dtype}, so subtract it first {constant}")
    elif r.reason == "large":
        lines.append(f"  the largest {largest} is {n(r.shift)}: e^{n(r.shift)} is too large to write out, "
                     f"so subtract it first {constant}")
    elif r.reason == "recipe":
        lines.append(f"  the run subtracts the largest {largest}, {n(r.shift)}, first {constant}")
    elif r.reason == "underflow":
        lines.append(f"  every e^x rounds to 0 at {plural(places, 'decimal')}, so subtract the largest {largest}, "
                     f"{n(r.shift)}, first {constant}")
    if not p.max_subtraction:
        lines.append(f"  the naive softmax, e^x / Σ e^x: the run does not subtract the largest {largest} first")
    power = (lambda j: f"e^{n(r.before[j][1])}") if r.shift is None else (
        lambda j: f"e^({n(r.before[j][1])} − {n(r.shift) if r.shift >= 0 else f'({n(r.shift)})'})")
    listed = page.shown
    terms = []
    for place, j in enumerate(listed):
        if j is None:  # the elided keys' terms as one named remainder, so that the sum still holds
            rest = [k for k in elided_at(listed, place, len(keys)) if r.allowed[k]]
            if rest:  # rounded carry: the terms as written; exact: the unrounded ones the sum adds
                total = n(sum((r.exps[k] for k in rest), Decimal(0))) if page.written.carry == "rounded" else \
                    n(printed(float(sum(r.true_exps[k] for k in rest)), page.places))
                terms.append(f"({plural(len(rest), 'more key')}: {total})")
        elif r.allowed[j]:
            terms.append(f"{power(j)} = {page.r(r.exps[j], ('exps', j))}")
    if r.sink is not None:  # one more logit in the sum, whose weight is then dropped
        sink = f"e^({page.short(r.sink)} − {n(r.shift)})" if r.shift is not None else f"e^{page.short(r.sink)}"
        terms.append(f"sink {sink} = {n(r.sink_exp)}")
    line_keys = [("exps", j) for j in range(len(keys))] + [("sink", 0), ("total", 0)]
    lines.append("  " + "   ".join(terms) + f"   sum = {page.r(r.total, ('total', 0))}" + page.note(*line_keys))
    weights = values(r.pairs)
    for place, j in enumerate(listed):
        if j is None:
            lines.append(more_keys(listed, place, len(keys)))
        elif not r.allowed[j]:
            lines.append(f"  {keys[j]:<{width - 1}} = e^−∞ / {n(r.total)} = 0 (masked)")
        else:
            lines.append(f"  {keys[j]:<{width - 1}} = {n(r.exps[j])} / {n(r.total)} = "
                         f"{page.exact(weights[j], (r.name, j))}"
                         + (f" ({r.percents[j]:.{PERCENT_PLACES}f}%)" if r.percents[j].is_finite() else "") +
                         f"{page.arrow((r.name, j))}" + page.note((r.name, j)))
    if r.sink is not None:
        lines.append(f"  the sink's share, {n(r.sink_exp)} / {n(r.total)}, is dropped: "
                     "these weights sum to less than 1")
    return lines


# --- the backward halves ----------------------------------------------------------------------------

def _write_masked_back(back: Back, name: str) -> None:
    """d x = d masked, 0 where masked is −∞: the gradient goes on, named like the one before (the
    softmax's step already wrote 0 for every masked key)."""
    back.d = [(0.0, Decimal(0)) if shown is None else pair for (_, shown), pair in zip(back.read(name).pairs, back.d)]


class SoftmaxBack(namedtuple("SoftmaxBack", "name d_name d_previous form left right D weights d pairs "
                                            "allowed dead")):
    """d x_j = P_j (d_j − D) for one row, D = Σ_j P_j d_j (= dO · output, the stage after offering it)."""
    # name: str
    # d_name, d_previous: str  # the gradient read (d_weights) and the one written (d_scores)
    # form: str  # how D is computed: "dO · output", or "Σ_j weight_j × d_weights_j"
    # left, right: list[Decimal]  # D's dot product, as printed
    # D: Decimal
    # weights: list[Decimal]
    # d: list[Decimal | None]  # the gradient read (None: masked)
    # pairs: Pairs  # d x
    # allowed: list[bool]
    # dead: bool
    __slots__ = ()


def _write_weights_back(back: Back, name: str) -> SoftmaxBack:
    w, weights, d_name = back.w, back.read(name).pairs, back.d_name
    live = [] if back.dead else [j for j, ok in enumerate(back.allowed) if ok]
    if "D" in back.offered:  # output = weights V: D = dO · output, FlashAttention-2's form
        form, left, right = back.offered["D"]
    else:
        form, left, right = f"Σ_j weight_j × {d_name}_j", [weights[j] for j in live], [back.d[j] for j in live]
    D_true = float(back.exact("D"))
    D = dot(w, ("D", 0), left, right, D_true)
    exact = back.exact(back.previous(name))
    pairs = [(0.0, Decimal(0)) if j not in live else
             (float(exact[j]), w.result((back.names[back.previous(name)], j), p * (g - D), exact[j],
                                        [(t, p), (g_true, g), (D_true, D)]))
             for j, ((t, p), (g_true, g)) in enumerate(zip(weights, back.d))]
    if back.dead:
        back.preamble.append("  every key is masked: the weights do not depend on the scores, so d_scores, d_q "
                             "and this row's share of d_k are 0")
    d = [g if ok else None for (_, g), ok in zip(back.d, back.allowed)]
    back.carry(name, pairs)
    return SoftmaxBack(name, d_name, back.d_name, form, values(left), values(right), D, values(weights), d, pairs,
                       list(back.allowed), back.dead)


def _weights_back_lines(page: Page, r: SoftmaxBack, steps) -> list[str]:
    n = page.n
    o = lambda x: f"({n(x)})" if x < 0 else n(x)  # a negative operand after a minus sign  # noqa: E731
    out = [f"Step {steps.number()}: D = {r.form}  (= Σ_j weight_j × {r.d_name}_j)" if "Σ" not in r.form else
           f"Step {steps.number()}: D = {r.form}",
           f"  {hw.dot(r.left, r.right, page.places) if r.left else '0'} = {n(r.D)}{page.note(('D', 0))}",
           f"Step {steps.number()}: {r.d_previous} = weight × ({r.d_name} − D)  (the softmax's gradient)"]
    return out + page.each(lambda j, key: f"{key} masked → 0" if not r.allowed[j] else
                           f"{key} 0 (the row is fully masked)" if r.dead else
                           f"{key} {n(r.weights[j])} × ({n(r.d[j])} − {o(r.D)}) = {n(r.pairs[j][1])}"
                           f"{page.note((r.d_previous, j))}")


MASKED = HandStep(_write_masked, _masked_lines, backward=BackStep(_write_masked_back, lambda page, r, steps: [],
                                                                  passes=True))
WEIGHTS = HandStep(_write_weights, _weights_lines, backward=BackStep(_write_weights_back, _weights_back_lines))
