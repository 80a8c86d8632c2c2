"""`attn compute`: parse its options (declared once, in commands/compute_options.py), plan from them
before numpy loads (the view, the stages shown, the output alone or every stage, the output file),
then run: compute_run.py reads the problem, computes the trace and renders it."""

import sys
from types import SimpleNamespace

import typer

from attncli.base import names  # the stage table's names without numpy, which loads after threads.before_numpy
from attncli.base.errors import InputError, quote
from attncli.commands import option_text as opt
from attncli.commands import spec
from attncli.commands.compute_options import OPTIONS, views
from attncli.commands.edge import auto_is_table
from attncli.compute.threads import before_numpy
from attncli.render.target import OutputError, check_target

# The choice options' Enums (Typer's choices), made from the core's tuples by the table.
Format, MaskedRows, Carry, RopeStyle, DType = (spec.find(OPTIONS, name).enum for name in (
    "format", "masked_rows", "carry", "rope_style", "dtype"))

SUFFIX_FORMATS = {".md": "markdown", ".tex": "latex", ".csv": "csv", ".html": "html", ".svg": "svg"}  # --output's text files
TEXT_ONLY_FORMATS = ("markdown", "latex", "csv", "svg")  # formats with no tile view


@spec.command(OPTIONS)
def compute(**values) -> None:
    """Compute softmax(Q Kᵀ · scale + bias) V and show every stage, per head.

    attn example scooter | attn compute

    attn compute --q "0,4" --k "1,0; 0,1; .5,.5" --v "2,0; 0,2; 1,-1"

    attn compute big.npz --cost --sram 100KiB   (FLOPs and bytes, naive and tiled; no attention computed)

    Matrix options take a path (.json .csv .tsv .npy) or inline text ("1,0; 0,1" or "[[1,0],[0,1]]").
    Piped stdin is read beside them; they override its keys. A matrix option of - reads that
    matrix from stdin, as from a .csv file (or JSON rows): printf '1,0,0\\n' | attn compute --q -
    --k "1,0,0" --v 1; stdin is then that matrix, not the document.
    Off is one spelling for every option: leave it out ("", none and null are refused).

    Conventions (where libraries differ):
    rows are queries, columns are keys;
    mask true = the query may attend the key (PyTorch SDPA, JAX; --invert-mask for nn.MultiheadAttention);
    causal: k_pos ≤ q_pos; positions are 0 to L−1 unless given: top-left, j ≤ i;
    causal_lower_right sets q_positions to Lk−Lq to Lk−1 (j ≤ i + Lk − Lq);
    window L,R: q_pos − L ≤ k_pos ≤ q_pos + R (bounds inclusive); key mask 1 = a real key;
    mask, bias, causal, window and key mask combine with AND; prefix P: k_pos < P or causal (prefix-LM);
    softcap: c·tanh(scaled/c) before bias and masks; ALiBi adds −slope·|q_pos − k_pos| (a penalty);
    sinks: softmax over the keys and one sink logit per head, which is dropped (rows sum to < 1);
    W_Q is (d_model × d_out) and Q = X W_Q (PyTorch's Linear.weight is its transpose);
    rope half pairs dim i with i + dims/2 (Llama rotate_half), interleaved 2i with 2i+1 (GPT-J),
    θ_i = base^(−2i/dims), angle = position · θ_i: attn example rope | attn compute --explain.
    """
    o = parse(values)
    chosen = plan(o, stdin_is_terminal=sys.stdin.isatty())
    if chosen.output_only:
        before_numpy()  # BLAS on one thread in each of the blocks' workers, set before numpy loads
    # The one import kept inside a function, for start-up: numpy, the core and the views load when
    # compute runs, so that `attn --version` and `attn --help` never import numpy.
    from attncli.commands.compute_layers import run

    run(o, chosen)


def parse(values: dict) -> SimpleNamespace:
    """compute's options by name, as Typer passed them: choices as their words, the rest at their
    defaults (a test or a caller may name only some)."""
    return spec.chosen(OPTIONS, values)


def matrices(o: SimpleNamespace) -> dict[str, str | None]:
    """The matrix options' text by input key (Q, K, V, X, …, mask, bias, dO)."""
    return {option.key: getattr(o, option.name) for option in OPTIONS if option.matrix}


