"""The hand calculation of selected query rows, step by step, as a textbook writes it.

Every number is read from `steps.written` (exact or rounded carry); this module only writes them
down, with a note on each exact-carry line whose printed operands do not give its result. Labels
come through `labels` (escaped by `shown`): the lines are display text wherever they go (a
terminal, an export, or JSON's `explanation`); each export escapes them again for its medium.
"""

from __future__ import annotations

import re

import numpy as np

from attncli.base.errors import plural
from attncli.base.rule_words import masked_rows_words
from attncli.explain.roundings import rounding_lines, stop_line
from attncli.explain.steps import Written, WrittenFinal, refuse_unexplained, written, written_final
from attncli.hand.handwriting import MAX_KEYS, comparison, dot, more_keys, note, number, short, shown_keys, vector
from attncli.hand.stage_steps import Page
from attncli.problem import groups, visibility
from attncli.problem.masks import has_rules
from attncli.problem.trace import Trace
from attncli.render.explain_backward import backward_lines
from attncli.render.text import labels
from attncli.stages.table import fields, present

TOP_LISTED = 3  # a long row's hand calculation lists its this many largest weights, wherever they are


def explain_row(trace: Trace, w: Written, listed: list[int | None] | None = None) -> list[str]:
    """One row of one head: its inputs (projected when the problem gives X), then each present
    stage's lines as its hand step writes them, "Step N" numbered in order; `listed`: the keys
    each step lists (hw.shown_keys; default: the first and last)."""
    p, places = trace.problem, w.places
    keys = labels(p.key_labels, p.lk)
    listed = listed if listed is not None else shown_keys(p.lk)
    query = f'"{labels(p.query_labels, p.lq)[w.row]}"' if p.query_labels else str(w.row)
    width = max(len(keys[j]) for j in listed if j is not None) + 1
    page = Page(trace, w, keys, width, query, lambda name: fields(p, name), _rules(trace, w, query, keys, listed),
                has_rules(p), masked_rows_words(p.masked_rows, f"--masked-rows {p.masked_rows}"), listed)
    reads = groups.reads(p, w.head)
    head = f"Head {w.head}{f' ({reads})' if reads else ''}, query" if p.heads > 1 else "Query"
    if w.projection is None:
        lines, step = [f"{head} {query} (row {w.row}): q = {vector(w.q, places, short)}"], 1
    else:
        lines = [f"{head} {query} (row {w.row}): x = {vector(w.projection.x, places, short)}"]
        lines += _projection_lines(trace, w, keys, width, listed)
        step = 2
    for stage in present(p):
        if stage.name not in w.stages:  # a precision lab row stopped at its first inf or NaN
            break
        if not stage.hand.numbered:
            step -= 1  # its lines continue the step before
        lines += stage.hand.lines(page, w.stages[stage.name], step)
        step += 1
    if w.stopped is not None:
        lines.append(stop_line(trace, w.head, w.row))
    return lines


def _rules(trace: Trace, w: Written, query: str, keys: list[str],
           listed: list[int | None]) -> tuple[list[str], list[str | None] | None]:
    """(lines, why) with mask rules: the rule this query's keys must meet (its q_pos filled in)
    and, when the key positions are not 0 … Lk − 1, each key's k_pos; why each key is hidden
    (None where it is visible). ([], None) without rules."""
    p = trace.problem
    if not has_rules(p):
        return [], None
    why = visibility.hidden_because(p, w.head, w.row)
    lines = [f"  query {query} (q_pos {int(p.q_positions[w.row])}) may attend a key when "
             f"{visibility.row_rule(p, w.row)}" + ("; every key does" if all(x is None for x in why) else "")]
    if visibility.positions_shown(p):
        shown = ["…" if j is None else f"{keys[j]}={int(p.k_positions[j])}" for j in listed]
        lines.append("  k_pos: " + ", ".join(shown))
    return lines, why


def _product_lines(proj, name: str, unrounded, key: str, places) -> list[str]:
    """One line per column of a vector-matrix product x W (+ b): `name_j: (x0)(w0j) + … = r`."""
    lines = []
    for j in shown_keys(len(proj.result)):
        if j is None:
            lines.append(f"  … {len(proj.result) - MAX_KEYS + 1} more columns …")
            continue
        column = [row[j] for row in proj.W]
        lines.append(f"  {name}{j}: {dot(proj.x, column, places, None if proj.b is None else proj.b[j])} = "
                     f"{number(proj.result[j], places)}{note(unrounded, [(key, j)], places)}")
    return lines

def _projection_lines(trace: Trace, w: Written, keys: list[str], width: int, listed: list[int | None]) -> list[str]:
    """q = x W_Q (+ b_Q) as dot products over this head's columns; k and v of every key."""
    p, places, proj = trace.problem, w.places, w.projection
    first = w.head * trace.d_k
    columns = f"column{'s' * (trace.d_k > 1)} {first}" + (f"–{first + trace.d_k - 1}" if trace.d_k > 1 else "")
    plus_b = " + b_Q" if proj.b is not None else ""
    lines = [f"Step 1: project, q = x W_Q{plus_b} ({columns} of W_Q for this head)"]
    lines += _product_lines(proj, "q", w.unrounded, "q", places)
    source = "x_kv" if "X_kv" in p.inputs else "x"
    lines.append(f"  k = {source} W_K and v = {source} W_V the same way{_kv_columns(trace, w.head)}, for every key:")
    for place, j in enumerate(listed):
        if j is None:
            lines.append(more_keys(listed, place, p.lk))
            continue
        k, v = w.keys[j]
        lines.append(f"  {keys[j] + ':':<{width}} k = {vector(k, places)}   v = {vector(v, places)}")
    return lines


