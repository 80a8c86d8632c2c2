"""`attn exercise`, `attn example` and `attn posenc`: problems to practise on and reference tables.
Their options are here; learn_run.py makes the exercises and the tables."""

import json
import math
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from attncli.choices import EXERCISE_KINDS, EXERCISE_MASKS
from attncli.commands.edge import AUTO_HELP, choices, formats
from attncli.errors import InputError, did_you_mean, quote
from attncli.rule_words import sliding_window

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


MaskKind = choices("MaskKind", EXERCISE_MASKS)
TableFormat = formats("TableFormat", "auto", "table", "json", "markdown", "latex", "csv")
ExerciseKind = choices("ExerciseKind", EXERCISE_KINDS)
SheetFormat = formats("SheetFormat", "json", "markdown", "latex")


def exercise(
    seed: Annotated[Optional[int], typer.Option(min=0, help="Same seed, same problem (default: a random one, "
                                                           "told on stderr).", show_default=False)] = None,
    kind: Annotated[ExerciseKind, typer.Option(help="plain: Q, K, V given. causal: self-attention over one "
                                               "sentence, causal mask. multihead: X with projections and W_O. "
                                               "cross: X and X_kv with projections. posenc: X = E + PE "
                                               "(sinusoidal) with projections. window: causal in a sliding "
                                               f"window ({sliding_window()}). decode: one "
                                               "KV-cache step, the last word's query at position t over keys "
                                               "0 … t. rope: causal self-attention with rotary positions (Q_rope, "
                                               "K_rope), d_k 4. alibi: causal with ALiBi, slopes 0.5, 0.25 and so on "
                                               "per head.")] = ExerciseKind.plain,
    queries: Annotated[Optional[int], typer.Option(min=1, max=64, help="Number of queries (default 1; for "
                                                   "self-attention the sentence length, --keys).",
                                                   show_default=False)] = None,
    keys: Annotated[int, typer.Option(min=1, max=64, help="Number of keys (words in the sentence).")] = 3,
    dim: Annotated[Optional[int], typer.Option(min=1, max=64, help="d_k, per head (default 2; 4 for rope).",
                                               show_default=False)] = None,
    value_dim: Annotated[Optional[int], typer.Option(min=1, max=64, help="d_v per head (default: --dim).",
                                                     show_default=False)] = None,
    heads: Annotated[Optional[int], typer.Option(min=1, max=16, help="Number of heads (default 2 for "
                                                 "multihead, else 1).", show_default=False)] = None,
    mask: Annotated[Optional[MaskKind], typer.Option(help="causal (self-attention), or random (every query "
                                                     "keeps a key).", show_default=False)] = None,
    count: Annotated[int, typer.Option(min=1, max=100, help="A problem set: problem k is the problem of "
                                       "seed + k - 1, with the same options.")] = 1,
    format: Annotated[SheetFormat, typer.Option("--format", "-f", help="json: attn compute input (with "
                                                "--count, {\"problems\": [...]}). markdown, latex: a worksheet "
                                                "with blank answer grids.")] = SheetFormat.json,
    answers: Annotated[bool, typer.Option("--answers", help="The answer key: every stage worked out, and "
                                          "the command that reproduces the problem.")] = False,
) -> None:
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

    run_exercise(seed, kind.value, queries, keys, dim, value_dim, heads, mask and mask.value, count, format.value,
                 answers)


def example(
    name: Annotated[Optional[str], typer.Argument(help="An example's name; none lists them.",
                                                   show_default=False)] = None,
) -> None:
    """List the bundled examples, or print one as JSON.

    attn example scooter | attn compute
    """
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


def posenc(
    positions: Annotated[int, typer.Option(min=1, max=100_000, help="Number of positions (rows).")] = 8,
    dim: Annotated[int, typer.Option(min=2, max=4096, help="Encoding width D (even).")] = 8,
    base: Annotated[float, typer.Option(min=1.0, help="The wavelength base.")] = 10000.0,
    format: Annotated[TableFormat, typer.Option("--format", "-f", help=f"{AUTO_HELP}; csv, markdown or "
                                                "latex for a write-up.")
                      ] = TableFormat.auto,
    precision: Annotated[int, typer.Option(min=0, max=17, help="Decimals in the table.")] = 4,
) -> None:
    """Sinusoidal positional encodings: PE(pos, 2i) = sin(pos / 10000^(2i/D)), PE(pos, 2i+1) = cos(…).

    attn posenc --positions 4 --dim 6
    """
    if not math.isfinite(base):  # typer reads 1e309 as inf, and nan passes min=1.0
        raise InputError(f"base is {base}; expected a finite number ≥ 1", "--base")
    if dim % 2:
        raise InputError(f"dim is {dim}; the encoding pairs sin and cos columns, so D must be even", "--dim")
    if positions * dim > 10_000_000:
        raise InputError(f"{positions} positions × {dim} columns is {positions * dim:,} values; at most "
                         "10,000,000", "--positions")
    # Imported here, for start-up, as in exercise.
    from attncli.commands.learn_run import run_posenc

    run_posenc(positions, dim, base, format.value, precision)
