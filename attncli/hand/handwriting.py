"""How a hand calculation writes its numbers, vectors and notes: the text of `--explain`'s lines.

Decimal only, no numpy and no view: the stage table's hand steps (attncli/hand/stage_steps.py) write
their lines with these.
"""

from __future__ import annotations

import math
import struct
from decimal import ROUND_DOWN, Decimal, localcontext

from attncli.base.errors import plural
from attncli.hand.carry import E_NOTATION_FROM, GIVEN_DECIMALS, MAX_TERMS, WIDE, round_to, shown_terms

MAX_KEYS = 8  # longer rows show the first and last keys with a "… N more …" line


def number(d: Decimal, places: int) -> str:
    """A computed value: fixed decimals, e-notation when huge; inf, −inf or nan as the tables write them."""
    if not d.is_finite():
        return "nan" if d.is_nan() else ("inf" if d > 0 else "-inf")
    return f"{d:.{places}e}" if abs(d) >= E_NOTATION_FROM else f"{d:.{places}f}"


def short(d: Decimal, places: int) -> str:
    """A number as a person writes it: 4.0, 0.5, 0.125, -1.0 (no trailing zeros past the first).
    Given inputs arrive exact (carry.given), computed values rounded to `places`: either is written
    with the decimals it has, never more than max(places, carry.GIVEN_DECIMALS)."""
    if abs(d) >= E_NOTATION_FROM:
        return number(d, places)
    d = round_to(d, max(places, GIVEN_DECIMALS))
    text = f"{d:f}"
    if "." in text:
        text = text.rstrip("0")
    return text + "0" if text.endswith(".") else text if "." in text else text + ".0"


def vector(values, places: int, write=number) -> str:
    items = [write(x, places) for x in values]
    if len(items) > MAX_TERMS:
        items = items[:3] + ["…"] + items[-2:]
    return "[" + ", ".join(items) + "]"


def dot(xs, ws, places: int, bias=None) -> str:
    """(x0)(w0) + (x1)(w1) + … (+ b): the left side of a dot product's line."""
    text = terms_sum([f"({short(a, places)})({short(b, places)})" for a, b in zip(xs, ws)])
    return text if bias is None else f"{text} + {short(bias, places)}"


def terms_sum(terms: list[str]) -> str:
    """a + b + …: a long sum elided in the middle (`shown_terms`), with its count of terms."""
    picked = shown_terms(len(terms))
    text = " + ".join("…" if i is None else terms[i] for i in picked)
    return text + (f" ({len(terms)} terms)" if None in picked else "")


def shown_keys(n: int, keep=(), full: bool = False) -> list[int | None]:
    """Which of n indices to list: all (`full`, or at most MAX_KEYS), else the first and last ones
    and every index in `keep` (the keys that matter: picked, the largest weights), in order; a None
    marks each elided run."""
    if full or n <= MAX_KEYS:
        return list(range(n))
    listed = sorted(set(range(MAX_KEYS - 3)) | set(range(n - 2, n)) | {j for j in keep if 0 <= j < n})
    found: list[int | None] = []
    for j in listed:
        if found and found[-1] != j - 1:
            found.append(None)
        found.append(j)
    return found


def elided_at(shown: list[int | None], place: int, n: int) -> list[int]:
    """The indices the None at shown[place] stands for."""
    before = shown[place - 1] if place else -1
    after = shown[place + 1] if place + 1 < len(shown) else n
    return list(range(before + 1, after))


def more_keys(shown: list[int | None], place: int, n: int, what: str = "keys") -> str:
    """The line standing for an elided run of keys: "  … 5 more keys …"."""
    return f"  … {plural(len(elided_at(shown, place, n)), 'more ' + what[:-1])} …"


def unrounded(x: float, places: int) -> str:
    """An operand's unrounded value: enough decimals to differ from the printed one, then `…`."""
    if abs(x) >= E_NOTATION_FROM:
        return repr(x)
    exact = Decimal(repr(x))
    decimals = min(17, max(places + 1, 2 - math.floor(math.log10(abs(x))) if x else 0))
    cut = exact.quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_DOWN, context=WIDE)
    return f"{cut}" if cut == exact else f"{cut}…"