def _stdin_matrix(o: SimpleNamespace, stdin_is_terminal: bool) -> str | None:
    """The one matrix option given as `-` (read from stdin), checked, or None."""
    dashed = [key for key, value in matrices(o).items() if value is not None and value.strip() == "-"]
    if not dashed:
        return None
    flags = [next(opt.flags[0] for opt in OPTIONS if opt.matrix and opt.key == key) for key in dashed]
    if len(dashed) > 1:
        raise InputError(f"is -, and so is {', '.join(flags[1:])}: stdin holds one matrix; give the others as "
                         "files or inline text", flags[0])
    if o.file == "-":
        raise InputError("is -, and so is FILE: stdin holds either the problem or this matrix; save one to a file",
                         flags[0])
    if stdin_is_terminal:
        raise InputError(f"is - (read from stdin), but stdin is a terminal: pipe the matrix in, e.g. "
                         f"printf '1,0\\n' | attn compute {flags[0]} - …", flags[0])
    return dashed[0]


def plan(o: SimpleNamespace, stdin_is_terminal: bool) -> SimpleNamespace:
    """What compute will do, decided from its options alone (before any input is read): `shown`
    (the --stages words), `format` (--output's suffix decides it), `view` (what is printed or
    written: table, json, markdown, latex or csv), `built` (what is built: a view, or npz, npy),
    `suffix`, `tile_sizes`, `stdin` ("-" when the document comes from a pipe), `output_only`
    (only the output is computed, in blocks) and `threads` (its workers; None: every core).
    Usage errors are raised here."""
    _cost_alone(o)
    tile_sizes = opt.tile_sizes(o.tiles)
    shown = _shown(o, tile_sizes is not None)
    if o.carry is not None and not o.explain:
        raise InputError("chooses how --explain carries its numbers; add --explain", "--carry")
    from_stdin = _stdin_matrix(o, stdin_is_terminal)
    # the document is read from stdin when piped and no file is named, unless a matrix is (`--q -`)
    stdin = "-" if o.file is None and not stdin_is_terminal and not from_stdin else None
    inputs = [o.file, stdin, *matrices(o).values()]  # files --output must not overwrite (dO's too)
    suffix = o.output_file and _output_suffix(o.output_file, inputs)
    format = _file_format(o.format, o.output_file, suffix)
    if tile_sizes is not None and (format in TEXT_ONLY_FORMATS or suffix in (".npy", ".npz")):
        raise InputError("shows its tiles as tables or JSON only; drop --tiles, or use --format table "
                         "or json (--output FILE.json)", "--tiles")
    if format == "csv" and (len(shown) != 1 or shown[0] in ("inputs", "heatmap") + names.GRADIENTS + (names.GRADS,)):
        others = ", ".join(name for name in names.STAGES if name != "weights")
        raise typer.BadParameter(f"--format csv writes one stage: give one, such as --stages weights (or {others})",
                                 param_hint="--stages")
    _binary_holds(o, shown, suffix)
    # Only the output is needed: compute it in blocks (bounded memory), one BLAS thread per worker.
    output_only = (not o.explain or tile_sizes is not None) and "heatmap" not in shown and format != "svg" and (
        suffix == ".npy" or (suffix != ".npz" and set(shown) == {"output"}))
    if o.threads is not None and not output_only and not o.cost:
        raise InputError("sets the threads that compute the output alone, in blocks; add --stages output "
                         "(or --output FILE.npy), or drop --threads", "--threads")
    need_input(o.file, matrices(o), stdin_is_terminal)
    view = _view(format, o.output_file and suffix, o.explain or "heatmap" in shown)
    if o.heatmap and o.stages is None and view == "table":
        shown = ("heatmap",)  # the picture alone, as --stages heatmap (not every stage's tables before it)
    # what is built: json, npz, npy, or a text view
    built = suffix[1:] if o.output_file and suffix not in SUFFIX_FORMATS else view
    return SimpleNamespace(shown=shown, format=format, view=view, built=built, suffix=suffix,
                           tile_sizes=tile_sizes, stdin=stdin, output_only=output_only, threads=o.threads)


def _cost_alone(o: SimpleNamespace) -> None:
    """--cost shows the counts alone, as tables, JSON or Markdown: refuse the options it would
    ignore; --sram sizes its tiles."""
    if not o.cost:
        if o.sram is not None:
            raise InputError("sets the on-chip memory --cost counts with; add --cost", "--sram")
        return
    ignored = [flag for flag, on in (
        ("--stages", o.stages is not None), ("--explain", o.explain), ("--tiles", o.tiles is not None),
        ("--heatmap", o.heatmap), ("--carry", o.carry is not None), ("--row", bool(o.row)),
        ("--head", o.head is not None), ("--do", o.do is not None), ("--round", o.round_ is not None),
        ("--full", o.full)) if on]
    if ignored:
        raise InputError(f"shows the counts alone, so {ignored[0]} would be ignored; drop it, or drop --cost",
                         "--cost")
    suffix = (o.output_file or "").lower().rsplit(".", 1)[-1] if o.output_file and "." in o.output_file else None
    if o.format in ("latex", "csv") or suffix in ("npy", "npz", "tex", "csv"):
        raise InputError("writes tables, JSON or Markdown only: use --format table, json or markdown "
                         "(--output FILE.json or FILE.md)", "--cost")


