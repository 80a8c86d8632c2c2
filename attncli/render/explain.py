"""The hand calculation of selected query rows, step by step, as a textbook writes it.

Every number is read from `steps.written` (exact or rounded carry); this module only writes them
down, with a note on each exact-carry line whose printed operands do not give its result. Labels
come through `labels` (escaped by `shown`): the lines are display text wherever they go (a
terminal, an export, or JSON's `explanation`); each export escapes them again for its medium.
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_DOWN, Decimal

from attncli import visibility
from attncli.masks import has_rules
from attncli.rule_words import masked_rows_words
from attncli.render.text import labels
from attncli.steps import E_NOTATION_FROM, PERCENT_PLACES, WIDE, Written, WrittenFinal, row_steps, written, written_final
from attncli.trace import Trace
from attncli.variants import number

MAX_KEYS = 8  # longer rows show the first and last keys with a "… N more …" line
MAX_TERMS = 6  # longer dot products and vectors are elided in the middle


def _number(d: Decimal, places: int) -> str:
    """A computed value: fixed decimals, e-notation when huge."""
    return f"{d:.{places}e}" if abs(d) >= E_NOTATION_FROM else f"{d:.{places}f}"


def _given(d: Decimal, places: int) -> str:
    """An operand as a person writes it: 4.0, 0.5, -1.0 (no trailing zeros past the first)."""
    text = _number(d, places)
    if "e" in text:
        return text
    if "." in text:
        text = text.rstrip("0")
    return text + "0" if text.endswith(".") else text if "." in text else text + ".0"


def _vector(values, places: int, write=_number) -> str:
    items = [write(x, places) for x in values]
    if len(items) > MAX_TERMS:
        items = items[:3] + ["…"] + items[-2:]
    return "[" + ", ".join(items) + "]"


def _dot(xs, ws, places: int, bias=None) -> str:
    """(x0)(w0) + (x1)(w1) + … (+ b): the left side of a dot product's line."""
    terms = [f"({_given(a, places)})({_given(b, places)})" for a, b in zip(xs, ws)]
    if len(terms) > MAX_TERMS:
        text = " + ".join(terms[:3] + ["…"] + terms[-1:]) + f" ({len(terms)} terms)"
    else:
        text = " + ".join(terms)
    return text if bias is None else f"{text} + {_given(bias, places)}"


def _keys(n: int) -> list[int | None]:
    """Which indices to list; None marks the elided middle."""
    if n <= MAX_KEYS:
        return list(range(n))
    return list(range(MAX_KEYS - 3)) + [None] + list(range(n - 2, n))


def _unrounded(x: float, places: int) -> str:
    """An operand's unrounded value: enough decimals to differ from the printed one, then `…`."""
    if abs(x) >= E_NOTATION_FROM:
        return repr(x)
    exact = Decimal(repr(x))
    decimals = min(17, max(places + 1, 2 - math.floor(math.log10(abs(x))) if x else 0))
    cut = exact.quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_DOWN, context=WIDE)
    return f"{cut}" if cut == exact else f"{cut}…"


def _note(unrounded: dict, keys, places: int) -> str:
    """'  (0.48024… unrounded)' when a line's printed operands do not give its printed result."""
    found = [unrounded[key] for key in keys if key in unrounded]
    if not found:
        return ""
    values = list(dict.fromkeys(x for group in found for x in group))
    parts = [", ".join(_unrounded(x, places) for x in values) + " unrounded"] if values else []
    if any(not group for group in found):
        parts.append("from the unrounded terms")
    return "  (" + "; ".join(parts) + ")"


def _slope(p, head: int) -> str:
    """A head's ALiBi slope as written in the explanation: 6 significant digits."""
    return f"{float(p.alibi_slopes[head]):.6g}"


