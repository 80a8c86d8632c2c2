"""`attn exercise`, `attn example` and `attn posenc`: problems to practise on and reference tables.
Their options are here; learn_run.py makes the exercises and the tables."""

import json
import math
import sys
from pathlib import Path

from attncli.base.choices import EXERCISE_MASKS
from attncli.base.errors import InputError, did_you_mean, quote
from attncli.commands import spec
from attncli.commands.edge import AUTO_HELP, formats
from attncli.commands.spec import Option
from attncli.marking import kinds

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def kind_help() -> str:
    """`--kind`'s help: each kind's sentence (with --tiles for a kind that takes it), then the mixed set."""
    return " ".join(f"{kind.name}: {kind.help.rstrip('.') + ' (--tiles).' if kind.tiles else kind.help}"
                    for kind in kinds.KINDS.values()) + " A comma list is a set, as --set."


EXERCISE: tuple[Option, ...] = (
    Option("seed", "Same seed, same problem (default: a random one, told on stderr).", type=int, low=0),
    Option("kind", kind_help(), metavar="KIND[,KIND…]", default="plain"),
    Option("set", "A homework set: one problem per kind listed (plain,causal,multihead,window,backward), titled "
           "Problem 1, Problem 2 …, each with its kind's own sizes (keys, d_k, heads) unless --keys, --dim or "
           "--heads is given; --count more goes round the list again.", metavar="KIND,KIND…"),
    Option("queries", "Number of queries (default 1; for self-attention the sentence length, --keys).",
           type=int, low=1, high=64),
    Option("keys", f"Number of keys (words in the sentence; default 3, {kinds.defaults('keys', 3)}).", type=int,
           low=1, high=64),
    Option("dim", f"d_k, per head (default 2; {kinds.defaults('dim', 2)}).", type=int, low=1, high=64),
    Option("value_dim", "d_v per head (default: --dim).", type=int, low=1, high=64),
    Option("heads", f"Number of heads (default {kinds.defaults('heads', 1)}, else 1).", type=int, low=1, high=16),
    Option("mask", "causal (self-attention), or random (every query keeps a key).", choices=EXERCISE_MASKS),
    Option("count", "A problem set: problem k is the problem of seed + k - 1, with the same options (default 1, "
           "or the number of kinds listed).", type=int, low=1, high=100),
    Option("tiles", "A tiles exercise's tile size: BQ queries × BK keys (default 1,2).", metavar="BQ,BK"),
    Option("find_the_slip", "A fully worked solution with one planted mistake: the learner names its stage and "
           "mistake, {\"slip\": {\"stage\": …, \"mistake\": …}}.", type=bool),
    Option("decimals", "The least decimals the problem asks a value to have (written into it as \"decimals\"; "
           "attn check reads it).", type=int, low=0, high=8, default=2),
    Option("format", "json: attn compute input (with --count, {\"problems\": [...]}). markdown, latex: a "
           "worksheet with blank answer grids.", flags=("--format", "-f"), default="json",
           choices=formats("SheetFormat", "json", "markdown", "latex")),
    Option("answers", "The answer key: every stage worked out, and the command that reproduces the problem.",
           type=bool),
)
EXAMPLE: tuple[Option, ...] = (
    Option("name", "An example's name; none lists them.", argument=True),
)
POSENC: tuple[Option, ...] = (
    Option("positions", "Number of positions (rows).", type=int, low=1, high=100_000, default=8),
    Option("dim", "Encoding width D (even).", type=int, low=2, high=4096, default=8),
    Option("base", "The wavelength base.", type=float, low=1.0, default=10000.0),
    Option("format", f"{AUTO_HELP}; csv, markdown or latex for a write-up.", flags=("--format", "-f"),
           default="auto", choices=formats("TableFormat", "auto", "table", "json", "markdown", "latex", "csv")),
    Option("precision", "Decimals in the table.", type=int, low=0, high=17, default=4),
)
# The choice options' Enums (Typer's choices), made from the core's tuples by the tables.
MaskKind, SheetFormat = (spec.find(EXERCISE, name).enum for name in ("mask", "format"))
TableFormat = spec.find(POSENC, "format").enum


