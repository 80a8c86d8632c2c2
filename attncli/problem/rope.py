"""Rotary position embeddings (RoPE): the `rope` input key and the rotation of each head's Q and K.

    θ_i   = base^(−2i/dims)                  i = 0 … dims/2 − 1  (as 1 / base^(2i/dims), Hugging Face)
    angle = pos · θ_i                        pos = q_positions (Q) or k_positions (K)
    (a, b) → (a cos − b sin, b cos + a sin)  for each pair (a, b) of the first `dims` dims of a head

Pairs: `half` (Hugging Face Llama/GPT-NeoX `rotate_half`, the default) pairs dim i with
i + dims/2; `interleaved` (GPT-J `rotate_every_two`, Meta's original code, flash-attn
interleaved=True) pairs 2i with 2i+1. Dims from `dims` to d_k − 1 are not rotated (partial rotary,
GPT-NeoX `rotary_pct`). Every message starts with the field it is about (`rope.dims is 3; …`).

`scaling` (attncli/problem/rope_scaling.py: transformers' linear, dynamic, llama3, yarn, longrope) changes
θ_i to θ'_i, for dynamic and longrope by the sequence length (the largest position + 1), and may
give an attention factor that multiplies cos and sin:

    (a, b) → (a · af cos − b · af sin, b · af cos + a · af sin),   angle = position · θ'_i
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from attncli.base.choices import ROPE_STYLES as STYLES
from attncli.base.errors import InputError, Notice, did_you_mean, quote
from attncli.base.values import HugeInt, describe, object_text
from attncli.problem import rope_scaling
from attncli.problem.rope_scaling import Scaling

FIELDS = ("style", "base", "dims", "scaling")
# Angles are float64: position · θ_i carries a rounding error up to about |position · θ_0| · 2^−52
# (θ_i's own rounding, then the product's; θ_0 = 1 is the largest). A notice past this many radians,
# that is past |position| ≈ 4.5 · 10^9.
ANGLE_TOLERANCE = 1e-6
BASE = 10000.0
LIBRARIES = {"half": "Hugging Face Llama rotate_half: dim i pairs with i + dims/2",
             "interleaved": "GPT-J rotate_every_two: dim 2i pairs with 2i+1"}


@dataclass(frozen=True)
class Rope:
    style: str = "half"
    base: float = BASE
    dims: int = 0  # the rotated leading dims of each head (even, 2 … d_k)
    scaling: Scaling | None = None  # transformers' rope_parameters (attncli/problem/rope_scaling.py); None: none

    def theta(self) -> np.ndarray:
        """(dims/2,) θ_i = 1 / base^(2i/dims), float64: before any scaling."""
        return 1.0 / self.base ** (np.arange(0, self.dims, 2, dtype=np.float64) / self.dims)

    def frequencies(self, length: int | None = None) -> np.ndarray:
        """(dims/2,) θ'_i: θ_i after the scaling, for a sequence of `length` positions (dynamic and
        longrope need it); θ_i without scaling."""
        if self.scaling is None:
            return self.theta()
        if length is None and self.scaling.by_length:
            raise ValueError(f"{self.scaling.rope_type} RoPE scaling needs the sequence length")
        return self.scaling.compute(self.base, self.dims, length)[0]

    @property
    def attention_factor(self) -> float:
        """What multiplies cos and sin (yarn, longrope); 1 otherwise."""
        return 1.0 if self.scaling is None else self.scaling.compute(self.base, self.dims)[1]

    def pairs(self) -> list[tuple[int, int]]:
        """The dims rotated together, pair i first: (i, i + dims/2) or (2i, 2i+1)."""
        half = self.dims // 2
        if self.style == "half":
            return [(i, i + half) for i in range(half)]
        return [(2 * i, 2 * i + 1) for i in range(half)]

    def describe(self, d_k: int) -> str:
        """The convention in words, for the table header and JSON's `rope_rule`."""
        part = "every dim" if self.dims == d_k else f"the first {self.dims} of {d_k} dims (partial rotary)"
        scaled, prime = ("", "") if self.scaling is None else (f"; {self.scaling.words(self.base, self.dims)}", "'")
        return (f"{self.style} ({LIBRARIES[self.style]}); θ_i = {_number(self.base)}^(−2i/{self.dims}){scaled}; "
                f"angle = position · θ{prime}_i; rotates {part} of each head's Q and K")

    def to_json(self) -> dict:
        scaling = {} if self.scaling is None else {"scaling": self.scaling.to_json()}
        return {"style": self.style, "base": self.base, "dims": self.dims} | scaling


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else repr(x)


