"""QK-norm: Q and K normalised after their projection (and biases), before RoPE (Qwen3, Gemma 3,
OLMo 2). The `q_norm` and `k_norm` keys, read into a `Norm`, and its math in plain numpy:

    "q_norm", "k_norm": {"type": "rms" | "layer", "weight": [...], "bias": [...] (layer only),
                         "eps": x, "over": "head" | "all", "weight_offset": 0 | 1}

    rms    x · 1/√(mean(x²) + eps) · w                  transformers' Qwen3RMSNorm, LlamaRMSNorm
    layer  (x − mean(x)) · 1/√(var(x) + eps) · w + b    torch.nn.LayerNorm (biased variance)
    w      weight, or 1 + weight with weight_offset 1   Gemma's RMSNorm (Gemma3RMSNorm)

    over "head"  each head's d_k numbers of a row; one weight of d_k entries for every head
                 (Qwen3, Gemma 3)
    over "all"   every head's columns of a row together, as the projection gives them (OLMo 2):
                 weight of heads·d_k entries for Q, kv_heads·d_k for K

With grouped-query attention the stages hold K per query head (each kv head repeated over its
group): over "all", a row's statistics over the repeated heads are those over the kv heads (each
is repeated equally often), and the weight is repeated with its head; the gradient of a kv head is
the sum over its group, as for K itself (attncli/compute/backward.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from attncli.base.errors import AttnError, InputError, did_you_mean, plural, quote
from attncli.base.values import HugeInt, as_array, describe, object_text

TYPES = ("rms", "layer")
OVERS = ("head", "all")
FIELDS = ("type", "weight", "bias", "eps", "over", "weight_offset")
EPS = {"rms": 1e-6, "layer": 1e-5}  # transformers' rms_norm_eps default; torch.nn.LayerNorm's
NAMES = {"Q": "q_norm", "K": "k_norm"}  # the block input each key normalises
LIKE = {("rms", 0): "RMSNorm, as Qwen3RMSNorm", ("rms", 1): "RMSNorm with 1 + weight, as Gemma3RMSNorm",
        ("layer", 0): "LayerNorm, as torch.nn.LayerNorm", ("layer", 1): "LayerNorm with 1 + weight"}


@dataclass(frozen=True, eq=False)
class Norm:
    """One QK-norm as read: `weight` (d_k,) over "head", (n·d_k,) over "all" with n = `heads`
    (query heads for q_norm, kv heads for k_norm); `bias` only for "layer"."""

    name: str  # "q_norm" or "k_norm"
    type: str  # "rms" or "layer"
    weight: np.ndarray
    eps: float
    over: str = "head"
    offset: int = 0  # weight_offset: 1 multiplies by 1 + weight
    bias: np.ndarray | None = None
    heads: int = 1  # the heads a row holds over "all"

    def __post_init__(self):
        for name in ("weight", "bias"):
            array = getattr(self, name)
            if array is not None:
                array = array.view()
                array.flags.writeable = False
                object.__setattr__(self, name, array)

    @property
    def scale(self) -> np.ndarray:
        """What the normalised x is multiplied by: weight, or 1 + weight."""
        return self.weight + self.offset if self.offset else self.weight

    def to_json(self) -> dict:
        out = {"type": self.type, "weight": self.weight.tolist()}
        if self.bias is not None:
            out["bias"] = self.bias.tolist()
        return out | {"eps": self.eps, "over": self.over, "weight_offset": self.offset}

    def formula(self, x: str) -> str:
        """The norm of `x` in words: "q / √(mean(q²) + eps) · weight"."""
        w = "(1 + weight)" if self.offset else "weight"
        if self.type == "rms":
            return f"{x} / √(mean({x}²) + eps) · {w}"
        return f"({x} − mean({x})) / √(var({x}) + eps) · {w}" + " + bias" * (self.bias is not None)

    def title(self, x: str) -> str:
        """The stage's formula with what it runs over: "Q / √(mean(Q²) + eps) · weight, per head"."""
        return self.formula(x) + (", per head" if self.over == "head" else ", over a row's every head")

    @property
    def like(self) -> str:
        """What it is, and the library's module it matches."""
        return LIKE[self.type, self.offset]

    @property
    def d_k(self) -> int:
        return len(self.weight) // (self.heads if self.over == "all" else 1)

    def describe(self) -> str:
        """The header line: what it is, over what, with which eps."""
        x, d_k = self.name[0], self.d_k
        over = (f"each head's {plural(d_k, 'number')} of a row" if self.over == "head" else
                f"all {plural(self.heads, 'head')}' {plural(self.heads * d_k, 'number')} of a row together")
        return f"{self.name}: {x}_normed = {self.formula(x)}, over {over}; eps {self.eps:g} " \
               f"({self.like}; after the projection, before RoPE)"


