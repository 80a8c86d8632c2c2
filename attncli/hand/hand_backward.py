"""The backward half of a stage's hand step (`HandStep.backward`, attncli/hand/stage_steps.py): what
`--explain` writes for one query row of that stage when dO is given. It mirrors the stage's vjp
(attncli/stages/vjps.py) as the forward half mirrors its compute, in both carries (attncli/hand/carry.py):
under "exact" every number is the exact gradient rounded, with a note on a line whose printed
operands do not give its result; under "rounded" every number is computed from the numbers
printed before it (the forward half's, and the backward lines above it).

A `BackStep` has two parts. `write(back, name)` reads `back.d`, the gradient of the stage's value
for the row ((true, printed) pairs, one per key or value column), and leaves in `back.d` the gradient
of what the stage read (named `back.d_name`), or gives a block input's gradient (`back.give`: the
row's d_q, or a `Share` of each key's d_k or d_v); it returns the record its `lines(page, record,
steps)` writes, numbering its steps with `steps` (a `Steps`: "B1", "B2", or "B2′" for a step that
continues the one before). `passes`: the stage's gradient is the one before it's, except for
zeros (the mask's), so it is named like it. `takes`: what the step can take from the one after it
(`back.offered`), as the scores take "factor": the scale's constant, applied once to their sums.

attncli/explain/backward_steps.py runs `write` over the problem's present stages in reverse order;
render/explain_backward.py runs `lines`. A present stage without a backward half is refused.
Decimal only, no numpy at import, as attncli/hand/stage_steps.py (every command's start-up reads the
stage table, which imports these steps); the exact gradients arrive as numpy rows.
"""

from __future__ import annotations

from collections import namedtuple
from decimal import Decimal
from typing import Callable

from attncli.hand import handwriting as hw
from attncli.hand.carry import Writer, given, root, round_to

Pairs = list  # [(true value, printed Decimal or None for −∞ or a masked key), …]


def values(pairs: Pairs) -> list:
    return [d for _, d in pairs]


class BackStep(namedtuple("BackStep", "write lines passes takes", defaults=(False, ()))):
    """A stage's backward hand step (the module's docstring)."""
    # write: Callable[[Back, str], Any]
    # lines: Callable[[Page, Any, Steps], list[str]]
    # passes: bool = False  # its gradient is the one before it's where it is not 0: named like it
    # takes: tuple[str, ...] = ()  # what it can take from the step after it ("factor")
    __slots__ = ()


class Steps:
    """The backward steps' numbers: `number()` starts the next step ("B3"); `primed()` one that
    continues the last ("B3′", then "B3″"…)."""

    def __init__(self):
        self.n, self.primes = 0, 0

    def number(self) -> str:
        self.n, self.primes = self.n + 1, 0
        return f"B{self.n}"

    def primed(self) -> str:
        self.primes += 1
        return f"B{self.n}" + "′" * self.primes


class Share(namedtuple("Share", "name what by factors vector results notes")):
    """This row's share of a key-side input's gradient (d_v, d_k): per key, factor × vector (by the
    scale) = result; None for a key no gradient reaches (masked)."""
    # name: str  # the input, lower case: "v", "k"
    # what: str  # the formula in words: "weight × dO"
    # by: str  # what the product is divided or multiplied by: " / 1.4142", or ""
    # factors: list[Decimal | None]  # (Lk,)
    # vector: list[Decimal]  # dO or q as printed
    # results: list[list[Decimal] | None]  # (Lk, width)
    # notes: tuple[str, ...]  # what the stages before add to the step's header ("; with RoPE …")
    __slots__ = ()


class Factor(namedtuple("Factor", "true printed divides symbol", defaults=(None,))):
    """The scale as a hand calculation applies it: divide by √d_k (the default) or multiply by the
    given scale; `true` the exact number, `printed` the one used (carry.root: √d_k unrounded under
    rounded carry, written as `symbol`, "√2")."""
    # true: float
    # printed: Decimal
    # divides: bool
    # symbol: str | None = None
    __slots__ = ()

    def text(self, places: int) -> str:  # √d_k is computed; a given scale is written as given
        if self.divides:
            return f"/ {self.symbol or hw.number(self.printed, places)}"
        return f"× {hw.short(self.printed, places)}"

    def apply(self, d: Decimal) -> Decimal:
        return d / self.printed if self.divides else d * self.printed