def explain_row(trace: Trace, w: Written) -> list[str]:
    p = trace.problem
    keys = labels(p.key_labels, p.lk)
    query = f'"{labels(p.query_labels, p.lq)[w.row]}"' if p.query_labels else str(w.row)
    width = max(len(keys[j]) for j in _keys(p.lk) if j is not None) + 1
    places = w.places
    n = lambda x: _number(x, places)  # noqa: E731
    note = lambda *line: _note(w.unrounded, line, places)  # noqa: E731

    def each(line):
        out = []
        for j in _keys(p.lk):
            out.append(f"  … {p.lk - MAX_KEYS + 1} more keys …" if j is None else
                       "  " + line(j, f"{keys[j] + ':':<{width}}"))
        return out

    head = f"Head {w.head}, query" if p.heads > 1 else "Query"
    step = 1
    if w.projection is None:
        lines = [f"{head} {query} (row {w.row}): q = {_vector(w.q, places, _given)}"]
    else:
        lines = [f"{head} {query} (row {w.row}): x = {_vector(w.projection.x, places, _given)}"]
        lines += _projection_lines(trace, w, keys, width)
        step = 2
    q, K, dot = w.q, w.K, "q · k"
    if w.rotation is not None:  # RoPE: the scores read the rotated q and k
        from attncli.render.explain_rope import rotation_lines

        lines += rotation_lines(trace, w, keys, width, step, n, lambda d: _given(d, places),
                                lambda v: _vector(v, places), note, _keys)
        q, K, dot, step = w.rotation.q_rope, w.rotation.K_rope, "q_rope · k_rope", step + 1
    lines.append(f"Step {step}: raw scores, {dot}")
    lines += each(lambda j, key: f"{key} {_dot(q, K[j], places)} = {n(w.scores[j])}{note(('scores', j))}")

    step += 1
    if w.divisor is not None:
        approx = "=" if math.isqrt(trace.d_k) ** 2 == trace.d_k else "≈"
        lines.append(f"Step {step}: scale by 1/√d_k, d_k = {trace.d_k}, √{trace.d_k} {approx} {n(w.divisor)}")
        lines += each(lambda j, key: f"{key} {n(w.scores[j])} / {n(w.divisor)} = {n(w.scaled[j])}"
                                     f"{note(('scaled', j))}")
    else:
        lines.append(f"Step {step}: scale by {n(w.scale)} (given)")
        lines += each(lambda j, key: f"{key} {n(w.scores[j])} × {n(w.scale)} = {n(w.scaled[j])}"
                                     f"{note(('scaled', j))}")

    before = w.scaled
    if w.capped is not None:
        step += 1
        c = number(p.softcap)
        lines.append(f"Step {step}: softcap, {c} · tanh(scaled / {c}) (Gemma 2): near scaled when small, "
                     f"never beyond ±{c}")
        lines += each(lambda j, key: f"{key} {c} · tanh({n(w.scaled[j])} / {c}) = {n(w.capped[j])}"
                                     f"{note(('capped', j))}")
        before = w.capped

    if trace.masked is not None:
        step += 1
        parts = ["add the bias"] * (w.bias is not None)
        if w.alibi is not None:
            parts.append(f"add ALiBi, −{_slope(p, w.head)}·|q_pos − k_pos|")
        what = ", ".join(parts) + (", then apply the mask" if parts and has_rules(p) else
                                   "apply the mask" if not parts else "")
        lines.append(f"Step {step}: {what} (masked keys become −∞ and are excluded)")
        q_pos = int(p.q_positions[w.row])
        rule, why = _rules(trace, w, query, keys)
        lines += rule

        def masked_line(j, key):
            if not w.allowed[j]:
                return f"{key} masked → −∞, excluded" + (f" ({why[j]})" if why and why[j] else "")
            if w.bias is None and w.alibi is None:
                return f"{key} {n(w.masked[j])}"
            terms = " + ".join([n(before[j])] + ([] if w.bias is None else [n(w.bias[j])]))
            if w.alibi is None:
                return f"{key} {terms} = {n(w.masked[j])}{note(('masked', j))}"
            a = w.alibi[j]
            alibi = f" − {n(abs(a))}" if a <= 0 else f" + {n(a)}"
            return (f"{key} {terms} − {_slope(p, w.head)}·|{q_pos} − {int(p.k_positions[j])}| = {terms}{alibi} = "
                    f"{n(w.masked[j])}{note(('masked', j))}")
        lines += each(masked_line)

    step += 1
    lines.append(f"Step {step}: softmax")
    lines += _softmax_lines(trace, w, keys, width)
    lines.append(f"Step {step + 1}: weighted sum of values")
    if not any(w.allowed):
        lines.append(f"  output = {_vector(w.output, places)}")
        return lines
    for j in _keys(p.lk):
        if j is None:
            lines.append(f"  … {p.lk - MAX_KEYS + 1} more keys …")
        elif w.allowed[j]:
            lines.append(f"  {n(w.weights[j])} × {_vector(w.V[j], places, _given)} = "
                         f"{_vector(w.contributions[j], places)}{note(('contributions', j))}")
    if not all(w.allowed):
        lines.append("  (masked keys have weight 0 and add nothing)")
    lines.append(f"  sum = {_vector(w.output, places)}{note(('output', 0))}")
    if w.carry == "rounded":
        lines.append(_comparison(w.output, w.exact_output, places))
    return lines


