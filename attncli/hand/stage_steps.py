"""Each stage's hand-calculation step (`Stage.hand` in attncli/stages/table.py): what `--explain` writes
for one query row of that stage, in both carries (attncli/hand/carry.py).

A `HandStep` has two parts. `write(row, name)` prints the stage's row from the numbers printed
before it (`row.x`: the previous stage's (true, printed) pairs; `row.inputs`: q, K and V) and the
trace's exact values (`row.exact(name)`), through `row.w` (a carry.Writer, which records the lines
whose printed operands do not give their result), and returns a record whose `pairs` are the next
stage's input. `lines(page, record, step)` writes that record as the explanation's lines ("Step
N: …" and one line per key), with `page` the view's writers and words (`Page`).

`steps.written` runs `write` over the problem's present stages in order, `render/explain.py` runs
`lines`; a present stage without a step is refused, never skipped. A stage that changes each key's
number alone needs only `elementwise(...)` (with `slope=`, its derivative, for the backward half).

A step's `backward` is its backward half (attncli/hand/hand_backward.py: the same two parts, run in
reverse order by attncli/explain/backward_steps.py when dO is given, mirroring the stage's vjp); a present
stage without one is refused by the backward narration.

This module and the other step modules (softmax_steps, rope_steps) sit below the stage table, which
imports them: no numpy and no trace at import (every command's start-up reads the table), so a
step that needs numpy imports it when it runs; records are NamedTuples, not dataclasses, which take
about ten times as long to build at import.
"""

from __future__ import annotations

import math
from collections import namedtuple
from decimal import Decimal
from string import Template
from typing import Callable

from attncli.hand import hand_backward
from attncli.hand import handwriting as hw
from attncli.hand.carry import Writer, given, printed, root
from attncli.hand.hand_backward import BackStep, Pairs, elementwise_back, values


class Row:
    """One query row of one head while its hand calculation is written: `inputs` "Q" (q's pairs),
    "K" and "V" (one list of pairs per key); `x` the last stage's row as (true, printed) pairs and
    `last` its name (`exact(last)` is `x`'s true values in the trace's dtype); `allowed` the keys
    that take part (False: −∞); `plane` a mask's or bias's (1 or H, Lq, Lk) array → this row's (Lk,)."""

    def __init__(self, trace, head: int, row: int, w: Writer, inputs: dict, allowed: list[bool],
                 plane: Callable):
        self.trace, self.head, self.row, self.w, self.inputs = trace, head, row, w, inputs
        self.allowed, self.plane = allowed, plane
        self.x: Pairs | None = None
        self.last: str | None = None

    @property
    def places(self) -> int:
        return self.w.places

    def exact(self, name: str):
        """The stage's true values for this row (the trace's (columns,) row)."""
        return self.trace.stage(name)[self.head, self.row]


class Page(namedtuple("Page", "trace written keys width query fields rules has_rules policy listed",
                      defaults=(([], None), False, "", None))):
    """What a step's lines are written with: the view's key labels and words for this row."""
    # trace: Any
    # written: Any  # steps.Written (backward_steps.WrittenBackward for the backward half)
    # keys: list[str]  # the key labels, escaped
    # width: int  # a key's label column
    # query: str  # the query as named in the header
    # fields: Callable[[str], dict]  # stages.fields for this problem: the stage's template words
    # rules: tuple[list[str], list[str | None] | None] = ([], None)  # the row's mask rule lines,
    #     and why each key is hidden (None where it is visible)
    # has_rules: bool = False
    # policy: str = ""  # the problem's masked_rows policy as the view names it, and the library it matches
    # listed: list[int | None] | None = None  # the keys each step lists (None: an elided run; hw.shown_keys)
    __slots__ = ()

    @property
    def shown(self) -> list[int | None]:
        """The keys a step lists, a None for each elided run (default: the first and last)."""
        return self.listed if self.listed is not None else hw.shown_keys(len(self.keys))

    @property
    def places(self) -> int:
        return self.written.places

    def n(self, x: Decimal) -> str:
        return hw.number(x, self.places)

    def short(self, x: Decimal) -> str:
        return hw.short(x, self.places)

    def vector(self, values, write=hw.number) -> str:
        return hw.vector(values, self.places, write)

    def note(self, *keys) -> str:
        return hw.note(self.written.unrounded, keys, self.places)

    def exact(self, d: Decimal, cell) -> str:
        """A result as its line writes it: exact arithmetic's (a low-precision run's line must hold
        before its rounding, `arrow`), else `d` as printed."""
        found = getattr(self.written, "rounded", {})
        if cell in found and found[cell][0] == 0:  # 0.0000 → 6.139e-06 reads as no rounding: the digits it has
            true = getattr(self.written, "ledger", {}).get(cell, (0.0,))[0]
            if true:
                return f"{true:.4g}" if abs(true) < 1e-4 else self.n(found[cell][0])
        return self.n(found[cell][0] if cell in found else d)

    def arrow(self, *cells) -> str:
        """' → 2056 in float16': what a low-precision run kept of `cells` (one number or a vector)."""
        return hw.rounding(getattr(self.written, "rounded", {}), getattr(self.written, "ledger", {}), cells)

    def r(self, d: Decimal, cell) -> str:
        """A result and its rounding: `= 2055.0000 → 2056 in float16`'s right side."""
        return self.exact(d, cell) + (hw.additions(getattr(self.written, "ledger", {}), cell) or self.arrow(cell))

    def rvector(self, values, cells) -> str:
        """A vector result and its rounding (the weighted sum's)."""
        found = getattr(self.written, "rounded", {})
        return self.vector([found[c][0] if c in found else d for d, c in zip(values, cells)]) + self.arrow(*cells)

    def each(self, line: Callable[[int, str], str]) -> list[str]:
        """One line per shown key, `line(j, "label:  ")`; the elided middle as one line."""
        lk, shown = len(self.keys), self.shown
        return [hw.more_keys(shown, place, lk) if j is None else
                "  " + line(j, f"{self.keys[j] + ':':<{self.width}}") for place, j in enumerate(shown)]

    def fill(self, template: str, name: str, **more) -> str:
        return Template(template).safe_substitute(self.fields(name), name=name, **more)


