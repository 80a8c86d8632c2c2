"""A case's arguments in the function's layout, and what it returned back into one 2-D matrix
per head (a "slot": one sequence of the batch, one head), beside the expected ones.

Layouts (the layout setting): `L,d` passes one sequence, one head: Q (Lq, d_k) (or (d_k,) for the 1-D
query case); `B,L,d` a batch, one head each: (B, Lq, d_k); `B,H,L,d` a batch of heads:
(B, H, Lq, d_k), K and V with the kv heads (B, H_kv, Lk, d). A mask comes in the same leading axes,
(…, Lq, Lk); an lse as (…, Lq). x and the projections: x in the layout, W_Q … as (d_in, d_out).
"""

from __future__ import annotations

import numpy as np

from attncli.base.arrays import split_heads
from attncli.code.calling import Signature, mask_argument
from attncli.code.cases import Case
from attncli.problem import masks

BLOCKS = (2, 2)  # block_q, block_k for a tiled kernel: every case of the battery has more than one key block


def _kv(trace, case: Case, array: np.ndarray) -> np.ndarray:
    """The kv heads of a per-query-head array (repeated for grouped-query attention)."""
    group = trace.problem.heads // case.kv_heads
    return array[::group]


def to_layout(case: Case, per_problem: list[np.ndarray], layout: str) -> np.ndarray:
    """Per problem (heads, …) arrays → the layout: the first head's (…), (B, …) or (B, heads, …)."""
    if layout == "L,d":
        return per_problem[0][0]
    if layout == "B,L,d":
        return np.stack([p[0] for p in per_problem])
    return np.stack(per_problem)


def arguments(case: Case, signature: Signature, layout: str, convention: str) -> list[tuple[str, object]]:
    """The case's arguments, in the signature's order, as numpy arrays of the case's dtype (or flags)."""
    dtype = np.dtype(case.dtype)
    traces = case.traces
    values = {}
    if signature.projected:
        inputs = [t.problem.inputs for t in traces]
        values["x"] = to_layout(case, [i["X"][None] for i in inputs], layout)
        for name in ("W_Q", "W_K", "W_V"):
            values[name] = np.asarray(inputs[0][name])
    else:
        values["Q"] = to_layout(case, [t.Q for t in traces], layout)
        if case.vector:
            values["Q"] = values["Q"][0]  # (d_k,): one query as a vector
        values["K"] = to_layout(case, [_kv(t, case, t.K) for t in traces], layout)
        values["V"] = to_layout(case, [_kv(t, case, t.V) for t in traces], layout)
    if signature.takes("mask"):
        planes = []
        for t in traces:
            p = t.problem
            seen = masks.visible(p, slice(0, p.lq), slice(0, p.lk))
            seen = np.ones((1, p.lq, p.lk), bool) if seen is None else seen
            planes.append(np.broadcast_to(seen, (p.heads, p.lq, p.lk)))
        values["mask"] = mask_argument(to_layout(case, planes, layout), convention, dtype)
    values["is_causal"] = case.causal
    values["block_q"], values["block_k"] = BLOCKS
    if signature.backward:
        values["dO"] = to_layout(case, [split_heads(t.problem.dO, t.problem.heads) for t in traces], layout)
        values["O"] = to_layout(case, [t.output for t in traces], layout)
        values["lse"] = to_layout(case, [t.lse for t in traces], layout)
    out = []
    for name in signature.names:
        value = values[name]
        if isinstance(value, np.ndarray) and value.dtype.kind == "f":
            value = np.ascontiguousarray(value, dtype=dtype)
        elif isinstance(value, np.ndarray):
            value = np.ascontiguousarray(value)
        out.append((name, value))
    return out


def expected(case: Case, name: str) -> list[np.ndarray]:
    """Per slot (sequence by sequence, head by head) the expected 2-D matrix of `name`: a stage
    (Lq, ·), lse as a column (Lq, 1), d_Q (Lq, d_k), d_K and d_V per kv head (Lk, ·)."""
    found = []
    for trace in case.traces:
        if name == "lse":
            found += [row[:, None] for row in trace.lse]
        elif name == "d_Q":
            found += list(trace.gradients.heads["d_Q"])
        elif name in ("d_K", "d_V"):
            g = trace.gradients.grads[name[-1]]
            found += list(g if g.ndim == 3 else split_heads(g, case.kv_heads))
        else:
            found += list(trace.stage(name))
    return found


def slot_names(case: Case, name: str) -> list[str]:
    """`b0 h1`-style names of the slots (empty when there is one)."""
    heads = case.kv_heads if name in ("d_K", "d_V") else case.heads
    batch = len(case.problems)
    return [" ".join(part for part in ((f"b{b}" if batch > 1 else ""), (f"h{h}" if heads > 1 else "")) if part)
            for b in range(batch) for h in range(heads)]


class Mismatch(Exception):
    """A returned array of another shape than the layout's: (found, expected)."""

    def __init__(self, found: tuple, wanted: tuple):
        super().__init__(f"shape {found}, expected {wanted}")
        self.found, self.wanted = found, wanted


def from_layout(case: Case, name: str, array: np.ndarray, layout: str) -> list[np.ndarray]:
    """A returned array in the layout → one 2-D matrix per slot; Mismatch when its shape is not
    the layout's (a 1-D result is one row for the 1-D query case; an lse is a column)."""
    wanted = expected(case, name)
    rows, cols = wanted[0].shape
    heads = case.kv_heads if name in ("d_K", "d_V") else case.heads
    batch = len(case.problems)
    inner = (rows,) if name == "lse" else (rows, cols)
    if case.vector and name != "lse":
        inner = (cols,)
    shape = {"L,d": inner, "B,L,d": (batch,) + inner, "B,H,L,d": (batch, heads) + inner}[layout]
    array = np.asarray(array)
    if array.shape != shape and case.vector and array.shape == (rows, cols):
        array = array[0]  # (1, d_v) for a vector query: one row all the same
    if array.shape != shape:
        raise Mismatch(tuple(array.shape), shape)
    flat = array.reshape((-1, rows, cols))
    return [flat[i].astype(np.float64) for i in range(flat.shape[0])]
