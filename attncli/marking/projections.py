"""A projected problem's first stages, Q = X W_Q, K = X W_K and V = X W_V, marked as the sheet
asks for them, and carried into the heads' stages. Pure numpy: no I/O.

Top-level `Q`, `K`, `V` of answers to a problem given by X and weight matrices are the learner's
projections, whole: (Lq, heads · d_k), and K and V with the kv heads' columns (grouped-query
attention). `heads[h].Q` … are one head's columns. A problem given by Q, K, V has no such stage:
there they are the problem's own echoes (checked, not marked). Each head's stages are then marked
from the learner's own Q, K and V (carried when those were wrong), as from their earlier stages.
"""

from __future__ import annotations

import numpy as np

from attncli.base.arrays import merge_heads
from attncli.base.names import PROJECTED
from attncli.marking.answers import read_stage
from attncli.marking.diagnosis import Diagnosis, diagnose
from attncli.marking.grading import Answer, Rule, StageMark, mark_cells, missing
from attncli.marking.mistakes import PROJECTION_MISTAKES, TRANSPOSED, TRANSPOSED_TEXT
from attncli.marking.stage_marks import diagnosed
from attncli.problem import groups
from attncli.problem.trace import Trace


def formula(trace: Trace, name: str) -> str:
    """`X W_Q`, or `X_kv W_K` for cross-attention: what the sheet writes."""
    return f"X{'_kv' if name != 'Q' and 'X_kv' in trace.problem.inputs else ''} W_{name}"


def whole(trace: Trace, name: str) -> np.ndarray:
    """The projection as the sheet asks for it: every head side by side (K and V: the kv heads)."""
    per_head = trace.stage(name)  # (H, L, d), K and V repeated for grouped-query attention
    if name != "Q":
        per_head = per_head[::trace.problem.heads // groups.count(trace.problem)]
    return merge_heads(per_head)


def _columns(trace: Trace, name: str, head: int) -> slice:
    """Head `head`'s columns of the whole projection."""
    width = trace.stage(name).shape[-1]
    n = head if name == "Q" else groups.kv_head(trace.problem, head)
    return slice(n * width, (n + 1) * width)


def _candidates(trace: Trace, name: str, columns: slice):
    """(id, note, prediction) of the projection's own mistakes, on `columns` of it."""
    inputs = trace.problem.inputs
    x = inputs["X"] if name == "Q" else inputs.get("X_kv", inputs["X"])
    w, b = inputs[f"W_{name}"], inputs.get(f"b_{name}", 0.0)
    expected = whole(trace, name)[:, columns]
    yield TRANSPOSED, f"{TRANSPOSED}: {TRANSPOSED_TEXT}", expected.T
    text = {m: f"{m}: {words}" for m, words in PROJECTION_MISTAKES.items()}
    if w.shape[0] == w.shape[1]:
        yield "projection_transposed", text["projection_transposed"], (x @ w.T + b)[:, columns]
    for other in PROJECTED:
        if other != name and inputs[f"W_{other}"].shape == w.shape:
            yield "projection_swapped", text["projection_swapped"], (x @ inputs[f"W_{other}"] + b)[:, columns]
    if f"b_{name}" in inputs:
        yield "no_projection_bias", text["no_projection_bias"], (x @ w)[:, columns]


def _mark(trace: Trace, name: str, answer: Answer, columns: slice, rule: Rule) -> StageMark:
    exact = whole(trace, name)[:, columns]
    if answer.transposed:
        return StageMark(given=answer, cells=np.full(exact.shape, "wrong"), expected=exact, diagnosis=(TRANSPOSED,),
                         notes=answer.notes + (f"{TRANSPOSED}: {TRANSPOSED_TEXT}",), cause=TRANSPOSED)
    cells, notes, _ = mark_cells(answer, exact, (), rule)
    found = Diagnosis()
    if ((cells == "wrong") | (cells == "imprecise")).any():
        found = diagnose(answer, cells, exact, _candidates(trace, name, columns), rule)
    return diagnosed(StageMark(given=answer, cells=cells, expected=exact, diagnosis=(), notes=answer.notes + notes),
                     found, rule)


def mark_projections(trace: Trace, doc: dict, rule: Rule, require: tuple[str, ...] = ()):
    """(marks keyed `Q` or `heads[h].Q`, per head the learner's own Q, K, V to carry (name →
    (L, d) values), per head whether those are all correct). Nothing for a problem given by Q, K, V."""
    p = trace.problem
    heads = p.heads
    if not p.projected or not isinstance(doc, dict):
        return {}, [{} for _ in range(heads)], [True] * heads
    several = heads > 1 or "W_O" in p.inputs
    listed = doc.get("heads") if isinstance(doc.get("heads"), list) else []
    entries = [entry if isinstance(entry, dict) else {} for entry in listed] + [{}] * (heads - len(listed))
    marks: dict[str, StageMark] = {}
    whole_marks: dict[str, StageMark] = {}
    for name in PROJECTED:
        value = doc.get(name)
        if value is None and not several and entries[0].get(name) is not None:
            value = entries[0][name]  # one head: its Q is the whole Q
        exact = whole(trace, name)
        if value is not None:
            answer = read_stage(value, name, exact.shape, f"{'queries' if name == 'Q' else 'keys'} × columns "
                                f"of {formula(trace, name)}")
            whole_marks[name] = marks[name] = _mark(trace, name, answer, slice(None), rule)
        elif name in require and not (several and all(e.get(name) is not None for e in entries)):
            marks[name] = missing(exact)
    inputs, sound = [], []
    for h, entry in enumerate(entries):
        own, right = {}, True
        for name in PROJECTED:
            columns = _columns(trace, name, h)
            path = f"heads[{h}].{name}"
            if several and entry.get(name) is not None:
                exact = trace.stage(name)[h]
                mark = marks[path] = _mark(trace, name, read_stage(entry[name], path, exact.shape, "rows × columns"),
                                           columns, rule)
                own[name], cells = mark.given.values, mark.cells
            elif name in whole_marks:
                own[name], cells = whole_marks[name].given.values[:, columns], whole_marks[name].cells[:, columns]
            else:
                if path in require:
                    marks[path] = missing(trace.stage(name)[h])
                continue
            right = right and bool((cells == "correct").all())
        inputs.append(own)
        sound.append(right)
    return marks, inputs, sound


def without_projections(doc, trace: Trace):
    """A projected problem's answers without the learner's Q, K, V in its heads (they are answers,
    not echoes of the problem to check)."""
    if not trace.problem.projected or not isinstance(doc, dict) or not isinstance(doc.get("heads"), list):
        return doc
    return doc | {"heads": [{k: v for k, v in h.items() if k not in PROJECTED} if isinstance(h, dict) else h
                            for h in doc["heads"]]}
