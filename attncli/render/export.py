"""Write-up exports: Markdown and LaTeX tables of the selected stages, and one stage as CSV.

User text arrives escaped by `shown` (labels, header lines, explanation) and is escaped again here
for the medium, at one place each: `md` (Markdown), `tex` (LaTeX), `csv_text` (CSV formulas).
"""

from __future__ import annotations

import csv
import io
import re

import numpy as np

from attncli.base.arrays import round_finite
from attncli.problem.groups import title as head_title
from attncli.problem.trace import Trace
from attncli.render.text import labels, number, shown
from attncli.stages.grads import GRADIENTS, title
from attncli.stages.table import fill, get, present


def formulas(trace: Trace) -> dict[str, tuple[str, str]]:
    """Each table's formula, (Markdown, LaTeX): the stage table's, filled for this trace (the
    softmax reads `scaled` when there is no mask or bias); the final output is the heads side by
    side, times W_O (+ b_O) when given."""
    p = trace.problem
    out = {stage.name: (fill(stage.plain, p, stage.name), fill(stage.latex, p, stage.name))
           for stage in present(p)}
    if trace.gradients is not None:
        out |= {g.name: (title(g, p).split(" = ", 1)[1], title(g, p, latex=True)) for g in GRADIENTS}
    inputs = trace.problem.inputs
    if "W_O" not in inputs:
        out["final"] = ("the heads' outputs side by side", r"\text{the heads' outputs side by side}")
    elif "b_O" in inputs:
        out["final"] = ("concat W_O + b_O", r"\text{concat}\, W_O + b_O")
    else:
        out["final"] = ("concat W_O", r"\text{concat}\, W_O")
    return out


def _matrices(trace: Trace, stages) -> list[tuple[str, str, np.ndarray, list[str], list[str]]]:
    """(stage, title, matrix, row labels, column labels) for every selected stage and head."""
    p = trace.problem
    queries, keys = labels(p.query_labels, p.lq), labels(p.key_labels, p.lk)
    out = []
    for h in range(p.heads):
        head = f" ({head_title(p, h)})" if p.heads > 1 else ""
        if "inputs" in stages:
            for name, rows in (("Q", queries), ("K", keys), ("V", keys)):
                m = trace.stage(name)[h]
                out.append((name, name + head, m, rows, [str(j) for j in range(m.shape[1])]))
        for stage in present(p):
            name, m = stage.name, trace.stage(stage.name)
            if name in stages and m is not None:
                columns = keys if stage.columns == "keys" else [str(j) for j in range(m.shape[2])]
                out.append((name, name + head, m[h], keys if stage.rows == "keys" else queries, columns))
        if trace.gradients is not None:
            out += _gradient_matrices(trace, stages, h, head, queries, keys)
    if "output" in stages and (p.heads > 1 or "W_O" in p.inputs):
        out.append(("final", "final output", trace.final, queries, [str(j) for j in range(trace.final.shape[1])]))
    return out


def _gradient_matrices(trace: Trace, stages, h: int, head: str, queries, keys) -> list:
    """The backward pass's per-head tables for `_matrices`; D as one column."""
    out = []
    for g in GRADIENTS:
        if g.name in stages:
            m = trace.gradients.heads[g.name][h]
            m = m[:, None] if m.ndim == 1 else m
            columns = keys if g.columns == "keys" else ["D"] if g.name == "D" else [str(j) for j in range(m.shape[1])]
            out.append((g.name, g.name + head, m, queries if g.rows == "queries" else keys, columns))
    return out


_MD_INLINE = re.compile(r"([\\`*_\[\]<>|#~&!$])")  # links, emphasis, code, HTML, table cells, math
_MD_LINE_START = re.compile(r"^(\s*(?:\d+(?=[.)]))?)([-+=.)])")  # lists, rules, setext headings


# What GitHub Markdown turns into a link without brackets: a scheme's "://", "www." and an e-mail's
# "@"; a backslash before the punctuation keeps the text and stops the autolink.
_MD_AUTOLINK = re.compile(r"(?<=[A-Za-z])(:)(?=//)|(?<![\w.])(www)(\.)|(@)", re.IGNORECASE)


def md(text: str) -> str:
    """Text for Markdown, shown literally: every inline special backslash-escaped (so `|` cannot
    add a column and `[x](y)` is no link), a bare URL or e-mail address kept from becoming an
    autolink, and a start that would open a list or rule escaped."""
    text = _MD_INLINE.sub(r"\\\1", shown(text))
    text = _MD_AUTOLINK.sub(lambda m: "\\" + m[1] if m[1] else m[2] + "\\" + m[3] if m[2] else "\\@", text)
    return _MD_LINE_START.sub(r"\1\\\2", text)


def fence(lines: list[str]) -> str:
    """A code block whose fence is longer than any run of backticks in it, so nothing closes it."""
    longest = max((len(run) for line in lines for run in re.findall("`+", line)), default=0)
    ticks = "`" * max(3, longest + 1)
    return "\n".join([ticks, *(shown(line) for line in lines), ticks])


