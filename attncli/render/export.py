"""Write-up exports: Markdown and LaTeX tables of the selected stages, and one stage as CSV."""

from __future__ import annotations

import csv
import io

import numpy as np

from attncli.render.text import labels, number
from attncli.trace import STAGES, Trace

FORMULAS = {
    "scores": ("scores", r"Q K^\top"),
    "scaled": ("scaled", r"\text{scores} \cdot \text{scale}"),
    "masked": ("masked", r"\text{scaled} + \text{bias}, -\infty \text{ where masked}"),
    "weights": ("weights", r"\operatorname{softmax}(\text{masked})"),
    "output": ("output", r"\text{weights}\, V"),
}
PLAIN = {"scores": "Q Kᵀ", "scaled": "scores · scale", "masked": "scaled + bias, −∞ where masked",
         "weights": "softmax over keys", "output": "weights V"}


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
        out.append(("output", "final output", trace.final, queries, [str(j) for j in range(trace.final.shape[1])]))
    return out


def markdown(trace: Trace, stages, precision: int, header: list[str], explanation: list[str] | None) -> str:
    parts = ["\n".join(f"{line}  " for line in header)]
    for name, title, m, rows, columns in _matrices(trace, stages):
        formula = f" = {PLAIN[name]}" if name in PLAIN else ""
        lines = [f"**{title}**{formula}", "", "| | " + " | ".join(columns) + " |",
                 "|---|" + "---:|" * len(columns)]
        lines += [f"| {r} | " + " | ".join(number(x, precision) for x in row) + " |" for r, row in zip(rows, m)]
        parts.append("\n".join(lines))
    if explanation:
        parts.append("```\n" + "\n".join(explanation) + "\n```")
    return "\n\n".join(parts) + "\n"


def _tex(text: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("$", r"\$"), ("#", r"\#"),
                 ("_", r"\_"), ("{", r"\{"), ("}", r"\}"), ("~", r"\textasciitilde{}"), ("^", r"\^{}")):
        text = text.replace(a, b)
    return text


def latex(trace: Trace, stages, precision: int, header: list[str], explanation: list[str] | None) -> str:
    """One `table` per stage: a captioned `tabular` with labels, and the matrix as a `bmatrix`."""
    parts = ["% attn compute: " + _tex(" · ".join(header[1:3]))]
    for name, title, m, rows, columns in _matrices(trace, stages):
        cell = lambda x: r"-\infty" if x == -np.inf else number(x, precision)  # noqa: E731
        body = " \\\\\n".join(" & ".join(cell(x) for x in row) for row in m)
        formula = FORMULAS.get(name, (name, name))[1]
        tab = " \\\\\n".join(_tex(r) + " & " + " & ".join(f"${cell(x)}$" for x in row) for r, row in zip(rows, m))
        parts.append("\n".join([
            r"\begin{table}[h]", r"\centering",
            rf"\caption{{{_tex(title)}: ${formula}$}}",
            rf"\begin{{tabular}}{{l{'r' * len(columns)}}}",
            " & " + " & ".join(_tex(c) for c in columns) + r" \\ \hline",
            tab, r"\end{tabular}", "",
            r"\[", rf"\text{{{_tex(title)}}} = \begin{{bmatrix}}", body, r"\end{bmatrix}", r"\]",
            r"\end{table}"]))
    if explanation:
        parts.append("\\begin{verbatim}\n" + "\n".join(explanation) + "\n\\end{verbatim}")
    return "\n\n".join(parts) + "\n"


def csv_stage(trace: Trace, stage: str) -> str:
    """One stage (scores, scaled, masked, weights or output) as CSV: a header of key (or column)
    labels, query labels in the first column; with several heads a leading `head` column.
    `output` is the final output; −∞ is written -inf."""
    p = trace.problem
    if stage == "output":
        matrices = [(None, trace.final)]
        columns = [str(j) for j in range(trace.final.shape[1])]
    else:
        matrices = [(h, trace.stage(stage)[h]) for h in range(p.heads)]
        columns = labels(p.key_labels, p.lk)
    multi = len(matrices) > 1
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow((["head"] if multi else []) + ["query"] + columns)
    for h, m in matrices:
        for r, row in zip(labels(p.query_labels, p.lq), m):
            writer.writerow(([h] if multi else []) + [r] + ["-inf" if x == -np.inf else repr(float(x)) for x in row])
    return buffer.getvalue()
