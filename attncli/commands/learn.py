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


KIND_HELP = ("plain: Q, K, V given. causal: self-attention over one sentence, causal mask. multihead: X with "
             "projections and W_O. cross: X and X_kv with projections. posenc: X = E + PE (sinusoidal) with "
             f"projections. window: causal in a sliding window ({sliding_window()}). decode: one KV-cache step, "
             "the last word's query at position t over keys 0 … t. rope: causal self-attention with rotary "
             "positions (Q_rope, K_rope), d_k 4. alibi: causal with ALiBi, slopes 0.5, 0.25 and so on per head. "
             "sinks: a sink logit per head. softcap: softcap 2. gqa: grouped-query, query heads in pairs over one "
             "kv head each. padding: the last key is padding (key_mask). tiles: the tiled online softmax, m, "
             "alpha, l, O per tile (--tiles). backward: the backward pass from a given dO. A comma list "
             "(plain,causal,rope) makes a mixed set: problem k is of the k-th kind, round and round (--count "
             "defaults to the list's length).")


def exercise(
    seed: Annotated[Optional[int], typer.Option(min=0, help="Same seed, same problem (default: a random one, "
                                                           "told on stderr).", show_default=False)] = None,
    kind: Annotated[str, typer.Option(metavar="KIND[,KIND…]", help=KIND_HELP)] = "plain",
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
    count: Annotated[Optional[int], typer.Option(min=1, max=100, help="A problem set: problem k is the problem "
                                                 "of seed + k - 1, with the same options (default 1, or the "
                                                 "number of kinds listed).", show_default=False)] = None,
    tiles: Annotated[Optional[str], typer.Option(metavar="BQ,BK", help="A tiles exercise's tile size: BQ "
                                                 "queries × BK keys (default 1,2).", show_default=False)] = None,
    find_the_slip: Annotated[bool, typer.Option("--find-the-slip", help="A fully worked solution with one "
                                                "planted mistake: the learner names its stage and mistake, "
                                                "{\"slip\": {\"stage\": …, \"mistake\": …}}.")] = False,
    decimals: Annotated[int, typer.Option(min=0, max=8, help="The least decimals the problem asks a value to "
                                          "have (written into it as \"decimals\"; attn check reads it).")] = 2,
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

    attn exercise --seed 7 --kind plain,causal,rope --format markdown > mixed.md

    attn exercise --seed 7 --count 2 | attn compute -p 0   (or: jq '.problems[0]')

    The students' sheet never shows the seed; the key (--answers) ends with the command that
    reproduces it. Without --seed a random one is chosen and told on stderr.
    """
    # Imported here, for start-up: numpy, the core and the views load when a command runs, so that
    # `attn --version` and `attn --help` never import numpy.
    from attncli.commands.learn_run import run_exercise

    kinds = _kinds(kind)
    run_exercise(seed, kinds, queries, keys, dim, value_dim, heads, mask and mask.value, count or len(kinds),
                 format.value, answers, _tile_size(tiles, kinds), find_the_slip, decimals)


def _kinds(text: str) -> tuple[str, ...]:
    """`--kind plain,causal`: the kinds of a mixed set, each one of EXERCISE_KINDS."""
    kinds = tuple(part.strip() for part in text.split(","))
    for kind in kinds:
        if kind not in EXERCISE_KINDS:
            hint = did_you_mean(kind, EXERCISE_KINDS)
            raise InputError(f"{quote(kind)} is not a kind{hint}; the kinds are {', '.join(EXERCISE_KINDS)}",
                             "--kind")
    return kinds


def _tile_size(text: str | None, kinds: tuple[str, ...]) -> tuple[int, int] | None:
    """`--tiles BQ,BK`: two whole numbers ≥ 1, for a tiles exercise only."""
    if text is None:
        return None
    if "tiles" not in kinds:
        raise InputError("a tile size is for --kind tiles (the tiled online softmax)", "--tiles")
    parts = text.replace(" ", "").split(",")
    if len(parts) != 2 or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise InputError(f"the tile size is {quote(text)}; expected BQ,BK, two whole numbers of at least 1 (e.g. 1,2)", "--tiles")
    return int(parts[0]), int(parts[1])


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
