"""`attn compute`: options in, a trace out through the chosen view."""

import sys
from typing import Annotated, Optional

import typer

from attncli.choices import CARRIES, DTYPES, MASKED_ROWS, ROPE_STYLES
from attncli.commands.edge import AUTO_HELP, auto_is_table, choices, flag, formats, warning
from attncli.errors import AttnError, InputError, one_line, quote
from attncli import grads
from attncli.commands import option_text as opt
from attncli.stages import get, names as stage_names, stand_in


Format = formats("Format", "auto", "table", "json", "markdown", "latex", "csv")
MaskedRows = choices("MaskedRows", MASKED_ROWS)
Carry = choices("Carry", CARRIES)
RopeStyle = choices("RopeStyle", ROPE_STYLES)
DType = choices("DType", DTYPES)


SUFFIX_FORMATS = {".md": Format.markdown, ".tex": Format.latex, ".csv": Format.csv}  # --output's text files


def views() -> tuple[str, ...]:
    """What --stages may name: the inputs, every stage of the stage table, the backward pass's
    stages and its grads (shown when there is a dO), the heatmap."""
    return ("inputs",) + stage_names() + grads.names() + (grads.GRADS, "heatmap")


Matrix = Optional[str]


def _matrix(name: str, help: str):
    return typer.Option(f"--{name}", help=help, rich_help_panel="Matrices (a path or inline text)")