def _kv_columns(trace: Trace, h: int) -> str:
    """Grouped-query attention: the columns of W_K and W_V that query head h's kv head owns."""
    if not groups.grouped(trace.problem):
        return ""
    g = groups.kv_head(trace.problem, h)
    span = lambda d: f"{g * d}" + (f"–{g * d + d - 1}" if d > 1 else "")  # noqa: E731
    return f" (kv head {g}: columns {span(trace.d_k)} of W_K, {span(trace.d_v)} of W_V)"


def final_lines(trace: Trace, f: WrittenFinal, places: int, carry: str) -> list[str]:
    """One query row's heads side by side and, with W_O, their product with W_O (+ b_O)."""
    p = trace.problem
    query = f'"{labels(p.query_labels, p.lq)[f.row]}"' if p.query_labels else str(f.row)
    if f.projection is None:
        lines = [f"Query {query} (row {f.row}): the heads' outputs side by side",
                 f"  output = {vector(f.concat, places)}"]
        return lines
    proj = f.projection
    plus_b = " + b_O" if proj.b is not None else ""
    what = "heads side by side" if p.heads > 1 else "output projection"
    lines = [f"Query {query} (row {f.row}): {what}, output = concat W_O{plus_b}",
             f"  concat = {vector(f.concat, places)}"]
    lines += _product_lines(proj, "output", f.unrounded, "final", places)
    lines.append(f"  output = {vector(proj.result, places)}")
    if carry == "rounded":
        lines.append(comparison(proj.result, f.exact_final, places))
    return lines


def fold(line: str, width: int | None) -> list[str]:
    """One explanation line for a terminal `width` columns wide: broken between its terms (three
    spaces apart: `e^x = y   e^x = y   sum = s`) and before its `  (… unrounded)` note, the rest
    indented two more spaces, so that the terminal's own wrapping cannot split an equation
    (`sum =` / `22.0321`). A single term wider than the terminal is left for it to wrap."""
    if width is None or len(line) <= width:
        return [line]
    margin = len(line) - len(line.lstrip(" "))
    pieces = re.split(r"(   |  (?=\())", line[margin:])  # term, separator, term, …
    lines, current = [], " " * margin + pieces[0]
    for separator, piece in zip(pieces[1::2], pieces[2::2]):
        if len(current) + len(separator) + len(piece) <= width:
            current += separator + piece
        else:
            lines.append(current)
            current = " " * (margin + 2) + piece
    return lines + [current]


def listed_keys(trace: Trace, h: int, row: int, keep=(), full: bool = False, words=None) -> list[int | None]:
    """The keys the hand calculation of one row lists: every one (`full`), else the first and last,
    the ones in `keep` (picked by --key) and the row's TOP_LISTED largest weights, which matter most,
    each with the other tokens of its word (`words`: lists of key positions, base/tokens.words)."""
    weights = trace.weights[h, row]
    top = {int(j) for j in np.argsort(-weights, kind="stable")[:TOP_LISTED]}
    top |= {j for group in words or () if top & set(group) for j in group}
    return shown_keys(trace.problem.lk, set(keep) | top, full)


def explain(trace: Trace, rows: list[int] | None = None, heads: list[int] | None = None,
            precision: int = 4, carry: str = "exact", keep=(), full: bool = False, words=None,
            errors: bool = False) -> list[str]:
    """Lines explaining the chosen rows (default: all when there are at most 3, else row 0);
    for each row every chosen head, then (all heads shown) the heads side by side and W_O. A long
    row lists its first and last keys, `keep`'s and its largest weights (`full`: every key); the
    others' terms are summed into one named remainder, so that each sum still holds. `errors`: a
    precision lab row's errors against float64 after its roundings."""
    p = trace.problem
    refuse_unexplained(p)  # before a line is written
    lines = []
    if carry == "rounded":
        lines.append(f"Rounded carry: {plural(precision, 'decimal')}, as a learner with a calculator: each step re-types the "
                     "numbers printed before it, except a key's logit, which stays on the display unrounded from its "
                     "dot product to e^x (÷ √d_k, softcap, + bias); √d_k itself is not rounded.")
    if rows is None:
        rows = list(range(p.lq)) if p.lq <= 3 else [0]
        if p.lq > 3:
            lines.append(f"(showing query 0 of {p.lq}; pick others with --row LABEL or --row INDEX)")
    every_head = heads is None or list(heads) == list(range(p.heads))
    combined = p.heads > 1 or "W_O" in p.inputs
    for i in rows:
        done = []
        for h in heads if heads is not None else range(p.heads):
            if lines:
                lines.append("")
            done.append(written(trace, h, i, precision, carry))
            lines += explain_row(trace, done[-1], listed_keys(trace, h, i, keep, full, words))
            rounded = rounding_lines(trace, h, i, labels(p.key_labels, p.lk), errors)  # errors: --error
            lines += [""] + rounded if rounded else []
            if trace.gradients is not None:
                lines += [""] + backward_lines(trace, done[-1])
        if combined and every_head and not any(r.stopped for r in done):
            lines += [""] + final_lines(trace, written_final(trace, done), precision, carry)
    if combined and not every_head:
        shown = ", ".join(str(h) for h in heads)
        lines += ["", f"(only head {shown} is shown; without --head the heads' outputs are placed side by side"
                  + (" and multiplied by W_O)" if "W_O" in p.inputs else ")")]
    return lines
