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
from attncli.render import formats as registry
from attncli.render.target import OutputError, check_target

# The choice options' Enums (Typer's choices), made from the core's tuples by the table.
Format, MaskedRows, Carry, RopeStyle, DType = (spec.find(OPTIONS, name).enum for name in (
    "format", "masked_rows", "carry", "rope_style", "dtype"))


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
    (the --stages words), `format` (the record of the format written, attncli/render/formats.py:
    --output's suffix or --format decides it, auto resolved), `suffix`, `tile_sizes`, `stdin` ("-"
    when the document comes from a pipe), `output_only` (only the output is computed, in blocks)
    and `threads` (its workers; None: every core). Usage errors are raised here, and so is every
    option the format cannot hold: nothing is computed or rendered to find that out."""
    _cost_alone(o)
    tile_sizes = opt.tile_sizes(o.tiles)
    shown = _shown(o, tile_sizes is not None)
    if o.carry is not None and not o.explain:
        raise InputError("chooses how --explain carries its numbers; add --explain", "--carry")
    if o.row and not o.explain:  # it was ignored, whatever it named
        raise InputError("chooses the query rows --explain explains; add --explain (--query picks the rows of "
                         "the tables)", "--row")
    from_stdin = _stdin_matrix(o, stdin_is_terminal)
    # the document is read from stdin when piped and no file is named, unless a matrix is (`--q -`)
    stdin = "-" if o.file is None and not stdin_is_terminal and not from_stdin else None
    inputs = [o.file, stdin, *matrices(o).values()]  # files --output must not overwrite (dO's too)
    suffix = None if o.output_file is None else _output_suffix(o.output_file, inputs)  # '': refused by name
    format = _chosen(o.format, o.output_file, suffix, text_only=o.explain or "heatmap" in shown)
    _holds(format, o, shown, tile_sizes is not None, suffix)
    # Only the output is needed: compute it in blocks (bounded memory), one BLAS thread per worker.
    # A format of the weights alone (the SVG picture) computes them whatever --stages says.
    output_only = (not o.explain or tile_sizes is not None) and "heatmap" not in shown and (
        format.stages == "output" or (set(shown) == {"output"} and format.stages != "weights" and not format.binary))
    if o.threads is not None and not output_only and not o.cost:
        raise InputError("sets the threads that compute the output alone, in blocks; add --stages output "
                         "(or --output FILE.npy), or drop --threads", "--threads")
    need_input(o.file, matrices(o), stdin_is_terminal)
    if o.heatmap and o.stages is None and format.terminal:
        shown = ("heatmap",)  # the picture alone, as --stages heatmap (not every stage's tables before it)
    return SimpleNamespace(shown=shown, format=format, suffix=suffix, tile_sizes=tile_sizes, stdin=stdin,
                           output_only=output_only, threads=o.threads)


def _cost_alone(o: SimpleNamespace) -> None:
    """--cost shows the counts alone: refuse the options it would ignore; --sram sizes its tiles.
    (Which formats hold the counts is their records' word: `_holds`.)"""
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


def _holds(format: registry.Format, o: SimpleNamespace, shown: tuple[str, ...], tiled: bool,
           suffix: str | None) -> None:
    """Refuse, naming the format and the option, every option the format cannot hold (its record
    says what it holds), with the formats that would hold them all."""
    # (flag, what would be lost, whether it is asked for, which formats hold it)
    wanted = [(flag, CONTENT_WORDS.get(content, content), asked, lambda f, c=content: f.can(c))
              for flag, content, asked in (
                  ("--tiles", "tiles", tiled), ("--cost", "cost", o.cost), ("--heatmap", "heatmap", "heatmap" in shown),
                  ("--explain", "explanation", o.explain), ("--do", "backward", o.do is not None))]
    wanted += [("--stages", "the other stages", o.stages is not None and bool(set(shown) - {"output", "heatmap"}),
                lambda f: f.stages != "output"),
               ("--round", "rounded numbers", o.round_ is not None, lambda f: not f.binary)]
    lost = [(flag, what, holds) for flag, what, asked, holds in wanted if asked and not holds(format)]
    one = [name for name in shown if name != "heatmap"]
    heatmap = any(flag == "--heatmap" for flag, _, _ in lost)  # refused by name first: no --stages would hold it
    if not heatmap and format.stages == "one" and (len(one) != 1 or one[0] not in names.STAGES):
        others = ", ".join(name for name in names.STAGES if name != "weights")
        raise typer.BadParameter(f"--format {format.name} writes one stage: give one, such as --stages weights "
                                 f"(or {others})", param_hint="--stages")
    if not lost:
        return
    flags = [flag for flag, _, _ in lost]
    ways = [f for f in registry.FORMATS if f.trace is not None and all(holds(f) for _, _, holds in lost)]
    subject = f"an {suffix} file" if suffix else f"--format {format.name}"
    advice = _advice(ways)
    raise InputError(f"{subject} holds {format.help}, not {registry.listed([what for _, what, _ in lost])}, so "
                     f"{', '.join(flags)} would be lost; {advice + ', or ' if advice else ''}drop "
                     f"{'it' if len(flags) == 1 else 'them'}", flags[0])


CONTENT_WORDS = {"cost": "the counts (--cost)"} | {
    content: words for content, words in registry.CONTENTS.items() if content != "cost"}


def _advice(ways: list[registry.Format]) -> str:
    """`use --format a or b (--output FILE.x or FILE.y)`: the formats that would do, on stdout and as files."""
    chosen = [f.name for f in ways if not f.binary]
    files = [f"FILE{suffix}" for f in ways for suffix in f.suffixes]
    if not chosen and not files:
        return ""
    said = f"--format {registry.listed(chosen)}" if chosen else ""
    if files:
        said += f" (--output {registry.listed(files)})" if said else f"--output {registry.listed(files)}"
    return "use " + said


def _shown(o: SimpleNamespace, tiled: bool) -> tuple[str, ...]:
    """The --stages words (and the heatmap). --tiles shows the tiles and the output alone unless
    asked for more; --do adds the backward pass."""
    tiled_default = "output" if o.do is None else ",".join(("output",) + names.GRADIENTS + (names.GRADS,))
    return _stages(o.stages if o.stages is not None or not tiled else tiled_default) + (
        ("heatmap",) if o.heatmap else ())


def _chosen(format: str, output_file: str | None, suffix: str | None, text_only: bool) -> registry.Format:
    """The format written: the one --output's suffix names (--format, when given, must agree), or
    --format's (auto: tables on a terminal or for text-only views, else JSON; edge.auto_is_table)."""
    if suffix:
        chosen = registry.by_suffix(suffix)
        if format not in ("auto", chosen.name):
            own = registry.get(format).suffixes
            change = f"change the suffix ({', '.join(own)})" if own else f"drop --output ({format} is never a file)"
            raise InputError(f"{quote(output_file)} is written as {chosen.name}, but --format is {format}; drop "
                             f"--format or {change}", "--output")
        return chosen
    if format == "auto":
        return registry.get("table" if auto_is_table(text_only=text_only) else "json")
    return registry.get(format)


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