class HandStep(namedtuple("HandStep", "write lines numbered backward", defaults=(True, None))):
    """A stage's hand calculation (the module's docstring): how it writes one row, and its lines."""
    # write: Callable[[Row, str], Any]  # the stage's printed row: a record with `pairs`
    # lines: Callable[[Page, Any, int], list[str]]  # (page, record, step number) → lines
    # numbered: bool = True  # starts a "Step N" (K_rope's lines continue Q_rope's step)
    # backward: BackStep | None = None  # its backward half (attncli/hand/hand_backward.py); None: the
    #     backward narration refuses the stage
    __slots__ = ()


# --- a stage that changes each key's number alone ---------------------------------------------------

class Each(namedtuple("Each", "name before pairs")):
    """A per-key stage's row as printed: `pairs` this stage, `before` the stage it read (`name`)."""
    # name: str
    # before: Pairs
    # pairs: Pairs
    __slots__ = ()


def elementwise(what: str, formula: str, apply: Callable[[Decimal], Decimal],
                slope: Callable[[Decimal, Decimal], Decimal] | None = None,
                through: str = "through $name, $d_previous = $d × ∂$name/∂$previous") -> HandStep:
    """The step of a stage that changes each key's number alone: "Step N: `what`" (a template:
    `$previous` and the stage table's other fields), then per key "`formula` = result", with
    `{x}` the printed number it reads. `apply` computes the result from the printed number (exact
    decimals); −∞ (a blocked key) stays −∞. With `slope(x, y)` (its derivative, from the exact x
    and y) the step has its backward half: "Step Bn′: `through`", then per key d_y × slope = d_x
    (hand_backward.elementwise_back); without it the backward narration refuses the stage."""
    def write(row: Row, name: str) -> Each:
        exact, before = row.exact(name), row.x
        pairs = [(float(exact[j]), None if d is None else row.w.result((name, j), apply(row.w.onward(d)), exact[j],
                                                                       [(t, d)], written=apply(d)))
                 for j, (t, d) in enumerate(before)]
        return Each(name, before, pairs)

    def lines(page: Page, r: Each, step: int) -> list[str]:
        out = [f"Step {step}: {page.fill(what, r.name)}"]
        return out + page.each(lambda j, key: f"{key} masked → −∞" if r.before[j][1] is None else
                               f"{key} {formula.format(x=page.n(r.before[j][1]))} = {page.r(r.pairs[j][1], (r.name, j))}"
                               f"{page.note((r.name, j))}")
    return HandStep(write, lines, backward=None if slope is None else elementwise_back(through, slope))


# --- scores, scaled, capped, output -----------------------------------------------------------------

class Scores(namedtuple("Scores", "name q K pairs")):
    # name: str
    # q: list[Decimal]
    # K: list[list[Decimal]]
    # pairs: Pairs
    __slots__ = ()


