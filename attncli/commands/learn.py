"""`attn exercise`, `attn example` and `attn posenc`: problems to practise on and reference tables.
Their options are here; learn_run.py makes the exercises and the tables."""

import json
import math
import sys
from pathlib import Path

from attncli.choices import EXERCISE_KINDS, EXERCISE_MASKS
from attncli.commands import spec
from attncli.commands.edge import AUTO_HELP, formats
from attncli.commands.spec import Option
from attncli.errors import InputError, did_you_mean, quote
from attncli.rule_words import sliding_window

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

EXERCISE: tuple[Option, ...] = (
    Option("seed", "Same seed, same problem (default: a random one, told on stderr).", type=int, low=0),
    Option("kind", "plain: Q, K, V given. causal: self-attention over one sentence, causal mask. multihead: X "
           "with projections and W_O. cross: X and X_kv with projections. posenc: X = E + PE (sinusoidal) with "
           f"projections. window: causal in a sliding window ({sliding_window()}). decode: one KV-cache step, "
           "the last word's query at position t over keys 0 … t. rope: causal self-attention with rotary "
           "positions (Q_rope, K_rope), d_k 4. alibi: causal with ALiBi, slopes 0.5, 0.25 and so on per head.",
           choices=EXERCISE_KINDS, default="plain"),
    Option("queries", "Number of queries (default 1; for self-attention the sentence length, --keys).",
           type=int, low=1, high=64),
    Option("keys", "Number of keys (words in the sentence).", type=int, low=1, high=64, default=3),
    Option("dim", "d_k, per head (default 2; 4 for rope).", type=int, low=1, high=64),
    Option("value_dim", "d_v per head (default: --dim).", type=int, low=1, high=64),
    Option("heads", "Number of heads (default 2 for multihead, else 1).", type=int, low=1, high=16),
    Option("mask", "causal (self-attention), or random (every query keeps a key).", choices=EXERCISE_MASKS),
    Option("count", "A problem set: problem k is the problem of seed + k - 1, with the same options.",
           type=int, low=1, high=100, default=1),
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
ExerciseKind, MaskKind, SheetFormat = (spec.find(EXERCISE, name).enum for name in ("kind", "mask", "format"))
TableFormat = spec.find(POSENC, "format").enum


@spec.command(EXERCISE)
def exercise(**given) -> None:
    """Print a fresh practice problem (small integers and halves): attn compute input, or a worksheet.

    attn exercise --seed 7 > problem.json && attn compute problem.json

    attn exercise --seed 7 --answers > key.json && attn check answers.json key.json

    attn exercise --seed 7 --count 5 --kind causal --format markdown > sheet.md

    The students' sheet never shows the seed; the key (--answers) ends with the command that
    reproduces it. Without --seed a random one is chosen and told on stderr.
    """
    # Imported here, for start-up: numpy, the core and the views load when a command runs, so that
    # `attn --version` and `attn --help` never import numpy.
    from attncli.commands.learn_run import run_exercise

    o = spec.given(EXERCISE, given)
    run_exercise(o.seed, o.kind, o.queries, o.keys, o.dim, o.value_dim, o.heads, o.mask, o.count, o.format,
                 o.answers)


@spec.command(EXAMPLE)
def example(**given) -> None:
    """List the bundled examples, or print one as JSON.

    attn example scooter | attn compute
    """
    name = spec.given(EXAMPLE, given).name
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
def posenc(**given) -> None:
    """Sinusoidal positional encodings: PE(pos, 2i) = sin(pos / 10000^(2i/D)), PE(pos, 2i+1) = cos(…).

    attn posenc --positions 4 --dim 6
    """
    o = spec.given(POSENC, given)
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