def compute(
    file: Annotated[Optional[str], typer.Argument(
        help="JSON problem file, or - for stdin (read when piped and no file is named).",
        show_default=False)] = None,
    q: Annotated[Matrix, _matrix("q", "Queries Q (Lq × d_k; 3-D: heads × Lq × d_k).")] = None,
    k: Annotated[Matrix, _matrix("k", "Keys K (Lk × d_k).")] = None,
    v: Annotated[Matrix, _matrix("v", "Values V (Lk × d_v).")] = None,
    x: Annotated[Matrix, _matrix("x", "Inputs X (L × d_model), instead of Q/K/V.")] = None,
    x_kv: Annotated[Matrix, _matrix("x-kv", "Cross-attention: keys and values come from X_kv.")] = None,
    wq: Annotated[Matrix, _matrix("wq", "W_Q (d_model × d_out): Q = X W_Q.")] = None,
    wk: Annotated[Matrix, _matrix("wk", "W_K: K = X_kv W_K.")] = None,
    wv: Annotated[Matrix, _matrix("wv", "W_V: V = X_kv W_V.")] = None,
    wo: Annotated[Matrix, _matrix("wo", "W_O (heads·d_v × d_out): output = concat(heads) W_O.")] = None,
    do: Annotated[Matrix, typer.Option(
        "--do", help="The backward pass: dO, the gradient of a loss by the final output (its shape), as a "
                     "path or inline text, or ones (the gradient of its sum). Adds the gradient tables "
                     "(d_V, d_weights, D, d_scores, d_Q, d_K) and grads, one per input.",
        metavar="PATH|TEXT|ones", rich_help_panel="Backward pass", show_default=False)] = None,
    mask: Annotated[Optional[str], typer.Option(
        help="causal | causal_lower_right | a true/false matrix (Lq × Lk), true = may attend.",
        rich_help_panel="Masking")] = None,
    bias: Annotated[Matrix, typer.Option(
        help="Additive bias (Lq × Lk), added after scaling; -inf or null = blocked.",
        rich_help_panel="Masking")] = None,
    invert_mask: Annotated[bool, typer.Option(
        "--invert-mask", help="Read a true/false mask matrix with true as BLOCKED (nn.MultiheadAttention's "
                              "convention).",
        rich_help_panel="Masking")] = False,
    q_positions: Annotated[Optional[str], typer.Option(
        help="Query positions (default 0 to Lq−1): 4 or 4,5,6. A KV-cache step is one query at position t.",
        rich_help_panel="Masking", show_default=False)] = None,
    k_positions: Annotated[Optional[str], typer.Option(
        help="Key positions (default 0 to Lk−1): 0,1,2,5.", rich_help_panel="Masking", show_default=False)] = None,
    window: Annotated[Optional[str], typer.Option(
        help="Sliding window LEFT,RIGHT: query i sees key j when q_pos−LEFT ≤ k_pos ≤ q_pos+RIGHT (inclusive); "
             "none (or empty) = unbounded: 2,none. Hugging Face sliding_window=W with causal is W−1,0.",
        metavar="L,R", rich_help_panel="Masking", show_default=False)] = None,
    key_mask: Annotated[Optional[str], typer.Option(
        help="Key padding, one per key: 1,1,0; 1/true = a real key (Hugging Face attention_mask; the "
             "inverse of nn.MultiheadAttention's key_padding_mask).",
        rich_help_panel="Masking", show_default=False)] = None,
    rope: Annotated[bool, typer.Option(
        "--rope", help="Rotary positions (RoPE): rotate each head's Q and K by q_positions and k_positions "
                       "before scores (default style half, base 10000, every dim).",
        rich_help_panel="Positions (RoPE)")] = False,
    rope_style: Annotated[Optional[RopeStyle], typer.Option(
        help="half: dim i pairs with i + dims/2 (Hugging Face Llama rotate_half; default); interleaved: "
             "2i with 2i+1 (GPT-J rotate_every_two). Implies --rope.",
        rich_help_panel="Positions (RoPE)", show_default=False)] = None,
    rope_base: Annotated[Optional[float], typer.Option(
        help="θ_i = BASE^(−2i/dims) (default 10000; Llama 3: 500000). Implies --rope.",
        rich_help_panel="Positions (RoPE)", show_default=False)] = None,
    rope_dims: Annotated[Optional[int], typer.Option(
        help="Rotate only each head's first DIMS dims, an even number ≤ d_k (partial rotary, as GPT-NeoX "
             "rotary_pct; default d_k). Implies --rope.",
        rich_help_panel="Positions (RoPE)", show_default=False)] = None,
    masked_rows: Annotated[Optional[MaskedRows], typer.Option(
        help="A query whose every key is masked: zero (weights and output 0, as PyTorch SDPA; default), "
             "uniform (mean of V; as JAX when a boolean mask blocks the row, but JAX gives NaN for a row "
             "blocked by a −∞ bias alone, and averages only the mask-blocked keys when a mask and a bias "
             "block the row together), or error. A warning names such rows.",
        rich_help_panel="Masking", show_default=False)] = None,
    softcap: Annotated[Optional[str], typer.Option(
        help="Softcap c > 0: capped = c·tanh(scaled/c), after scaling, before bias, ALiBi and masks (Gemma 2).",
        metavar="C", rich_help_panel="Variants", show_default=False)] = None,
    alibi: Annotated[bool, typer.Option(
        "--alibi", help="ALiBi with the paper's slopes for the query heads: 2^(−8k/n), k = 1 to n (not a power of "
                        "two: as BLOOM); adds −slope·|q_pos − k_pos| after scaling, with any bias.",
        rich_help_panel="Variants")] = False,
    alibi_slopes: Annotated[Optional[str], typer.Option(
        help="ALiBi with these slopes, one per query head: 0.5,0.25 (instead of --alibi's).",
        metavar="SLOPES", rich_help_panel="Variants", show_default=False)] = None,
    sinks: Annotated[Optional[str], typer.Option(
        help="Attention sinks (gpt-oss): one logit per query head, or one for all: 0.5 or 0.5,-1; each joins "
             "its row's softmax and is dropped, so rows sum to less than 1.",
        metavar="LOGITS", rich_help_panel="Variants", show_default=False)] = None,
    heads: Annotated[Optional[int], typer.Option(
        help="Split the feature axis of 2-D Q/K/V into this many contiguous heads.")] = None,
    scale: Annotated[Optional[str], typer.Option(
        help="Scale for Q Kᵀ (default 1/√d_k): a number, a fraction (1/1.4142) or a root (1/sqrt(2)).",
        metavar="<number>", show_default=False)] = None,
    query_labels: Annotated[Optional[str], typer.Option(help="Row labels, comma-separated: it,they")] = None,
    key_labels: Annotated[Optional[str], typer.Option(help="Key labels, comma-separated.")] = None,
    dtype: Annotated[Optional[DType], typer.Option(help="Arithmetic: float64 (default) or float32.",
                                                   show_default=False)] = None,
    format: Annotated[Format, typer.Option(
        "--format", "-f", help=f"{AUTO_HELP} (text with --explain or --heatmap). "
                               "markdown/latex: write-up tables; csv: one stage.",
        rich_help_panel="Output")] = Format.auto,
    stages: Annotated[Optional[str], typer.Option(
        help=f"Comma-separated stages to show: {', '.join(views())}.",
        rich_help_panel="Output")] = None,
    precision: Annotated[int, typer.Option(
        min=0, max=17, help="Decimals in tables.", rich_help_panel="Output")] = 4,
    round_: Annotated[Optional[int], typer.Option(
        "--round", min=0, max=17, help="Round JSON numbers to N decimals (default: full precision).",
        rich_help_panel="Output")] = None,
    explain: Annotated[bool, typer.Option(
        "--explain", help="Show the hand calculation, step by step, instead of the tables.",
        rich_help_panel="Learning")] = False,
    carry: Annotated[Optional[Carry], typer.Option(
        help="With --explain: exact (default; exact arithmetic, rounded display, a note where printed "
             "numbers do not give the printed result) or rounded (each step from the numbers as printed, "
             "as on a pocket calculator; every printed equation holds).",
        rich_help_panel="Learning", show_default=False)] = None,
    row: Annotated[Optional[list[str]], typer.Option(
        help="With --explain: a query row to explain, by label or index (repeatable).",
        rich_help_panel="Learning", show_default=False)] = None,
    head: Annotated[Optional[int], typer.Option(
        help="With --explain or --heatmap: only this head.", rich_help_panel="Learning",
        show_default=False)] = None,
    heatmap: Annotated[bool, typer.Option(
        "--heatmap", help="Draw the weights as a shaded grid (also: --stages heatmap).",
        rich_help_panel="Learning")] = False,
    output_file: Annotated[Optional[str], typer.Option(
        "--output", "-o", help="Write to FILE instead of stdout: .json, .md, .tex, .csv (as --format "
                               "json, markdown, latex, csv), .npy (the final output) or .npz (every "
                               "stage); atomically.", rich_help_panel="Output",
        show_default=False)] = None,
    full: Annotated[bool, typer.Option(
        "--full", help="Print every row and column of big tables (default: elide the middle).",
        rich_help_panel="Output")] = False,
    tiles: Annotated[Optional[str], typer.Option(
        help="FlashAttention-2's tiled online softmax with BQ query rows and BK keys per tile: each "
             "tile's S, running max m, alpha = e^(m_old − m), running sum l and unnormalised O, then "
             "O / l, lse = m + ln l and the largest difference from the plain output. Tables or JSON "
             "(per head \"tiles\"); with --explain, one query row through the tiles. Shows only "
             "the output stage unless --stages says more.",
        metavar="BQ,BK", rich_help_panel="Learning", show_default=False)] = None,
) -> None:
    """Compute softmax(Q Kᵀ · scale + bias) V and show every stage, per head.

    attn example scooter | attn compute

    attn compute --q "0,4" --k "1,0; 0,1; .5,.5" --v "2,0; 0,2; 1,-1"

    Matrix options take a path (.json .csv .tsv .npy) or inline text ("1,0; 0,1" or "[[1,0],[0,1]]").

    Conventions (where libraries differ):
    rows are queries, columns are keys;
    mask true = the query may attend the key (PyTorch SDPA, JAX; --invert-mask for nn.MultiheadAttention);
    causal: k_pos ≤ q_pos; positions are 0 to L−1 unless given: top-left, j ≤ i;
    causal_lower_right sets q_positions to Lk−Lq to Lk−1 (j ≤ i + Lk − Lq);
    window L,R: q_pos − L ≤ k_pos ≤ q_pos + R, inclusive; key mask 1 = a real key;
    mask, bias, causal, window and key mask combine with AND;
    softcap: c·tanh(scaled/c) before bias and masks; ALiBi adds −slope·|q_pos − k_pos| (a penalty);
    sinks: softmax over the keys and one sink logit per head, which is dropped (rows sum to < 1);
    W_Q is (d_model × d_out) and Q = X W_Q (PyTorch's Linear.weight is its transpose);
    rope half pairs dim i with i + dims/2 (Llama rotate_half), interleaved 2i with 2i+1 (GPT-J),
    θ_i = base^(−2i/dims), angle = position · θ_i: attn example rope | attn compute --explain.
    """
    tile_sizes = opt.tile_sizes(tiles)
    gradients = grads.names() + (grads.GRADS,)
    # --tiles shows the tiles and the output alone unless asked for more; --do adds the backward pass.
    tiled_default = "output" if do is None else ",".join(("output",) + gradients)
    shown = _stages(stages if stages is not None or tile_sizes is None else tiled_default) + (
        ("heatmap",) if heatmap else ())
    if carry is not None and not explain:
        raise InputError("chooses how --explain carries its numbers; add --explain", "--carry")
    stdin = "-" if file is None and not sys.stdin.isatty() else None  # read when piped and no file is named
    suffix = output_file and _output_suffix(output_file, [file, stdin, q, k, v, x, x_kv, wq, wk, wv, wo, mask,
                                                          bias])
    if suffix in SUFFIX_FORMATS:
        if format not in (Format.auto, SUFFIX_FORMATS[suffix]):
            raise InputError(f"{quote(output_file)} is written as {SUFFIX_FORMATS[suffix].value}, "
                             f"but --format is {format.value}; drop --format or change the suffix", "--output")
        format = SUFFIX_FORMATS[suffix]
    elif suffix and format not in (Format.auto, Format.json):  # .json, .npy, .npz: no text view goes there
        raise InputError(f"{quote(output_file)} is written as {suffix[1:]}, but --format is {format.value}; "
                         "drop --format or change the suffix (.md, .tex, .csv)", "--output")
    if tile_sizes is not None and (format in (Format.markdown, Format.latex, Format.csv)
                                   or suffix in (".npy", ".npz") or suffix in SUFFIX_FORMATS):
        raise InputError("shows its tiles as tables or JSON only; drop --tiles, or use --format table "
                         "or json (--output FILE.json)", "--tiles")
    if format == Format.csv and (len(shown) != 1 or shown[0] in ("inputs", "heatmap") + grads.names() + (grads.GRADS,)):
        others = ", ".join(name for name in stage_names() if name != "weights")
        raise typer.BadParameter(f"--format csv writes one stage: add --stages weights (or {others})",
                                 param_hint="--stages")
    # Only the output is needed: compute it in blocks (bounded memory), one BLAS thread per worker.
    output_only = (not explain or tile_sizes is not None) and "heatmap" not in shown and (
        suffix == ".npy" or (suffix != ".npz" and set(shown) == {"output"}))
    workers = 1
    if output_only:
        from attncli.blas import one_blas_thread

        workers = one_blas_thread()  # before numpy loads

    from attncli.loading import OneMatrixError, gather
    from attncli.masks import positions_line
    from attncli.problem import build_problem

    matrices = {"Q": q, "K": k, "V": v, "X": x, "X_kv": x_kv, "W_Q": wq, "W_K": wk, "W_V": wv,
                "W_O": wo, "mask": mask, "bias": bias, "dO": do}
    settings = {"heads": heads, "scale": opt.scale(scale), "query_labels": opt.labels(query_labels),
                "key_labels": opt.labels(key_labels), "masked_rows": masked_rows and masked_rows.value,
                "dtype": dtype and dtype.value, "q_positions": opt.values(q_positions),
                "k_positions": opt.values(k_positions), "window": opt.values(window),
                "key_mask": opt.values(key_mask), "softcap": opt.one(opt.values(softcap)),
                "alibi": opt.alibi(alibi, alibi_slopes), "sinks": opt.one(opt.values(sinks))}
    try:
        need_input(file, matrices, stdin_is_terminal=sys.stdin.isatty())
        doc, origin, source = gather(file, matrices, settings)
    except OneMatrixError as error:
        error.message += f"; give it as a matrix option: --q {file}"
        raise
    origin["invert_mask"] = "--invert-mask"
    if alibi_slopes is not None:
        origin["alibi"] = "--alibi-slopes"
    rope_fields = {"style": rope_style and rope_style.value, "base": rope_base, "dims": rope_dims}
    if rope or any(value is not None for value in rope_fields.values()):  # the options replace the file's rope
        doc["rope"] = {key: value for key, value in rope_fields.items() if value is not None} or True
        origin.update({"rope": "--rope", **{f"rope.{key}": f"--rope-{key}" for key, value in rope_fields.items()
                                            if value is not None}})
    problem = build_problem(doc, origin, source, invert_mask=invert_mask)
    _check_backward(problem, shown if stages is not None else (), output_only, suffix, tile_sizes and stages is None)
    if problem.dO is not None and format != Format.csv and not set(shown) & set(gradients):
        shown += gradients  # dO given: its gradients are shown beside whatever --stages chose
    stage = get(shown[0])
    if format == Format.csv and stage is not None and not stage.applies(problem):
        raise InputError(f"{stage.absent}, so it has no {stage.name} stage; "
                         f"use --stages {stand_in(problem, stage.name)}", "--stages")
    # Warnings are printed once the run has succeeded: an error is always the only line on stderr.
    warnings = []
    if problem.mask_rule == "causal" and problem.lq < problem.lk and positions_line(problem) is None:
        warnings.append(f"mask causal is top-left (query i sees keys j ≤ i), and there are fewer queries "
                        f"({problem.lq}) than keys ({problem.lk}); if the queries are the last tokens of the "
                        "keys' sequence (a KV cache), use causal_lower_right or give their q_positions")
    view = format
    if output_file:  # a file's suffix decides: .md, .tex, .csv as their formats (checked above), else JSON
        view = format if suffix in SUFFIX_FORMATS else Format.json
    elif view == Format.auto:
        view = Format.table if auto_is_table(text_only=explain or "heatmap" in shown) else Format.json
    # what is built: json, npz, npy, or a text view
    written = suffix[1:] if output_file and suffix not in SUFFIX_FORMATS else view.value
    if tile_sizes is not None:
        _check_tile_count(problem, *tile_sizes, table=written != "json")
    try:
        _guard(problem, written, shown, full, output_only, tile_sizes)
        trace = _attend(problem, output_only, workers)
        tiled = None
        if tile_sizes is not None:
            from attncli.tiles import attend_tiles

            tiled = attend_tiles(problem, *tile_sizes)
    except AttnError as error:
        raise error.at(source) if source else error
    rows = opt.rows(row, problem.query_labels, problem.lq)
    heads_shown = None if head is None else [opt.head(head, problem.heads)]
    warnings += trace.warnings
    explanation = None
    if explain and tiled is not None:
        if carry is not None:
            raise InputError("--explain --tiles writes each step from the numbers as printed; drop --carry",
                             "--carry")
        from attncli.render.tiles import explain_tiles

        explanation = explain_tiles(tiled, trace, rows, heads_shown, precision)
    elif explain:
        from attncli.render.explain import explain as explain_lines

        explanation = explain_lines(trace, rows, heads_shown, precision, (carry or Carry.exact).value)
    if output_file:
        from attncli.render.files import Interrupted, OutputError, write_output

        try:
            write_output(trace, output_file, suffix,
                         lambda: _text(view, trace, shown, precision, round_, explanation, tiled))
        except OutputError as error:
            raise error.at("--output")
        except Interrupted as stop:  # SIGTERM or SIGHUP: the temporary file is gone; die of it
            stop.die()
    elif view == Format.table:
        from attncli.render.tables import print_tables

        print_tables(trace, shown, precision, explanation, heads_shown, full, tiled)
    else:
        from attncli.render import out

        out.write_all(_text(view, trace, shown, precision, round_, explanation, tiled))
    for notice in warnings:
        sys.stderr.write(f"warning: {one_line(warning(notice))}\n")


