"""Grouped-query attention (GQA): which kv head each query head reads, defined once.

    group   = heads / kv_heads       query heads that share one kv head
    kv head = h // group             query head h's K and V (transformers' `repeat_kv`,
                                     torch.repeat_interleave over the head axis)

K and V hold `kv_heads` heads: 3-D (kv_heads, L, d), or 2-D with kv_heads · d columns (W_K and
W_V likewise, `"kv_heads": N`). Every path works on them repeated to one per query head
(`repeat`); the backward pass adds each query group's gradients back onto its kv head (`fold`).
The words (`title`, `header_line`) say which kv head a query head reads, in every view.
Numpy, the error types and `values.whole_count` only.
"""

from __future__ import annotations

import numpy as np

from attncli.base.errors import InputError, plural
from attncli.base.values import whole_count


def from_inputs(inputs, heads: int, kv_heads: int | None) -> int:
    """The kv heads: `kv_heads` when given, else what the inputs give (a 3-D K's first axis; 1 for
    a 2-D K beside a 3-D Q; else one per query head)."""
    if kv_heads is not None:
        return kv_heads
    Q, K = inputs.get("Q"), inputs.get("K")
    if Q is None or Q.ndim == 2:
        return heads
    return K.shape[0] if K.ndim == 3 else 1


def count(problem) -> int:
    """The problem's kv heads (`Problem.kv_heads`, or what its inputs give)."""
    return from_inputs(problem.inputs, problem.heads, problem.kv_heads)


def grouped(problem) -> bool:
    """Whether query heads share kv heads (fewer kv heads than query heads)."""
    return count(problem) < problem.heads


def kv_head(problem, h: int) -> int:
    """The kv head query head h reads: h // (heads / kv_heads)."""
    return h // (problem.heads // count(problem))


def repeat(x: np.ndarray, heads: int) -> np.ndarray:
    """(kv_heads, L, d) → (heads, L, d): each kv head repeated for its group, in order."""
    group = heads // x.shape[0]
    return x if group == 1 else np.repeat(x, group, axis=0)


def fold(d: np.ndarray, kv_heads: int) -> np.ndarray:
    """(heads, L, w) → (kv_heads, L, w): the sum of each group's per-query-head gradients."""
    heads = d.shape[0]
    return d if kv_heads == heads else d.reshape(kv_heads, heads // kv_heads, *d.shape[1:]).sum(axis=1)


def reads(problem, h: int) -> str | None:
    """`K, V of kv head 1` with grouped-query attention: what query head h reads; None without."""
    return f"K, V of kv head {kv_head(problem, h)}" if grouped(problem) else None


def title(problem, h: int) -> str:
    """`head 3`, and with grouped-query attention `head 3 · K, V of kv head 1`."""
    return f"head {h}" + (f" · {reads(problem, h)}" if grouped(problem) else "")


def group_text(problem, h: int) -> str:
    """` of every query head of kv head 1 (heads 2–3)`: whose shares a kv head's gradient adds up
    with grouped-query attention; "" without."""
    if not grouped(problem):
        return ""
    g, size = kv_head(problem, h), problem.heads // count(problem)
    return f" of every query head of kv head {g} (heads {g * size}–{g * size + size - 1})"


def header_line(problem) -> str | None:
    """The grouping in words for the header, None without it."""
    if not grouped(problem):
        return None
    n, group = count(problem), problem.heads // count(problem)
    if n == 1:
        return f"grouped-query attention: {problem.heads} query heads share 1 kv head (multi-query)"
    return (f"grouped-query attention: {problem.heads} query heads over {n} kv heads; query head h reads "
            f"K, V of kv head h // {group} (transformers' repeat_kv)")


def read_count(value) -> int | None:
    """`kv_heads`: absent (None), or a whole number ≥ 1."""
    return None if value is None else whole_count(value, "kv_heads")


def check_heads(heads: int, kv_heads: int) -> None:
    """kv_heads at most heads, and a divisor of it."""
    if kv_heads > heads:
        raise InputError(f"kv_heads is {kv_heads} but heads is {heads}: there are at most as many kv heads as "
                         "query heads", field="kv_heads", also=("heads",))
    if heads % kv_heads:
        raise InputError(f"heads = {heads} is not a multiple of kv_heads = {kv_heads}: each kv head serves "
                         "heads / kv_heads query heads (grouped-query attention)", field="kv_heads",
                         also=("heads",))


def check_columns(inputs: dict, names: tuple[str, str, str], heads: int, kv_heads: int) -> None:
    """2-D Q, K, V (or W_Q, W_K, W_V) with `heads` query heads over `kv_heads` kv heads: Q's (W_Q's)
    columns split into heads of d_k, K's into kv_heads · d_k, V's into kv_heads of d_v."""
    q, k, v = names
    check_heads(heads, kv_heads)
    for name, n, field in ((q, heads, "heads"), (k, kv_heads, "kv_heads"), (v, kv_heads, "kv_heads")):
        if inputs[name].shape[1] % n:
            raise InputError(f"{field} = {n} does not divide the {plural(inputs[name].shape[1], 'column')} of {name}",
                             field=field, also=(name,))
    d_k = inputs[q].shape[1] // heads
    if inputs[k].shape[1] != kv_heads * d_k:
        raise InputError(f"{k} has {plural(inputs[k].shape[1], 'column')} but kv_heads · d_k = {kv_heads} · {d_k} = "
                         f"{kv_heads * d_k} ({q} has {plural(inputs[q].shape[1], 'column')}: {plural(heads, 'head')} of d_k = {d_k})",
                         field=k, also=(q, "kv_heads"))


def hint(name: str, Q: np.ndarray, K: np.ndarray) -> str:
    """Said after "d_k must match" when a 2-D K (or W_K) has a whole fraction of Q's columns."""
    q, k = Q.shape[-1], K.shape[-1]
    return f"; for grouped-query attention give kv_heads ({name} holds kv_heads · d_k columns)" \
        if Q.ndim == K.ndim == 2 and k < q and q % k == 0 else ""


def check_split(heads: int, kv_heads: int | None, K: np.ndarray) -> int:
    """3-D Q (heads first): the kv heads K gives (its first axis; 1 for a 2-D K), and `kv_heads`,
    when given, checked against it."""
    found = K.shape[0] if K.ndim == 3 else 1
    if kv_heads is not None and kv_heads != found:
        where = f"K has {plural(found, 'head')} (its first axis)" if K.ndim == 3 else \
            "K and V are 2-D beside a 3-D Q: one kv head shared by every query head"
        raise InputError(f"kv_heads is {kv_heads} but {where}", field="kv_heads", also=("K",))
    return found


def value_width(inputs: dict, heads: int, kv_heads: int) -> int:
    """H·d_v: the width of the heads' outputs side by side (each query head has its kv head's d_v)."""
    V = inputs["W_V"] if "W_V" in inputs else inputs["V"]
    if V.ndim == 3 or inputs.get("Q", V).ndim == 3:
        return heads * V.shape[-1]
    return heads * (V.shape[1] // kv_heads)
