"""Write-up exports: Markdown and LaTeX tables of the selected stages, and one stage as CSV.

User text arrives escaped by `shown` (labels, header lines, explanation) and is escaped again for
the medium, at one place each (render/escapes.py): `md` (Markdown), `tex` (LaTeX), `csv_text` (CSV).
"""

from __future__ import annotations

import csv
import io

import numpy as np

from attncli.base.arrays import round_finite
from attncli.problem.groups import title as head_title
from attncli.problem.trace import Trace
from attncli.render.escapes import csv_text, fence, md, tex, tex_lines, with_attnchar
from attncli.render.text import labels, number
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


def _matrices(trace: Trace, stages) -> list[tuple[str, str, np.ndarray, list[str], list[str], tuple]]:
    """(stage, title, matrix, row labels, column labels, the columns beside it: `_sums`) for every
    selected stage and head."""
    p = trace.problem
    queries, keys = labels(p.query_labels, p.lq), labels(p.key_labels, p.lk)
    out = []
    for h in range(p.heads):
        head = f" ({head_title(p, h)})" if p.heads > 1 else ""
        if "inputs" in stages:
            for name, rows in (("Q", queries), ("K", keys), ("V", keys)):
                m = trace.stage(name)[h]
                out.append((name, name + head, m, rows, [str(j) for j in range(m.shape[1])], ()))
        for stage in present(p):
            name, m = stage.name, trace.stage(stage.name)
            if name in stages and m is not None:
                columns = keys if stage.columns == "keys" else [str(j) for j in range(m.shape[2])]
                out.append((name, name + head, m[h], keys if stage.rows == "keys" else queries, columns,
                            _sums(trace, stage, h)))
        if trace.gradients is not None:
            out += _gradient_matrices(trace, stages, h, head, queries, keys)
    if "output" in stages and (p.heads > 1 or "W_O" in p.inputs):
        out.append(("final", "final output", trace.final, queries, [str(j) for j in range(trace.final.shape[1])], ()))
    return out


def _sums(trace: Trace, stage, h: int) -> tuple:
    """The columns the terminal tables add beside a stage (render/tables.py): the weights' row sums
    and, when computed, ln Σ e^logit: (label, column) pairs."""
    if not stage.sum_column:
        return ()
    matrix = trace.stage(stage.name)[h]
    return (("sum", matrix.sum(axis=1)),) + ((("lse", trace.lse[h]),) if trace.lse is not None else ())


def _gradient_matrices(trace: Trace, stages, h: int, head: str, queries, keys) -> list:
    """The backward pass's per-head tables for `_matrices`; D as one column."""
    out = []
    for g in GRADIENTS:
        if g.name in stages:
            m = trace.gradients.heads[g.name][h]
            m = m[:, None] if m.ndim == 1 else m
            columns = keys if g.columns == "keys" else ["D"] if g.name == "D" else [str(j) for j in range(m.shape[1])]
            out.append((g.name, g.name + head, m, queries if g.rows == "queries" else keys, columns, ()))
    return out


def markdown_table(title: str, formula: str | None, m: np.ndarray, rows, columns, precision: int) -> str:
    """**title** = formula (both ours), then a pipe table with row and column labels (`md`)."""
    lines = [f"**{title}**" + (f" = {formula}" if formula else ""), "",
             "| | " + " | ".join(md(c) for c in columns) + " |", "|---|" + "---:|" * len(columns)]
    lines += [f"| {md(r)} | " + " | ".join(number(x, precision) for x in row) + " |" for r, row in zip(rows, m)]
    return "\n".join(lines)


def markdown(trace: Trace, stages, precision: int, header: list[str], explanation: list[str] | None) -> str:
    parts = ["\n".join(f"{md(line)}  " for line in header)]
    formula = formulas(trace)
    for name, heading, m, rows, columns, beside in _matrices(trace, stages):  # beside: as the terminal's tables
        m = np.column_stack([m] + [column for _, column in beside]) if beside else m
        parts.append(markdown_table(heading, formula[name][0] if name in formula else None, m, rows,
                                    list(columns) + [label for label, _ in beside], precision))
    if explanation:
        parts.append(fence(explanation))
    return "\n\n".join(parts) + "\n"


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
    for name, heading, m, rows, columns, _ in _matrices(trace, stages):
        parts.append(latex_table(heading, formula[name][1] if name in formula else name, m, rows, columns, precision))
    if explanation:
        parts.append(tex_lines(explanation))
    return with_attnchar("\n\n".join(parts) + "\n")


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
