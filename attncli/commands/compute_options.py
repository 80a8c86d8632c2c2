"""`attn compute`'s options, declared once (commands/spec.py makes the Typer parameters, the
document's settings and the README's list from this table). An option with a `key` sets that key
of the input document (attncli/document/schema.py) over the file's; one without is a view option.

The documented overrides (README "Input"): a matrix option replaces the file's key (`--mask` its
whole mask rule, in the loader); `--alibi` and `--alibi-slopes` together make the `alibi` key;
each `--rope-…` option replaces its own field of the file's `rope` object; `--invert-mask` changes how the
mask matrix is read. Light: no numpy (start-up reads this table).
"""

from attncli.base import names  # the tables' names without numpy (start-up)
from attncli.base.choices import ACCUMULATE, CARRIES, DTYPES, MASKED_ROWS, ROPE_STYLES, STORE
from attncli.base.rule_words import WINDOW_ENDS, masked_rows_help, sliding_window, window_condition
from attncli.commands import option_text as opt
from attncli.commands.edge import AUTO_HELP, formats
from attncli.commands.spec import Option
from attncli.problem import variants  # the records, without numpy (start-up)
from attncli.render import formats as registry


def views() -> tuple[str, ...]:
    """What --stages may name: the inputs, every stage of the stage table, the backward pass's
    stages and its grads (shown when there is a dO), the heatmap."""
    return ("inputs",) + names.STAGES + names.GRADIENTS + (names.GRADS, "heatmap")


def _format_help() -> str:
    """--format's help, from the format records (attncli/render/formats.py)."""
    return (f"{AUTO_HELP} (text with --explain or --heatmap); "
            + "; ".join(f"{f.name}: {f.help}" for f in registry.views() if f.name not in ("table", "json")) + ".")


def _output_help() -> str:
    """--output's help: each suffix and the format it writes, from the format records."""
    written = [f"{suffix} ({f.help if f.binary else f.name})" for f in registry.FORMATS for suffix in f.suffixes]
    return f"Write to FILE instead of stdout, as its suffix says: {registry.listed(written)}; atomically."


MATRICES = "Matrices (a path or inline text)"
MASKING, ROPE, VARIANTS_PANEL, OUTPUT, LEARNING = "Masking", "Positions (RoPE)", "Variants", "Output", "Learning"
PRECISION = "Precision (docs/explanations/precision.md)"


def _matrix(name: str, key: str, help: str) -> Option:
    return Option(name, help, key=key, matrix=True, panel=MATRICES)


def _one_value(flag: str):
    """--softcap 30, --sinks 0.5: one number alone as itself, several as a list (an empty, none or
    null value is refused: an option is off when it is left out)."""
    return lambda text: opt.one(opt.values(text, flag))


def variant_options() -> tuple[Option, ...]:
    """Each variant's options, from its record (attncli/problem/variants.py, which loads no numpy):
    `--NAME VALUE` (one number alone, several as a list), an on/off switch, or a part of a key that
    several options make (joined by PARTS)."""
    found = []
    for variant in variants.VARIANTS:
        for flag in variant.options:
            name = flag.name or variant.name
            read = None if flag.part or flag.switch else _one_value("--" + name.replace("_", "-"))
            found.append(Option(name, flag.help, key=variant.name, part=flag.part, read=read, metavar=flag.metavar,
                                type=bool if flag.switch else str, panel=VARIANTS_PANEL))
    return tuple(found)


def _listed(flag: str):
    """--q-positions 0,1,5, --window 2,none: the JSON list the text stands for (a whole value that
    is empty, none or null is refused, naming `flag`)."""
    return lambda text: opt.values(text, flag)


