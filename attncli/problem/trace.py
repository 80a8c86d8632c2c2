"""Frozen records of a problem and of every stage computed from it; attncli/document/writing.py writes
them as the JSON document.

Stage names (attncli/stages/table.py) are the same words everywhere: Trace keys, JSON keys and table titles.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

import numpy as np

from attncli.base import names
from attncli.base.choices import MASKED_ROWS  # noqa: F401  (the policies, read as trace.MASKED_ROWS)
from attncli.base.errors import plural
from attncli.problem.masks import MASK_WORDS
from attncli.problem.qk_norm import Norm
from attncli.problem.rope import Rope
from attncli.problem.rules import Causal, Matrix, Rule, Window, find
from attncli.problem.variants import attributes


def frozen(array: np.ndarray | None) -> np.ndarray | None:
    """A read-only view: the record cannot be changed through it, and the caller's array (an API
    user's, say) keeps its own flags."""
    if array is None or not isinstance(array, np.ndarray):
        return array
    view = array.view()
    view.flags.writeable = False
    return view


def _freeze(record, names: tuple[str, ...], mappings: tuple[str, ...]) -> None:
    for name in names:
        object.__setattr__(record, name, frozen(getattr(record, name)))
    for name in mappings:
        value = {key: frozen(array) for key, array in getattr(record, name).items()}
        object.__setattr__(record, name, MappingProxyType(value))


@dataclass(frozen=True, eq=False)
class Problem:
    """A validated attention problem. Arrays are float (or bool for the mask), read-only.

    `inputs` holds the matrices as given (1-D promoted to one row): either Q, K, V
    or X, X_kv, W_Q, W_K, W_V, b_Q, b_K, b_V; plus W_O and b_O in both forms.
    """

    inputs: Mapping[str, np.ndarray]
    heads: int  # query heads; 2-D Q/K/V (or projections) are split into this many
    lq: int
    lk: int
    kv_heads: int | None = None  # K and V's heads (grouped-query attention, attncli/problem/groups.py); None: from the inputs
    # The mask rules (attncli/problem/rules.py: Causal, Window, KeyMask, Matrix, and AnyOf for those joined by
    # OR: causal OR prefix), ANDed; attncli/problem/masks.py evaluates them. Positions are (L,) int64, 0 … L − 1
    # by default.
    rules: tuple[Rule, ...] = ()
    q_positions: np.ndarray | None = None  # (Lq,)
    k_positions: np.ndarray | None = None  # (Lk,)
    bias: np.ndarray | None = None  # (1 or H, Lq, Lk), -inf allowed
    rope: Rope | None = None  # rotary positions on Q and K (attncli/problem/rope.py); None: none
    # QK-norm on the projected Q and K, before RoPE (attncli/problem/qk_norm.py): the Q_normed and K_normed stages
    q_norm: Norm | None = None
    k_norm: Norm | None = None
    # The logit variants (attncli/problem/variants.py: one record each), by the attributes they set, read
    # as problem.softcap (c: the `capped` stage), problem.alibi_slopes ((H,): masks.bias adds
    # −slope_h · |q_pos − k_pos|) and alibi_rule ("paper" or "given"), problem.sinks ((H,): one extra
    # logit per head in the softmax, then dropped); None without it. Arrays per query head, read-only.
    variants: Mapping[str, object] = field(default_factory=dict)
    scale: float | None = None  # None: 1/sqrt(d_k)
    masked_rows: str = "zero"  # the policy for rows whose every key is masked
    dtype: str = "float64"
    query_labels: list[str] | None = None
    key_labels: list[str] | None = None
    title: str | None = None
    description: str | None = None
    dO: np.ndarray | None = None  # (Lq, d_out): the gradient of a loss by the final output (attncli/compute/backward.py)

    def __post_init__(self):
        _freeze(self, ("bias", "dO"), ("inputs", "variants"))

    def __getattr__(self, name: str):
        """A variant's attribute (`problem.softcap`), None when the problem does not have it; the
        registry is read at each call, so a variant registered later has its attribute too."""
        if name in attributes():  # through __dict__: no recursion before __init__ has set `variants`
            return self.__dict__.get("variants", {}).get(name)
        raise AttributeError(name)

    # The rules as the fields they were before `rules` (read-only; a rule inside an OR counts), for
    # readers not yet moved to `rules`; new code loops over `rules` (attncli/problem/masks.py) instead.
    @property
    def mask(self) -> np.ndarray | None:  # a GIVEN (1 or H, Lq, Lk) bool matrix, True = may attend
        found = find(self, Matrix)
        return None if found is None else found.mask

    @property
    def mask_rule(self) -> str | None:  # as the `mask` key: "causal", "causal_lower_right", "matrix", None
        causal = find(self, Causal)
        return "matrix" if self.mask is not None else None if causal is None else MASK_WORDS[causal.lower_right]

    @property
    def window(self) -> tuple[int | None, int | None] | None:
        found = find(self, Window)
        return None if found is None else (found.left, found.right)

    @property
    def projected(self) -> bool:
        return "X" in self.inputs