def _rules(trace: Trace, w: Written, query: str, keys: list[str]) -> tuple[list[str], list[str | None] | None]:
    """(lines, why) with mask rules: the rule this query's keys must meet (its q_pos filled in)
    and, when the key positions are not 0 … Lk − 1, each key's k_pos; why each key is hidden
    (None where it is visible). ([], None) without rules."""
    p = trace.problem
    if not has_rules(p):
        return [], None
    lines = [f"  query {query} (q_pos {int(p.q_positions[w.row])}) may attend a key when "
             f"{visibility.row_rule(p, w.row)}" + ("; every key does" if all(w.allowed) else "")]
    if visibility.positions_shown(p):
        shown = ["…" if j is None else f"{keys[j]}={int(p.k_positions[j])}" for j in _keys(p.lk)]
        lines.append("  k_pos: " + ", ".join(shown))
    return lines, visibility.hidden_because(p, w.head, w.row)


def _product_lines(proj, name: str, unrounded, key: str, places) -> list[str]:
    """One line per column of a vector-matrix product x W (+ b): `name_j: (x0)(w0j) + … = r`."""
    lines = []
    for j in _keys(len(proj.result)):
        if j is None:
            lines.append(f"  … {len(proj.result) - MAX_KEYS + 1} more columns …")
            continue
        column = [row[j] for row in proj.W]
        lines.append(f"  {name}{j}: {_dot(proj.x, column, places, None if proj.b is None else proj.b[j])} = "
                     f"{_number(proj.result[j], places)}{_note(unrounded, [(key, j)], places)}")
    return lines

def _projection_lines(trace: Trace, w: Written, keys: list[str], width: int) -> list[str]:
    """q = x W_Q (+ b_Q) as dot products over this head's columns; k and v of every key."""
    p, places, proj = trace.problem, w.places, w.projection
    first = w.head * trace.d_k
    columns = f"column{'s' * (trace.d_k > 1)} {first}" + (f"–{first + trace.d_k - 1}" if trace.d_k > 1 else "")
    plus_b = " + b_Q" if proj.b is not None else ""
    lines = [f"Step 1: project, q = x W_Q{plus_b} ({columns} of W_Q for this head)"]
    lines += _product_lines(proj, "q", w.unrounded, "q", places)
    source = "x_kv" if "X_kv" in p.inputs else "x"
    lines.append(f"  k = {source} W_K and v = {source} W_V the same way, for every key:")
    for j in _keys(p.lk):
        if j is None:
            lines.append(f"  … {p.lk - MAX_KEYS + 1} more keys …")
            continue
        k, v = w.keys[j]
        lines.append(f"  {keys[j] + ':':<{width}} k = {_vector(k, places)}   v = {_vector(v, places)}")
    return lines