def markdown_table(title: str, formula: str | None, m: np.ndarray, rows, columns, precision: int) -> str:
    """**title** = formula (both ours), then a pipe table with row and column labels (`md`)."""
    lines = [f"**{title}**" + (f" = {formula}" if formula else ""), "",
             "| | " + " | ".join(md(c) for c in columns) + " |", "|---|" + "---:|" * len(columns)]
    lines += [f"| {md(r)} | " + " | ".join(number(x, precision) for x in row) + " |" for r, row in zip(rows, m)]
    return "\n".join(lines)


def markdown(trace: Trace, stages, precision: int, header: list[str], explanation: list[str] | None) -> str:
    parts = ["\n".join(f"{md(line)}  " for line in header)]
    formula = formulas(trace)
    for name, heading, m, rows, columns in _matrices(trace, stages):
        parts.append(markdown_table(heading, formula[name][0] if name in formula else None, m, rows, columns,
                                    precision))
    if explanation:
        parts.append(fence(explanation))
    return "\n\n".join(parts) + "\n"


# Every character with a meaning to LaTeX, in a form user text cannot end: braces and backslash
# are escaped, so a label can neither close a group nor start a command. `[` and `*` are braced
# because `\\` at a row's end would read them as its optional arguments.
_TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
        "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
        "[": "{[}", "]": "{]}", "*": "{*}", "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}"}


# pdflatex reads UTF-8 but typesets only the characters its fonts have (ASCII, accented Latin
# letters): any other one, a full-width or CJK label say, stops it with "Unicode character … not
# set up for use with LaTeX". So the symbols attncli writes become math, full-width ASCII forms
# (ｃａｔ, U+FF01-FF5E) their ASCII letters, and every other character `\attnchar{HEX}`, its code
# point: pdflatex shows [U+732B] (the definition ATTNCHAR prepends when it is used); a document
# for xelatex or lualatex that defines `\newcommand{\attnchar}[1]{\symbol{"#1}}` first shows
# the character itself.
_TEX_SYMBOLS = {"−": "-", "∞": r"\infty", "·": r"\cdot", "×": r"\times", "÷": r"\div", "±": r"\pm", "≤": r"\le",
                "≥": r"\ge", "≈": r"\approx", "≠": r"\ne", "≪": r"\ll", "√": r"\surd", "Σ": r"\Sigma",
                "∂": r"\partial", "∘": r"\circ", "→": r"\to", "ℓ": r"\ell", "ᵀ": r"^{\top}", "²": "^{2}",
                "¹": "^{1}", "⁻": "^{-}", "′": "'", "″": "''", "‖": r"\|", "⌈": r"\lceil", "⌉": r"\rceil",
                "⋮": r"\vdots", "⋯": r"\cdots", "θ": r"\theta", "Θ": r"\Theta", "α": r"\alpha", "π": r"\pi"}
# LaTeX's UTF-8 input sets – — … ‘ ’ “ ” itself; the ideographic space (U+3000) is a space.
_TEX_RAW = "–—…‘’“”"
ATTNCHAR = r"\providecommand{\attnchar}[1]{\texttt{[U+#1]}}% a character pdflatex cannot set"


def tex_unicode(text: str) -> str:
    """Escaped LaTeX text with every character beyond ASCII and Latin-1 written so that pdflatex
    sets it (see `_TEX_SYMBOLS`); Latin-1 letters (é, ß) stay, as LaTeX's UTF-8 input reads them."""
    out = []
    for c in text:
        if c < "\x80" or ("\xc0" <= c <= "\xff" and c not in "×÷") or c in _TEX_RAW:
            out.append(c)
        elif c in _TEX_SYMBOLS:
            out.append(r"\ensuremath{" + _TEX_SYMBOLS[c] + "}")
        elif c == "\u3000":
            out.append(" ")
        elif "\uff01" <= c <= "\uff5e":  # full-width ASCII: the letter it is
            ascii = chr(ord(c) - 0xFEE0)
            out.append(_TEX.get(ascii, ascii))
        else:
            out.append(r"\attnchar{" + f"{ord(c):04X}" + "}")
    return "".join(out)


def tex(text: str, symbols: bool = True) -> str:
    """Text for LaTeX, shown literally, on one line; with `symbols`, every character pdflatex
    cannot set made one it can (`tex_unicode`)."""
    escaped = "".join(_TEX.get(c, c) for c in shown(text))
    return tex_unicode(escaped) if symbols else escaped


def with_attnchar(text: str) -> str:
    """A LaTeX fragment, with ATTNCHAR's fallback first when it writes a character as \attnchar."""
    return f"{ATTNCHAR}\n{text}" if r"\attnchar{" in text else text