@spec.command(EXERCISE)
def exercise(**values) -> None:
    """Print a fresh practice problem (small integers and halves): attn compute input, or a worksheet.

    attn exercise --seed 7 > problem.json && attn compute problem.json

    attn exercise --seed 7 --answers > key.json && attn check answers.json key.json

    attn exercise --seed 7 --count 5 --kind causal --format markdown > sheet.md

    attn exercise --seed 7 --set plain,causal,multihead,window,backward --format latex > homework.tex

    attn exercise --seed 7 --count 2 > set.json && jq '.problems[0]' set.json | attn compute

    The students' sheet never shows the seed; the key (--answers) ends with the command that
    reproduces it. Without --seed a random one is chosen and told on stderr.
    """
    # Imported here, for start-up: numpy, the core and the views load when a command runs, so that
    # `attn --version` and `attn --help` never import numpy.
    from attncli.commands.learn_run import run_exercise

    o = spec.chosen(EXERCISE, values)
    if o.set is not None and o.kind != "plain":
        raise InputError("--kind and --set both list kinds; give one (a set: --set plain,causal)", "--set")
    chosen = _kinds(o.kind if o.set is None else o.set, "--kind" if o.set is None else "--set")
    run_exercise(o.seed, chosen, o.queries, o.keys, o.dim, o.value_dim, o.heads, o.mask, o.count or len(chosen),
                 o.format, o.answers, _tile_size(o.tiles, chosen), o.find_the_slip, o.decimals)


def _kinds(text: str, flag: str) -> tuple[str, ...]:
    """`--set plain,causal` (or `--kind`): the kinds of a set, each one of the registry's
    (attncli/marking/kinds.py)."""
    chosen = tuple(part.strip() for part in text.split(","))
    for kind in chosen:
        if kind not in kinds.KINDS:
            hint = did_you_mean(kind, kinds.names())
            raise InputError(f"{quote(kind)} is not a kind{hint}; the kinds are {', '.join(kinds.KINDS)}", flag)
    return chosen


def _tile_size(text: str | None, chosen: tuple[str, ...]) -> tuple[int, int] | None:
    """`--tiles BQ,BK`: two whole numbers ≥ 1, for a kind that takes it (tiles) only."""
    if text is None:
        return None
    tiled = [name for name, kind in kinds.KINDS.items() if kind.tiles]
    if not set(tiled) & set(chosen):
        raise InputError(f"a tile size is for --kind {' or '.join(tiled)} (the tiled online softmax)", "--tiles")
    parts = text.replace(" ", "").split(",")
    if len(parts) != 2 or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise InputError(f"the tile size is {quote(text)}; expected BQ,BK, two whole numbers of at least 1 (e.g. 1,2)", "--tiles")
    return int(parts[0]), int(parts[1])


@spec.command(EXAMPLE)
def example(**values) -> None:
    """List the bundled examples, or print one as JSON.

    attn example scooter | attn compute
    """
    name = spec.chosen(EXAMPLE, values).name
    found = {path.stem: path for path in sorted(EXAMPLES.glob("*.json"))}
    if name is None:
        width = max(len(n) for n in found)
        for stem, path in found.items():
            title = json.loads(path.read_text(encoding="utf-8")).get("title", "")
            print(f"{stem:<{width}}  {title}")
        return
    if name not in found:
        hint = did_you_mean(name, found)
        raise InputError(f'no example {quote(name)}{hint}; the examples are {", ".join(found)}')
    sys.stdout.write(found[name].read_text(encoding="utf-8"))


@spec.command(POSENC)
def posenc(**values) -> None:
    """Sinusoidal positional encodings: PE(pos, 2i) = sin(pos / 10000^(2i/D)), PE(pos, 2i+1) = cos(…).

    attn posenc --positions 4 --dim 6
    """
    o = spec.chosen(POSENC, values)
    positions, dim, base = o.positions, o.dim, o.base
    if not math.isfinite(base):  # typer reads 1e309 as inf, and nan passes min=1.0
        raise InputError(f"base is {base}; expected a finite number ≥ 1", "--base")
    if dim % 2:
        raise InputError(f"dim is {dim}; the encoding pairs sin and cos columns, so D must be even", "--dim")
    if positions * dim > 10_000_000:
        raise InputError(f"{positions} positions × {dim} columns is {positions * dim:,} values; at most "
                         "10,000,000", "--positions")
    # Imported here, for start-up, as in exercise.
    from attncli.commands.learn_run import run_posenc

    run_posenc(positions, dim, base, o.format, o.precision)
