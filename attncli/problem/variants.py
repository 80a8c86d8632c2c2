"""The logit variants, one record each in one registry (`VARIANTS`) that every path reads: the
input key and its reader, the table header's line, the JSON echo, the float32 check, the option of
`attn compute` and the cost row.

    softcap  c > 0: the `capped` stage, c · tanh(scaled / c), before bias and masks (Gemma 2)
    alibi    true (the paper's slopes for the query heads) or one slope per query head;
             masks.bias adds −slope_h · |q_pos − k_pos| to the logits (after scaling and softcap)
    sinks    one logit per query head (or one number for all): the softmax runs over the keys and
             the sink, which is then dropped, so rows sum to less than 1 (gpt-oss)

A variant's value is a `Problem` attribute of its name (`problem.softcap`; ALiBi sets two,
`alibi_slopes` and `alibi_rule`), None when the problem does not have it. What it does to the
numbers is its stage's (attncli/stages/table.py: `capped` reads problem.softcap), or the stage it
joins (`masked` adds ALiBi, `weights` a sink), with that stage's vjp and hand step.

No numpy here: `attn compute` makes its options from this registry at start-up, before numpy loads.
A reader gets what needs numpy from its `reading` argument (attncli/problem/variant_input.py's
`Reading`: the document, the query heads, a number, one value per head).

Adding a variant: its `Variant` in VARIANTS, and its stage (with its vjp and hand step) in the stage
table; the schema's key, the reader, the header, the JSON and .npz echo, the float32 check, the
option and the cost follow from the record (tests/test_variants.py adds a throwaway `temperature`).

Every message starts with the key it is about (`sinks[1] is "a"; expected …`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

from attncli.base.errors import Advice, InputError, plural

MAX_SLOPE = 1e6  # |slope| · |q_pos − k_pos| ≤ 2e22 (positions ≤ 2^53): never overflows a finite logit (stages._check_masked)
FLOAT32_MAX = float.fromhex("0x1.fffffep+127")  # numpy.finfo(float32).max, 3.4e+38
FLOAT32_TINY = float.fromhex("0x1p-149")  # numpy.finfo(float32).smallest_subnormal, 1.4e-45


class Flag(NamedTuple):
    """A variant's option of `attn compute` (attncli/commands/compute_options.py makes it): `--NAME`
    with its help and placeholder. `part`: which part of the key it gives, when several options make
    the key together (the commands join them: --alibi and --alibi-slopes). `switch`: an on/off flag."""
    help: str
    metavar: str | None = None
    name: str | None = None  # the option's name when it is not the variant's (alibi_slopes)
    part: str | None = None
    switch: bool = False


@dataclass(frozen=True, eq=False)
class Variant:
    """One logit variant. See the module's docstring for the paths that read each field."""

    name: str  # its input key, its Problem attribute (problem.softcap) and its option (--softcap)
    about: str  # what the key holds: the schema's words
    read: Callable  # (the key's value, reading) -> the attribute's value; a tuple of `attributes`' when several
    line: Callable  # problem -> its convention in words: the table header, the worksheets
    options: tuple[Flag, ...] = ()  # its options of attn compute
    attributes: tuple[str, ...] = ()  # the Problem attributes `read` sets, the first None without it; () = (name,)
    echo: Callable | None = None  # problem -> the input keys that read back to it; None: {name: its value}
    echoes: tuple[tuple[str, str], ...] = ()  # (key, about): keys written beside it, derived from it (alibi_slopes)
    float32: Callable | None = None  # its value -> None, or InputError when float32 cannot hold it
    stage: str | None = None  # the stage it brings (capped) or joins (masked, weights)
    flops: int = 0  # --cost: FLOPs per score cell it adds to that stage
    term: tuple[str, str] | None = None  # what it adds to the logits in `masked`'s formulas: (plain, LaTeX)
    template: Callable | None = None  # problem -> the stage templates' fields it fills; None: {name: its number}

    @property
    def fields(self) -> tuple[str, ...]:
        return self.attributes or (self.name,)

    def keys(self) -> tuple[str, ...]:
        """Its input key and the keys written beside it: any of them given, the reader reads."""
        return (self.name,) + tuple(key for key, _ in self.echoes)

    def value(self, problem):
        return getattr(problem, self.fields[0])

    def present(self, problem) -> bool:
        return self.value(problem) is not None

    def read_fields(self, doc: dict, reading) -> dict:
        """The Problem attributes from a document: its reader's, when one of its keys is given."""
        if all(doc.get(key) is None for key in self.keys()):
            return {}
        found = self.read(doc.get(self.name), reading)
        return dict(zip(self.fields, found if len(self.fields) > 1 else (found,)))

    def input_keys(self, problem) -> dict:
        if not self.present(problem):
            return {}
        if self.echo is not None:
            return self.echo(problem)
        value = self.value(problem)
        return {self.name: value.tolist() if hasattr(value, "tolist") else value}

    def words(self, problem) -> dict[str, str]:
        """Its fields of the stage templates ($softcap), empty strings without it."""
        if self.template is not None:
            return self.template(problem)
        value = self.value(problem)
        return {self.name: number(value) if isinstance(value, (int, float)) else ""}


