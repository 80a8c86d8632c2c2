"""`attn compute`: its options, and the plan made from them before numpy loads (the view, the
stages shown, the output alone or every stage, the output file); compute_run.py does the work."""

import sys
from types import SimpleNamespace
from typing import Annotated, Optional

import typer

from attncli import names  # the stage table's names without numpy, which loads after one_blas_thread
from attncli.blas import one_blas_thread
from attncli.choices import CARRIES, DTYPES, MASKED_ROWS, ROPE_STYLES
from attncli.commands import option_text as opt
from attncli.commands.edge import AUTO_HELP, auto_is_table, choices, formats
from attncli.errors import InputError, quote
from attncli.render.target import OutputError, check_target
from attncli.rule_words import WINDOW_ENDS, masked_rows_help, sliding_window, window_condition

Format = formats("Format", "auto", "table", "json", "markdown", "latex", "csv")
MaskedRows = choices("MaskedRows", MASKED_ROWS)
Carry = choices("Carry", CARRIES)
RopeStyle = choices("RopeStyle", ROPE_STYLES)
DType = choices("DType", DTYPES)

SUFFIX_FORMATS = {".md": "markdown", ".tex": "latex", ".csv": "csv"}  # --output's text files
TEXT_ONLY_FORMATS = ("markdown", "latex", "csv")  # formats with no tile view


def views() -> tuple[str, ...]:
    """What --stages may name: the inputs, every stage of the stage table, the backward pass's
    stages and its grads (shown when there is a dO), the heatmap."""
    return ("inputs",) + names.STAGES + names.GRADIENTS + (names.GRADS, "heatmap")


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
        help=f"Sliding window LEFT,RIGHT: query i sees key j when {window_condition('LEFT', 'RIGHT')} "
             f"({WINDOW_ENDS}); none (or empty) = unbounded: 2,none. {sliding_window()}.",
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
        help=f"A query whose every key is masked: {masked_rows_help()}. A warning names such rows.",
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
    window L,R: q_pos − L ≤ k_pos ≤ q_pos + R (bounds inclusive); key mask 1 = a real key;
    mask, bias, causal, window and key mask combine with AND;
    softcap: c·tanh(scaled/c) before bias and masks; ALiBi adds −slope·|q_pos − k_pos| (a penalty);
    sinks: softmax over the keys and one sink logit per head, which is dropped (rows sum to < 1);
    W_Q is (d_model × d_out) and Q = X W_Q (PyTorch's Linear.weight is its transpose);
    rope half pairs dim i with i + dims/2 (Llama rotate_half), interleaved 2i with 2i+1 (GPT-J),
    θ_i = base^(−2i/dims), angle = position · θ_i: attn example rope | attn compute --explain.
    """
    given = dict(locals())  # every option by name; a choice (an Enum) as its word below
    options = SimpleNamespace(**{name: getattr(value, "value", value) for name, value in given.items()})
    chosen = plan(options, stdin_is_terminal=sys.stdin.isatty())
    if chosen.output_only:
        chosen.workers = one_blas_thread()  # before numpy loads
    # The one import kept inside a function, for start-up: numpy, the core and the views load when
    # compute runs, so that `attn --version` and `attn --help` never import numpy.
    from attncli.commands.compute_run import run

    run(options, chosen)


def plan(o: SimpleNamespace, stdin_is_terminal: bool) -> SimpleNamespace:
    """What compute will do, decided from its options alone (before any input is read): `shown`
    (the --stages words), `format` (--output's suffix decides it), `view` (what is printed or
    written: table, json, markdown, latex or csv), `written` (what is built: a view, or npz, npy),
    `suffix`, `tile_sizes`, `stdin` ("-" when the document comes from a pipe) and `output_only`
    (only the output is computed, in blocks). Usage errors are raised here."""
    tile_sizes = opt.tile_sizes(o.tiles)
    gradients = names.GRADIENTS + (names.GRADS,)
    # --tiles shows the tiles and the output alone unless asked for more; --do adds the backward pass.
    tiled_default = "output" if o.do is None else ",".join(("output",) + gradients)
    shown = _stages(o.stages if o.stages is not None or tile_sizes is None else tiled_default) + (
        ("heatmap",) if o.heatmap else ())
    if o.carry is not None and not o.explain:
        raise InputError("chooses how --explain carries its numbers; add --explain", "--carry")
    stdin = "-" if o.file is None and not stdin_is_terminal else None  # read when piped and no file is named
    inputs = [o.file, stdin, o.q, o.k, o.v, o.x, o.x_kv, o.wq, o.wk, o.wv, o.wo, o.mask, o.bias]
    suffix = o.output_file and _output_suffix(o.output_file, inputs)
    format = _file_format(o.format, o.output_file, suffix)
    if tile_sizes is not None and (format in TEXT_ONLY_FORMATS or suffix in (".npy", ".npz")):
        raise InputError("shows its tiles as tables or JSON only; drop --tiles, or use --format table "
                         "or json (--output FILE.json)", "--tiles")
    if format == "csv" and (len(shown) != 1 or shown[0] in ("inputs", "heatmap") + gradients):
        others = ", ".join(name for name in names.STAGES if name != "weights")
        raise typer.BadParameter(f"--format csv writes one stage: add --stages weights (or {others})",
                                 param_hint="--stages")
    # Only the output is needed: compute it in blocks (bounded memory), one BLAS thread per worker.
    output_only = (not o.explain or tile_sizes is not None) and "heatmap" not in shown and (
        suffix == ".npy" or (suffix != ".npz" and set(shown) == {"output"}))
    need_input(o.file, {"Q": o.q, "K": o.k, "V": o.v, "X": o.x}, stdin_is_terminal)
    view = format
    if o.output_file:  # a file's suffix decides: .md, .tex, .csv as their formats (checked above), else JSON
        view = format if suffix in SUFFIX_FORMATS else "json"
    elif view == "auto":
        view = "table" if auto_is_table(text_only=o.explain or "heatmap" in shown) else "json"
    # what is built: json, npz, npy, or a text view
    written = suffix[1:] if o.output_file and suffix not in SUFFIX_FORMATS else view
    return SimpleNamespace(shown=shown, format=format, view=view, written=written, suffix=suffix,
                           tile_sizes=tile_sizes, stdin=stdin, output_only=output_only, workers=1)


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
    for name in chosen:
        if name not in views():
            raise typer.BadParameter(f'unknown stage {quote(name)}; expected some of {",".join(views())}',
                                     param_hint="--stages")
    return chosen