# --- reading ------------------------------------------------------------------------------------------

def read(value, name: str, d_k: int, heads: int) -> Norm | None:
    """`q_norm` or `k_norm` (`name`) for heads of width `d_k`; `heads`: the heads of a row (query
    heads for q_norm, kv heads for k_norm). In an .npz the object is its JSON text."""
    if value is None:
        return None
    value = object_text(value, name)  # an .npz holds it as JSON text; other text is refused below
    if not isinstance(value, dict):
        raise InputError(f'{name} is {describe(value)}; expected an object {{"type": "rms" or "layer", "weight": '
                         '[...], "eps": x, "over": "head" or "all"}', field=name)
    for key in value:
        if key not in FIELDS:
            hint = did_you_mean(str(key), FIELDS, 0.4)
            raise InputError(f"{name} has an unknown key {quote(str(key))}{hint}; expected {', '.join(FIELDS)}",
                             field=name)
    kind = _word(value.get("type", "rms"), f"{name}.type", TYPES, "rms (RMSNorm) or layer (LayerNorm)")
    over = _word(value.get("over", "head"), f"{name}.over", OVERS,
                 "head (each head's d_k numbers, Qwen3) or all (every head's columns of a row, OLMo 2)")
    offset = value.get("weight_offset", 0)
    if isinstance(offset, bool) or offset not in (0, 1):
        raise InputError(f"{name}.weight_offset is {describe(offset)}; expected 0 (x · weight) or 1 "
                         "(x · (1 + weight), Gemma)", field=f"{name}.weight_offset")
    eps = value.get("eps", EPS[kind])
    if isinstance(eps, (bool, HugeInt)) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps <= 0:
        raise InputError(f"{name}.eps is {describe(eps)}; expected a number > 0 (1e-6 in Qwen3)", field=f"{name}.eps")
    n = heads if over == "all" else 1
    what = (f"each head's d_k = {plural(d_k, 'number')}" if over == "head" else
            f"a row's {plural(heads, 'head')} of d_k = {d_k} together ({heads}·{d_k} = {n * d_k})")
    if "weight" not in value:
        raise InputError(f"{name} has no weight; expected {plural(n * d_k, 'number')}, one per number of {what}",
                         field=f"{name}.weight")
    weight = _vector(value["weight"], f"{name}.weight", n * d_k, over, what)
    bias = None
    if value.get("bias") is not None:
        if kind == "rms":
            raise InputError(f'{name}.bias is given with type "rms": RMSNorm has no bias; drop bias, or give '
                             'type "layer"', field=f"{name}.bias")
        bias = _vector(value["bias"], f"{name}.bias", n * d_k, over, what)
    return Norm(name, kind, weight, float(eps), over, int(offset), bias, heads)


def _word(value, field: str, choices: tuple[str, ...], expected: str) -> str:
    if value not in choices:
        hint = did_you_mean(value, choices, 0.4) if isinstance(value, str) else ""
        raise InputError(f"{field} is {describe(value)}{hint}; expected {expected}", field=field)
    return value


