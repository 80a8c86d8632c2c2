"""`attn exercise --format markdown|latex`: a worksheet (the given matrices, values as written, and a
blank grid per stage to fill in) or, with `--answers`, the key (the grids filled in, and the line
that reproduces the problem; it is never printed on the students' sheet).

Views never compute: the key's numbers are read from the trace.
"""

from __future__ import annotations

import re

import numpy as np

from attncli.base.errors import plural
from attncli.compute.attention import merge_heads
from attncli.marking.exercise import Exercise, asked_gradients, rounding_note
from attncli.marking.grading import marked_gradient
from attncli.marking.marks import present
from attncli.marking.mistakes import MISTAKES
from attncli.problem import groups
from attncli.problem.masks import has_rules, positions_line, rule_lines
from attncli.problem.trace import Trace
from attncli.problem.variants import variant_lines
from attncli.render.escapes import md, tex, tex_unicode, with_attnchar
from attncli.render.export import formulas
from attncli.render.text import labels, number, precision_lines
from attncli.stages import grads
from attncli.stages.table import get

GIVEN_TITLES = {"E": "E (token embeddings)", "PE": "PE (sinusoidal positional encoding, 2 decimals)"}
KEY_DECIMALS = 4
BOX = r"\rule[-1em]{0pt}{2.6em}"  # a worksheet row's height: room to write a number by hand (about 9 mm)
BLANK = r"\hspace{5em}"  # a blank answer cell's width: -0.7071 in handwriting (about 18 mm)


def given_text(x) -> str:
    """A given value as a person writes it: 1.5, -2, 0.84 (never 1.5000, never -0)."""
    return f"{float(x) + 0.0:g}"


def _grids(trace: Trace, exercise: Exercise) -> list[tuple[str, np.ndarray, list[str], list[str]]]:
    """(title, key values, row labels, column labels) for every matrix the learner computes (for
    find-the-slip, the worked solution's values; for a tiles exercise, each tile's m, alpha, l, O)."""
    if exercise.tiled is not None:
        return _tile_grids(exercise, trace)
    out = _stage_grids(trace, exercise)
    if trace.gradients is not None:
        out += _gradient_grids(trace)
    return out


def _stage_grids(trace: Trace, exercise: Exercise) -> list[tuple[str, np.ndarray, list[str], list[str]]]:
    p = trace.problem
    queries, keys = labels(p.query_labels, p.lq), labels(p.key_labels, p.lk)
    columns = lambda m: [str(j) for j in range(m.shape[-1])]  # noqa: E731
    out = []
    if "PE" in exercise.shown:
        out.append(("X = E + PE", p.inputs["X"], keys, columns(p.inputs["X"])))
    if p.projected:
        for name, rows in (("Q", queries), ("K", keys), ("V", keys)):
            m = merge_heads(trace.stage(name))
            out.append((f"{name} = X{'_kv' if name != 'Q' and 'X_kv' in p.inputs else ''} W_{name}", m, rows,
                        columns(m)))
    multi = p.heads > 1 or "W_O" in p.inputs
    formula = {name: plain for name, (plain, _) in formulas(trace).items()}
    for h in range(p.heads):
        for name in present(trace):
            m = exercise.worked.stages[name] if exercise.worked is not None else trace.stage(name)[h]
            title = f"{name} ({groups.title(p, h)})" if multi else name
            stage = get(name)
            out.append((f"{title} = {formula[name]}", m, keys if stage.rows == "keys" else queries,
                        keys if stage.columns == "keys" else columns(m)))
    if multi:
        out.append((f"output = {formula['final']}", trace.final, queries, columns(trace.final)))
    return out


def _gradient_grids(trace: Trace) -> list[tuple[str, np.ndarray, list[str], list[str]]]:
    """The backward pass's stages per head, D as a column (as `attn check` marks them)."""
    p = trace.problem
    queries, keys = labels(p.query_labels, p.lq), labels(p.key_labels, p.lk)
    out = []
    for h in range(p.heads):
        for g in grads.GRADIENTS:
            if g.name not in asked_gradients(p):
                continue  # one head without W_O: d_output is the given dO
            m = marked_gradient(trace, h, g.name)
            title = grads.title(g, p) + (f" ({groups.title(p, h)})" if p.heads > 1 else "")
            columns = keys if g.columns == "keys" else [g.name] if g.name == "D" else [str(j) for j in range(m.shape[1])]
            out.append((title, m, keys if g.rows == "keys" else queries, columns))
    return out


def _tile_grids(exercise: Exercise, trace: Trace) -> list[tuple[str, np.ndarray, list[str], list[str]]]:
    """One grid per tile that is not skipped: its queries × (m, alpha, l, O_0 …), as `attn check`
    marks a tile (`tiles[q 0–1, k 0–2]`)."""
    p = trace.problem
    queries = labels(p.query_labels, p.lq)
    out = []
    for h in range(p.heads):
        for tile in exercise.tiled.tiles:
            if tile.skipped:
                continue
            (q0, q1), (k0, k1) = tile.q_block, tile.k_block
            values = np.hstack([tile.m[h][:, None], tile.alpha[h][:, None], tile.l[h][:, None], tile.O[h]])
            name = f"{'heads[%d].' % h if p.heads > 1 else ''}tiles[q {q0}–{q1}, k {k0}–{k1}]"
            out.append((name, values, queries[q0:q1], ["m", "alpha", "l"] + [f"O_{j}" for j in range(tile.O.shape[-1])]))
    return out