def note(found_in: dict, keys, places: int) -> str:
    """'  (0.48024… unrounded)' when a line's printed operands do not give its printed result;
    `found_in`: a Writer's `unrounded`, `keys` the line's keys in it."""
    found = [found_in[key] for key in keys if key in found_in]
    if not found:
        return ""
    values = list(dict.fromkeys(x for group in found for x in group))
    parts = [", ".join(unrounded(x, places) for x in values) + " unrounded"] if values else []
    if any(not group for group in found):
        parts.append("from the unrounded terms")
    return "  (" + "; ".join(parts) + ")"


def comparison(carried: list[Decimal], exact: list[Decimal], places: int) -> str:
    """Rounded carry's last line: the carried result beside exact arithmetic's."""
    changed = sum(number(a, places) != number(b, places) for a, b in zip(carried, exact))
    verdict = "the same" if not changed else f"carrying rounded numbers changed {changed} of {len(exact)}"
    return f"  with exact arithmetic: {vector(exact, places)} ({verdict})"


def kept(x: float, dtype: str) -> str:
    """A number as a low-precision run kept it: exactly in bfloat16 or float16 (each has a short
    exact decimal, which is its float64 repr); float32's shortest decimal that reads back as it."""
    if not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    text = repr(x)
    if dtype == "float32":
        text = next(f"{x:.{digits}g}" for digits in range(1, 10) if _float32(float(f"{x:.{digits}g}")) == x)
    return text[:-2] if text.endswith(".0") else text


def _exact_sum(a: float, b: float) -> str:
    """a + b exactly, every digit written (float64's shortest digits would round it: …796875 as
    …7969, and 1 + 1e-20 as 1); in e-notation past 40 characters (every digit still)."""
    if not (math.isfinite(a) and math.isfinite(b)):
        return kept(a + b, "float64")
    with localcontext() as context:
        context.prec = 2000  # two doubles' exact sum: at most ~1,100 significant digits
        exact = Decimal(a) + Decimal(b)
    text = format(exact, "f")
    text = text.rstrip("0").rstrip(".") if "." in text else text
    return text if len(text) <= 40 else format(exact.normalize(), "e")


def _float32(x: float) -> float:
    """x rounded to float32 (struct's round trip, no numpy: the stage table's steps import this)."""
    return struct.unpack("f", struct.pack("f", x))[0]


def rounding(found: dict, ledger: dict, cells) -> str:
    """' → 2056 in float16' after a line's exact result: the numbers a low-precision run kept for
    `cells` (found: a Writer's `rounded`; ledger: its ledger, for the unrounded parts of a vector),
    one or a vector; '' when the run kept what exact arithmetic gives."""
    hits = [found[c] for c in cells if c in found]
    if not hits:
        return ""
    dtype = hits[0][2]
    if len(cells) == 1:
        return f" → {kept(hits[0][1], dtype)} in {dtype}"
    return " → [" + ", ".join(kept(found[c][1] if c in found else ledger[c][1], dtype) for c in cells) + f"] in {dtype}"


def additions(ledger: dict, cell) -> str:
    """', added as the run adds: 256 + 1 = 257 → 256; 256 + 1 = 257 → 256 in bfloat16' after a line's
    exact result, when recipe `same`'s rounded partial sums (the ledger's ("chain", cell)) kept
    another number than the exact result rounded once; '' otherwise. A long chain shows its first
    SHOWN_HEAD additions, …, and its last."""
    entry = ledger.get(("chain",) + tuple(cell))
    if entry is None:
        return ""
    steps, dtype, made = entry
    picked = shown_terms(len(steps))
    products = [f"q[{a}]·k[{a}] = {kept(x, 'float64')} → {kept(t, dtype)}" for a, x, t in made]
    text = "; ".join(products + ["…" if i is None else
                                 f"{kept(steps[i][0], dtype)} + {kept(steps[i][1], dtype)} = "
                                 f"{_exact_sum(steps[i][0], steps[i][1])}" + (f" → {kept(steps[i][3], dtype)}" if
                                 math.isfinite(steps[i][2]) else "") for i in picked])
    return f", added as the run adds: {text} in {dtype}"