def number(x: float) -> str:
    """A given number as written: short (30, 0.5, 1e+06), every digit when it has more than 6."""
    short = f"{x:g}"
    return short if float(short) == x else repr(float(x))


def _numbers(values) -> str:
    return ", ".join(f"{x:.6g}" for x in values[:8]) + (", …" if len(values) > 8 else "")


FLOAT64 = Advice("dtype", ("float64",), "; or use {}")


# softcap ------------------------------------------------------------------------------------------

def _read_softcap(value, reading) -> float:
    return reading.number(value, "softcap", "a number > 0", above=0.0,
                          why=" (capped = c · tanh(scaled / c))")


def _softcap_float32(cap: float) -> None:
    """A softcap that float32 turns into ∞ or 0 is named here, not later as an overflow of the output."""
    if not FLOAT32_TINY / 2 < cap <= FLOAT32_MAX:
        held = "∞" if cap > FLOAT32_MAX else "0"
        raise InputError(f"softcap is {number(cap)}, which is {held} in float32; expected a number from "
                         f"{FLOAT32_TINY:.1e} to {FLOAT32_MAX:.3g}", field="softcap", advice=FLOAT64)


def _softcap_line(problem) -> str:
    c = number(problem.softcap)
    return f"softcap {c}: capped = {c} · tanh(scaled / {c}), after scaling, before bias, ALiBi and masks (Gemma 2)"


SOFTCAP = Variant(
    "softcap", "c > 0: capped = c · tanh(scaled / c)", _read_softcap, _softcap_line,
    options=(Flag("Softcap c > 0: capped = c·tanh(scaled/c), after scaling, before bias, ALiBi and masks "
                  "(Gemma 2).", "C"),),
    float32=_softcap_float32, stage="capped", flops=3)  # ÷ c, tanh, × c


# ALiBi --------------------------------------------------------------------------------------------

def paper_slopes(heads: int) -> list[float]:
    """Press et al.'s `get_slopes` (as BLOOM's `_get_alibi_slopes`): 2^(−8k/n), k = 1…n, for n a
    power of two; otherwise those of the closest lower power of two n, then every other slope of
    2n (the odd k of 2^(−8k/2n)), until there are `heads`. Each 2^e correctly rounded (the
    exponents −8k/n are exact binary fractions): BLOOM's torch.pow(base, k) from a rounded base is
    up to 14 units in the last place away for 32 heads (agreeing to 4e-15)."""
    n = 1 << (heads.bit_length() - 1)  # the largest power of two ≤ heads
    exponents = [-8.0 * k / n for k in range(1, n + 1)]
    exponents += [-8.0 * k / (2 * n) for k in range(1, 2 * (heads - n), 2)]
    return [2.0 ** e for e in exponents]