class Back:
    """One query row of one head while its backward pass is written (the reverse of
    stage_steps.Row). `forward` is the row's forward half as printed (steps.Written: its records by
    stage name, `allowed`); `d` the gradient being carried back, named `d_name`; `found` what the
    steps gave the block inputs, by the stage or input that holds them (`holders`: "Q" → "Q_rope"
    after RoPE); `offered` what the step after this one left for it, `offers` what this one leaves,
    `takes` what the step before this one can take; `preamble` lines printed after dO.

    `exact(name)` is the true gradient of a stage, a block input or a reported number ("D") for
    this row; `value(name)` a stage's true forward values; `input(name)` a block input's true
    values as the stage reads it (Q_rope's for "Q" after RoPE); `names[stage]` its gradient's name."""

    def __init__(self, trace, forward, w: Writer, exact: dict, order: list[str], names: dict[str, str]):
        self.trace, self.forward, self.w, self._exact = trace, forward, w, exact
        self.head, self.row, self.order, self.names = forward.head, forward.row, order, names
        self.d: Pairs = []
        self.d_name = ""
        self.found: dict = {}
        self.holders: dict[str, str] = {}
        self.offered: dict = {}
        self.offers: dict = {}
        self.takes: tuple[str, ...] = ()
        self.preamble: list[str] = []

    @property
    def places(self) -> int:
        return self.w.places

    @property
    def allowed(self) -> list[bool]:
        return self.forward.allowed

    @property
    def dead(self) -> bool:
        """Every key is masked: no gradient reaches the logits."""
        return not any(self.forward.allowed)

    def exact(self, name: str):
        return self._exact[name][0, self.row]

    def value(self, name: str):
        return self.trace.stage(name)[self.head, self.row]

    def input(self, name: str):
        holder = self.holders.get(name, name)
        if holder != name:
            return self.trace.stage(holder)[self.head]
        return {"Q": self.trace.Q, "K": self.trace.K, "V": self.trace.V}[name][self.head]

    def previous(self, name: str) -> str:
        return self.order[self.order.index(name) - 1]

    def read(self, name: str):
        """The stage's record as its forward half printed it."""
        return self.forward.stages[name]

    def give(self, name: str, value) -> None:
        """A block input's gradient, kept under whatever stands in for it here."""
        self.found[self.holders.get(name, name)] = value

    def carry(self, name: str, pairs: Pairs) -> None:
        """The gradient of what stage `name` read, as (true, printed) pairs."""
        self.d, self.d_name = pairs, self.names[self.previous(name)]


def dot(w: Writer, key, xs: Pairs, ys: Pairs, exact) -> Decimal:
    """Σ x_i y_i of the printed numbers, written in the carry; xs, ys (true, printed) pairs."""
    value = sum((x[1] * y[1] for x, y in zip(xs, ys)), Decimal(0))
    return w.result(key, value, exact, [*xs, *ys])


# --- a stage that changes each key's number alone ---------------------------------------------------

class Through(namedtuple("Through", "name d_name d_previous d factors pairs blocked")):
    """d x_j = d y_j × slope_j for one row: `pairs` d x, `factors` the slopes as printed."""
    # name: str
    # d_name: str  # the gradient read (this stage's)
    # d_previous: str  # the gradient written (the stage before's)
    # d: list[Decimal | None]  # the gradient read, as printed (None: a masked key after the softmax)
    # factors: list[Decimal | None]
    # pairs: Pairs  # (true, printed) d x
    # blocked: list[bool]  # the key was −∞ before the stage: no gradient
    __slots__ = ()


def elementwise_back(what: str, slope: Callable[[Decimal, Decimal], Decimal]) -> BackStep:
    """The backward half of a stage that changes each key's number alone, y = f(x): "Step Bn′:
    `what`" (a template: `$d` this stage's gradient, `$d_previous` the one it writes, `$previous`
    and the stage table's other fields), then per key "d_y × slope = d_x". `slope(x, y)` is f′ from
    the exact x and y (Decimal); it is printed as an operand, the product in the carry."""
    def write(back: Back, name: str) -> Through:
        before, after = back.read(name).before, back.read(name).pairs  # (true, printed) x and y
        exact, d_name = back.exact(back.previous(name)), back.d_name
        factors, pairs = [], []
        for j, ((x, shown), (y, _), (d_true, d)) in enumerate(zip(before, after, back.d)):
            if shown is None or d is None:  # −∞ before the stage, or a masked key after the softmax
                factors.append(None)
                pairs.append((0.0, Decimal(0)) if shown is None else (d_true, None))
                continue
            true = slope(Decimal(float(x)), Decimal(float(y)))
            factors.append(round_to(true, back.places))
            operands = [(d_true, d), (float(true), factors[-1])]
            pairs.append((float(exact[j]), back.w.result((name, j), d * factors[-1], exact[j], operands)))
        d = values(back.d)
        back.carry(name, pairs)
        return Through(name, d_name, back.d_name, d, factors, pairs, [shown is None for _, shown in before])

    def lines(page, r: Through, steps: Steps) -> list[str]:
        header = page.fill(what, r.name, d=r.d_name, d_previous=r.d_previous)
        return [f"Step {steps.primed()}: {header}"] + page.each(
            lambda j, key: f"{key} masked → 0" if r.blocked[j] else f"{key} masked, no gradient" if r.d[j] is None else
            f"{key} {page.n(r.d[j])} × {page.n(r.factors[j])} = {page.n(r.pairs[j][1])}{page.note((r.name, j))}")
    return BackStep(write, lines)


