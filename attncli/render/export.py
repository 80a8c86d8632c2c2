"""Write-up exports: Markdown and LaTeX tables of the selected stages, and one stage as CSV."""

from __future__ import annotations

import csv
import io

import numpy as np

from attncli.render.text import labels, number
from attncli.trace import STAGES, Trace

# Each table's formula: (Markdown, LaTeX). `formulas` adapts the weights' and the final output's.
FORMULAS = {
    "scores": ("Q Kᵀ", r"Q K^\top"),
    "scaled": ("scores · scale", r"\text{scores} \cdot \text{scale}"),
    "masked": ("scaled + bias, −∞ where masked", r"\text{scaled} + \text{bias}, -\infty \text{ where masked}"),
    "weights": ("softmax(masked) over keys", r"\operatorname{softmax}(\text{masked})"),
    "output": ("weights V", r"\text{weights}\, V"),
}


def formulas(trace: Trace) -> dict[str, tuple[str, str]]:
    """FORMULAS for this trace: the softmax reads `scaled` when there is no mask or bias; the
    final output is the heads side by side, times W_O (+ b_O) when given."""
    out = dict(FORMULAS)
    if trace.masked is None:
        out["weights"] = ("softmax(scaled) over keys", r"\operatorname{softmax}(\text{scaled})")
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
        head = f" (head {h})" if p.heads > 1 else ""
        if "inputs" in stages:
            for name, rows in (("Q", queries), ("K", keys), ("V", keys)):
                m = trace.stage(name)[h]
                out.append((name, name + head, m, rows, [str(j) for j in range(m.shape[1])]))
        for name in STAGES:
            m = trace.stage(name)
            if name in stages and m is not None:
                columns = keys if name != "output" else [str(j) for j in range(m.shape[2])]
                out.append((name, name + head, m[h], queries, columns))
    if "output" in stages and (p.heads > 1 or "W_O" in p.inputs):
        out.append(("final", "final output", trace.final, queries, [str(j) for j in range(trace.final.shape[1])]))
    return out


def markdown_table(title: str, formula: str | None, m: np.ndarray, rows, columns, precision: int) -> str:
    """**title** = formula, then a pipe table with row labels."""
    lines = [f"**{title}**" + (f" = {formula}" if formula else ""), "", "| | " + " | ".join(columns) + " |",
             "|---|" + "---:|" * len(columns)]
    lines += [f"| {r} | " + " | ".join(number(x, precision) for x in row) + " |" for r, row in zip(rows, m)]
    return "\n".join(lines)


def markdown(trace: Trace, stages, precision: int, header: list[str], explanation: list[str] | None) -> str:
    parts = ["\n".join(f"{line}  " for line in header)]
    written = formulas(trace)
    for name, title, m, rows, columns in _matrices(trace, stages):
        parts.append(markdown_table(title, written[name][0] if name in written else None, m, rows, columns,
                                    precision))
    if explanation:
        parts.append("```\n" + "\n".join(explanation) + "\n```")
    return "\n\n".join(parts) + "\n"


def _tex(text: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("$", r"\$"), ("#", r"\#"),
                 ("_", r"\_"), ("{", r"\{"), ("}", r"\}"), ("~", r"\textasciitilde{}"), ("^", r"\^{}")):
        text = text.replace(a, b)
    return text


def latex_table(title: str, formula: str, m: np.ndarray, rows, columns, precision: int) -> str:
    """One `table`: a `tabular` captioned "title: $formula$" with labels, and the matrix as a `bmatrix`."""
    cell = lambda x: r"-\infty" if x == -np.inf else number(x, precision)  # noqa: E731
    body = " \\\\\n".join(" & ".join(cell(x) for x in row) for row in m)
    tab = " \\\\\n".join(_tex(r) + " & " + " & ".join(f"${cell(x)}$" for x in row) for r, row in zip(rows, m))
    return "\n".join([
        r"\begin{table}[h]", r"\centering",
        rf"\caption{{{_tex(title)}: ${formula}$}}",
        rf"\begin{{tabular}}{{l{'r' * len(columns)}}}",
        " & " + " & ".join(_tex(c) for c in columns) + r" \\ \hline",
        tab, r"\end{tabular}", "",
        r"\[", rf"\text{{{_tex(title)}}} = \begin{{bmatrix}}", body, r"\end{bmatrix}", r"\]",
        r"\end{table}"])


def latex(trace: Trace, stages, precision: int, header: list[str], explanation: list[str] | None) -> str:
    """The header as comments, then one `latex_table` per stage and head."""
    parts = ["\n".join("% " + _tex(line) for line in header)]  # the header as comments, every line
    written = formulas(trace)
    for name, title, m, rows, columns in _matrices(trace, stages):
        parts.append(latex_table(title, written[name][1] if name in written else name, m, rows, columns, precision))
    if explanation:
        parts.append("\\begin{verbatim}\n" + "\n".join(explanation) + "\n\\end{verbatim}")
    return "\n\n".join(parts) + "\n"


def csv_table(rows, columns, matrices, decimals: int | None = None, first: str = "query") -> str:
    """A CSV table: a header of column labels, row labels in the first column; with several
    matrices a leading `head` column. −∞ is written -inf, −0 as 0; `decimals` rounds as JSON's --round."""
    multi = len(matrices) > 1
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow((["head"] if multi else []) + [first] + list(columns))
    for h, m in matrices:
        if decimals is not None:
            m = np.round(m, decimals)
        for r, row in zip(rows, m):
            cells = ["-inf" if x == -np.inf else repr(float(x) + 0.0) for x in row]  # + 0.0: no "-0.0"
            writer.writerow(([h] if multi else []) + [r] + cells)
    return buffer.getvalue()


def csv_stage(trace: Trace, stage: str, decimals: int | None = None) -> str:
    """One stage (scores, scaled, masked, weights or output) as CSV: a header of key (or column)
    labels, query labels in the first column; with several heads a leading `head` column.
    `output` is the final output; −∞ is written -inf; `decimals` rounds as --round does."""
    p = trace.problem
    if stage == "output":
        matrices = [(None, trace.final)]
        columns = [str(j) for j in range(trace.final.shape[1])]
    else:
        matrices = [(h, trace.stage(stage)[h]) for h in range(p.heads)]
        columns = labels(p.key_labels, p.lk)
    return csv_table(labels(p.query_labels, p.lq), columns, matrices, decimals)
