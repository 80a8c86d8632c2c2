"""The logit variants: ALiBi slopes, softcap and attention sinks, from input keys to `Problem` fields,
and their conventions in words (table header, JSON).

    alibi    true (the paper's slopes for the query heads) or one slope per query head;
             masks.bias adds −slope_h · |q_pos − k_pos| to the logits (after scaling and softcap)
    softcap  c > 0: the `capped` stage, c · tanh(scaled / c), before bias and masks (Gemma 2)
    sinks    one logit per query head (or one number for all): the softmax runs over the keys and
             the sink, which is then dropped, so rows sum to less than 1 (gpt-oss)

Every message starts with the key it is about (`sinks[1] is "a"; expected …`).
"""

from __future__ import annotations

import math

import numpy as np

from attncli.base.errors import Advice, InputError, plural
from attncli.base.values import HugeInt, describe

VARIANT_KEYS = ("alibi", "softcap", "sinks")
MAX_SLOPE = 1e6  # |slope| · |q_pos − k_pos| ≤ 2e22 (positions ≤ 2^53): never overflows a finite logit (stages._check_masked)


def alibi_slopes(heads: int) -> np.ndarray:
    """Press et al.'s `get_slopes` (as BLOOM's `_get_alibi_slopes`): 2^(−8k/n), k = 1…n, for n a
    power of two; otherwise those of the closest lower power of two n, then every other slope of
    2n (the odd k of 2^(−8k/2n)), until there are `heads`. (H,) float64, each 2^e correctly
    rounded (the exponents −8k/n are exact binary fractions): BLOOM's torch.pow(base, k) from a
    rounded base is up to 14 units in the last place away for 32 heads (agreeing to 4e-15)."""
    n = 2 ** int(math.floor(math.log2(heads)))
    exponents = [-8.0 * k / n for k in range(1, n + 1)]
    exponents += [-8.0 * k / (2 * n) for k in range(1, 2 * (heads - n), 2)]
    return np.exp2(np.array(exponents, dtype=np.float64))


def _number(value, field: str, expected: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, HugeInt, np.integer, np.floating)) \
            or isinstance(value, HugeInt) or not math.isfinite(float(value)):
        raise InputError(f"{field} is {describe(value)}; expected {expected}", field=field)
    return float(value)