# --- scaled, scores, output -------------------------------------------------------------------------

class ScaledBack(namedtuple("ScaledBack", "name factor d_name d_previous d pairs")):
    """The scale: left for the scores to apply once to their sums (`pairs` None), or applied per
    key here when the stage before cannot take it: d x_j = d_j / √d_k (or × scale)."""
    # name: str
    # factor: Factor
    # d_name, d_previous: str  # the gradient read and the one written
    # d: list[Decimal | None]  # the gradient read, as printed (None: a masked key after the softmax)
    # pairs: Pairs | None  # d x, (true, printed)
    __slots__ = ()


def _factor(trace, places: int, carry: str) -> Factor:
    if trace.default_scale:
        true, used, symbol = root(trace.d_k, places, carry)
        return Factor(true, used, True, symbol)
    return Factor(float(trace.scale), given(trace.scale, places), False)


def _write_scaled_back(back: Back, name: str) -> ScaledBack:
    factor, d_name, d = _factor(back.trace, back.places, back.w.carry), back.d_name, back.d
    if "factor" in back.takes:  # scale · Σ_j d_j k_j: the scores apply it once, to their sums
        back.offers["factor"] = factor
        return ScaledBack(name, factor, d_name, d_name, values(d), None)
    exact = back.exact(back.previous(name))
    pairs = [(float(exact[j]), back.w.result((name, j), factor.apply(shown), exact[j],
                                             [(t, shown), (factor.true, factor.printed)]))
             for j, (t, shown) in enumerate(d)]
    back.carry(name, pairs)
    return ScaledBack(name, factor, d_name, back.d_name, values(d), pairs)


def _scaled_back_lines(page, r: ScaledBack, steps: Steps) -> list[str]:
    if r.pairs is None:
        return []
    by = r.factor.text(page.places)
    return [f"Step {steps.primed()}: through the scale, {r.d_previous} = {r.d_name} {by}"] + page.each(
        lambda j, key: f"{key} {page.n(r.d[j])} {by} = {page.n(r.pairs[j][1])}{page.note((r.name, j))}")


class ScoresBack(namedtuple("ScoresBack", "name d_name q_name k_name factor live d K sums pairs")):
    """d q = Σ_j d_j k_j (then the scale) for one row; the keys' shares of d k go to `Back.found`."""
    # name: str
    # d_name: str  # the gradient read
    # q_name, k_name: str  # what stands for q and k ("q_rope")
    # factor: Factor | None  # the scale, when the scaled stage left it here
    # live: list[int]  # the keys that take part
    # d: list[Decimal]  # (Lk,) the gradient read, as printed
    # K: list[list[Decimal]]  # (Lk, d_k) the keys as the forward half printed them
    # sums: list[Decimal]  # (d_k,) Σ_j d_j k_j
    # pairs: Pairs  # (d_k,) d q
    __slots__ = ()