def _softmax_lines(trace: Trace, w: Written, keys: list[str], width: int) -> list[str]:
    places = w.places
    n = lambda x: _number(x, places)  # noqa: E731
    lines = []
    if not any(w.allowed) and w.sink is not None:
        return [f"  every key is masked: the sink takes the whole row (e^{n(w.sink)} of e^{n(w.sink)}), "
                "so every weight is 0"]
    if not any(w.allowed):
        chosen = trace.problem.masked_rows
        return [f"  every key is masked: {masked_rows_words(chosen, f'--masked-rows {chosen}')}"]
    largest = "score" if w.sink is None else "logit, the sink included,"
    if w.shift_reason == "overflow":
        dtype = trace.problem.dtype
        lines.append(f"  the largest {largest} is {n(w.shift)}: e^{n(w.shift)} overflows "
                     f"{dtype}, so subtract it first (a constant shift leaves softmax unchanged)")
    elif w.shift_reason == "large":
        lines.append(f"  the largest {largest} is {n(w.shift)}: e^{n(w.shift)} is too large to write out, "
                     "so subtract it first (a constant shift leaves softmax unchanged)")
    elif w.shift_reason == "underflow":
        lines.append(f"  every e^x rounds to 0 at {places} decimals, so subtract the largest {largest}, "
                     f"{n(w.shift)}, first (a constant shift leaves softmax unchanged)")
    if w.shift is not None:
        power = lambda j: f"e^({n(w.masked[j])} − {n(w.shift)})"  # noqa: E731
    else:
        power = lambda j: f"e^{n(w.masked[j])}"  # noqa: E731
    shown = [j for j in _keys(len(keys)) if j is None or w.allowed[j]]
    terms = ["…" if j is None else f"{power(j)} = {n(w.exps[j])}" for j in shown]
    if w.sink is not None:  # one more logit in the sum, whose weight is then dropped
        sink = f"e^({n(w.sink)} − {n(w.shift)})" if w.shift is not None else f"e^{n(w.sink)}"
        terms.append(f"sink {sink} = {n(w.sink_exp)}")
    line_keys = [("exps", j) for j in range(len(keys))] + [("sink", 0), ("total", 0)]
    lines.append("  " + "   ".join(terms) + f"   sum = {n(w.total)}" + _note(w.unrounded, line_keys, places))
    for j in _keys(len(keys)):
        if j is None:
            lines.append(f"  … {len(keys) - MAX_KEYS + 1} more keys …")
        elif not w.allowed[j]:
            lines.append(f"  {keys[j]:<{width - 1}} = e^−∞ / {n(w.total)} = 0 (masked)")
        else:
            lines.append(f"  {keys[j]:<{width - 1}} = {n(w.exps[j])} / {n(w.total)} = "
                         f"{n(w.weights[j])} ({w.percents[j]:.{PERCENT_PLACES}f}%)"
                         + _note(w.unrounded, [("weights", j)], places))
    if w.sink is not None:
        lines.append(f"  the sink's share, {n(w.sink_exp)} / {n(w.total)}, is dropped: these weights sum to less than 1")
    return lines


def _comparison(carried: list[Decimal], exact: list[Decimal], places: int) -> str:
    """Rounded carry's last line: the carried result beside exact arithmetic's."""
    changed = sum(_number(a, places) != _number(b, places) for a, b in zip(carried, exact))
    verdict = "the same" if not changed else f"carrying rounded numbers changed {changed} of {len(exact)}"
    return f"  with exact arithmetic: {_vector(exact, places)} ({verdict})"


def final_lines(trace: Trace, f: WrittenFinal, places: int, carry: str) -> list[str]:
    """One query row's heads side by side and, with W_O, their product with W_O (+ b_O)."""
    p = trace.problem
    query = f'"{labels(p.query_labels, p.lq)[f.row]}"' if p.query_labels else str(f.row)
    if f.projection is None:
        lines = [f"Query {query} (row {f.row}): the heads' outputs side by side",
                 f"  output = {_vector(f.concat, places)}"]
        return lines
    proj = f.projection
    plus_b = " + b_O" if proj.b is not None else ""
    what = "heads side by side" if p.heads > 1 else "output projection"
    lines = [f"Query {query} (row {f.row}): {what}, output = concat W_O{plus_b}",
             f"  concat = {_vector(f.concat, places)}"]
    lines += _product_lines(proj, "output", f.unrounded, "final", places)
    lines.append(f"  output = {_vector(proj.result, places)}")
    if carry == "rounded":
        lines.append(_comparison(proj.result, f.exact_final, places))
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


def explain(trace: Trace, rows: list[int] | None = None, heads: list[int] | None = None,
            precision: int = 4, carry: str = "exact") -> list[str]:
    """Lines explaining the chosen rows (default: all when there are at most 3, else row 0);
    for each row every chosen head, then (all heads shown) the heads side by side and W_O."""
    p = trace.problem
    lines = []
    if carry == "rounded":
        lines.append("Rounded carry: every step uses the numbers as printed before it, "
                     f"{precision} decimals, as on a pocket calculator.")
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
            done.append(written(trace, row_steps(trace, h, i), precision, carry))
            lines += explain_row(trace, done[-1])
            if trace.gradients is not None:
                from attncli.render.explain_backward import backward_lines

                lines += [""] + backward_lines(trace, done[-1])
        if combined and every_head:
            lines += [""] + final_lines(trace, written_final(trace, done), precision, carry)
    if combined and not every_head:
        shown = ", ".join(str(h) for h in heads)
        lines += ["", f"(only head {shown} is shown; without --head the heads' outputs are placed side by side"
                  + (" and multiplied by W_O)" if "W_O" in p.inputs else ")")]
    return lines