OPTIONS: tuple[Option, ...] = (
    Option("file", "JSON problem file, or - for stdin (read when piped and no file is named).", argument=True),
    _matrix("q", "Q", "Queries Q (Lq × d_k; 3-D: heads × Lq × d_k)."),
    _matrix("k", "K", "Keys K (Lk × d_k)."),
    _matrix("v", "V", "Values V (Lk × d_v)."),
    _matrix("x", "X", "Inputs X (L × d_model), instead of Q/K/V."),
    _matrix("x_kv", "X_kv", "Cross-attention: keys and values come from X_kv."),
    _matrix("wq", "W_Q", "W_Q (d_model × d_out): Q = X W_Q."),
    _matrix("wk", "W_K", "W_K: K = X_kv W_K."),
    _matrix("wv", "W_V", "W_V: V = X_kv W_V."),
    _matrix("wo", "W_O", "W_O (heads·d_v × d_out): output = concat(heads) W_O."),
    Option("do", "The backward pass: dO, the gradient of a loss by the final output (its shape), as a path or "
           "inline text, or ones (the gradient of its sum). Adds the gradient tables (d_V, d_weights, D, "
           "d_scores, d_Q, d_K) and grads, one per input.",
           key="dO", matrix=True, metavar="PATH|TEXT|ones", panel="Backward pass"),
    Option("mask", "causal | causal_lower_right | a true/false matrix (Lq × Lk), true = may attend.",
           key="mask", matrix=True, panel=MASKING),
    Option("bias", "Additive bias (Lq × Lk), added after scaling; -inf or null = blocked.",
           key="bias", matrix=True, panel=MASKING),
    Option("invert_mask", "Read a true/false mask matrix with true as BLOCKED (nn.MultiheadAttention's "
           "convention).", key="mask", modifier=True, type=bool, panel=MASKING),
    Option("q_positions", "Query positions (default 0 to Lq−1): 4 or 4,5,6. A KV-cache step is one query "
           "at position t.", key="q_positions", read=_listed("--q-positions"), panel=MASKING),
    Option("k_positions", "Key positions (default 0 to Lk−1): 0,1,2,5.", key="k_positions", read=_listed("--k-positions"),
           panel=MASKING),
    Option("window", f"Sliding window LEFT,RIGHT: query i sees key j when {window_condition('LEFT', 'RIGHT')} "
           f"({WINDOW_ENDS}); none (or empty) = unbounded: 2,none. {sliding_window()}.",
           key="window", read=_listed("--window"), metavar="L,R", panel=MASKING),
    Option("key_mask", "Key padding, one per key: 1,1,0; 1/true = a real key (Hugging Face attention_mask; "
           "the inverse of nn.MultiheadAttention's key_padding_mask).", key="key_mask", read=_listed("--key-mask"),
           panel=MASKING),
    Option("prefix", "Prefix-LM (T5, PaLM): every query sees the first P keys (k_pos < P) in both directions, the "
           "others causally: query i sees key j when k_pos < P or k_pos ≤ q_pos. Widens the causal rule "
           "(--mask causal or causal_lower_right; causal when --mask is not given); 0: causal alone.",
           key="prefix", type=int, low=0, metavar="P", panel=MASKING),
    Option("rope", "Rotary positions (RoPE): rotate each head's Q and K by q_positions and k_positions before "
           "scores (default style half, base 10000, every dim).", key="rope", part="on", type=bool, panel=ROPE),
    Option("rope_style", "half: dim i pairs with i + dims/2 (Hugging Face Llama rotate_half; default); "
           "interleaved: 2i with 2i+1 (GPT-J rotate_every_two). Implies --rope.",
           key="rope", part="style", choices=ROPE_STYLES, panel=ROPE),
    Option("rope_base", "θ_i = BASE^(−2i/dims) (default 10000; Llama 3: 500000). Implies --rope.",
           key="rope", part="base", type=float, panel=ROPE),
    Option("rope_dims", "Rotate only each head's first DIMS dims, an even number ≤ d_k (partial rotary, as "
           "GPT-NeoX rotary_pct; default d_k). Implies --rope.", key="rope", part="dims", type=int, panel=ROPE),
    Option("masked_rows", f"A query whose every key is masked: {masked_rows_help()}. A warning names such rows.",
           key="masked_rows", choices=MASKED_ROWS, panel=MASKING),
    *variant_options(),
    Option("heads", "Split the feature axis of 2-D Q/K/V into this many contiguous heads.", key="heads", type=int),
    Option("scale", "Scale for Q Kᵀ (default 1/√d_k): a number, a fraction (1/1.4142) or a root (1/sqrt(2)).",
           key="scale", read=opt.scale, metavar="<number>"),
    Option("query_labels", "Row labels, comma-separated: it,they", key="query_labels", read=opt.labels("--query-labels")),
    Option("key_labels", "Key labels, comma-separated.", key="key_labels", read=opt.labels("--key-labels")),
    Option("dtype", "Arithmetic: float64 (default), float32, or bfloat16 and float16 (16 bits, computed by a "
           "recipe: --accumulate, --store; bfloat16 needs the ml-dtypes package). An overflow is an error in "
           "float64 and float32; bfloat16 and float16 (and --mask-fill, --no-max-subtraction, --error: the "
           "precision lab) show it, inf and NaN as stored, with a warning naming where the first was born.",
           key="dtype", choices=DTYPES,
           panel=PRECISION),
    Option("accumulate", "bfloat16, float16: where products, sums and the softmax are computed: float32 (default, "
           "as PyTorch's CPU kernels) or same (every operation rounded to the dtype).", key="accumulate",
           choices=ACCUMULATE, panel=PRECISION),
    Option("store", "bfloat16, float16: stages (default: each stage stored in the dtype, as transformers' eager "
           "attention) or output (only the output, as PyTorch's SDPA).", key="store", choices=STORE,
           panel=PRECISION),
    Option("mask_fill", "What a masked score becomes: -inf (default), min (the dtype's most negative finite "
           "number, as transformers), -1e4, -1e9 or any number; a finite fill lets masked keys through.",
           key="mask_fill", read=opt.mask_fill, metavar="-inf|min|NUMBER", panel=PRECISION),
    Option("no_max_subtraction", "The softmax takes e^x without subtracting each row's max (the naive way, to "
           "see where it overflows).", key="max_subtraction", type=bool, read=lambda flag: False,
           panel=PRECISION),
    Option("error", "Each stage's error against a float64 reference: absolute, relative and in ulps of the "
           "dtype (tables and JSON).", type=bool, panel=PRECISION),
    Option("format", _format_help(), flags=("--format", "-f"), panel=OUTPUT, default="auto",
           choices=formats("Format", "auto", *(f.name for f in registry.views()))),
    Option("stages", f"Comma-separated stages to show: {', '.join(views())}.", panel=OUTPUT),
    Option("precision", "Decimals in tables.", type=int, low=0, high=17, default=4, panel=OUTPUT),
    Option("round_", "Round JSON numbers to N decimals (default: full precision).", flags=("--round",),
           type=int, low=0, high=17, panel=OUTPUT),
    Option("explain", "Show the hand calculation, step by step, instead of the tables.", type=bool,
           panel=LEARNING),
    Option("carry", "With --explain: exact (default; exact arithmetic, rounded display, a note where printed "
           "numbers do not give the printed result) or rounded (a learner carrying --precision decimals on a "
           "calculator: each step re-types the numbers printed before it, except a key's logit, unrounded on "
           "the display from its dot product to e^x; √d_k is not rounded; a line whose printed operand gives "
           "another result says so).", choices=CARRIES, panel=LEARNING),
    Option("row", "With --explain: a query row to explain (repeatable), by label or by index: #N is always "
           "index N, a plain N only when no label is N (a label wins); a label several queries share is "
           "refused, listing their #N.", type=list, metavar="LABEL|#INDEX", panel=LEARNING),
    Option("head", "Only this head: its tables, heatmap and explanation (the page opens on it). JSON and array "
           "files keep every head, a whole problem that reads back.", type=int, panel=LEARNING),
    Option("query", "Queries to look at, by label or index (repeatable, or comma-separated: it,#3): never elided "
           "from a table or heatmap (nor their largest weights), and the rows --explain explains. A label is the "
           "token as given or as read (Ġit: it), or a word of several tokens (scooter: sc ##oot ##er, by the "
           "word ids attn capture stores); #N is always index N; a label found twice is refused, naming both.",
           type=list, metavar="LABEL|#INDEX", panel=OUTPUT),
    Option("key", "Keys to look at, as --query names queries: never elided from a table or heatmap.", type=list,
           metavar="LABEL|#INDEX", panel=OUTPUT),
    Option("heatmap", "Draw the weights as a shaded grid, alone (as --stages heatmap; beside tables: --stages "
           "weights,heatmap).", type=bool, panel=LEARNING),
    Option("layer", "A document of several layers (attn capture --layer all): the layers to compute, from 0: one "
           "(3), several (3,7-9) or all (the default). Several are shown one after another as tables, as one "
           "JSON document with a layers list, or as one page (-o page.html: a model view of every head).",
           metavar="N", panel=OUTPUT),
    Option("output_file", _output_help(), flags=("--output", "-o"), panel=OUTPUT),
    Option("full", "Print every row and column of big tables (default: elide the middle).", type=bool,
           panel=OUTPUT),
    Option("threads", "Threads that compute the output alone (--stages output, --output FILE.npy), in blocks of "
           "queries, BLAS on one thread in each: default every core; 1 for reproducible timing. The output is "
           "the same bit for bit with any number.", type=int, low=1, metavar="N", panel=OUTPUT),
    Option("tiles", "FlashAttention-2's tiled online softmax with BQ query rows and BK keys per tile: each tile's "
           "S, running max m, alpha = e^(m_old − m), running sum l and unnormalised O, then O / l, lse = m + ln l "
           "and the largest difference from the plain output. Tables or JSON (per head \"tiles\"); with "
           "--explain, one query row through the tiles. Shows only the output stage unless --stages says more.",
           metavar="BQ,BK", panel=LEARNING),
    Option("cost", "The forward pass's arithmetic instead of the stages: per stage the FLOPs and bytes read and "
           "written by the naive algorithm (every stage in main memory) and by FlashAttention-2's tiles for an "
           "on-chip memory of --sram bytes (B_c = ⌈M / 4·d·itemsize⌉ keys, B_r = min(B_c, d) queries; key "
           "blocks the mask hides are skipped), the KV-cache bytes per decoded token, FLOPs per byte of each. "
           "Computes no attention. Tables, JSON (\"cost\") or Markdown.", type=bool, panel=LEARNING),
    Option("sram", "With --cost: the on-chip memory M, in B, KiB, MiB, KB or MB (default 192KiB).",
           metavar="SIZE", panel=LEARNING),
)


def _alibi(parts: dict) -> tuple:
    """The `alibi` key from --alibi (the paper's slopes) or --alibi-slopes (these): one of them."""
    (paper, paper_flag), (slopes, slopes_flag) = parts["paper"], parts["slopes"]
    value = opt.alibi(paper, slopes)
    return value, {"alibi": slopes_flag if slopes is not None else paper_flag}


def _rope(parts: dict) -> tuple:
    """The `rope` key from --rope and the --rope-… options: any of them sets it; the loader lays
    the fields given over the file's rope object (true when only --rope is given: the file's
    fields or the defaults)."""
    fields = {part: parts[part] for part in ("style", "base", "dims") if parts[part][0] is not None}
    if not parts["on"][0] and not fields:
        return None, {}
    origin = {"rope": parts["on"][1]} | {f"rope.{part}": flag for part, (_, flag) in fields.items()}
    return {part: value for part, (value, _) in fields.items()} or True, origin


PARTS = {"alibi": _alibi, "rope": _rope}  # keys that several options make together
