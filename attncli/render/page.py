"""The explorer page: `attn compute FILE --format html` (or `-o page.html`), one self-contained
HTML file with every table the terminal view shows, heat-coloured, one tab per head; clicking a
number (or Enter on it) shows its hand calculation, the lines `--explain` prints for its row.

Views never compute: the tables are `render.tables.each_table`'s (the terminal's), the header is
`header_lines`, the derivations `render.page_derive` (the `--explain` code). Every number is stored
once, as the text of its table cell; the derivations are the explanation's lines, in a JSON block
the script reads. User text (labels, title, description, file name) reaches the page only through
render/escapes.py's `html_text` (text) and `script_json` (the JSON block); the Content-Security-Policy
allows only this page's own style and script, by hash.
"""

from __future__ import annotations

import base64
import hashlib
import math
import shlex

import numpy as np

from attncli.base.errors import InputError
from attncli.problem import recipes
from attncli.problem.trace import Trace
from attncli.render import page_whatif
from attncli.render.escapes import html_text, script_json
from attncli.render.page_assets import CSS, JS
from attncli.render.page_derive import derivations
from attncli.render.page_views import VIEWS_CSS, VIEWS_JS, layer_views
from attncli.render.tables import each_table
from attncli.render.text import header_lines, kept, labels, number
from attncli.render.tiles import tile_parts
from attncli.stages import grads
from attncli.stages.table import names as stage_names
from attncli.stages.table import present

KEEP = 32  # a table shows at most this many rows and columns (the first and last 16) unless --full
# The most value cells one page holds. Measured in headless Chromium on this machine (2 cores,
# load average 8): 9,000 cells (a 512 × 512 problem, every stage, elided) are interactive in
# 0.6 s, 40,000 (a 100 × 100 problem with --full) in 2.1 s, 262,000 (512 × 512 weights, --full)
# in 19 s and 24 MB. Past this a page would take more than about 1.5 s to open.
MAX_CELLS = 30_000
KEY_ROWS = ("K", "V", "K_rope", "d_K", "d_V")  # tables whose rows are keys, not queries
_MASKED_ON = stage_names()[stage_names().index("masked"):]  # the stages (and gradients) a mask has hidden keys in


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def policy(styles: tuple[str, ...] = (CSS,), scripts: tuple[str, ...] = (JS,)) -> str:
    """The Content-Security-Policy: nothing loads; only this page's styles and scripts run."""
    return (f"default-src 'none'; style-src {' '.join(map(_hash, styles))}; "
            f"script-src {' '.join(map(_hash, scripts))}; img-src 'none'; base-uri 'none'; form-action 'none'")