def _write_scores(row: Row, name: str) -> Scores:
    q, K, exact = row.inputs["Q"], row.inputs["K"], row.exact(name)
    pairs = [(float(exact[j]), row.w.dot((name, j), q, K[j], None, exact[j])) for j in range(len(K))]
    return Scores(name, values(q), [values(k) for k in K], pairs)


def _scores_lines(page: Page, r: Scores, step: int) -> list[str]:
    words = page.fields(r.name)
    out = [f"Step {step}: raw scores, {words['q'].lower()} · {words['k'].lower()}"]
    return out + page.each(lambda j, key: f"{key} {hw.dot(r.q, r.K[j], page.places)} = {page.r(r.pairs[j][1], (r.name, j))}"
                           f"{page.note((r.name, j))}")


class Scaled(namedtuple("Scaled", "name before divisor scale pairs symbol", defaults=(None,))):
    # name: str
    # before: Pairs
    # divisor: Decimal | None  # √d_k as printed (default scale), or None
    # scale: Decimal | None  # a given scale as written (carry.given), or None
    # pairs: Pairs
    # symbol: str | None = None  # "√2": rounded carry divides by √d_k unrounded (carry.root)
    __slots__ = ()


def _write_scaled(row: Row, name: str) -> Scaled:
    trace, exact = row.trace, row.exact(name)
    divisor = scale = symbol = None
    if trace.default_scale:
        true, used, symbol = root(trace.d_k, row.places, row.w.carry)
        divisor = printed(true, row.places)
        by, operand = (lambda d: d / used), (true, used)
    else:
        scale = given(trace.scale, row.places)
        by, operand = (lambda d: d * scale), (trace.scale, scale)
    pairs = [(float(exact[j]), None if d is None else row.w.result((name, j), by(row.w.onward(d)), exact[j],
                                                                   [(t, d), operand], written=by(d)))
             for j, (t, d) in enumerate(row.x)]
    return Scaled(name, row.x, divisor, scale, pairs, symbol)


def _scaled_lines(page: Page, r: Scaled, step: int) -> list[str]:
    n, d_k = page.n, page.trace.d_k
    if r.divisor is not None:
        approx = "=" if math.isqrt(d_k) ** 2 == d_k else "≈"
        unrounded = " (used unrounded, as a calculator's √ key gives it)" if r.symbol else ""
        out = [f"Step {step}: scale by 1/√d_k, d_k = {d_k}, √{d_k} {approx} {n(r.divisor)}{unrounded}"]
        by = f"/ {r.symbol or n(r.divisor)}"
    else:
        out = [f"Step {step}: scale by {page.short(r.scale)} (given)"]
        by = f"× {page.short(r.scale)}"
    return out + page.each(lambda j, key: f"{key} {n(r.before[j][1])} {by} = {page.r(r.pairs[j][1], (r.name, j))}"
                           f"{page.note((r.name, j))}")


def tanh(x: Decimal) -> Decimal:
    """tanh in the working precision: (e^2x − 1) / (e^2x + 1); ±1 beyond |x| = 80, where it is 1 to
    more than 60 digits (and e^2x would overflow the context for a tiny softcap)."""
    if abs(x) > 80:
        return Decimal(1).copy_sign(x)
    e = (2 * x).exp()
    return (e - 1) / (e + 1)


def _write_capped(row: Row, name: str) -> Each:
    """c · tanh(x / c) = c (e^(2x/c) − 1) / (e^(2x/c) + 1), per key."""
    cap = Decimal(repr(row.trace.problem.softcap))
    return elementwise("", "", lambda d: cap * tanh(d / cap)).write(row, name)


THROUGH_CAP = "through the softcap, $d_previous = $d × (1 − tanh²($previous / c))"


def _write_capped_back(back, name: str):
    """d x = d capped × (1 − tanh²(x / c)) = d capped × (1 − (capped / c)²), per key."""
    cap = Decimal(repr(back.trace.problem.softcap))
    return elementwise_back(THROUGH_CAP, lambda x, y: 1 - (y / cap) ** 2).write(back, name)


def _capped_lines(page: Page, r: Each, step: int) -> list[str]:
    c, n, before = page.fields(r.name)["softcap"], page.n, page.fields(r.name)["previous"]
    out = [f"Step {step}: softcap, {c} · tanh({before} / {c}) (Gemma 2): near {before} when small, never beyond ±{c}"]
    return out + page.each(lambda j, key: f"{key} {c} · tanh({n(r.before[j][1])} / {c}) = {n(r.pairs[j][1])}"
                           f"{page.note((r.name, j))}")


