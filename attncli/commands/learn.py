"""`attn exercise`, `attn example` and `attn posenc`: problems to practise on and reference tables."""

import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Optional

import typer

from attncli.choices import EXERCISE_KINDS, EXERCISE_MASKS
from attncli.commands.edge import AUTO_HELP, auto_is_table, choices, formats
from attncli.errors import InputError, did_you_mean, quote

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


MaskKind = choices("MaskKind", EXERCISE_MASKS)
TableFormat = formats("TableFormat", "auto", "table", "json", "markdown", "latex", "csv")
ExerciseKind = choices("ExerciseKind", EXERCISE_KINDS)
SheetFormat = formats("SheetFormat", "json", "markdown", "latex")


def pretty(doc: dict) -> str:
    """JSON with one key per line and each matrix row on one line: strict, and readable."""
    from attncli.render.json import dumps

    def value(v, indent: str) -> str:
        if isinstance(v, list) and v and isinstance(v[0], list):
            inner = ",\n".join(indent + "  " + value(row, indent + "  ") for row in v)
            return "[\n" + inner + "\n" + indent + "]"
        if isinstance(v, list) and v and isinstance(v[0], dict):
            inner = ",\n".join(indent + "  " + value(item, indent + "  ") for item in v)
            return "[\n" + inner + "\n" + indent + "]"
        if isinstance(v, dict):
            inner = ",\n".join(f"{indent}  {dumps(k)}: {value(x, indent + '  ')}" for k, x in v.items())
            return "{\n" + inner + "\n" + indent + "}"
        return dumps(v)
    return value(doc, "") + "\n"


def exercise(
    seed: Annotated[Optional[int], typer.Option(min=0, help="Same seed, same problem (default: a random one, "
                                                           "told on stderr).", show_default=False)] = None,
    kind: Annotated[ExerciseKind, typer.Option(help="plain: Q, K, V given. causal: self-attention over one "
                                               "sentence, causal mask. multihead: X with projections and W_O. "
                                               "cross: X and X_kv with projections. posenc: X = E + PE "
                                               "(sinusoidal) with projections. window: causal in a sliding "
                                               "window [W-1, 0] (Hugging Face sliding_window = W). decode: one "
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
    import random

    from attncli.exercise import ExerciseError, Options, problem_set

    chosen = seed is None
    if chosen:
        seed = random.SystemRandom().randrange(1, 1_000_000)
    heads = heads or (2 if kind == ExerciseKind.multihead else 1)
    dim = dim or (4 if kind == ExerciseKind.rope else 2)
    options = Options(seed, kind.value, queries, keys, dim, value_dim, heads, mask and mask.value)
    try:
        problems = problem_set(options, count)
    except ExerciseError as error:  # name the option at the edge: the core speaks of queries, keys, dim
        raise error.at(f"--{error.field.replace('_', '-')}") from None
    problems = [replace(p, command=command_line(p.options)) for p in problems]
    if chosen and not answers:  # the teacher needs the seed for the key; the sheet must not show it
        sys.stderr.write(f"answer key: {problems[0].command} --answers"
                         + (f" --count {count}" if count > 1 else "") + "\n")
    if count > 1:
        problems = [_titled(p, f"Exercise {k + 1}") for k, p in enumerate(problems)]
    if format == SheetFormat.json:
        docs = [_key(p) if answers else p.doc for p in problems]
        sys.stdout.write(pretty(docs[0] if count == 1 else {"problems": docs}))
        return
    from attncli.attention import attend
    from attncli.problem import build_problem
    from attncli.render import worksheet

    items = [(p, attend(build_problem(p.doc))) for p in problems]
    sys.stdout.write((worksheet.markdown if format == SheetFormat.markdown else worksheet.latex)(items, answers))


def command_line(options) -> str:
    """`attn exercise …` naming every option, so that changed defaults cannot change it."""
    o = options
    parts = [f"attn exercise --seed {o.seed} --kind {o.kind}", f"--queries {o.lq}", f"--keys {o.keys}",
             f"--dim {o.dim}", f"--value-dim {o.value_dim or o.dim}", f"--heads {o.heads}"]
    if o.mask:
        parts.append(f"--mask {o.mask}")
    return " ".join(parts)


def _titled(problem, title: str):
    return replace(problem, doc=problem.doc | {"title": title})


def _key(problem) -> dict:
    """`attn compute`'s full JSON of the problem, its description ending with the reproduce line."""
    from attncli.attention import attend
    from attncli.problem import build_problem
    from attncli.trace import to_dict

    doc = problem.doc | {"description": f"{problem.doc['description']}; reproduce with: {problem.command}"}
    return to_dict(attend(build_problem(doc)))


def example(
    name: Annotated[Optional[str], typer.Argument(help="An example's name; none lists them.",
                                                   show_default=False)] = None,
) -> None:
    """List the bundled examples, or print one as JSON.

    attn example scooter | attn compute
    """
    import json

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
    from attncli.posenc import positional_encoding

    pe = positional_encoding(positions, dim, base)
    if format == TableFormat.json or (format == TableFormat.auto and not auto_is_table()):
        from attncli.render.json import dumps

        sys.stdout.write(dumps({"positions": positions, "dim": dim, "base": base,
                                "formula": "PE(pos, 2i) = sin(pos / base^(2i/D)); PE(pos, 2i+1) = cos(pos / base^(2i/D))",
                                "encoding": pe.tolist()}) + "\n")
        return
    formula = (f"PE(pos, 2i) = sin(pos / {base:g}^(2i/{dim})), "
               f"PE(pos, 2i+1) = cos(pos / {base:g}^(2i/{dim}))")
    rows = [str(p) for p in range(positions)]
    columns = [f"{'sin' if j % 2 == 0 else 'cos'} {j}" for j in range(dim)]
    if format in (TableFormat.csv, TableFormat.markdown, TableFormat.latex):
        from attncli.render import export

        if format == TableFormat.csv:
            sys.stdout.write(export.csv_table(rows, columns, [(None, pe)], first="pos"))
        elif format == TableFormat.markdown:
            sys.stdout.write(f"sinusoidal positional encoding, base {base:g}: {formula}  \n\n"
                             + export.markdown_table("PE", None, pe, rows, columns, precision) + "\n")
        else:
            tex = (rf"PE_{{(pos, 2i)}} = \sin(pos / {base:g}^{{2i/{dim}}}),\ "
                   rf"PE_{{(pos, 2i+1)}} = \cos(pos / {base:g}^{{2i/{dim}}})")
            sys.stdout.write(f"% attn posenc: sinusoidal positional encoding, base {base:g}\n\n"
                             + export.latex_table("PE", tex, pe, rows, columns, precision) + "\n")
        return
    from rich.text import Text

    from attncli.render.tables import make_console, matrix_tables

    console = make_console()
    width = console.width if sys.stdout.isatty() else None
    console.print(Text(f"sinusoidal positional encoding, base {base:g}: {formula}"))
    # The title is the name only: an elided table adds the shape once ("PE (100×8, middle elided…)").
    for renderable in matrix_tables("PE", pe, rows, columns, precision, width):
        console.print(renderable)