def _alibi(value, reading, field: str):
    """(slopes, rule) from one key's value: true, a list of slopes, or false/absent (None, None)."""
    if value is True:
        return reading.per_head(paper_slopes(reading.heads), field), "paper"
    if isinstance(value, list) or hasattr(value, "tolist"):  # a list, or an .npz's array
        slopes = reading.per_head(value, field)
        big = [i for i, slope in enumerate(slopes.tolist()) if abs(slope) > MAX_SLOPE]
        if big:
            raise InputError(f"{field}[{big[0]}] is {reading.describe(float(slopes[big[0]]))}; expected a slope "
                             f"from -{MAX_SLOPE:g} to {MAX_SLOPE:g}", field=f"{field}[{big[0]}]")
        return slopes, "given"
    if value is not None and value is not False:
        raise InputError(f"{field} is {reading.describe(value)}; expected true (the paper's slopes) or a list of "
                         f"{plural(reading.heads, 'slope')}, one per query head", field=field)
    return None, None


def _read_alibi(value, reading):
    """(alibi_slopes, alibi_rule). `alibi_slopes` (written beside `alibi` as the slopes used) given
    alone means "use these slopes"; beside `alibi` it must be what `alibi` gives, to the decimals
    it was written with."""
    written = reading.doc.get("alibi_slopes")
    if written is None:
        return _alibi(value, reading, "alibi")
    if not (isinstance(written, list) or hasattr(written, "tolist")):  # slopes, not alibi's true/false
        raise InputError(f"alibi_slopes is {reading.describe(written)}; expected a list of "
                         f"{plural(reading.heads, 'slope')}, one per query head (alibi: true gives the paper's)",
                         field="alibi_slopes")
    given = _alibi(written, reading, "alibi_slopes")
    if value is None:
        return given
    if value is False:
        raise InputError("alibi is false but alibi_slopes is given: drop alibi_slopes, or alibi to use "
                         "these slopes", field="alibi_slopes")
    slopes, rule = _alibi(value, reading, "alibi")
    found, used = given[0].tolist(), slopes.tolist()
    written = written.tolist() if hasattr(written, "tolist") else written
    places = [reading.decimals(x) for x in written] if isinstance(written, list) else [17] * len(used)
    if not all(abs(f - u) <= 0.5 * 10.0 ** -p * (1 + 1e-9) + 1e-12 * abs(u) for f, u, p in zip(found, used, places)):
        what = "the paper's slopes" if value is True else "its slopes"
        raise InputError(f"alibi_slopes [{_numbers(found)}] contradicts alibi ({what}: [{_numbers(used)}]); keep "
                         "alibi, or drop it and give the slopes as alibi_slopes", field="alibi_slopes")
    return slopes, rule


def _alibi_line(problem) -> str:
    heads = problem.heads
    source = ("the paper's slopes for " + plural(heads, "head")
              + ("" if heads & (heads - 1) == 0 else
                 " (not a power of two: the lower power's slopes, then every other one of twice that, as BLOOM)")
              if problem.alibi_rule == "paper" else "given slopes")
    return (f"ALiBi: −slope · |q_pos − k_pos| added to the logits of each head, with any bias; "
            f"{source}: {_numbers(problem.alibi_slopes.tolist())}")


def _alibi_echo(problem) -> dict:
    slopes = problem.alibi_slopes.tolist()
    return {"alibi": True if problem.alibi_rule == "paper" else slopes, "alibi_slopes": slopes}


ALIBI = Variant(
    "alibi", "true (the paper's slopes) or one slope per query head", _read_alibi, _alibi_line,
    options=(Flag("ALiBi with the paper's slopes for the query heads: 2^(−8k/n), k = 1 to n (not a power of "
                  "two: as BLOOM); adds −slope·|q_pos − k_pos| after scaling, with any bias.",
                  part="paper", switch=True),
             Flag("ALiBi with these slopes, one per query head: 0.5,0.25 (instead of --alibi's).", "SLOPES",
                  name="alibi_slopes", part="slopes")),
    attributes=("alibi_slopes", "alibi_rule"), echo=_alibi_echo,
    echoes=(("alibi_slopes", "the slopes ALiBi used; given alone: use these slopes"),),
    stage="masked", flops=4, term=(" + ALiBi", r" + \text{ALiBi}"))  # −slope·|q − k|: −, |·|, ×, +