def _binary_holds(o: SimpleNamespace, shown: tuple[str, ...], suffix: str | None) -> None:
    """An .npy or .npz file holds exact arrays: refuse the options it would silently drop. An .npy
    holds the final output alone; text (--explain, the heatmap) and --round go to text or JSON."""
    if suffix not in (".npy", ".npz"):
        return
    dropped = [flag for flag, on in (("--explain", o.explain), ("--heatmap", "heatmap" in shown),
                                        ("--round", o.round_ is not None)) if on]
    if suffix == ".npy" and o.stages is not None and set(shown) - {"output", "heatmap"}:
        dropped.append("--stages")
    if dropped:
        holds = "the final output alone" if suffix == ".npy" else "the stages as exact arrays"
        raise InputError(f"an {suffix} file holds {holds}, so {', '.join(dropped)} would be lost; write "
                         "JSON (--output FILE.json) or a text view (.md, .tex, .csv), or drop "
                         f"{'it' if len(dropped) == 1 else 'them'}", dropped[0])


def _shown(o: SimpleNamespace, tiled: bool) -> tuple[str, ...]:
    """The --stages words (and the heatmap). --tiles shows the tiles and the output alone unless
    asked for more; --do adds the backward pass."""
    tiled_default = "output" if o.do is None else ",".join(("output",) + names.GRADIENTS + (names.GRADS,))
    return _stages(o.stages if o.stages is not None or not tiled else tiled_default) + (
        ("heatmap",) if o.heatmap else ())


def _view(format: str, suffix: str | None, text_only: bool) -> str:
    """What is printed or written: an --output file's suffix decides (.md, .tex, .csv as their
    formats, checked by _file_format; else JSON); on stdout, --format (auto: see edge.auto_is_table)."""
    if suffix:
        return format if suffix in SUFFIX_FORMATS else "json"
    if format == "auto":
        return "table" if auto_is_table(text_only=text_only) else "json"
    return format


def _file_format(format: str, output_file: str | None, suffix: str | None) -> str:
    """--format, or the format --output's suffix names (.md, .tex, .csv); the two must agree."""
    if suffix in SUFFIX_FORMATS:
        if format not in ("auto", SUFFIX_FORMATS[suffix]):
            raise InputError(f"{quote(output_file)} is written as {SUFFIX_FORMATS[suffix]}, "
                             f"but --format is {format}; drop --format or change the suffix", "--output")
        return SUFFIX_FORMATS[suffix]
    if suffix and format not in ("auto", "json"):  # .json, .npy, .npz: no text view goes there
        raise InputError(f"{quote(output_file)} is written as {suffix[1:]}, but --format is {format}; "
                         "drop --format or change the suffix (.md, .tex, .csv)", "--output")
    return format


def need_input(file: str | None, matrices: dict[str, str | None], stdin_is_terminal: bool) -> None:
    """Refuse to wait, silently, for a document typed on the terminal: say the ways to give one."""
    if file is None and stdin_is_terminal and all(matrices.get(key) is None for key in ("Q", "K", "V", "X")):
        raise InputError("no input: name a JSON file (attn compute problem.json), pipe one "
                         "(attn example scooter | attn compute), or give --q, --k and --v")


def _output_suffix(path: str, inputs: list[str | None]) -> str:
    """--output's suffix, after checking that the file can be written and is no input of this
    run; before any work is done."""
    try:
        return check_target(path, inputs)
    except OutputError as error:
        raise error.at("--output")


def _stages(text: str | None) -> tuple[str, ...]:
    if text is None:
        return views()[:-1]
    chosen = tuple(name.strip() for name in text.split(",") if name.strip())
    if not chosen:  # `--stages ""` or `,`: nothing to show is no choice
        raise typer.BadParameter(f'names no stage; expected some of {",".join(views())}', param_hint="--stages")
    for name in chosen:
        if name not in views():
            raise typer.BadParameter(f'unknown stage {quote(name)}; expected some of {",".join(views())}',
                                     param_hint="--stages")
    return chosen