@dataclass(frozen=True, eq=False)
class Trace:
    """Every stage of one computation. Per-head arrays have the head axis first; all read-only.

    `stages` maps each stage name of `attncli.stages.table` to its (H, Lq, ·) array; the output-only
    path (blocks.attend_output) holds only "output". `trace.stage(name)` (and `trace.scores`,
    `trace.weights`, …) read it, None for a stage not computed.
    """

    problem: Problem
    scale: float
    Q: np.ndarray  # (H, Lq, d_k)
    K: np.ndarray  # (H, Lk, d_k), kv heads repeated for grouped-query attention (groups.repeat)
    V: np.ndarray  # (H, Lk, d_v)
    # Q_rope (H, Lq, d_k), K_rope (H, Lk, d_k) with rope; scores, scaled, masked, weights (H, Lq, Lk);
    # output (H, Lq, d_v)
    stages: Mapping[str, np.ndarray]
    concat: np.ndarray  # (Lq, H·d_v)  heads side by side
    final: np.ndarray  # (Lq, d_out)  concat W_O + b_O, or concat; JSON's top-level "output"
    fully_masked: tuple[tuple[int, int], ...] = ()  # (head, query row) with every key masked
    warnings: tuple[str, ...] = ()
    # (H, Lq): ln Σ_j e^(logit_ij) over the logits the softmax read (natural log); −∞ for a fully
    # masked row. JSON's per-head "lse", the tables' column beside the weights.
    lse: np.ndarray | None = None
    gradients: object = None  # backward.Gradients when the problem has dO

    def __repr__(self) -> str:
        """One line (a notebook shows `view(trace)` for the tables)."""
        p = self.problem
        shown = ", ".join(name for name, value in self.stages.items() if value is not None)
        return f"<Trace {plural(p.heads, 'head')}, {plural(p.lq, 'query')} × {plural(p.lk, 'key')}, scale {self.scale:.4g}: {shown}>"

    def __post_init__(self):
        _freeze(self, ("Q", "K", "V", "concat", "final", "lse"), ("stages",))

    def stage(self, name: str) -> np.ndarray | None:
        """A stage by name (or the inputs Q, K, V); None when it was not computed."""
        if name in ("Q", "K", "V"):
            return getattr(self, name)
        return self.stages.get(name)

    def __getattr__(self, name: str):
        if name in names.STAGES:  # through __dict__: no recursion before __init__ has set `stages`
            return self.__dict__.get("stages", {}).get(name)
        raise AttributeError(name)

    @property
    def d_k(self) -> int:
        return self.Q.shape[-1]

    @property
    def d_v(self) -> int:
        return self.V.shape[-1]

    @property
    def default_scale(self) -> bool:
        return self.problem.scale is None


def head_slice(array: np.ndarray | None, head: int) -> np.ndarray | None:
    """A mask's or bias's (Lq, Lk) plane for one head; they are stored as (1 or H, Lq, Lk)."""
    if array is None:
        return None
    return array[head if array.shape[0] > 1 else 0]
