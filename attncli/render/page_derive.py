"""The page's derivations: what `attn compute --explain --row N` prints for each row the page
shows, and where in those lines each stage's step (and each gradient's) begins and ends.

One code path: the lines are `render.explain.explain` (and `render.tiles.explain_tiles` for the
tiles) for that row, called exactly as `--explain --row #N` calls it; the page only cuts them into
steps. The hand calculation is Decimal arithmetic, about 40 µs per key and dimension of a row
(measured: a row of 512 keys at d_k = 64 takes 1.4 s), so rows are explained in order while
`BUDGET` lasts; a row past it says which command explains it.
"""

from __future__ import annotations

import re

from attncli.base.errors import AttnError
from attncli.problem.trace import Trace
from attncli.render.explain import explain
from attncli.render.tiles import explain_tiles
from attncli.stages import grads
from attncli.stages.table import present

BUDGET = 60_000  # heads × keys × (d_k + d_v) summed over the rows explained: about 2 s of Decimal work
# The first row is explained past the budget, but not this far past it: a real model's layer (12 heads of
# 15 keys projected from 384 numbers) is 4.6 million, half a minute; a 4000-key row 512,000, twenty seconds.
FIRST_MOST = 8 * BUDGET
SECTION = re.compile(r"^(Head (\d+)( \(K, V of kv head \d+\))?, query|Query) .*\(row \d+\): ")  # as steps.py heads a section
STEP = re.compile(r"^Step (B?)(\d+): (.*)$")


def row_cost(trace: Trace) -> int:
    """What one row's explanation costs, in BUDGET's units: per head, each key's d_k + d_v numbers,
    and with projections each of them (and q's) a dot product over the input's width."""
    p = trace.problem
    width = max((a.shape[-1] for key, a in p.inputs.items() if key in ("X", "X_kv") and a.ndim >= 1), default=0)
    per_key = (trace.d_k + trace.d_v) * (1 + width)
    return max(1, p.heads * (p.lk * per_key + trace.d_k * width))


def derivations(trace: Trace, rows: list[int], precision: int, tiled=None, carry: str = "exact") -> dict:
    """{"rows": {N: {"lines", "heads": {h: {"span", "steps": {name: [start, end)}}}, "final"}},
    "tiles": {"h:N": lines}, "missing": the rows past the budget}: the explanation of each row in
    `rows` (in order) while the budget lasts, carrying numbers as `--carry` says (the page of
    `--explain --carry rounded` must not disagree with its explanation). A problem the hand calculation cannot explain (a
    stage without a hand step) has none: {"rows": {}, "why": the reason}."""
    found: dict = {"rows": {}, "tiles": {}, "missing": []}
    spent, cost = 0, row_cost(trace)
    if tiled is not None:
        found["tiles"] = {f"{h}:{i}": explain_tiles(tiled, trace, [i], [h], precision)
                          for i in rows for h in range(trace.problem.heads)}
    if any(trace.stage(stage.name) is None for stage in present(trace.problem)):
        return found | {"why": "only the output was computed (in blocks): add --stages to see every stage"}
    for i in rows:
        if spent + cost > BUDGET and (found["rows"] or cost > FIRST_MOST):  # the first row unless it is far past it
            found["missing"].append(i)
            continue
        spent += cost
        try:
            lines = explain(trace, [i], None, precision, carry)
        except AttnError as error:
            return found | {"rows": {}, "missing": [], "why": error.message}
        found["rows"][str(i)] = {"lines": lines} | cut(trace, lines)
    return found


def cut(trace: Trace, lines: list[str]) -> dict:
    """Where each head's section, each stage's step and each gradient's step lie in one row's
    explanation: {"heads": {h: {"span": [start, end), "steps": {name: [start, end)}}}, "final":
    [start, end) or None}."""
    p = trace.problem
    starts = [n for n, line in enumerate(lines) if SECTION.match(line)] + [len(lines)]
    heads = {}
    for h in range(p.heads):
        start, end = starts[h], starts[h + 1]
        heads[str(h)] = {"span": [start, end], "steps": _steps(trace, lines, start, end)}
    final = [starts[p.heads], len(lines)] if len(starts) > p.heads + 1 else None
    return {"heads": heads, "final": final}


def _steps(trace: Trace, lines: list[str], start: int, end: int) -> dict:
    """Each stage's and gradient's lines in one head's section, as explain_row numbers them."""
    heads = [(n, STEP.match(lines[n])) for n in range(start, end)]
    marks = [(n, m) for n, m in heads if m]
    bounds = {}
    for k, (n, m) in enumerate(marks):
        following = marks[k + 1][0] if k + 1 < len(marks) else end
        following = next((b for b in range(n + 1, following) if not lines[b].strip()), following)  # a blank line ends it
        bounds[(m[1], int(m[2]))] = (n, following, m[3])
    steps = {}
    number = 2 if trace.problem.projected else 1  # Step 1 is the projection
    for stage in present(trace.problem):
        if not stage.hand.numbered:
            number -= 1  # its lines continue the step before
        if ("", number) in bounds:
            steps[stage.name] = list(bounds[("", number)][:2])
        number += 1
    backward = [(key, value) for key, value in bounds.items() if key[0] == "B"]
    for gradient in grads.GRADIENTS:
        word = re.compile(rf"\b{re.escape(gradient.name.lower())}\b")
        hit = next((value for _, value in backward if word.search(value[2].lower())), None)
        if hit is not None:
            steps[gradient.name] = list(hit[:2])
    if backward and "d_output" not in steps:  # dO's line, before Step B1
        first = min(value[0] for _, value in backward)
        begin = next(n for n in range(start, first) if lines[n].startswith("Backward pass"))
        steps["d_output"] = [begin, first]
    return steps