class Tables:
    """The page's tables, collected from `each_table` (the terminal's tables, in its order) and
    `tile_parts`: (section, html) pairs, section "inputs", a head number, or "all"."""

    def __init__(self, trace: Trace, precision: int, full: bool):
        self.trace, self.precision, self.full = trace, precision, full
        p = trace.problem
        self.queries, self.keys = labels(p.query_labels, p.lq), labels(p.key_labels, p.lk)
        masked = trace.stage("masked")
        self.blocked = None if masked is None else np.isneginf(masked)  # (H, Lq, Lk)
        self.parts: list[tuple[object, str]] = []
        self.rows: set[int] = set()  # the query rows some table shows
        self.cells = 0

    def show(self, title: str, matrix: np.ndarray, rows: list[str], columns: list[str] | None = None,
             extra=(), what=(None, None), keep=((), ())) -> None:
        name, head = what
        section = head if head is not None else "inputs" if name in self.trace.problem.inputs else "all"
        self.parts.append((section, self.table(title, matrix, rows, columns, extra, name or "", head, keep=keep)))

    def table(self, title: str, matrix: np.ndarray, rows: list[str], columns: list[str] | None, extra,
              name: str, head: int | None, tile: int | None = None, first_row: int = 0, keep=((), ())) -> str:
        """One titled table: a header row of keys (or column numbers), a row per query (or key);
        `keep`: the rows and columns never elided."""
        n_rows, n_cols = matrix.shape
        most = max(n_rows, n_cols) if self.full else KEEP
        row_ids, col_ids = kept(n_rows, most, keep[0]), kept(n_cols, most, keep[1])
        self.cells += sum(i is not None for i in row_ids) * (sum(j is not None for j in col_ids) + len(extra))
        key_rows = name in KEY_ROWS or (name.startswith(grads.GRADS + "/") and name[6:] in ("K", "V", "X_kv"))
        key_columns = columns is not None and matrix.shape[1] == self.trace.problem.lk and columns != [name]
        if not key_rows and n_rows == self.trace.problem.lq and head is not None:
            self.rows.update(first_row + i for i in row_ids if i is not None)
        after = name in grads.names() or name in _MASKED_ON
        blocked = self.blocked[head] if (self.blocked is not None and head is not None and key_columns
                                         and not key_rows and tile is None and after) else None
        levels = _levels(matrix, name, [i for i in row_ids if i is not None], [j for j in col_ids if j is not None])
        born = getattr(self.trace.precision, "nonfinite", None)  # the precision lab's first inf or NaN: marked
        born = (born.query - first_row, born.key) if born is not None and (born.stage, born.head) == (name, head) \
            and tile is None else None
        h = "" if head is None else str(head)
        common = f' data-stage="{html_text(name)}" data-head="{h}"' + ("" if tile is None else f' data-tile="{tile}"')
        out = [f'<h2>{html_text(title)}</h2>\n<table data-title="{html_text(title)}"><thead><tr><th></th>']
        for j in col_ids:
            if j is None:
                out.append("<th>⋯</th>")
                continue
            text = html_text(columns[j]) if columns is not None else str(j)
            key = f' data-key="{text}"' if key_columns else ""
            out.append(f'<th data-col="{j}"{key}>{text}</th>')
        out += [f'<th data-col="{html_text(extra_name)}">{html_text(extra_name)}</th>' for extra_name, _ in extra]
        out.append("</tr></thead><tbody>\n")
        focusable = True
        for i in row_ids:
            if i is None:
                out.append('<tr><th>⋮</th>' + "<td>⋮</td>" * (len(col_ids) + len(extra)) + "</tr>\n")
                continue
            text = html_text(rows[i])
            who = "data-key" if key_rows else "data-query" if n_rows == len(self.queries) or tile is not None else ""
            out.append(f'<tr><th data-row="{first_row + i}"' + (f' {who}="{text}"' if who else "") + f">{text}</th>")
            for j in col_ids:
                if j is None:
                    out.append("<td>⋯</td>")
                    continue
                mark = "x" if blocked is not None and blocked[i, j] else levels[i][j]
                if born == (i, j):
                    mark = f'{mark} nf" title="{html_text(self.trace.precision.nonfinite.cause)}'.strip()
                mark = f' class="{mark}"' if mark else ""
                focus = ' tabindex="0"' if focusable else ""
                focusable = False
                out.append(f'<td{mark}{common} data-row="{first_row + i}" data-col="{j}"{focus}>'
                           f"{number(matrix[i, j], self.precision)}</td>")
            for extra_name, values in extra:
                out.append(f'<td data-stage="{html_text(extra_name)}" data-head="{h}" data-row="{first_row + i}" '
                           f'data-col="{html_text(extra_name)}">{number(values[i], self.precision)}</td>')
            out.append("</tr>\n")
        out.append("</tbody></table>\n")
        return "".join(out)

    def tiles(self, tiled, heads: list[int]) -> list[str]:
        """The tile tables, per head (in each head's section), and the tile view's lines of text."""
        notes = []
        for h in heads:
            blocks = iter([t for t in tiled.tiles if not t.skipped for _ in range(3)])
            count = 0
            for part in tile_parts(tiled, self.trace, self.precision, [h]):
                if isinstance(part, str):
                    if h == heads[0] or not part.startswith(("tiled online", "max |")):
                        (notes if not part.startswith("tile ") else self._text(h)).append(part)
                    continue
                title, matrix, names, columns, extra = part
                tile = next(blocks, None)
                count += 1
                first = 0 if tile is None or title.startswith("output") else tile.q_block[0]
                number_ = None if tile is None or title.startswith("output") else tiled.tiles.index(tile) + 1
                keys = None if columns is None else columns
                self.parts.append((h, self.table(title, matrix, names, keys, extra, "tiles", h,
                                                 tile=number_ if number_ else 0, first_row=first)))
        return notes

    def _text(self, h):
        lines: list[str] = []
        self.parts.append((h, lines))
        return lines