def _vector(value, field: str, length: int, over: str, what: str) -> np.ndarray:
    array = as_array(value, field, max_dims=1)
    if array.ndim != 1 or array.shape[0] != length:
        n = array.shape[0]
        found = plural(n, "entry") if array.ndim == 1 else f"{array.ndim} dimensions"
        raise InputError(f'{field} has {found}; over "{over}" it needs {length}: one per number of {what}',
                         field=field)
    return array.astype(np.float64)


# --- the math -----------------------------------------------------------------------------------------

def statistics(norm: Norm, rows: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
    """(mean or None for rms, r = 1/√(mean(x²) + eps) or 1/√(var + eps)), each (…, 1), over
    the last axis of `rows`."""
    eps = rows.dtype.type(norm.eps)
    if norm.type == "rms":
        return None, 1 / np.sqrt(np.mean(rows * rows, axis=-1, keepdims=True) + eps)
    mean = np.mean(rows, axis=-1, keepdims=True)
    centred = rows - mean
    return mean, 1 / np.sqrt(np.mean(centred * centred, axis=-1, keepdims=True) + eps)


def _per_head(norm: Norm, values: np.ndarray, heads: int, head: int | None) -> np.ndarray:
    """`values` (weight or bias) as (H or 1, 1, d_k): over "all" each query head's part (a kv
    head's repeated over its group), over "head" the one vector."""
    if norm.over == "head":
        return values[None, None, :]
    parts = values.reshape(norm.heads, -1)  # (n, d_k)
    if heads % norm.heads:
        raise AttnError(f"{norm.name} covers {plural(norm.heads, 'head')}, which does not divide the {plural(heads, 'query head')}")
    parts = np.repeat(parts, heads // norm.heads, axis=0)[:, None, :]  # (H, 1, d_k)
    return parts if head is None else parts[head:head + 1]


def _rows(x: np.ndarray) -> np.ndarray:
    """(H, L, d_k) → (L, H·d_k): every head's columns of a row side by side."""
    return x.transpose(1, 0, 2).reshape(x.shape[1], -1)


def apply(norm: Norm, x: np.ndarray, whole: np.ndarray | None = None, heads: int | None = None,
          head: int | None = None) -> np.ndarray:
    """The norm of x (H, L, d_k), every head of its rows; or of one head's (1, L, d_k) (`head`)
    with `whole` (L, n·d_k) its rows' every head (over "all" the statistics need them) and
    `heads` the query heads."""
    dtype = x.dtype
    heads = x.shape[0] if heads is None else heads
    if norm.over == "head":
        mean, r = statistics(norm, x)  # (H, L, 1) each
    else:
        mean, r = statistics(norm, _rows(x) if whole is None else whole)  # (L, 1) each
        mean, r = (None if mean is None else mean[None]), r[None]  # (1, L, 1)
    out = x - mean if mean is not None else x.copy()  # (H, L, d_k)
    out *= r
    out *= _per_head(norm, norm.scale.astype(dtype), heads, head)
    if norm.bias is not None:
        out += _per_head(norm, norm.bias.astype(dtype), heads, head)
    return out


def vjp(norm: Norm, x: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(d x, the parameters' gradients by name) for y = norm(x), x and d (H, L, d_k), every head:

        rms    d x = r · g − x · r³ · mean(g ∘ x)             g = d ∘ w, r = 1/√(mean(x²) + eps)
        layer  d x = r · (g − mean(g) − x̂ · mean(g ∘ x̂))     x̂ = (x − mean(x)) · r
        d weight = Σ_rows d ∘ x̂ (x̂ = x · r for rms), d bias = Σ_rows d

    over "all" the means run over a row's every head (H·d_k numbers), and a kv head's part of the
    weight's gradient is the sum over its group."""
    heads = x.shape[0]
    w = _per_head(norm, norm.scale.astype(x.dtype), heads, None)  # (H or 1, 1, d_k)
    rows = (lambda a: a) if norm.over == "head" else _rows
    mean, r = statistics(norm, rows(x))
    if norm.over == "all":
        mean, r = (None if mean is None else mean[None]), r[None]
    normed = (x if mean is None else x - mean) * r  # x̂ (H, L, d_k)
    g = d * w
    if norm.over == "head":
        gx = np.mean(g * normed, axis=-1, keepdims=True)  # (H, L, 1)
        g_mean = np.mean(g, axis=-1, keepdims=True)
    else:
        gx = np.mean(_rows(g * normed), axis=-1, keepdims=True)[None]  # (1, L, 1)
        g_mean = np.mean(_rows(g), axis=-1, keepdims=True)[None]
    dx = r * (g - normed * gx) if norm.type == "rms" else r * (g - g_mean - normed * gx)
    found = {f"{norm.name}.weight": _parameter(norm, (d * normed).sum(axis=1), heads)}
    if norm.bias is not None:
        found[f"{norm.name}.bias"] = _parameter(norm, d.sum(axis=1), heads)
    return dx, found


def _parameter(norm: Norm, per_head: np.ndarray, heads: int) -> np.ndarray:
    """A parameter's gradient from its per-query-head sums (H, d_k): over "head" their sum (d_k,),
    over "all" each kv head's group summed, side by side (n·d_k,)."""
    if norm.over == "head":
        return per_head.sum(axis=0)
    return per_head.reshape(norm.heads, heads // norm.heads, -1).sum(axis=1).reshape(-1)


def applies(which: str):
    """Whether a problem has the stage normalising `which` ("Q" or "K"): its q_norm or k_norm."""
    return lambda problem: getattr(problem, NAMES[which]) is not None


def compute(which: str):
    """The compute function of Q_normed or K_normed (attncli/stages/table.py): the block's Q or K
    normalised. One head's block (marking) over "all" reads its rows' every head from the
    problem's projection (`whole_rows`)."""
    def normed(block, x) -> np.ndarray:
        problem = block.problem
        norm = getattr(problem, NAMES[which])
        whole = None
        if block.head is not None and norm.over == "all":
            whole = whole_rows(problem, which)[block.rows if which == "Q" else block.cols]
        return apply(norm, getattr(block, which), whole, problem.heads, block.head)  # (H, b or c, d_k)
    return normed


def fields(problem) -> dict[str, str]:
    """The stage table's template fields for the norms: $qnorm and $knorm (the stages' formulas),
    $qin and $kin (what RoPE and the scores read: Q_normed or Q), and $qintex, $kintex in LaTeX."""
    qin, kin = ("Q_normed" if problem.q_norm else "Q"), ("K_normed" if problem.k_norm else "K")
    tex = {"Q": "Q", "K": "K", "Q_normed": r"Q_{\text{normed}}", "K_normed": r"K_{\text{normed}}"}
    return {"qnorm": problem.q_norm.title("Q") if problem.q_norm else "",
            "knorm": problem.k_norm.title("K") if problem.k_norm else "",
            "qin": qin, "kin": kin, "qintex": tex[qin], "kintex": tex[kin]}


def whole_rows(problem, which: str) -> np.ndarray:
    """Q's or K's rows as the projection gives them, every head side by side (L, n·d_k), in the
    problem's dtype: what one head's norm over "all" reads its statistics from."""
    dtype = np.dtype(problem.dtype)
    given = problem.inputs
    if problem.projected:
        x = given["X"] if which == "Q" or "X_kv" not in given else given["X_kv"]
        rows = x.astype(dtype) @ given[f"W_{which}"].astype(dtype)  # (L, n·d_k)
        if f"b_{which}" in given:
            rows = rows + given[f"b_{which}"].astype(dtype)
        return rows
    matrix = given[which].astype(dtype)
    return matrix if matrix.ndim == 2 else _rows(matrix)