def _asks(exercise: Exercise) -> list[str]:
    """What the problem asks, in words (its `ask` and `decimals`); for find-the-slip, the answer's
    form and the mistakes to name."""
    doc = exercise.doc
    if exercise.worked is not None:
        found = [f"{m}: {MISTAKES[m].text}" for m in exercise.worked.candidates]
        return ['answer: {"slip": {"stage": "<stage>", "mistake": "<mistake>"}}, the stage where the worked '
                "solution first goes wrong and the mistake made there, one of:"] + found
    return [f"answer: {', '.join(doc['ask'])}; write each value with at least {plural(doc['decimals'], 'decimal')} "
            "(or the exact value)"]


def _givens(exercise: Exercise, trace: Trace) -> list[tuple[str, list, list[str], list[str]]]:
    """The matrices the kind's sheet shows (`Exercise.shown`), as given; a 3-D one (gqa's Q, K, V)
    one table per head or kv head."""
    p = trace.problem
    queries, keys = labels(p.query_labels, p.lq), labels(p.key_labels, p.lk)
    rows_of = {"Q": queries, "X": queries, "bias": queries, "dO": queries, "K": keys, "V": keys, "X_kv": keys,
               "E": keys, "PE": keys}
    out = []
    for name, m in exercise.shown.items():
        per_head = isinstance(m[0][0], list)
        word = "head" if name == "Q" or not per_head or len(m) == p.heads else "kv head"
        for h, matrix in enumerate(m) if per_head else [(None, m)]:
            title = GIVEN_TITLES.get(name, name) + (f" ({word} {h})" if per_head else "")
            rows = rows_of.get(name) or [str(i) for i in range(len(matrix))]
            columns = keys if name == "bias" else [str(j) for j in range(len(matrix[0]))]
            out.append((title, matrix, rows, columns))
    return out


def _notes(trace: Trace) -> list[str]:
    p = trace.problem
    scale = f"1/√d_k, d_k = {trace.d_k}" if np.isclose(trace.scale, trace.d_k ** -0.5) else f"{trace.scale:g}"
    lines = [f"scale = {scale}" + (f"; {p.heads} heads, each its own columns" if p.heads > 1 else "")]
    lines += [groups.header_line(p)] if groups.header_line(p) else []  # grouped-query: which kv head each reads
    if p.dtype != "float64":  # the precision every stage is stored in, and how (the precision lab's recipe)
        lines += [f"dtype = {p.dtype}"] + precision_lines(p)
    if has_rules(p):
        lines += [f"mask: {rule}" for rule in rule_lines(p)]
    if positions_line(p):  # a KV-cache step's query position decides what it sees
        lines.append(positions_line(p))
    if p.rope is not None:
        lines.append(f"rope: {p.rope.describe(trace.d_k)}")
    if trace.gradients is not None and "d_output" not in asked_gradients(p):
        lines.append("d_output = dO (one head)")
    return lines + variant_lines(p)


def _mask(trace: Trace):
    p = trace.problem
    if p.mask_rule != "matrix":
        return None
    return ("mask (1 = may attend)", [[int(x) for x in row] for row in p.mask[0]],
            labels(p.query_labels, p.lq), labels(p.key_labels, p.lk))


def markdown(items: list[tuple[Exercise, Trace]], key: bool) -> str:
    parts = []
    for exercise, trace in items:
        doc = exercise.doc
        parts.append(f"## {doc['title']}{' — answer key' if key else ''}\n\n{doc['description']}.")
        parts.append("\n".join(f"- {line}" for line in _notes(trace) + _asks(exercise)))
        givens = _givens(exercise, trace) + ([_mask(trace)] if _mask(trace) else [])
        for title, m, rows, columns in givens:
            parts.append(_md_table(title, [[given_text(x) for x in row] for row in m], rows, columns))
        for title, m, rows, columns in _grids(trace, exercise):
            cells = [[number(x, KEY_DECIMALS) if key or exercise.worked else " " for x in row] for row in m]
            parts.append(_md_table(title, cells, rows, columns))
        if key and exercise.worked is not None:
            parts.append(f"slip: {_slip(exercise)}")
        if key and rounding_note(trace, exercise.options.decimals):
            parts.append(md(f"rounding: {rounding_note(trace, exercise.options.decimals)}."))
        if key:
            parts.append(f"reproduce with: `{exercise.command}`")
    return "\n\n".join(parts) + "\n"