def _per_head(value, field: str, heads: int, one_for_all: bool) -> np.ndarray:
    """(H,) float64, read-only: a list of one number per query head (or one number for all)."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if one_for_all and not isinstance(value, list):
        value = [_number(value, field, "a number or a list of one number per query head")] * heads
    if not isinstance(value, list):
        raise InputError(f"{field} is {describe(value)}; expected a list of {plural(heads, 'number')}, one per query head",
                         field=field)
    if len(value) != heads:
        raise InputError(f"{field} has {plural(len(value), 'entry')}; expected {heads}, "
                         "one per query head", field=field)
    array = np.array([_number(x, f"{field}[{i}]", "a finite number") for i, x in enumerate(value)], np.float64)
    array.flags.writeable = False
    return array


def read_variants(doc: dict, heads: int) -> dict:
    """The `Problem` fields `alibi_slopes`, `alibi_rule`, `softcap` and `sinks` of a document."""
    fields = {"alibi_slopes": None, "alibi_rule": None, "softcap": None, "sinks": None}
    alibi = doc.get("alibi")
    if alibi is True:
        slopes = alibi_slopes(heads)
        slopes.flags.writeable = False
        fields.update(alibi_slopes=slopes, alibi_rule="paper")
    elif isinstance(alibi, (list, np.ndarray)):
        slopes = _per_head(alibi, "alibi", heads, one_for_all=False)
        big = np.flatnonzero(np.abs(slopes) > MAX_SLOPE)
        if big.size:
            raise InputError(f"alibi[{big[0]}] is {describe(float(slopes[big[0]]))}; expected a slope from "
                             f"-{MAX_SLOPE:g} to {MAX_SLOPE:g}", field=f"alibi[{big[0]}]")
        fields.update(alibi_slopes=slopes, alibi_rule="given")
    elif alibi is not None and alibi is not False:
        raise InputError(f"alibi is {describe(alibi)}; expected true (the paper's slopes) or a list of "
                         f"{plural(heads, 'slope')}, one per query head", field="alibi")
    if doc.get("softcap") is not None:
        cap = _number(doc["softcap"], "softcap", "a number > 0")
        if cap <= 0:
            raise InputError(f"softcap is {describe(doc['softcap'])}; expected a number > 0 "
                             "(capped = c · tanh(scaled / c))", field="softcap")
        fields["softcap"] = cap
    if doc.get("sinks") is not None:
        fields["sinks"] = _per_head(doc["sinks"], "sinks", heads, one_for_all=True)
    if doc.get("dtype") == "float32":
        _held_by_float32(fields["softcap"], fields["sinks"])
    return fields


def _held_by_float32(softcap: float | None, sinks: np.ndarray | None) -> None:
    """A softcap or sink that float32 turns into ∞ (or a softcap into 0) is named here, not later as
    an overflow of the output."""
    largest, tiny = float(np.finfo(np.float32).max), float(np.finfo(np.float32).smallest_subnormal)
    advice = Advice("dtype", ("float64",), "; or use {}")
    if softcap is not None and not tiny / 2 < softcap <= largest:
        held = "∞" if softcap > largest else "0"
        raise InputError(f"softcap is {number(softcap)}, which is {held} in float32; expected a number from "
                         f"{tiny:.1e} to {largest:.3g}", field="softcap", advice=advice)
    if sinks is not None:
        beyond = np.flatnonzero(np.abs(sinks) > largest)
        if beyond.size:
            i = int(beyond[0])
            raise InputError(f"sinks[{i}] is {number(float(sinks[i]))}, beyond float32's largest finite value "
                             f"{largest:.3g}", field=f"sinks[{i}]", advice=advice)


def number(x: float) -> str:
    """A given number as written: short (30, 0.5, 1e+06), every digit when it has more than 6."""
    short = f"{x:g}"
    return short if float(short) == x else repr(float(x))


def _numbers(array: np.ndarray) -> str:
    return ", ".join(f"{x:.6g}" for x in array[:8]) + (", …" if len(array) > 8 else "")


def variant_lines(problem) -> list[str]:
    """Each variant's convention in words, for the table header."""
    lines = []
    if problem.softcap is not None:
        c = number(problem.softcap)
        lines.append(f"softcap {c}: capped = {c} · tanh(scaled / {c}), after scaling, before bias, ALiBi and "
                     "masks (Gemma 2)")
    if problem.alibi_slopes is not None:
        source = ("the paper's slopes for " + plural(problem.heads, "head")
                  + ("" if problem.heads & (problem.heads - 1) == 0 else
                     " (not a power of two: the lower power's slopes, then every other one of twice that, as BLOOM)")
                  if problem.alibi_rule == "paper" else "given slopes")
        lines.append(f"ALiBi: −slope · |q_pos − k_pos| added to the logits of each head, with any bias; "
                     f"{source}: {_numbers(problem.alibi_slopes)}")
    lines += [norm.describe() for norm in (problem.q_norm, problem.k_norm) if norm is not None]  # QK-norm
    if problem.sinks is not None:
        lines.append(f"sinks: one extra logit per head in each row's softmax, then dropped (gpt-oss): rows sum "
                     f"to less than 1; a row with every key masked has weights 0; sinks {_numbers(problem.sinks)}")
    return lines


def input_keys(problem) -> dict:
    """The variants as input keys (JSON echo: read back, the same problem), and `alibi_slopes`."""
    keys: dict = {}
    if problem.alibi_slopes is not None:
        keys["alibi"] = True if problem.alibi_rule == "paper" else problem.alibi_slopes.tolist()
        keys["alibi_slopes"] = problem.alibi_slopes.tolist()
    if problem.softcap is not None:
        keys["softcap"] = problem.softcap
    if problem.sinks is not None:
        keys["sinks"] = problem.sinks.tolist()
    return keys