def tex_lines(lines: list[str]) -> str:
    """Lines in typewriter type, spaces kept (each a `~`), as a verbatim block would show them,
    but escaped by `tex`: no line can end the block."""
    body = " \\\\\n".join(tex(line).replace(" ", "~") or r"\mbox{}" for line in lines)
    return "\\begin{flushleft}\\ttfamily\n" + body + "\n\\end{flushleft}"


def latex_table(title: str, formula: str, m: np.ndarray, rows, columns, precision: int) -> str:
    """One `table`: a `tabular` captioned "title: $formula$" with labels, and the matrix as a `bmatrix`."""
    cell = lambda x: r"-\infty" if x == -np.inf else number(x, precision)  # noqa: E731
    body = " \\\\\n".join(" & ".join(cell(x) for x in row) for row in m)
    tab = " \\\\\n".join(tex(r) + " & " + " & ".join(f"${cell(x)}$" for x in row) for r, row in zip(rows, m))
    return "\n".join([
        r"\begin{table}[h]", r"\centering",
        rf"\caption{{{tex(title)}: ${formula}$}}",
        rf"\begin{{tabular}}{{l{'r' * len(columns)}}}",
        " & " + " & ".join(tex(c) for c in columns) + r" \\ \hline",
        tab, r"\end{tabular}", "",
        r"\[", rf"\text{{{tex(title)}}} = \begin{{bmatrix}}", body, r"\end{bmatrix}", r"\]",
        r"\end{table}"])


def latex(trace: Trace, stages, precision: int, header: list[str], explanation: list[str] | None) -> str:
    """The header as comments, then one `latex_table` per stage and head."""
    # The header as comments, every line (as written: TeX skips a comment before reading its characters)
    parts = ["\n".join("% " + tex(line, symbols=False) for line in header)]
    formula = formulas(trace)
    for name, heading, m, rows, columns in _matrices(trace, stages):
        parts.append(latex_table(heading, formula[name][1] if name in formula else name, m, rows, columns, precision))
    if explanation:
        parts.append(tex_lines(explanation))
    return with_attnchar("\n\n".join(parts) + "\n")


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet reads such a cell as a formula
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def csv_text(text: str) -> str:
    """A text cell: escaped by `shown`, and prefixed with `'` when it starts like a formula
    (OWASP's CSV injection advice) unless it is a plain number such as -1."""
    text = shown(text)
    return "'" + text if text.startswith(_FORMULA_START) and not _NUMBER.fullmatch(text) else text


# The header's corner, above the row labels, is empty (as pandas' to_csv writes it): attn's own
# reader (document/text_input.py) then takes row 1 as a header and column 1 as labels, whatever
# the column labels look like (`,0,1` for an output's columns). With several heads a `head` column
# comes first (`head,,I,like`), which the reader reads back as one matrix per head.
HEAD_COLUMN = "head"


def csv_table(rows, columns, matrices, decimals: int | None = None) -> str:
    """A CSV table: a header of column labels after an empty corner, row labels in the first
    column (a blank label as its index); with several matrices a leading `head` column. Numbers are written as numbers (−∞ as
    -inf, −0 as 0; `decimals` rounds as JSON's --round); labels through `csv_text`. attn reads it
    back as the matrix (or one per head) it holds, with its row labels."""
    multi = len(matrices) > 1
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(([HEAD_COLUMN] if multi else []) + [""] + [_label(c, j) for j, c in enumerate(columns)])
    for h, m in matrices:
        if decimals is not None:
            m = round_finite(m, decimals)
        for i, (r, row) in enumerate(zip(rows, m)):
            cells = ["-inf" if x == -np.inf else repr(float(x) + 0.0) for x in row]  # + 0.0: no "-0.0"
            writer.writerow(([h] if multi else []) + [_label(r, i)] + cells)
    return buffer.getvalue()


def _label(text: str, index: int) -> str:
    """A row or column label through `csv_text`; a blank one as its index, since a CSV has no
    blank label (a header of blank labels, `,,,`, reads as a blank line and is skipped)."""
    cell = csv_text(text)
    return cell if cell.strip() else str(index)


def csv_stage(trace: Trace, stage: str, decimals: int | None = None) -> str:
    """One stage (scores, scaled, masked, weights or output) as CSV: a header of key (or column)
    labels after an empty corner, query (or key) labels in the first column; with several heads a
    leading `head` column.
    `output` is the final output; −∞ is written -inf; `decimals` rounds as --round does."""
    p = trace.problem
    if stage == "output":
        matrices = [(None, trace.final)]
        columns = [str(j) for j in range(trace.final.shape[1])]
    else:
        matrices = [(h, trace.stage(stage)[h]) for h in range(p.heads)]
        columns = labels(p.key_labels, p.lk) if get(stage).columns == "keys" else \
            [str(j) for j in range(matrices[0][1].shape[1])]
    if stage != "output" and get(stage).rows == "keys":  # K_rope: one row per key
        return csv_table(labels(p.key_labels, p.lk), columns, matrices, decimals)
    return csv_table(labels(p.query_labels, p.lq), columns, matrices, decimals)
