"""The hand steps of `Q_normed` and `K_normed` (see attncli/hand/stage_steps.py): the explained query's
q and every key's k normalised (attncli/problem/qk_norm.py), in either carry:

    rms    mean(x²) = Σ x² / n,  r = 1/√(mean(x²) + eps),  x_j × r × w_j
    layer  mean(x) = Σ x / n,  var(x) = Σ (x − mean)² / n,  r = 1/√(var + eps),  (x_j − mean) × r × w_j + b_j

with w the weight (or 1 + weight, Gemma), n = d_k per head, or a row's every head's numbers over
"all" (the other heads' numbers are the trace's, printed). √ is taken with the decimal context's
precision, so a printed result is checked against the exact value of its printed operands.

The backward half (per head; over "all" the backward pass refuses one head alone, attncli/stages/vjps.py):

    rms    d x_j = r × g_j − x_j × r³ × S / n,            g = w ∘ d_normed, S = Σ g_i x_i
    layer  d x_j = r × (g_j − Σ g / n − x̂_j × S / n),     x̂ = (x − mean) × r, S = Σ g_i x̂_i

Decimal only, no numpy at import (every command's start-up reads the stage table).
"""

from __future__ import annotations

import math
from collections import namedtuple
from decimal import Decimal

from attncli.base.errors import plural
from attncli.hand.carry import given, given_pairs
from attncli.hand.carry import pairs as printed_pairs
from attncli.hand.hand_backward import Back, BackStep, values
from attncli.hand.handwriting import more_keys, terms_sum
from attncli.hand.stage_steps import HandStep, Page, Row


class Normalised(namedtuple("Normalised", "before every mean var r weight bias after")):
    """One vector normalised, as printed: `before` its (true, printed) numbers, `every` the row's
    numbers the statistics read (`before`, then over "all" the other heads'), `mean`
    (layer, else None), `var` (mean(x²) for rms), `r`, the head's `weight` (w or 1 + w) and `bias`
    as written, `after` the normed vector's (true, printed) pairs."""
    __slots__ = ()


class Normed(namedtuple("Normed", "name norm vectors pairs")):
    """q normalised (Q_normed: one vector), or every key's k (K_normed); `pairs` the next stages'
    input: q's pairs, or one list per key."""
    __slots__ = ()


def _sqrt_inverse(x: Decimal) -> Decimal:
    return 1 / x.sqrt()


def _part(norm, values, head: int, heads: int) -> list:
    """The head's part of the weight or bias (over "all", or each head its own, its kv head's d_k numbers)."""
    if not norm.parts:
        return list(values)
    d_k = len(values) // norm.heads
    kv = head // (heads // norm.heads)
    return list(values[kv * d_k:(kv + 1) * d_k])


def _others(row: Row, which: str, index: int) -> list:
    """Over "all": the rest of the row's numbers (the other heads', a kv head once), printed."""
    norm = getattr(row.trace.problem, f"{which.lower()}_norm")
    if norm.over == "head":
        return []
    stage = row.trace.Q if which == "Q" else row.trace.K  # (H, L, d_k), kv heads repeated
    group = row.trace.problem.heads // norm.heads
    write = printed_pairs if row.trace.problem.projected else given_pairs
    out = []
    for kv in range(norm.heads):
        if kv != row.head // group:
            out += write(stage[kv * group, index].tolist(), row.places)
    return out


def _normalise(row: Row, key: str, norm, xs: list, others: list, exact) -> Normalised:
    w, places, heads = row.w, row.places, row.trace.problem.heads
    eps = Decimal(repr(norm.eps))
    weight = [given(x, places) + norm.offset for x in _part(norm, norm.weight.tolist(), row.head, heads)]
    bias = None if norm.bias is None else [given(x, places) for x in _part(norm, norm.bias.tolist(), row.head, heads)]
    every = list(xs) + list(others)
    n = len(every)
    true = [t for t, _ in every]
    mean = mean_true = None
    if norm.type == "layer":
        mean_true = math.fsum(true) / n
        mean = w.result((f"{key}.mean", 0), sum((d for _, d in every), Decimal(0)) / n, mean_true, every)
        var_true = math.fsum((t - mean_true) ** 2 for t in true) / n
        var = w.result((f"{key}.var", 0), sum(((d - mean) ** 2 for _, d in every), Decimal(0)) / n, var_true,
                       every + [(mean_true, mean)])
    else:
        var_true = math.fsum(t * t for t in true) / n
        var = w.result((f"{key}.var", 0), sum((d * d for _, d in every), Decimal(0)) / n, var_true, every)
    r_true = 1 / math.sqrt(var_true + norm.eps)
    r = w.result((f"{key}.r", 0), _sqrt_inverse(var + eps), r_true, [(var_true, var)])
    after = []
    for j, (t, d) in enumerate(xs):
        centred = d if mean is None else d - mean
        value = centred * r * weight[j] + (bias[j] if bias else 0)
        operands = [(t, d), (r_true, r)] + ([] if mean is None else [(mean_true, mean)])
        after.append((float(exact[j]), w.result((key, j), value, exact[j], operands)))
    return Normalised(xs, every, mean, var, r, weight, bias, after)