def escape_lines(lines: list[str]) -> str:
    """Lines of user text (or text holding it) for a <pre>: each escaped, joined by line breaks."""
    return "\n".join(html_text(line) for line in lines)


def _levels(matrix: np.ndarray, name: str, rows: list[int], cols: list[int]) -> dict:
    """The shown cells' heat classes ({row: {col: class}}): weights by their value (0 to 1), other
    tables by their share of the table's largest finite magnitude; negative values in the second
    colour. The magnitude is one pass over the matrix; classes are made only for the cells shown (a
    4000 × 4000 table made 16 million strings for the 1,024 cells a page shows: 48 s, 4.8 GB)."""
    if name == "weights":
        most = 1.0
    else:
        finite = np.isfinite(matrix)
        most = float(np.abs(matrix if finite.all() else matrix[finite]).max(initial=0.0)) or 1.0
    shown = matrix[np.ix_(rows, cols)].astype(np.float64)
    shown = np.where(np.isfinite(shown), shown, 0.0)
    level = np.clip(np.rint(np.abs(shown) / most * 9), 0, 9).astype(int)
    return {i: {j: "" if level[a, b] == 0 else ("n" if shown[a, b] < 0 else "p") + str(level[a, b])
                for b, j in enumerate(cols)} for a, i in enumerate(rows)}


def collect(trace: Trace, stages, precision: int = 4, full: bool = False, tiled=None, picked=((), ()),
            fallback: tuple[str, ...] | None = None) -> tuple[Tables, list[str]]:
    """The page's tables (and the tile view's notes), refused past MAX_CELLS before any text is
    joined; the same tables a notebook shows. `fallback`: the stages shown instead when the ones
    asked for would not fit (the default stages of a real model's layer: its weights), else refused."""
    tables = Tables(trace, precision, full)
    notes = tables.tiles(tiled, list(range(trace.problem.heads))) if tiled is not None else []
    shown_stages = tuple(stages) + (("weights",) if "heatmap" in stages and "weights" not in stages else ())
    each_table(trace, shown_stages, tables.show, precision, picked=picked)
    if tables.cells > MAX_CELLS and fallback is not None and tiled is None:
        smaller, _ = collect(trace, fallback, precision, full, None, picked)
        has = ("inputs", *(s.name for s in present(trace.problem)), *(grads.names() if trace.gradients else ()))
        left = [s for s in shown_stages if s not in fallback and s in has]
        return smaller, [f"this page shows {', '.join(fallback)} alone: every stage would be {tables.cells:,} numbers, "
                         f"more than a page opens quickly ({MAX_CELLS:,}); --stages {','.join(left + list(fallback))} "
                         "asks for the others (--query LABEL keeps a row in view)"]
    if tables.cells > MAX_CELLS:
        fit = MAX_CELLS * trace.problem.lq // tables.cells
        raise InputError(f"would hold {tables.cells:,} numbers; a page holds at most {MAX_CELLS:,} (more takes "
                         f"seconds to open), which with --full and these stages is {fit:,} of its "
                         f"{trace.problem.lq:,} queries: drop --full (tables then show their first and last 16 rows and columns), "
                         "or choose fewer stages (--stages weights)", "--output")
    return tables, notes