class Output(namedtuple("Output", "name weights V allowed contributions pairs exact products")):
    """weights V for one row: each key's weight × its value row, and their sum."""
    # name: str
    # weights: list[Decimal]
    # V: list[list[Decimal]]
    # allowed: list[bool]
    # contributions: list[list[Decimal]]
    # pairs: Pairs  # the output row
    # exact: list[Decimal]  # the exact output rounded: what rounded carry compares with
    # products: np.ndarray  # (Lk, d_v) each weight × value row, unrounded (an elided run's sum, exact carry)
    __slots__ = ()


def _write_output(row: Row, name: str) -> Output:
    w, weights, V, allowed = row.w, row.x, row.inputs["V"], row.allowed
    exact_products = row.exact(row.last)[:, None] * row.trace.V[row.head]  # (Lk, d_v) weight_j · v_j
    contributions = [[w.result(("contributions", j), p * v, exact_products[j, i], [(t, p), (v_true, v)],
                               cell=("contributions", j, i))
                      for i, (v_true, v) in enumerate(V[j])] for j, (t, p) in enumerate(weights)]
    exact = row.exact(name)
    shown = [printed(x, row.places) for x in exact]
    live = [j for j in range(len(V)) if allowed[j]]
    if live:
        shown = [w.result((name, 0), sum((contributions[j][i] for j in live), Decimal(0)), exact[i], cell=(name, i))
                 for i in range(len(exact))]
    return Output(name, values(weights), [values(v) for v in V], list(allowed), contributions,
                  [(float(t), d) for t, d in zip(exact, shown)], [printed(x, row.places) for x in exact],
                  exact_products)


def _output_lines(page: Page, r: Output, step: int) -> list[str]:
    vector, out = page.vector, [f"Step {step}: weighted sum of values"]
    result = values(r.pairs)
    if not any(r.allowed):  # the masked-rows policy's output (a uniform row: its additions, when they rounded)
        return out + [f"  output = {vector(result)}"] + _additions(page, r.name, len(result))
    shown = page.shown
    for place, j in enumerate(shown):
        if j is None:
            rest = [k for k in hw.elided_at(shown, place, len(r.V)) if r.allowed[k]]
            if page.written.carry == "rounded":  # what the learner adds: the products as written
                added = [sum((r.contributions[k][i] for k in rest), Decimal(0)) for i in range(len(result))]
            else:  # the unrounded products, as the sum below adds them (0.00004 each is not 0.0000 each)
                added = [printed(float(sum(r.products[k][i] for k in rest)), page.places) for i in range(len(result))]
            out.append(hw.more_keys(shown, place, len(r.V)) + f" adding {vector(added)}")
        elif r.allowed[j]:
            out.append(f"  {page.n(r.weights[j])} × {vector(r.V[j], hw.short)} = "
                       f"{page.rvector(r.contributions[j], [('contributions', j, i) for i in range(len(result))])}"
                       f"{page.note(('contributions', j))}")
    if not all(r.allowed):
        out.append("  (masked keys have weight 0 and add nothing)")
    out.append(f"  sum = {page.rvector(result, [(r.name, i) for i in range(len(result))])}{page.note((r.name, 0))}")
    out += _additions(page, r.name, len(result))
    if page.written.carry == "rounded":
        out.append(hw.comparison(result, r.exact, page.places))
    return out


def _additions(page: Page, name: str, columns: int) -> list[str]:
    """A precision run's additions of each column of the weighted sum, where its rounded partial sums
    kept another number than one rounding of the exact sum (a wide V: the first columns', and a count)."""
    ledger = getattr(page.written, "ledger", {})
    chains = [f"  column {i}{added}" for i in range(columns) if (added := hw.additions(ledger, (name, i)))]
    if len(chains) > hw.MAX_KEYS:
        chains[hw.MAX_KEYS - 1:] = [f"  … and {len(chains) - hw.MAX_KEYS + 1} more columns whose additions rounded "
                                    "as they went"]
    return chains


SCORES = HandStep(_write_scores, _scores_lines, backward=hand_backward.SCORES)
SCALED = HandStep(_write_scaled, _scaled_lines, backward=hand_backward.SCALED)
CAPPED = HandStep(_write_capped, _capped_lines,
                  backward=BackStep(_write_capped_back, elementwise_back(THROUGH_CAP, None).lines))
OUTPUT = HandStep(_write_output, _output_lines, backward=hand_backward.OUTPUT)