def _md_table(title: str, cells: list[list[str]], rows: list[str], columns: list[str]) -> str:
    lines = [f"**{title}**", "", "| | " + " | ".join(map(md, columns)) + " |",
             "|---|" + "---:|" * len(columns)]
    lines += [f"| {md(r)} | " + " | ".join(row) + " |" for r, row in zip(rows, cells)]
    return "\n".join(lines)


def latex(items: list[tuple[Exercise, Trace]], key: bool) -> str:
    """Fragments to \\input: one \\section* per problem, a tabular per matrix (blank, ruled grids
    on the worksheet)."""
    parts = []
    for exercise, trace in items:
        doc = exercise.doc
        parts.append(rf"\section*{{{tex(doc['title'])}{' --- answer key' if key else ''}}}"
                     + "\n" + _text(doc["description"]) + ".\n\n"
                     + " \\\\\n".join(_text(n) for n in _notes(trace) + _asks(exercise)))
        givens = _givens(exercise, trace) + ([_mask(trace)] if _mask(trace) else [])
        for title, m, rows, columns in givens:
            parts.append(_tex_table(title, [[f"${given_text(x)}$" for x in row] for row in m], rows, columns, False))
        for title, m, rows, columns in _grids(trace, exercise):
            filled = key or exercise.worked is not None
            cells = [[(r"$-\infty$" if x == -np.inf else f"${number(x, KEY_DECIMALS)}$") if filled else BLANK
                      for x in row] for row in m]
            parts.append(_tex_table(title, cells, rows, columns, not filled))
        if key and exercise.worked is not None:
            parts.append(_text(f"slip: {_slip(exercise)}"))
        if key and rounding_note(trace, exercise.options.decimals):
            parts.append(_text(f"rounding: {rounding_note(trace, exercise.options.decimals)}."))
        if key:  # ragged right: typewriter spaces do not stretch, so a justified line would run off the margin
            parts.append(r"\begin{flushleft}reproduce with: \texttt{" + tex(exercise.command) + r"}\end{flushleft}")
    return with_attnchar("\n\n".join(parts) + "\n")


def _slip(exercise: Exercise) -> str:
    w = exercise.worked
    return f"stage {w.stage}, mistake {w.mistake} ({MISTAKES[w.mistake].text})"


MATH = {"θ\\_i": r"$\theta_i$", "θ": r"$\theta$", "ᵀ": r"$^\top$", "√": r"$\surd$", "≤": r"$\le$", "−": "-", "·": r"$\cdot$", "∞": r"$\infty$"}


# A symbol with a subscript as our words write it (d_k, W_Q, X_kv, O_0, d_model, q_pos), escaped: a
# letter standing alone, "\_", up to five letters or digits. Longer words (q_positions, key_mask,
# sliding_window) are names, and keep their underscore.
SUBSCRIPT = re.compile(r"(?<![A-Za-z0-9_\\])([A-Za-z])\\_([A-Za-z0-9]{1,5})(?![A-Za-z0-9\\])")


# The backward pass's names (d_V, d_output, d_scores, …) are one kind of symbol: all set as math,
# whatever the length of their subscript (d_output as $d_{\mathrm{output}}$ beside $d_{V}$).
GRADIENT = re.compile(r"(?<![A-Za-z0-9_\\])(d)\\_(" + "|".join(sorted(
    (name[2:] for name in grads.names() if name.startswith("d_")), key=len, reverse=True)) + r")(?![A-Za-z0-9\\])")


def _subscript(found: re.Match) -> str:
    base, sub = found.groups()
    return f"${base}_{{{sub}}}$" if len(sub) == 1 else f"${base}_{{\\mathrm{{{sub}}}}}$"


def _text(text: str) -> str:
    """Our titles and notes in LaTeX: special characters escaped, the few symbols they use in math,
    and a symbol's subscript set as one (d_k as $d_k$, not with a printed underscore)."""
    text = SUBSCRIPT.sub(_subscript, GRADIENT.sub(_subscript, tex(text, symbols=False)))
    for symbol, math in MATH.items():
        text = text.replace(symbol, math)
    return re.sub(r"(?<!\\)\$\$", " ", tex_unicode(text))  # what MATH leaves; $\surd$$d_k$ as one span


def _tex_table(title: str, cells: list[list[str]], rows: list[str], columns: list[str], ruled: bool) -> str:
    """A matrix as a tabular, its row labels in a column of their own (a rule between them and the
    values); a blank grid (`ruled`) boxed, each row tall enough to write in."""
    spec = "l|" + "c|" * len(columns) if ruled else "l|" + "r" * len(columns)
    rule, strut = (r" \hline", BOX) if ruled else ("", "")
    body = [" & " + " & ".join(_text(c) for c in columns) + r" \\ \hline"]
    body += [strut + tex(r) + " & " + " & ".join(row) + r" \\" + rule for r, row in zip(rows, cells)]
    return "\n".join([r"\paragraph{" + _text(title) + "}", "", rf"\begin{{tabular}}{{{spec}}}", *body,
                      r"\end{tabular}"])