def _write_q(row: Row, name: str) -> Normed:
    norm = row.trace.problem.q_norm
    done = _normalise(row, name.lower(), norm, row.inputs["Q"], _others(row, "Q", row.row), row.exact(name))
    return Normed(name, norm, [done], done.after)


def _write_k(row: Row, name: str) -> Normed:
    norm, exact = row.trace.problem.k_norm, row.trace.stage(name)[row.head]  # (Lk, d_k)
    done = [_normalise(row, f"{name.lower()}.{j}", norm, k, _others(row, "K", j), exact[j])
            for j, k in enumerate(row.inputs["K"])]
    return Normed(name, norm, done, [v.after for v in done])


def _header(page: Page, r: Normed, step: int, what: str) -> str:
    norm = r.norm
    x = norm.name[0]
    over = "per head" if norm.over == "head" else f"over the row's every head ({plural(norm.heads, 'head')})"
    return f"Step {step}: normalise {what} ({norm.like}): " \
           f"{x}_normed = {norm.formula(x)}, {over}, eps = {norm.eps:g}"


def _vector_lines(page: Page, r: Normed, v: Normalised, key: str, x: str, indent: str) -> list[str]:
    n, g = page.n, page.short
    shown = lambda d: f"({g(d)})" if d < 0 else g(d)  # noqa: E731  (a given or projected number)
    mean = "" if v.mean is None else f"({n(v.mean)})" if v.mean < 0 else n(v.mean)  # computed
    count = len(v.every)
    terms = [f"{shown(d)}²" if v.mean is None else f"({g(d)} − {mean})²" for _, d in v.every]
    lines = []
    if v.mean is not None:
        lines.append(f"{indent}mean({x}) = ({terms_sum([shown(d) for _, d in v.every])}) / {count} = "
                     f"{n(v.mean)}{page.note((f'{key}.mean', 0))}")
        lines.append(f"{indent}var({x}) = ({terms_sum(terms)}) / {count} = {n(v.var)}{page.note((f'{key}.var', 0))}")
    else:
        lines.append(f"{indent}mean({x}²) = ({terms_sum(terms)}) / {count} = {n(v.var)}{page.note((f'{key}.var', 0))}")
    lines.append(f"{indent}r = 1/√({n(v.var)} + {r.norm.eps:g}) = {n(v.r)}{page.note((f'{key}.r', 0))}")
    for j, (_, d) in enumerate(v.before):
        centred = g(d) if v.mean is None else f"({g(d)} − {mean})"
        bias = "" if v.bias is None else f" + {g(v.bias[j])}"
        lines.append(f"{indent}dim {j}: {centred} × {n(v.r)} × {g(v.weight[j])}{bias} = {n(v.after[j][1])}"
                     f"{page.note((key, j))}")
    return lines + [f"{indent}{x}_normed = {page.vector(values(v.after))}"]


def _q_lines(page: Page, r: Normed, step: int) -> list[str]:
    return [_header(page, r, step, "q")] + _vector_lines(page, r, r.vectors[0], r.name.lower(), "q", "  ")


def _k_lines(page: Page, r: Normed, step: int) -> list[str]:
    lines = [_header(page, r, step, "every k")]
    keys = page.keys
    shown = page.shown
    for place, j in enumerate(shown):
        if j is None:
            lines.append(more_keys(shown, place, len(keys)))
            continue
        lines.append(f"  {keys[j]}:")
        lines += _vector_lines(page, r, r.vectors[j], f"{r.name.lower()}.{j}", "k", "    ")
    return lines


# --- the backward halves ----------------------------------------------------------------------------

class NormedBack(namedtuple("NormedBack", "name d g mean_g total xs r n pairs")):
    """d q through the norm for one row: `d` d q_normed as printed, `g` = w ∘ d, `mean_g` Σ g / n
    (layer), `total` S, `xs` q (rms) or x̂ (layer), `r` and `n` the forward half's, `pairs` d q."""
    __slots__ = ()


