"""How numbers, labels and the header are written in every text view.

User text (labels, title, description, file names) reaches a view only through `shown` (or
`labels` and `header_lines`, which use it): controls, separators and bidi characters become
visible `\\uXXXX` escapes. Rich renders it only as `rich_text(...)`, never as a str it would
parse as markup. Each export then escapes for its own medium (export.py).
"""

from __future__ import annotations

import math

from attncli.base.errors import plural, visible
from attncli.base.rule_words import masked_rows_words
from attncli.base.tokens import readable
from attncli.problem import recipes
from attncli.problem.groups import header_line as groups_line
from attncli.problem.masks import positions_line, rule_lines
from attncli.problem.trace import Trace
from attncli.problem.variants import variant_lines

MINUS_INF = "−∞"  # U+2212, one spelling in every text view (CSV writes -inf, JSON null)
EDGE_ROWS = 5  # a table taller than 2·EDGE_ROWS shows its first and last EDGE_ROWS rows
MAX_COLUMNS = 16  # without --full, at most this many columns, first and last halves
# On a terminal, a table or heatmap whose every column fits in this many column ranges is split
# into them instead of elided (past MAX_COLUMNS too); only a wider one is elided, then split.
RANGES = 3


def kept(n: int, keep: int, always=()) -> list[int | None]:
    """Which of n rows (or columns) an elided table or grid shows: all of range(n), or its first
    and last keep/2 and every index in `always` (the ones picked, the largest weights), in order,
    with a None standing for each elided run."""
    if n <= keep:
        return list(range(n))
    ends = set(range((keep + 1) // 2)) | set(range(n - keep // 2, n))
    shown = sorted(ends | {i for i in always if 0 <= i < n})
    found: list[int | None] = []
    for i in shown:
        if found and found[-1] != i - 1:
            found.append(None)
        found.append(i)
    return found


def elided(ids: list[int | None], n: int) -> str:
    """The indices a None stands for, in words: "5–8, 10–14"."""
    runs, last = [], -1
    for place, i in enumerate(ids):
        if i is None:
            after = ids[place + 1] if place + 1 < len(ids) else n
            runs.append(f"{last + 1}" if after - last == 2 else f"{last + 1}–{after - 1}")
        else:
            last = i
    return ", ".join(runs)


def elision(row_ids: list[int | None], col_ids: list[int | None], n_rows: int, n_cols: int, picked: bool) -> str:
    """A title's note on what an elided table leaves out: the middle, or (beside picked rows or
    keys, which are never elided) the rows and columns by number."""
    if None not in row_ids and None not in col_ids:
        return ""
    if not picked:
        return f" ({n_rows}×{n_cols}, middle elided: --full shows all)"
    parts = [f"{what} {elided(ids, n)}" for what, ids, n in (("rows", row_ids, n_rows), ("columns", col_ids, n_cols))
             if None in ids]
    return f" ({n_rows}×{n_cols}, {' and '.join(parts)} elided: --full shows all)"


def shown(text: str) -> str:
    """User text as every text view writes it: see `attncli.base.errors.visible`."""
    return visible(text)


def rich_text(text: str, style: str = "") -> "Text":
    """User text for rich: escaped by `shown`, and a `Text`, which rich never parses as markup
    (`[link=…]`, `[/]` and `:emoji:` stay literal)."""
    # Imported here, for start-up: the plain-text views (CSV, Markdown, LaTeX, the explanation in
    # JSON) use this module but never rich, which takes longer to load than numpy does.
    from rich.text import Text

    return Text(shown(text), style=style)


def number(x: float, precision: int) -> str:
    """A computed value: fixed decimals as textbooks round, −∞ as `MINUS_INF`, huge values in
    e-notation."""
    x = float(x)
    if x == -math.inf:
        return MINUS_INF
    text = f"{x:.{precision}e}" if abs(x) >= 1e15 else f"{x:.{precision}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text  # no "-0.0000"


def labels(names: list[str] | None, n: int) -> list[str]:
    """Row or column headers: the given labels as read (a tokenizer's `Ġit` as `it`:
    base/tokens.py) and escaped by `shown`, or indices."""
    return [shown(name) for name in readable(names)] if names else [str(i) for i in range(n)]


def shape_text(shape) -> str:
    return "×".join(str(n) for n in shape)


def exact_scale(trace: Trace) -> str | None:
    """1/√d_k written exactly (`1/√2`, or `1/2` when d_k = 4); None for a given scale."""
    if not trace.default_scale:
        return None
    root = math.isqrt(trace.d_k)
    return f"1/{root}" if root * root == trace.d_k else f"1/√{trace.d_k}"


def scale_text(trace: Trace, precision: int) -> str:
    exact = exact_scale(trace)
    value = number(trace.scale, precision)
    return f"1/√d_k = {exact} = {value}" if exact else f"{value} (given)"


def precision_lines(p) -> list[str]:
    """The precision lab's settings in words (attncli/problem/recipes.py): the recipe, the mask fill,
    the softmax without its max subtracted."""
    lines = []
    recipe = recipes.recipe(p)
    if recipe is not None:
        lines.append(f"recipe: {recipe.line(p.dtype)} (accumulate {recipe.accumulate}, store {recipe.store})")
    if p.mask_fill != -math.inf:
        stored = "" if recipes.fill_used(p) in ("−∞", recipes.fill_word(p)) else \
            f"; {p.dtype} stores it as {recipes.fill_used(p)}"
        lines.append(f"mask fill: {recipes.fill_word(p)} (a masked score becomes this, not −∞{stored})"
                     if recipes.fill_used(p) != "−∞" else
                     f"mask fill: {recipes.fill_word(p)}, past {p.dtype}'s range: a masked score becomes −∞")
    if not p.max_subtraction:
        lines.append("softmax: e^x without subtracting each row's max (--no-max-subtraction: it may overflow)")
    return lines


def header_lines(trace: Trace, precision: int) -> list[str]:
    """The problem in a few lines: shapes, scale and every convention that libraries disagree on."""
    p = trace.problem
    lines = ["attn · softmax(Q Kᵀ · scale + bias) V"]
    lines += [shown(p.title)] if p.title else []
    # A description may have line breaks (each its own header line); other controls stay escaped.
    lines += [shown(line) for line in p.description.replace("\r\n", "\n").split("\n")] if p.description else []
    shapes = " · ".join(f"{name} {shape_text(a.shape)}" for name, a in p.inputs.items())
    lines.append(f"{shapes} · {plural(p.heads, 'head')} · d_k = {trace.d_k} · "
                 f"d_v = {trace.d_v} · {p.dtype}")
    lines += [groups_line(p)] if groups_line(p) else []
    lines.append(f"scale = {scale_text(trace, precision)}")
    lines += [f"mask: {rule}" for rule in rule_lines(p)]
    if positions_line(p):
        lines.append(positions_line(p))
    if p.rope is not None:
        lines.append(f"rope: {p.rope.describe(trace.d_k)}")
    if p.bias is not None:
        lines.append("bias: added after scaling, before the mask; −∞ blocks")
    lines += variant_lines(p)
    lines += precision_lines(p)
    if trace.masked is not None and p.sinks is None and p.mask_fill == -math.inf:  # a finite fill: no dead rows  # with sinks such a row is all zero: its own line says so
        lines.append("rows with every key masked: " + masked_rows_words(p.masked_rows))
    if p.projected:
        lines.append("projections: Q = X W_Q, W is (d_in × d_out) (PyTorch's Linear.weight is Wᵀ)")
    if p.dO is not None:
        lines.append(f"backward: dO {shape_text(p.dO.shape)}, the gradient of a loss by the final output "
                     "(d_scores is by the scaled scores; a row with every key masked gets none)")
    lines.append("rows are queries, columns are keys")
    return lines