# sinks --------------------------------------------------------------------------------------------

def _read_sinks(value, reading):
    return reading.per_head(value, "sinks", one_for_all=True)


def _sinks_float32(sinks) -> None:
    """A sink that float32 turns into ∞ is named here, not later as an overflow of the output."""
    beyond = [i for i, sink in enumerate(sinks.tolist()) if abs(sink) > FLOAT32_MAX]
    if beyond:
        i = beyond[0]
        raise InputError(f"sinks[{i}] is {number(float(sinks[i]))}, beyond float32's largest finite value "
                         f"{FLOAT32_MAX:.3g}", field=f"sinks[{i}]", advice=FLOAT64)


def _sinks_line(problem) -> str:
    return (f"sinks: one extra logit per head in each row's softmax, then dropped (gpt-oss): rows sum to less "
            f"than 1; a row with every key masked has weights 0; sinks {_numbers(problem.sinks.tolist())}")


def _sinks_template(problem) -> dict:
    sink = problem.sinks is not None
    return {"sink": " and the head's sink logit (then dropped: rows sum to less than 1)" * sink,
            "sink_tex": r",\ \text{sink}" * sink}


SINKS = Variant(
    "sinks", "one extra logit per query head", _read_sinks, _sinks_line,
    options=(Flag("Attention sinks (gpt-oss): one logit per query head, or one for all: 0.5 or 0.5,-1; each "
                  "joins its row's softmax and is dropped, so rows sum to less than 1.", "LOGITS"),),
    float32=_sinks_float32, stage="weights", template=_sinks_template)  # the sink's extra logit is not counted


# The registry, in the order the header says them (the order of their stages).
VARIANTS: tuple[Variant, ...] = (SOFTCAP, ALIBI, SINKS)


def attributes() -> tuple[str, ...]:
    """Every Problem attribute a variant sets (read at each call: a variant registered later)."""
    return tuple(name for variant in VARIANTS for name in variant.fields)


def replaced(key: str) -> tuple[str, ...]:
    """The keys an option setting `key` replaces in a file: the variant's own and those written
    beside it (--alibi replaces the file's alibi and alibi_slopes)."""
    return next((variant.keys() for variant in VARIANTS if key in variant.keys()), (key,))


def read(doc: dict, reading) -> dict:
    """The `Problem.variants` of a document: each variant's attributes (None without it), then the
    float32 check of those it has when the document asks for float32."""
    found = dict.fromkeys(attributes())
    for variant in VARIANTS:
        found.update(variant.read_fields(doc, reading))
    if doc.get("dtype") == "float32":
        for variant in VARIANTS:
            value = found[variant.fields[0]]
            if variant.float32 is not None and value is not None:
                variant.float32(value)
    return found


def variant_lines(problem) -> list[str]:
    """QK-norm's and each variant's convention in words, in the order of their stages, for the
    table header and the worksheets."""
    norms = [norm.describe() for norm in (problem.q_norm, problem.k_norm) if norm is not None]
    return norms + [variant.line(problem) for variant in VARIANTS if variant.present(problem)]


def input_keys(problem) -> dict:
    """The variants as input keys (the JSON and .npz echo: read back, the same problem)."""
    keys: dict = {}
    for variant in VARIANTS:
        keys.update(variant.input_keys(problem))
    return keys


def joining(problem, stage: str) -> tuple[Variant, ...]:
    """The problem's variants that join stage `stage` (ALiBi joins `masked`)."""
    return tuple(variant for variant in VARIANTS if variant.stage == stage and variant.present(problem))


def template_fields(problem) -> dict[str, str]:
    """Every variant's fields of the stage templates ($softcap, $sink), and `$bias`'s terms they
    add to the logits (" + ALiBi")."""
    found: dict[str, str] = {}
    for variant in VARIANTS:
        found.update(variant.words(problem))
    terms = [variant.term for variant in joining(problem, "masked") if variant.term is not None]
    found["terms"] = "".join(plain for plain, _ in terms)
    found["terms_tex"] = "".join(tex for _, tex in terms)
    return found
