"""The hand calculation of selected query rows, step by step, as a textbook writes it.

Every number is read from `attention.row_steps`; this module only writes them down. Labels come
through `labels` (escaped by `shown`): the lines are display text wherever they go (a terminal,
an export, or JSON's `explanation`); each export escapes them again for its medium.
"""

from __future__ import annotations

import math

from attncli.steps import RowSteps, row_steps
from attncli.render.text import given, labels, number
from attncli.trace import Trace

MAX_KEYS = 8  # longer rows show the first and last keys with a "… N more …" line
MAX_TERMS = 6  # longer dot products and vectors are elided in the middle


def _vector(values, precision: int, written=number) -> str:
    items = [written(x, precision) for x in values]
    if len(items) > MAX_TERMS:
        items = items[:3] + ["…"] + items[-2:]
    return "[" + ", ".join(items) + "]"


def _dot(q, k, precision: int) -> str:
    terms = [f"({given(a, precision)})({given(b, precision)})" for a, b in zip(q, k)]
    if len(terms) > MAX_TERMS:
        terms = terms[:3] + ["…"] + terms[-1:] + [f"({len(q)} terms)"]
        return " + ".join(terms[:-1]) + " " + terms[-1]
    return " + ".join(terms)


def _keys(n: int) -> list[int | None]:
    """Which key indices to list; None marks the elided middle."""
    if n <= MAX_KEYS:
        return list(range(n))
    return list(range(MAX_KEYS - 3)) + [None] + list(range(n - 2, n))


def explain_row(trace: Trace, steps: RowSteps, precision: int) -> list[str]:
    p = trace.problem
    keys = labels(p.key_labels, p.lk)
    query = f'"{labels(p.query_labels, p.lq)[steps.row]}"' if p.query_labels else str(steps.row)
    width = max(len(keys[j]) for j in _keys(p.lk) if j is not None) + 1
    n = lambda x: number(x, precision)  # noqa: E731

    def each(line):
        out = []
        for j in _keys(p.lk):
            out.append(f"  … {p.lk - MAX_KEYS + 1} more keys …" if j is None else
                       "  " + line(j, f"{keys[j] + ':':<{width}}"))
        return out

    head = f"Head {steps.head}, query" if p.heads > 1 else "Query"
    lines = [f"{head} {query} (row {steps.row}): q = {_vector(steps.q, precision, given)}"]
    lines.append("Step 1: raw scores, q · k")
    lines += each(lambda j, key: f"{key} {_dot(steps.q, steps.K[j], precision)} = {n(steps.scores[j])}")

    if trace.default_scale:
        root = math.sqrt(trace.d_k)
        approx = "=" if root == int(root) else "≈"
        lines.append(f"Step 2: scale by 1/√d_k, d_k = {trace.d_k}, √{trace.d_k} {approx} {n(root)}")
        lines += each(lambda j, key: f"{key} {n(steps.scores[j])} / {n(root)} = {n(steps.scaled[j])}")
    else:
        lines.append(f"Step 2: scale by {n(trace.scale)} (given)")
        lines += each(lambda j, key: f"{key} {n(steps.scores[j])} × {n(trace.scale)} = {n(steps.scaled[j])}")

    step = 3
    if trace.masked is not None:
        what = {(True, True): "add the bias, then apply the mask", (True, False): "add the bias",
                (False, True): "apply the mask"}[(steps.bias is not None, p.mask is not None)]
        lines.append(f"Step 3: {what} (masked keys become −∞ and are excluded)")

        def masked_line(j, key):
            if not steps.allowed[j]:
                return f"{key} masked → −∞, excluded"
            if steps.bias is None:
                return f"{key} {n(steps.masked[j])}"
            return f"{key} {n(steps.scaled[j])} + {n(steps.bias[j])} = {n(steps.masked[j])}"
        lines += each(masked_line)
        step = 4

    lines.append(f"Step {step}: softmax")
    lines += _softmax_lines(trace, steps, keys, width, precision)
    lines.append(f"Step {step + 1}: weighted sum of values")
    if not steps.allowed.any():
        lines.append(f"  output = {_vector(steps.output, precision)}")
        return lines
    for j in _keys(p.lk):
        if j is None:
            lines.append(f"  … {p.lk - MAX_KEYS + 1} more keys …")
        elif steps.allowed[j]:
            lines.append(f"  {n(steps.weights[j])} × {_vector(steps.V[j], precision, given)} = "
                         f"{_vector(steps.contributions[j], precision)}")
    if not steps.allowed.all():
        lines.append("  (masked keys have weight 0 and add nothing)")
    lines.append(f"  sum = {_vector(steps.output, precision)}")
    return lines


def _softmax_lines(trace: Trace, steps: RowSteps, keys: list[str], width: int, precision: int) -> list[str]:
    n = lambda x: number(x, precision)  # noqa: E731
    lines = []
    if not steps.allowed.any():
        policy = {"zero": "its weights are all 0 (--masked-rows zero, as PyTorch SDPA)",
                  "uniform": "its weights are uniform, 1/Lk each (--masked-rows uniform, as JAX)"}
        return [f"  every key is masked: {policy[trace.problem.masked_rows]}"]
    if steps.shift:
        lines.append(f"  the largest score is {n(steps.shift)}: e^{n(steps.shift)} overflows "
                     f"{steps.masked.dtype}, so subtract it first (a constant shift leaves softmax unchanged)")
        power = lambda j: f"e^({n(steps.masked[j])} − {n(steps.shift)})"  # noqa: E731
    else:
        power = lambda j: f"e^{n(steps.masked[j])}"  # noqa: E731
    shown = [j for j in _keys(len(keys)) if j is None or steps.allowed[j]]
    terms = ["…" if j is None else f"{power(j)} = {n(steps.exps[j])}" for j in shown]
    lines.append("  " + "   ".join(terms) + f"   sum = {n(steps.total)}")
    for j in _keys(len(keys)):
        if j is None:
            lines.append(f"  … {len(keys) - MAX_KEYS + 1} more keys …")
        elif not steps.allowed[j]:
            lines.append(f"  {keys[j]:<{width - 1}} = e^−∞ / {n(steps.total)} = 0 (masked)")
        else:
            lines.append(f"  {keys[j]:<{width - 1}} = {n(steps.exps[j])} / {n(steps.total)} = "
                         f"{n(steps.weights[j])} ({steps.weights[j] * 100:.1f}%)")
    return lines


def explain(trace: Trace, rows: list[int] | None = None, heads: list[int] | None = None,
            precision: int = 4) -> list[str]:
    """Lines explaining the chosen rows (default: all when there are at most 3, else row 0)."""
    p = trace.problem
    note = []
    if rows is None:
        rows = list(range(p.lq)) if p.lq <= 3 else [0]
        if p.lq > 3:
            note = [f"(showing query 0 of {p.lq}; pick others with --row LABEL or --row INDEX)"]
    lines = list(note)
    for h in heads if heads is not None else range(p.heads):
        for i in rows:
            if lines:
                lines.append("")
            lines += explain_row(trace, row_steps(trace, h, i), precision)
    if "W_O" in p.inputs or p.heads > 1:
        lines += ["", "Then the heads' outputs are placed side by side"
                  + (" and multiplied by W_O (see the output table)." if "W_O" in p.inputs else ".")]
    return lines
