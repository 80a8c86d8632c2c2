"""The work of `attn exercise` and `attn posenc`, once commands/learn.py has read their options.
This module loads numpy and the core: learn.py imports it only when one of them runs."""

import random
import sys
from dataclasses import replace

from attncli.commands.edge import auto_is_table
from attncli.compute import attention
from attncli.compute.tiles import attend_tiles
from attncli.document.readback import add_tiles
from attncli.document.reading import build_problem
from attncli.document.writing import to_dict
from attncli.marking.exercise import build, rounding_note
from attncli.marking.kinds import DECIMALS, DEFAULT_TILES, KINDS, ExerciseError, Options
from attncli.problem.posenc import positional_encoding
from attncli.render import export, worksheet
from attncli.render.json import dumps


def run_exercise(seed: int | None, kinds: tuple[str, ...], queries: int | None, keys: int | None, dim: int | None,
                 value_dim: int | None, heads: int | None, mask: str | None, count: int, format: str,
                 answers: bool, tiles: tuple[int, int] | None = None, slip: bool = False, decimals: int = 2) -> None:
    """Print the exercise (or its key, or a problem set) as `attn exercise` documents."""
    chosen = seed is None
    if chosen:
        seed = random.SystemRandom().randrange(1, 1_000_000)
    options = [_options(seed, kind, queries, keys, dim, value_dim, heads, mask, tiles, slip, decimals)
               for kind in kinds]
    try:
        problems = [build(replace(options[k % len(options)], seed=seed + k)) for k in range(count)]
    except ExerciseError as error:  # name the option at the edge: the core speaks of queries, keys, dim
        raise error.at(f"--{error.field.replace('_', '-')}") from None
    problems = [replace(p, command=command_line(p.options)) for p in problems]
    if chosen and not answers:  # the teacher needs the seed for the key; the sheet must not show it
        given = [f"--{name.replace('_', '-')} {value}" for name, value in (
            ("queries", queries), ("keys", keys), ("dim", dim), ("value_dim", value_dim), ("heads", heads),
            ("mask", mask), ("tiles", tiles and "{},{}".format(*tiles)), ("decimals", decimals != DECIMALS and decimals))
            if value] + (["--find-the-slip"] if slip else [])
        shape = f" --format {format}" if format != "json" else ""
        sys.stderr.write(f"answer key: {_set_command(problems[0].command, kinds, count, given)}{shape} --answers\n")
    if count > 1:
        problems = [_titled(p, f"Problem {k + 1}: {KINDS[p.options.kind].title or p.options.kind}")
                    for k, p in enumerate(problems)]
    if format == "json":
        docs = [_key(p) if answers else p.doc for p in problems]
        sys.stdout.write(pretty(docs[0] if count == 1 else {"problems": docs}))
        return
    items = [(p, p.trace) for p in problems]
    sys.stdout.write((worksheet.markdown if format == "markdown" else worksheet.latex)(items, answers))


def _options(seed: int, kind: str, queries, keys, dim, value_dim, heads, mask, tiles, slip, decimals) -> Options:
    """One kind's options, its defaults filled in (the kind's keys, heads and d_k)."""
    record = KINDS[kind]
    return Options(seed, kind, queries, keys or record.keys, dim or record.dim, value_dim, heads or record.heads, mask,
                   tiles if record.tiles else None, slip, decimals)


def _set_command(command: str, kinds: tuple[str, ...], count: int, given: list[str]) -> str:
    """The whole set's command: one kind's is its first problem's, with the count; a set's names the
    kinds and only the options given (each kind has its own sizes), and the count beyond one round."""
    if len(kinds) == 1:
        return command + (f" --count {count}" if count > 1 else "")
    seed = command.split()[3]
    return " ".join([f"attn exercise --seed {seed} --set {','.join(kinds)}", *given]
                    + ([f"--count {count}"] if count != len(kinds) else []))