def sections(trace: Trace, tables: Tables) -> list[tuple[str, str]]:
    """The tables grouped, as (name, html): the inputs, one section per head, every head's tables."""
    p = trace.problem
    order = [("inputs", "inputs")] + [(h, f"head {h}") for h in range(p.heads)] + [("all", "every head")]
    found = []
    for key, name in order:
        parts = [part if isinstance(part, str) else f'<pre class="note">{escape_lines(part)}</pre>'
                 for section, part in tables.parts if section == key]
        if parts:
            found.append((name, "".join(parts)))
    return found


def tabbed(parts: list[tuple], tabs: bool = True) -> str:
    """Sections of (name, html) or (name, html, label): with `tabs`, a tab each (the script shows
    one at a time; print and a page without script show them all), else each under its label. The
    name makes the ids (ours, never user text); the label (default: the name) is the text shown,
    escaped, so it may be a file's name."""
    out = []
    if tabs and parts:
        out.append('<nav role="tablist" aria-label="sections">')
        out += [f'<button role="tab" id="tab-{_id(name)}" aria-controls="part-{_id(name)}" type="button">'
                f"{html_text(label[0] if label else name)}</button>" for name, _, *label in parts]
        out.append("</nav>")
    for name, html_, *label in parts:
        out.append(f'<section id="part-{_id(name)}" role="tabpanel" aria-labelledby="tab-{_id(name)}">' if tabs
                   else f"<section><h2>{html_text(label[0] if label else name)}</h2>")
        out += [html_, "</section>"]
    return "\n".join(out)


def _id(name: str) -> str:
    """A section's id from its name (ours, never user text): "head 1" -> "1", "every head" -> "all"."""
    return {"every head": "all"}.get(name, name.removeprefix("head ").replace(" ", "-"))


def notebook(trace: Trace, stages, precision: int = 4) -> str:
    """The page's tables for Jupyter: the header, the style and every section, no script."""
    tables, _ = collect(trace, stages, precision)
    header = escape_lines(header_lines(trace, precision))
    return (f'<div class="attn"><style>{CSS}</style><pre class="header">{header}</pre>'
            f"{tabbed(sections(trace, tables), tabs=False)}</div>")


def page(trace: Trace, stages, precision: int = 4, full: bool = False, tiled=None, source: str | None = None,
         explanation: list[str] | None = None, carry: str = "exact", picked=((), ()), chosen: bool = True,
         views: tuple | None = None) -> str:
    """The whole page as text (see the module docstring). `source`: the problem's file name, for
    the page title and the commands a derivation names; `carry`: --explain's --carry; `picked`: the
    query and key positions --query and --key name (never elided; their rows explained first);
    `chosen`: the stages were asked for (else, too many numbers for a page, the weights alone);
    `views`: a captured layer's (number, word ids): a first tab of render/page_views.py's views."""
    p = trace.problem
    tables, notes = collect(trace, stages, precision, full, tiled, picked, None if chosen or full else ("weights",))
    first = [i for i in picked[0] if i in tables.rows]
    # --query's rows first (a precision lab run's row that holds an inf or a NaN stops where it is born)
    found = derivations(trace, first + sorted(tables.rows - set(first)), precision, tiled, carry)
    data = {"rows": found["rows"], "tiles": found["tiles"], "why": found.get("why"), "heads": p.heads,
            "command": "attn compute " + (shlex.quote(source) if source and source != "-" else "FILE")
            + "".join(f" {flag}" for flag in lab_flags(p)) + (f" --precision {precision}" if precision != 4 else "") + (" --carry rounded" if carry == "rounded" else ""),
            "given": ["Q", "K", "V"] + list(p.inputs), "keyRows": [n for n in KEY_ROWS if n not in ("K", "V")]}
    data["whatif"] = page_whatif.data(trace, precision, tiled, tables)  # render/page_whatif.py: edit an input, see the stages change
    title = p.title or (source if source and source != "-" else "attention")
    lines = header_lines(trace, precision)
    header = escape_lines([line for n, line in enumerate(lines) if not (n == 1 and p.title)])  # the title: the h1
    missing = sorted(found["missing"])
    body = [(f'<p class="note">{_rows_text(missing)} {"are" if len(missing) > 1 else "is"} not explained on this '
             "page (a hand calculation of this size takes about a second a row; --query LABEL chooses the rows "
             "explained): clicking one of their numbers names the command that explains it.</p>") if missing else ""]
    body += [f'<pre class="note">{html_text(line)}</pre>' for line in notes]
    body.append(page_whatif.panel(data["whatif"], trace))  # above the tabs
    born = getattr(trace.precision, "nonfinite", None)
    if born is not None:  # the precision lab's first inf or NaN, its cell outlined in its table
        body.append(f'<p class="note">{html_text(born.line())} (outlined below).</p>')
    if explanation:
        body.append(f'<h2>explanation</h2><pre>{escape_lines(explanation)}</pre>')
    parts, more = sections(trace, tables), ("", "")
    if views is not None and trace.stage("weights") is not None:  # a captured layer: its heads' views, a tab
        tab = layer_views(trace, *views, picked, precision, command=data["command"])
        parts, more = [("views", tab)] + parts, (VIEWS_CSS, VIEWS_JS)
    body.append(tabbed(parts))
    intro = ("Click a number, or move with the arrow keys and press Enter, to see how it was calculated. "
             "Hatched cells are masked.")
    return document(title, header, body, script_json(data), intro, more)


