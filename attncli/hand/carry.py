"""Numbers as a hand calculation prints them, under one of two carries (`CARRIES`):

- "exact" (the textbook's convention): every number is the exact value rounded for display. A
  line whose printed operands do not give its printed result records the operands that were
  rounded (`Writer.unrounded`), so the explanation can say why.
- "rounded" (a learner carrying --precision decimals on a calculator): a step that combines
  numbers (a dot product, a sum, a quotient, a weighted sum) re-types them as printed, then its
  result is rounded. A key's logit is different: from its dot product to its exponential it
  passes through steps that each apply one operation to it (÷ √d_k or × scale, the softcap,
  + bias, e^x), and like a calculator's display it stays unrounded along that chain (`Held`,
  `Writer.onward`), each link printed rounded; a line whose printed operand would give another
  result says so, `(2.82842… unrounded)`. The formula's constant √d_k is used unrounded too, as
  the calculator's √ key gives it, written `√2` (`root`). So the textbook's digits come out at 4
  decimals: 4.0000 / √2 = 2.8284, e^2.8284 = 16.9188 (e^2.82842…), sum 22.0321, weights 0.0454,
  0.7679, 0.1867, output [0.2775, 1.3491]; re-typing 1.4142 and 2.8284 would give 2.8285,
  16.9201 and 22.0333, or 16.9184 and 22.0316.

Given numbers (Q, K, V, X, the W and b matrices, a given bias, scale and sink logits, dO without W_O) are the
problem's data, not results: both carries print them and compute with them as given (`given`):
exactly, in their shortest round-trip decimal form (0.125, 2.5, 4.0), when that form has at most
max(--precision, GIVEN_DECIMALS) decimals and the number is below E_NOTATION_FROM; otherwise
rounded to --precision like a computed number (e-notation when huge), and a line whose printed
operands then do not give its result says so (`Writer.unrounded`, exact carry). Numbers the
calculation derives (projected q, k, v; RoPE's rotated vectors; √d_k; ALiBi's terms; dO W_Oᵀ) are computed
values, printed and carried like every other result.

"Holds" (`holds`): the printed result equals the printed operands' exact result rounded to the
printed decimals; at an exact tie either neighbour holds. Lines with a number of E_NOTATION_FROM
or more are exempt: such numbers are written in e-notation, rounded to significant digits.

Decimal only, no numpy: the stage table's hand steps (attncli/hand/stage_steps.py) build on this.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_EVEN, Context, Decimal, localcontext

from attncli.base.choices import CARRIES  # noqa: F401  (read as carry.CARRIES)

MAX_TERMS = 6  # longer dot products and vectors are elided in the middle (handwriting writes them)
SHOWN_HEAD = 3  # an elided dot product prints its first 3 terms, then …, then its last

# Exact results of the printed operands: 60 digits decide every tie and near-tie of numbers with
# at most 17 decimals; quantizing e^709 to 17 decimals needs ~330 digits, hence WIDE.
WORK = Context(prec=60)
WIDE = Context(prec=1000)
PERCENT_PLACES = 1  # "(76.8%)"
# Numbers this large are written in e-notation; e^x would be one, so the hand calculation
# subtracts the row's largest score first (it would overflow the dtype soon after anyway).
E_NOTATION_FROM = 1e15
# A given number is written exactly when its shortest decimal form has at most this many decimals
# (or --precision, when that is more); beyond, it is rounded to --precision.
GIVEN_DECIMALS = 6


def printed(x: float, places: int) -> Decimal:
    """x as written with `places` decimals: its exact binary value rounded half-even (as Python's
    `format` rounds), never −0."""
    return round_to(Decimal(float(x)), places)


def given(x: float, places: int) -> Decimal:
    """A given number as written (the module's docstring): its shortest round-trip decimal when that
    has at most max(places, GIVEN_DECIMALS) decimals and |x| < E_NOTATION_FROM, else `printed`."""
    x = float(x)
    if math.isfinite(x) and abs(x) < E_NOTATION_FROM:
        d = Decimal(repr(x))
        if max(0, -d.as_tuple().exponent) <= max(places, GIVEN_DECIMALS):
            return abs(d) if d == 0 else d
    return printed(x, places)


def shown_terms(n: int) -> list[int | None]:
    """Which of a sum's n terms its line writes: every one, or past MAX_TERMS the first SHOWN_HEAD,
    None for the elided middle, and the last (handwriting's lines and the notes on their operands)."""
    return [*range(SHOWN_HEAD), None, n - 1] if n > MAX_TERMS else list(range(n))


def root(d_k: int, places: int, carry: str) -> tuple[float, Decimal, str | None]:
    """√d_k as the scale step divides by it: (true value, the number divided by, how a line writes
    it; None: as a number). Exact carry and a whole root (√4 = 2): the printed root. Rounded carry:
    √d_k unrounded (60 digits), written `√d_k`: a constant of the formula, not a carried result."""
    true = math.sqrt(d_k)
    if carry == "rounded" and math.isqrt(d_k) ** 2 != d_k:
        return true, Decimal(d_k).sqrt(WORK), f"√{d_k}"
    return true, printed(true, places), None


def given_pairs(values, places: int) -> list[tuple[float, Decimal]]:
    """(true value, as written) for each of the given numbers `values`."""
    return [(float(x), given(x, places)) for x in values]


def round_to(value: Decimal, places: int) -> Decimal:
    """`value` rounded half-even to `places` decimals, never −0 (an inf or a NaN as it is)."""
    if not value.is_finite():
        return value
    d = value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_EVEN, context=WIDE)
    return abs(d) if d == 0 else d


def holds(shown: Decimal, value: Decimal, places: int) -> bool:
    """The printed result `shown` is `value` (the printed operands' exact result) rounded to
    `places` decimals: within half a unit of the last place (so at an exact tie both hold)."""
    if not (shown.is_finite() and value.is_finite()):
        return shown == value
    return WORK.abs(WORK.subtract(shown, value)) <= Decimal(5).scaleb(-places - 1)


def pairs(values, places: int) -> list[tuple[float, Decimal]]:
    """(true value, as printed) for each of `values`."""
    return [(float(x), printed(x, places)) for x in values]


class Held(Decimal):
    """A result as rounded carry prints it (a Decimal of the printed value) that remembers the
    unrounded value it was rounded from, as a calculator's display still holds it: `unrounded`.
    Arithmetic on it gives plain Decimals of the printed value (a re-typed number)."""

    unrounded: Decimal


def held(shown: Decimal, value: Decimal) -> Held:
    out = Held(shown)
    out.unrounded = value
    return out


class Writer:
    """Prints one result at a time: exact carry rounds the exact value, rounded carry rounds the
    value of the printed operands; both record a line whose operands do not give its result in
    `unrounded`: (line, index) → the rounded operands' unrounded values, ("scores", j),
    ("total", 0)…; an empty tuple when every operand is a rounded result printed on an earlier line."""

    def __init__(self, places: int, carry: str, ledger: dict | None = None):
        self.places, self.carry = places, carry
        self.unrounded: dict[tuple[str, int], tuple[float, ...]] = {}
        # A low-precision run (attncli/explain/roundings.py's ledger): cell → (exact, kept, dtype,
        # always); `rounded` the cells whose line writes the exact result, then → the number kept.
        self.ledger = ledger or {}
        self.rounded: dict[tuple, tuple[Decimal, float, str]] = {}

    def result(self, key, value: Decimal, exact: float, operands=(), places: int | None = None,
               written: Decimal | None = None, cell=...) -> Decimal:
        """`value`: the printed operands' exact result; `exact`: the true value; `operands`:
        (true value, printed) pairs, named in the note when they were rounded. Rounded carry: a
        `Held` result; `written`, when `value` started from an operand as the display held it
        (`onward`), is the printed operands' result, and a line it does not give notes that
        operand's unrounded value. A low-precision run's `cell` (default `key`) in the ledger whose
        kept number differs from exact arithmetic's: the line's result is exact arithmetic's (which
        it must hold to), and the number returned, which the next step reads, is the one kept."""
        places = self.places if places is None else places
        rounded = self.carry == "rounded"
        entry = self.ledger.get(key if cell is ... else cell) if not rounded else None
        kept = None
        if entry is not None:
            true, kept, dtype, always = entry
            if not math.isfinite(true) or true == kept or (
                    math.isfinite(kept) and not always and printed(true, places) == printed(kept, places)):
                kept = None  # nothing to show, or no exact arithmetic to show (inf − inf)
            else:
                exact = true
        if not math.isfinite(exact) and kept is None:
            return printed(exact, places)  # an inf or a NaN the run made (the lab): as it is, no equation to hold
        shown = round_to(value, places) if rounded else printed(exact, places)
        check = written if rounded and written is not None else value
        huge = max([abs(shown)] + [abs(d) for _, d in operands]) >= E_NOTATION_FROM  # e-notation: exempt
        if not huge and not holds(shown, check, places):
            if check is written and rounded:
                noted = tuple(float(d.unrounded) for _, d in operands if isinstance(d, Held) and d.unrounded != d)
            else:
                noted = tuple(float(x) for x, d in operands if Decimal(repr(float(x))) != d)
            self.unrounded[key] = self.unrounded.get(key, ()) + tuple(
                x for x in noted if x not in self.unrounded.get(key, ()))
        if kept is not None:
            self.rounded[key if cell is ... else cell] = (shown, kept, dtype)
            return printed(kept, places)
        return held(shown, value) if rounded else shown

    def onward(self, d: Decimal | None) -> Decimal | None:
        """The number a logit's next one-operation step starts from: under rounded carry the
        unrounded value the display still holds (`Held`), else `d` as printed."""
        return getattr(d, "unrounded", d)

    def dot(self, key, xs, ws, bias, exact: float) -> Decimal:
        """Σ x_i w_i (+ b): xs, ws and bias are (true, printed) pairs."""
        value = sum((a[1] * b[1] for a, b in zip(xs, ws)), bias[1] if bias is not None else Decimal(0))
        # a note names only the operands the line prints (a long one elides its middle, as handwriting.dot)
        shown = [i for i in shown_terms(len(xs)) if i is not None]
        operands = [xs[i] for i in shown] + [ws[i] for i in shown]
        return self.result(key, value, exact, operands + ([bias] if bias is not None else []))


def exactly(function):
    """Run with WORK as the decimal context: sums and products of printed numbers are exact."""
    def run(*args, **kwargs):
        with localcontext(WORK):
            return function(*args, **kwargs)
    run.__doc__, run.__name__ = function.__doc__, function.__name__
    return run