MAX_TILES = {True: 1_000, False: 100_000}  # tables draw about 4 ms a tile; JSON keeps about 5 KB a tile


def _check_tile_count(problem, bq: int, bk: int, table: bool) -> None:
    """Refuse a tile trace too long to show, before computing it (tiles of 1 at L = 3000 are nine
    million tables)."""
    def count(q: int, k: int) -> int:
        return problem.heads * -(-problem.lq // q) * -(-problem.lk // k)

    most = MAX_TILES[table]
    if count(bq, bk) > most:
        side = 2
        while count(side, side) > most:
            side *= 2
        raise InputError(f"{bq},{bk} makes {count(bq, bk):,} tiles ({problem.heads} head{'s' * (problem.heads != 1)} × "
                         f"{-(-problem.lq // bq):,} "
                         f"query blocks × {-(-problem.lk // bk):,} key blocks); "
                         f"{'tables show' if table else 'the JSON holds'} at most {most:,}: use bigger tiles, "
                         f"such as --tiles {side},{side}", "--tiles")


def _check_backward(problem, asked_for, output_only: bool, suffix: str | None, tiled_default: bool) -> None:
    """A gradient asked for with --stages needs dO; dO needs the full trace (the weights), which the output-only
    path does not keep."""
    asked = [name for name in asked_for if name in grads.names() + (grads.GRADS,)]
    if asked and problem.dO is None:
        raise InputError(f"{asked[0]} is a gradient of the backward pass, which needs dO; add --do ones "
                         "(or a matrix of the final output's shape)", "--stages")
    if problem.dO is not None and output_only:
        if suffix == ".npy":
            raise InputError("a .npy file holds only the final output; the backward pass (dO) needs every "
                             "stage: write .npz or .json, or drop --do", "--output")
        if tiled_default:
            raise InputError("shows the tiles and the output alone unless --stages says more; the backward pass "
                             "(dO) needs the weights: add --stages output,grads, or drop dO", "--tiles")
        raise InputError("output computes only the final output, in blocks; the backward pass (dO) needs the "
                         "weights: add weights (or d_Q, grads, …) to --stages, or drop --do", "--stages")


def _text(view: Format, trace, shown, precision: int, round_: int | None, explanation, tiled=None) -> str:
    """The document of a text format: JSON, CSV (one stage), Markdown or LaTeX."""
    if view == Format.json:
        from attncli.render.json import document

        return document(trace, shown, round_, explanation, tiled, say=flag)
    from attncli.render import export

    if view == Format.csv:
        return export.csv_stage(trace, shown[0], round_)
    from attncli.render.text import header_lines

    write = export.markdown if view == Format.markdown else export.latex
    return write(trace, shown, precision, header_lines(trace, precision), explanation)


def need_input(file: str | None, matrices: dict[str, str | None], stdin_is_terminal: bool) -> None:
    """Refuse to wait, silently, for a document typed on the terminal: say the ways to give one."""
    if file is None and stdin_is_terminal and all(matrices.get(key) is None for key in ("Q", "K", "V", "X")):
        raise InputError("no input: name a JSON file (attn compute problem.json), pipe one "
                         "(attn example scooter | attn compute), or give --q, --k and --v")


def _guard(problem, view: str, shown, full: bool, output_only: bool, tile_sizes=None) -> None:
    """Refuse, before computing, a problem whose stages and view would not fit in memory, naming
    the ways out that would fit: only the output (in blocks), a binary file, single precision."""
    from attncli.limits import ResourceError, available_bytes, check_fits, needs, tile_bytes

    available = available_bytes()
    itemsize = 8 if problem.dtype == "float64" else 4
    plan = {"view": view, "shown": shown, "full": full, "output_only": output_only, "itemsize": itemsize}

    def total(**change) -> dict[str, int]:
        found = needs(problem, **plan | change)
        if tile_sizes is not None:  # the tile trace comes on top of the trace
            found |= tile_bytes(problem, *tile_sizes, (plan | change)["itemsize"], (plan | change)["view"])
        return found

    def fits(**change) -> bool:
        return available is None or sum(total(**change).values()) <= available

    try:
        check_fits(total(), available)
    except ResourceError as error:
        ways = [way for way, works in (
            ("--stages output (computed in blocks of about 16 MiB)",
             not output_only and fits(output_only=True, shown=("output",))),
            ("--output FILE.npz (no text)", view not in ("npz", "npy") and tile_sizes is None and fits(view="npz")),
            ("--dtype float32", itemsize == 8 and fits(itemsize=4))) if works]
        error.message += "; use " + " or ".join(ways) if ways else "; make the problem smaller"
        raise


def _attend(problem, output_only: bool, workers: int):
    """The full trace, or only the output in blocks; a progress bar when it takes a while."""
    from attncli.render.progress import progress  # small: rich is imported only for a bar

    with progress(problem.lq, problem.heads * problem.lq * problem.lk) as done:
        if output_only:
            from attncli.blocks import attend_output

            return attend_output(problem, workers=workers, progress=done)
        from attncli.attention import attend

        return attend(problem, progress=done)


def _output_suffix(path: str, inputs: list[str | None]) -> str:
    """--output's suffix, after checking that the file can be written and is no input of this
    run; before any work is done."""
    from attncli.render.files import OutputError, check_target

    try:
        return check_target(path, inputs)
    except OutputError as error:
        raise error.at("--output")








def _stages(text: str | None) -> tuple[str, ...]:
    if text is None:
        return views()[:-1]
    chosen = tuple(name.strip() for name in text.split(",") if name.strip())
    for name in chosen:
        if name not in views():
            raise typer.BadParameter(f'unknown stage {quote(name)}; expected some of {",".join(views())}',
                                     param_hint="--stages")
    return chosen