def command_line(options) -> str:
    """`attn exercise …` naming every option, so that changed defaults cannot change it."""
    o = options
    parts = [f"attn exercise --seed {o.seed} --kind {o.kind}", f"--queries {o.lq}", f"--keys {o.keys}",
             f"--dim {o.dim}", f"--value-dim {o.value_dim or o.dim}", f"--heads {o.heads}"]
    if o.mask:
        parts.append(f"--mask {o.mask}")
    if KINDS[o.kind].tiles:
        parts.append("--tiles {},{}".format(*(o.tiles or DEFAULT_TILES)))
    if o.decimals != DECIMALS:
        parts.append(f"--decimals {o.decimals}")
    if o.slip:
        parts.append("--find-the-slip")
    return " ".join(parts)


def _titled(problem, title: str):
    return replace(problem, doc=problem.doc | {"title": title})


def _key(problem) -> dict:
    """`attn compute`'s full JSON of the problem, with what it asks (and a tiles exercise's tiles; a
    find-the-slip's worked solution and slip; a precision exercise's `"rounding"`), and `"reproduce"`,
    the command that makes it: in a key of its own, not in the description, which the students'
    pages made against the key show."""
    doc = problem.doc
    trace = attention.attend(build_problem(doc))
    key = to_dict(trace)
    if "tile_size" in doc:
        add_tiles(key, attend_tiles(trace.problem, *doc["tile_size"]), trace.stage("output"))
    key |= {name: doc[name] for name in ("ask", "decimals", "worked") if name in doc}
    note = rounding_note(trace, problem.options.decimals) if problem.options is not None else None
    if note:  # a precision exercise: which scores the dtype changed, float64's weights beside its own
        key["rounding"] = note
    if problem.worked is not None:
        key["slip"] = problem.worked.key()
    return key | {"reproduce": problem.command}


def pretty(doc: dict) -> str:
    """JSON with one key per line and each matrix row on one line: strict, and readable."""
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


def run_posenc(positions: int, dim: int, base: float, format: str, precision: int) -> None:
    """Print the encodings as `attn posenc` documents."""
    pe = positional_encoding(positions, dim, base)
    if format == "json" or (format == "auto" and not auto_is_table()):
        sys.stdout.write(dumps({"positions": positions, "dim": dim, "base": base,
                                "formula": "PE(pos, 2i) = sin(pos / base^(2i/D)); PE(pos, 2i+1) = cos(pos / base^(2i/D))",
                                "encoding": pe.tolist()}) + "\n")
        return
    formula = (f"PE(pos, 2i) = sin(pos / {base:g}^(2i/{dim})), "
               f"PE(pos, 2i+1) = cos(pos / {base:g}^(2i/{dim}))")
    rows = [str(p) for p in range(positions)]
    columns = [f"{'sin' if j % 2 == 0 else 'cos'} {j}" for j in range(dim)]
    if format in ("csv", "markdown", "latex"):
        if format == "csv":
            sys.stdout.write(export.csv_table(rows, columns, [(None, pe)]))
        elif format == "markdown":
            sys.stdout.write(f"sinusoidal positional encoding, base {base:g}: {formula}  \n\n"
                             + export.markdown_table("PE", None, pe, rows, columns, precision) + "\n")
        else:
            tex = (rf"PE_{{(pos, 2i)}} = \sin(pos / {base:g}^{{2i/{dim}}}),\ "
                   rf"PE_{{(pos, 2i+1)}} = \cos(pos / {base:g}^{{2i/{dim}}})")
            sys.stdout.write(f"% attn posenc: sinusoidal positional encoding, base {base:g}\n\n"
                             + export.latex_table("PE", tex, pe, rows, columns, precision) + "\n")
        return
    # Imported here, for start-up: the table needs rich, which takes longer to load than numpy;
    # the JSON and text formats never import it.
    from rich.text import Text

    from attncli.render.tables import make_console, matrix_tables

    console = make_console()
    width = console.width if sys.stdout.isatty() else None
    console.print(Text(f"sinusoidal positional encoding, base {base:g}: {formula}"))
    # The title is the name only: an elided table adds the shape once ("PE (100×8, middle elided…)").
    for renderable in matrix_tables("PE", pe, rows, columns, precision, width):
        console.print(renderable)