def _write_q_back(back: Back, name: str) -> NormedBack:
    w, v = back.w, back.read(name).vectors[0]
    norm = back.trace.problem.q_norm
    before = back.found[name]  # this row's d q_normed, (true, printed) pairs
    exact = back.exact(back.holders.get("Q", "Q"))  # (d_k,) d q
    true = [t for t, _ in v.every]
    n = len(true)
    mean_true = math.fsum(true) / n if v.mean is not None else 0.0
    spread = math.fsum((t - mean_true) ** 2 for t in true) / n
    r_true = 1 / math.sqrt(spread + norm.eps)
    key = f"d_{name.lower()}"
    if v.mean is None:  # rms: the sums read q itself
        xs = list(v.before)
    else:  # layer: x̂ = (q − mean) × r, written in the carry
        xs = [((t - mean_true) * r_true, w.result((f"{key}.x", j), (d - v.mean) * v.r, (t - mean_true) * r_true,
                                                  [(t, d), (mean_true, v.mean), (r_true, v.r)]))
              for j, (t, d) in enumerate(v.before)]
    g = [(t * float(v.weight[j]), w.result((f"{key}.g", j), d * v.weight[j], t * float(v.weight[j]), [(t, d)]))
         for j, (t, d) in enumerate(before)]
    total_true = math.fsum(a[0] * b[0] for a, b in zip(g, xs))
    total = w.result((f"{key}.S", 0), sum((a[1] * b[1] for a, b in zip(g, xs)), Decimal(0)), total_true, g + xs)
    mean_g = None
    if v.mean is not None:
        mean_g = w.result((f"{key}.mean", 0), sum((d for _, d in g), Decimal(0)) / n, math.fsum(t for t, _ in g) / n, g)
    out = []
    for j, (_, x) in enumerate(xs):
        gj = g[j][1]
        value = v.r * gj - x * v.r ** 3 * total / n if mean_g is None else v.r * (gj - mean_g - x * total / n)
        operands = [before[j], (r_true, v.r), g[j], xs[j], (total_true, total)]
        out.append((float(exact[j]), w.result(("d_q", j), value, exact[j], operands)))
    back.give("Q", out)
    return NormedBack(name, values(before), values(g), mean_g, total, values(xs), v.r, n, out)


def _q_back_lines(page: Page, r: NormedBack, steps) -> list[str]:
    n = page.n
    rms = r.mean_g is None
    formula = ("r × g_j − q_j × r³ × S / n, g = weight ∘ d_q_normed, S = Σ g_i q_i" if rms else
               "r × (g_j − Σ g / n − x̂_j × S / n), g = weight ∘ d_q_normed, x̂ = (q − mean) × r, S = Σ g_i x̂_i")
    lines = [f"Step {steps.primed()}: back through q_norm, d_q_j = {formula}",
             f"  d_q_normed = {page.vector(r.d)}",
             *([] if rms else [f"  x̂ = {page.vector(r.xs)}"]),
             f"  g = {page.vector(r.g)}   S = {n(r.total)}" + ("" if rms else f"   Σ g / n = {n(r.mean_g)}")]
    o = lambda x: f"({n(x)})" if x < 0 else n(x)  # noqa: E731  (a negative operand after a sign)
    for j, x in enumerate(r.xs):
        terms = (f"{n(r.r)} × {o(r.g[j])} − {o(x)} × {n(r.r)}³ × {o(r.total)} / {r.n}" if rms else
                 f"{n(r.r)} × ({n(r.g[j])} − {o(r.mean_g)} − {o(x)} × {o(r.total)} / {r.n})")
        lines.append(f"  dim {j}: {terms} = {n(r.pairs[j][1])}{page.note(('d_q', j))}")
    return lines


def _write_k_back(back: Back, name: str) -> None:
    """The row's shares of d k are by the normed keys: d_K takes them back through k_norm, key by key."""
    share = back.found.pop(name)
    back.give("K", share._replace(notes=share.notes + (
        f"; with k_norm this d_{share.name} is by {name.lower()}, and d_K takes it back through k_norm, key by key",)))


Q_NORMED = HandStep(_write_q, _q_lines, backward=BackStep(_write_q_back, _q_back_lines))
K_NORMED = HandStep(_write_k, _k_lines, backward=BackStep(_write_k_back, lambda page, r, steps: []))