def read(value, d_k: int, field: str = "rope") -> Rope | None:
    """`rope`: true/false, or {"style", "base", "dims", "scaling"} (each optional); dims defaults to d_k. In
    an .npz (whose arrays hold no objects) the object is written as its JSON text."""
    if value is None or value is False:
        return None
    value = object_text(value, field)  # an .npz holds it as JSON text; other text is refused below
    if value is True:
        value = {}
    if not isinstance(value, dict):
        raise InputError(f"{field} is {describe(value)}; expected true or an object with "
                         f"style, base, dims and scaling (each optional)", field=field)
    for key in value:
        if key not in FIELDS:
            hint = did_you_mean(str(key), FIELDS, 0.4)
            raise InputError(f"{field} has an unknown key {quote(str(key))}{hint}; expected {', '.join(FIELDS)}",
                             field=field)
    style = value.get("style", "half")
    if style not in STYLES:
        hint = did_you_mean(style, STYLES, 0.4) if isinstance(style, str) else ""
        raise InputError(f"{field}.style is {describe(style)}{hint}; expected half (rotate_half, Llama) "
                         "or interleaved (rotate_every_two, GPT-J)", field=f"{field}.style")
    base = value.get("base", BASE)
    if isinstance(base, bool) or not isinstance(base, (int, float)) or isinstance(base, HugeInt) \
            or not math.isfinite(base) or base <= 0:
        raise InputError(f"{field}.base is {describe(base)}; expected a finite number > 0 (10000 in most models)",
                         field=f"{field}.base")
    dims = value.get("dims", d_k)
    if isinstance(dims, bool) or not isinstance(dims, (int, float)) or isinstance(dims, HugeInt) \
            or not math.isfinite(dims) or dims != int(dims):
        raise InputError(f"{field}.dims is {describe(dims)}; expected a whole even number from 2 to d_k = {d_k}",
                         field=f"{field}.dims")
    if not 2 <= dims <= d_k or dims % 2:
        why = "odd: dims rotate in pairs" if 2 <= dims <= d_k else f"outside 2 … d_k = {d_k}"
        raise InputError(f"{field}.dims is {describe(dims)}, {why}; expected a whole even number from 2 to "
                         f"d_k = {d_k}", field=f"{field}.dims")
    rope = Rope(style, float(base), int(dims))
    with np.errstate(over="ignore", divide="ignore"):
        theta = rope.theta()
    if not np.isfinite(theta).all():
        i = int(np.flatnonzero(~np.isfinite(theta))[0])
        raise InputError(f"{field}.base is {describe(base)}: θ_{i} = base^(−{2 * i}/{rope.dims}) is beyond float64; "
                         "expected a base of at least 1 (10000 in most models)", field=f"{field}.base")
    scaling = rope_scaling.read(value.get("scaling"), rope.base, rope.dims, f"{field}.scaling")
    return rope if scaling is None else Rope(style, float(base), int(dims), scaling)


def length(problem) -> int:
    """The sequence length RoPE scaling reads: the largest position + 1, queries' and keys' together
    (transformers: max(position_ids) + 1 of one forward call)."""
    return max(int(p.max(initial=-1)) for p in (problem.q_positions, problem.k_positions)) + 1


def angles(rope: Rope, positions: np.ndarray, length: int | None = None) -> np.ndarray:
    """(L, dims/2) float64: position · θ'_i. An angle beyond float64 is an error naming rope.base."""
    theta = rope.frequencies(length)
    with np.errstate(over="ignore"):
        angle = positions.astype(np.float64)[:, None] * theta[None, :]
    if not np.isfinite(angle).all():
        row, i = (int(x) for x in np.argwhere(~np.isfinite(angle))[0])
        raise InputError(f"rope.base is {_number(rope.base)}: at position {int(positions[row]):,} the angle "
                         f"position · θ_{i} (θ_{i} = {theta[i]:.3g}) is beyond float64; expected a base of "
                         "at least 1 (10000 in most models)", field="rope.base")
    return angle


def angle_notes(problem) -> list[Notice]:
    """A warning when the farthest position's angles may be off by more than ANGLE_TOLERANCE."""
    if problem.rope is None:
        return []
    farthest = max(abs(int(p)) for positions in (problem.q_positions, problem.k_positions)
                   for p in (positions.min(initial=0), positions.max(initial=0)))
    error = farthest * float(np.abs(problem.rope.frequencies(length(problem))).max()) * 2.0 ** -52
    if error <= ANGLE_TOLERANCE:
        return []
    return [Notice(f"RoPE angles position · θ_i are float64, and at position {farthest:,} they may be off by up "
                   f"to {error:.1e} radians (more than {ANGLE_TOLERANCE:g}): the rotation of far positions "
                   "is only that precise")]


def rotate(x: np.ndarray, positions: np.ndarray, rope: Rope, length: int | None = None) -> np.ndarray:
    """x (H, L, d_k) rotated by `positions` (L,) on its first rope.dims dims, cos and sin times the
    attention factor; a new array. `length`: the sequence length scaling reads (rope.length)."""
    angle = angles(rope, positions, length)  # (L, dims/2)
    cos, sin = np.cos(angle), np.sin(angle)  # (L, dims/2)
    if rope.scaling is not None:  # as transformers: cos and sin times the attention factor
        cos, sin = cos * rope.attention_factor, sin * rope.attention_factor
    cos, sin = cos.astype(x.dtype), sin.astype(x.dtype)
    first, second = zip(*rope.pairs())
    a, b = x[..., list(first)], x[..., list(second)]  # (H, L, dims/2) each
    out = x.copy()
    out[..., list(first)] = a * cos - b * sin
    out[..., list(second)] = b * cos + a * sin
    return out  # (H, L, d_k)
