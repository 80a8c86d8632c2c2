"""A learner's answers document to checked `Answer`s, shaped like the stages they answer.

Top-level `scores`, `scaled`, `masked`, `weights` answer a one-head problem; several heads are
answered as `"heads": [{...}, ...]`. Top-level `output` is the final output (for one head without
W_O that is the head's output). The JSON that `attn compute` writes is a complete answer.
"""

from __future__ import annotations

import numpy as np

from attncli.errors import InputError, did_you_mean, quote
from attncli.marking import Answer, present
from attncli.problem import ALIASES, INPUT_KEYS, OUTPUT_KEYS
from attncli.trace import Trace
from attncli.values import as_array, decimals_of, describe

HEAD_STAGES = ("scores", "scaled", "masked", "weights", "output")
IGNORED_IN_HEADS = ("Q", "K", "V")


def _answer(value, field: str, shape: tuple[int, int], what: str) -> Answer:
    kind = "bias" if field.endswith("masked") else "number"
    values = as_array(value, field, kind=kind, max_dims=2)
    if values.ndim == 1 and shape[0] == 1:
        values = values.reshape(1, -1)
    if values.shape != shape:
        found = " × ".join(map(str, values.shape))
        raise InputError(f"{field} has shape ({found}); expected ({shape[0]} × {shape[1]}): {what}")
    decimals = decimals_of(value, values.shape) if isinstance(value, list) else np.full(shape, -1)
    return Answer(values=values, decimals=decimals)


def _check_keys(doc: dict, allowed: tuple[str, ...], where: str) -> None:
    for key in doc:
        if key not in allowed and ALIASES.get(key) not in allowed:
            hint = did_you_mean(key, allowed) or f"; answers are {', '.join(HEAD_STAGES)}"
            raise InputError(f"unknown key {quote(key)}{where}{hint}")


def read_answers(doc, trace: Trace) -> tuple[list[dict[str, Answer]], Answer | None]:
    """Per-head answers, and the final output's answer (None when it is head 0's output or absent)."""
    p = trace.problem
    if not isinstance(doc, dict):
        raise InputError(f"the top level is {describe(doc)}; expected a JSON object of answers")
    _check_keys(doc, HEAD_STAGES + ("heads",) + INPUT_KEYS + OUTPUT_KEYS, "")
    shapes = {"scores": (p.lq, p.lk), "scaled": (p.lq, p.lk), "masked": (p.lq, p.lk),
              "weights": (p.lq, p.lk), "output": (p.lq, trace.d_v)}
    what = {name: "queries × keys" for name in shapes} | {"output": "queries × value columns"}
    stages = present(trace)
    single = p.heads == 1 and "W_O" not in p.inputs  # the final output is head 0's output

    heads = [dict() for _ in range(p.heads)]
    listed = doc.get("heads")
    if isinstance(listed, list):
        if len(listed) != p.heads:
            raise InputError(f"heads lists {len(listed)} heads but the problem has {p.heads}")
        for h, entry in enumerate(listed):
            if not isinstance(entry, dict):
                raise InputError(f"heads[{h}] is {describe(entry)}; expected an object of stages")
            _check_keys(entry, HEAD_STAGES + IGNORED_IN_HEADS, f" in heads[{h}]")
            heads[h] = {k: v for k, v in entry.items() if k in HEAD_STAGES and v is not None}
    top = {k: doc[k] for k in HEAD_STAGES if k != "output" and doc.get(k) is not None}
    if top and p.heads > 1:
        raise InputError(f"{next(iter(top))} is given at the top level, but the problem has {p.heads} heads: "
                         'answer each head in "heads": [{...}, ...]')
    heads[0] = top | heads[0]
    final = doc.get("output")
    if single and final is not None and "output" not in heads[0]:
        heads[0]["output"] = final
    marked = []
    for h, entry in enumerate(heads):
        prefix = f"heads[{h}]." if isinstance(listed, list) else ""
        for name in entry:
            if name not in stages:
                raise InputError(f"{prefix}{name} is given, but this problem has no mask or bias, so no masked stage")
        marked.append({name: _answer(entry[name], prefix + name, shapes[name], what[name]) for name in entry})
    final_answer = None
    if final is not None and not single:
        final_answer = _answer(final, "output", trace.final.shape, "queries × output columns")
    return marked, final_answer