def lab_flags(p) -> list[str]:
    """The options that make a run the one the page shows, beyond the problem's file: its dtype, recipe,
    mask fill and softmax (a derivation's command must explain the same numbers)."""
    flags = [f"--dtype {p.dtype}"] if p.dtype != "float64" else []
    recipe = recipes.recipe(p)
    if recipe is not None:
        flags += [f"--accumulate {recipe.accumulate}"] * (recipe.accumulate != "float32")
        flags += [f"--store {recipe.store}"] * (recipe.store != "stages")
    if p.mask_fill != -math.inf:
        flags.append(f"--mask-fill {shlex.quote(str(p.mask_fill))}")
    return flags + ["--no-max-subtraction"] * (not p.max_subtraction)


def _rows_text(rows: list[int]) -> str:
    """"Rows 1–8, 10–14" (runs of consecutive rows), or "Row 3"."""
    runs, start = [], rows[0]
    for a, b in zip(rows, rows[1:] + [None]):
        if b != a + 1:
            runs.append(str(start) if start == a else f"{start}–{a}")
            start = b
    return ("Rows " if len(rows) > 1 else "Row ") + ", ".join(runs)


def document(title: str, header: str, body: list[str], data: str, intro: str, more: tuple[str, str] = ("", "")) -> str:
    """The page around its body: the policy, the style, the title (user text: escaped here), the
    header (escaped lines), the derivation panel, the data block (script_json) and the script.
    `more`: a style and a script of its own beside the page's (render/page_views.py's)."""
    styles, scripts = (CSS, more[0]) if more[0] else (CSS,), (JS, more[1]) if more[1] else (JS,)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
            f'<meta http-equiv="Content-Security-Policy" content="{policy(styles, scripts)}">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{html_text(title)}</title>\n" + "".join(f"<style>{s}</style>" for s in styles) + "</head>\n"
            f'<body class="attn">\n<h1>{html_text(title)}</h1>\n'
            + (f'<pre class="header">{header}</pre>\n' if header else "")
            + f'<p class="note">{html_text(intro)}</p>\n' + "\n".join(body)
            + '\n<aside id="derivation" aria-live="polite"><p class="note">Click a number to see its '
            "derivation.</p></aside>"
            f'\n<script type="application/json" id="attn-data">{data}</script>\n'
            + "".join(f"<script>{s}</script>\n" for s in scripts) + "</body></html>\n")