def _write_scores_back(back: Back, name: str) -> ScoresBack:
    w, r, factor, d = back.w, back.read(name), back.offered.get("factor"), back.d
    q_name, k_name = back.holders.get("Q", "Q").lower(), back.holders.get("K", "K").lower()
    q_true, K_true = back.input("Q")[back.row].tolist(), back.input("K").tolist()  # (d_k,), (Lk, d_k)
    q, K = list(zip(q_true, r.q)), [list(zip(k, shown)) for k, shown in zip(K_true, r.K)]
    live = [] if back.dead else [j for j, ok in enumerate(back.allowed) if ok]
    scale = [] if factor is None else [(factor.true, factor.printed)]
    by = factor.apply if factor else (lambda x: x)
    true_by = (lambda x: x) if factor is None else (lambda x: x / factor.true if factor.divides else x * factor.true)
    exact_q = back.exact(back.holders.get("Q", "Q"))  # (d_k,) this row's gradient of q
    sums, pairs = [], []
    for c in range(len(q)):
        exact_sum = sum(float(d[j][0]) * K_true[j][c] for j in live)
        sums.append(dot(w, (f"d_{q_name}", c), [d[j] for j in live], [K[j][c] for j in live], exact_sum))
        pairs.append((float(exact_q[c]), w.result((f"d_{q_name}", c), by(sums[-1]), exact_q[c],
                                                  [(exact_sum, sums[-1])] + scale)))
    back.give("Q", pairs)
    shares = [[w.result(("d_k", j), by(d[j][1] * x), true_by(float(d[j][0]) * t), [d[j], (t, x)] + scale)
               for t, x in q] if ok or back.dead else None for j, ok in enumerate(back.allowed)]
    by_text = f" {factor.text(back.places)}" if factor else ""
    back.give("K", Share("k", f"{back.d_name} × {q_name}{by_text}", by_text,
                         [dj if s is not None else None for (_, dj), s in zip(d, shares)], values(q), shares, ()))
    return ScoresBack(name, back.d_name, q_name, k_name, factor, live, values(d), r.K, sums, pairs)


def _scores_back_lines(page, r: ScoresBack, steps: Steps) -> list[str]:
    n, by = page.n, "" if r.factor is None else f" {r.factor.text(page.places)}"
    out = [f"Step {steps.number()}: d_{r.q_name} = Σ_j {r.d_name}_j {r.k_name}_j{by}"]
    for c in range(len(r.sums)):
        terms = hw.dot([r.d[j] for j in r.live], [r.K[j][c] for j in r.live], page.places) if r.live else "0"
        scaled = f"{by} = {n(r.sums[c])}{by}" if by else ""
        out.append(f"  column {c}: ({terms}){scaled} = {n(r.pairs[c][1])}{page.note((f'd_{r.q_name}', c))}")
    return out


class OutputBack(namedtuple("OutputBack", "name d_name dO V pairs")):
    """d x_j = dO · v_j for one row (x: the weights); the keys' shares of d v go to `Back.found`."""
    # name: str
    # d_name: str  # the gradient written
    # dO: list[Decimal]  # (d_v,) as printed
    # V: list[list[Decimal]]  # (Lk, d_v) as printed
    # pairs: Pairs  # (Lk,) d x, None printed where the key is masked
    __slots__ = ()


def _write_output_back(back: Back, name: str) -> OutputBack:
    w, r, dO = back.w, back.read(name), back.d
    x_name = back.previous(name)
    exact, x_true, V_true = back.exact(x_name), back.value(x_name), back.input("V")
    V = [list(zip(v.tolist(), printed)) for v, printed in zip(V_true, r.V)]
    pairs = [(float(exact[j]), dot(w, (back.names[x_name], j), dO, V[j], exact[j]) if ok else None)
             for j, ok in enumerate(r.allowed)]
    shares = [None if not (ok or back.dead) else
              [w.result(("d_v", j), r.weights[j] * g, float(x_true[j]) * t, [(float(x_true[j]), r.weights[j]), (t, g)])
               for t, g in dO] for j, ok in enumerate(r.allowed)]
    back.give("V", Share("v", "weight × dO", "", [x if s is not None else None for x, s in zip(r.weights, shares)],
                         values(dO), shares, ()))
    back.offers["D"] = ("dO · output", dO, r.pairs)  # output = weights V: D = rowsum(dO ∘ output)
    back.carry(name, pairs)  # None for a masked key: the softmax's step gives it no gradient
    return OutputBack(name, back.d_name, values(dO), r.V, pairs)


def _output_back_lines(page, r: OutputBack, steps: Steps) -> list[str]:
    out = [f"Step {steps.number()}: {r.d_name} = dO · v  (how the loss moves with each weight)"]
    return out + page.each(lambda j, key: f"{key} masked, no gradient" if r.pairs[j][1] is None else
                           f"{key} {hw.dot(r.dO, r.V[j], page.places)} = {page.n(r.pairs[j][1])}"
                           f"{page.note((r.d_name, j))}")


SCALED = BackStep(_write_scaled_back, _scaled_back_lines)
SCORES = BackStep(_write_scores_back, _scores_back_lines, takes=("factor",))
OUTPUT = BackStep(_write_output_back, _output_back_lines)
