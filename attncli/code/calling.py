"""How a learner's function is called and what it returns, declared, never guessed.

A signature, `"Q, K, V, mask"`, names the parameters in order (PARAMETERS: each a record with its
aliases and what it is); the layout the axes of Q, K and V ((L, d), (B, L, d) or (B, H, L, d));
the mask convention how a mask reads (True = attend as PyTorch's SDPA, True = blocked as
nn.MultiheadAttention, or an additive 0/−∞ matrix). The return value is read by `returned`:
the output alone, (output, weights) as the textbook's function returns them, (output, lse) for a
FlashAttention-2 forward (its signature takes block_q, block_k), (dQ, dK, dV) for a backward (its
signature takes dO), or a dict of named stages in attncli's stage names (aliases as `attn check`
reads them: attention_weights, probs, logits …).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from attncli.base.choices import CODE_LAYOUTS, MASK_CONVENTIONS
from attncli.base.errors import InputError, did_you_mean, quote
from attncli.marking.answer_keys import alias_of
from attncli.stages.table import names as stage_names


class Parameter(NamedTuple):
    name: str
    about: str
    aliases: tuple[str, ...] = ()


PARAMETERS = {p.name: p for p in (
    Parameter("Q", "the queries", ("q", "query", "queries")),
    Parameter("K", "the keys", ("k", "key", "keys")),
    Parameter("V", "the values", ("v", "value", "values")),
    Parameter("x", "the token vectors (self-attention with projections)", ("X", "inputs", "in_features")),
    Parameter("W_Q", "the query projection, (d_in, d_k): Q = x W_Q", ("w_q", "Wq", "W_query", "w_query")),
    Parameter("W_K", "the key projection, (d_in, d_k)", ("w_k", "Wk", "W_key", "w_key")),
    Parameter("W_V", "the value projection, (d_in, d_v)", ("w_v", "Wv", "W_value", "w_value")),
    Parameter("mask", "the mask, as the mask convention says", ("attn_mask", "attention_mask")),
    Parameter("is_causal", "True for causal (top-left, as PyTorch's is_causal)", ("causal",)),
    Parameter("block_q", "the query tile size (FlashAttention-2)", ("bq", "Bq", "B_q", "q_tile_size", "Q_TILE_SIZE")),
    Parameter("block_k", "the key tile size (FlashAttention-2)", ("bk", "Bk", "B_k", "k_tile_size", "K_TILE_SIZE")),
    Parameter("dO", "the gradient of a loss by the output (a backward pass)", ("do", "grad_output", "d_output", "dout")),
    Parameter("O", "the forward pass's output (a backward pass)", ("output", "out")),
    Parameter("lse", "the forward pass's log-sum-exp per query (a backward pass)", ("L", "logsumexp")),
)}
GRADIENT_NAMES = {"d_Q": ("dQ", "dq", "grad_Q", "grad_q", "d_q"), "d_K": ("dK", "dk", "grad_K", "grad_k", "d_k"),
                  "d_V": ("dV", "dv", "grad_V", "grad_v", "d_v")}
KERNEL_NAMES = ("lse", "tiles")  # a FlashAttention-2 forward's own results beside the stages


@dataclass(frozen=True)
class Signature:
    """The parameters, in order, by their PARAMETERS names."""

    names: tuple[str, ...]

    @property
    def text(self) -> str:
        return ", ".join(self.names)

    @property
    def projected(self) -> bool:
        return "x" in self.names

    @property
    def backward(self) -> bool:
        return "dO" in self.names

    @property
    def kernel(self) -> bool:
        return "block_q" in self.names

    def takes(self, name: str) -> bool:
        return name in self.names


def parse_signature(text: str) -> Signature:
    """`"Q, K, V, mask"` → Signature(("Q", "K", "V", "mask")); a parameter may be given by an
    alias (`attn_mask`, `q`); the combination is checked."""
    lookup = {alias: p.name for p in PARAMETERS.values() for alias in (p.name,) + p.aliases}
    names = []
    for word in (w.strip() for w in text.split(",")):
        if not word:
            continue
        if word not in lookup:
            hint = did_you_mean(word, tuple(lookup), 0.6) or f"; parameters are {', '.join(PARAMETERS)}"
            raise InputError(f"unknown parameter {quote(word)}{hint}", field="signature")
        if lookup[word] in names:
            raise InputError(f"{quote(word)} names {lookup[word]} a second time", field="signature")
        names.append(lookup[word])
    signature = Signature(tuple(names))
    qkv, projected = {"Q", "K", "V"} & set(names), {"x", "W_Q", "W_K", "W_V"} & set(names)
    if qkv and projected or not (qkv or projected):
        raise InputError(f"{quote(text)}: give Q, K, V or x, W_Q, W_K, W_V (not both)", field="signature")
    for group in ({"Q", "K", "V"}, {"x", "W_Q", "W_K", "W_V"}, {"block_q", "block_k"}):
        if group & set(names) and not group <= set(names):
            raise InputError(f"{quote(text)}: {', '.join(sorted(group - set(names)))} missing beside "
                             f"{', '.join(sorted(group & set(names)))}", field="signature")
    if ({"O", "lse"} & set(names)) and not signature.backward:
        raise InputError(f"{quote(text)}: O and lse are a backward pass's inputs; give dO too", field="signature")
    return signature


def check_layout(layout: str) -> str:
    if layout not in CODE_LAYOUTS:
        raise InputError(f"layout {quote(layout)}; expected one of {', '.join(CODE_LAYOUTS)}", field="layout")
    return layout


def check_convention(convention: str) -> str:
    if convention not in MASK_CONVENTIONS:
        raise InputError(f"mask convention {quote(convention)}; expected one of {', '.join(MASK_CONVENTIONS)}",
                         field="mask_convention")
    return convention


def mask_argument(visible: np.ndarray, convention: str, dtype) -> np.ndarray:
    """A boolean visibility (True = may attend) as the function's mask."""
    if convention == "keep":
        return visible.copy()
    if convention == "block":
        return ~visible
    return np.where(visible, 0.0, -np.inf).astype(dtype)  # additive


class Unreadable(Exception):
    """A return value that is none of the forms `returned` reads: the case's mark says why."""


def _names(value) -> str:
    return value.kind if hasattr(value, "kind") else type(value).__name__


def returned(value, signature: Signature, before_weights: str = "scaled") -> tuple[dict, list[str]]:
    """{name: array (or the tiles' list)}, notes: what the function returned, by stage name."""
    notes: list[str] = []
    if isinstance(value, np.ndarray):
        if signature.backward:
            raise Unreadable("returned one array; a backward pass returns (dQ, dK, dV)")
        return {"output": value}, notes
    kind = getattr(value, "kind", None)
    if kind == "list":
        items = value.items
        if items and all(isinstance(i, np.ndarray) for i in items):
            notes.append("returned a list; read as a tuple")
            kind = "tuple"
        else:
            what = "a list of numbers" if items and all(getattr(i, "kind", None) in ("number", "list") for i in items) \
                else "a list"
            raise Unreadable(f"returned {what}, not an array: return np.asarray(…) (or a torch tensor)")
    if kind == "tuple":
        items = value.items
        order = (("d_Q", "d_K", "d_V") if signature.backward else ("output", "lse") if signature.kernel
                 else ("output", "weights"))
        if not 1 <= len(items) <= len(order) or (signature.backward and len(items) != 3):
            raise Unreadable(f"returned a tuple of {len(items)}; expected ({', '.join(order)})"
                             + ("" if signature.backward else f" or ({order[0]},)"))
        bad = [i for i, item in enumerate(items) if not isinstance(item, np.ndarray)]
        if bad:
            raise Unreadable(f"returned a tuple whose item {bad[0]} is {_describe(items[bad[0]])}, not an array")
        return dict(zip(order, items)), notes
    if kind == "dict":
        return _from_dict(value.items, signature, before_weights, notes), notes
    raise Unreadable(f"returned {_describe(value)}; expected an array, "
                     + ("(dQ, dK, dV)" if signature.backward else "(output, weights) or a dict of stages"))


def _describe(value) -> str:
    kind = getattr(value, "kind", None)
    if kind == "none":
        return "None"
    if kind == "number":
        return f"a number ({value.value})"
    if kind == "other":
        return value.type if value.type.startswith(("a ", "an ")) else f"a {value.type}"
    return f"a {kind}" if kind else type(value).__name__


def _from_dict(items: dict, signature: Signature, before_weights: str, notes: list[str]) -> dict:
    stages = stage_names()
    gradients = {alias: name for name, aliases in GRADIENT_NAMES.items() for alias in (name,) + aliases}
    found = {}
    for key, item in items.items():
        name = key if key in stages or key in KERNEL_NAMES else gradients.get(key) or alias_of(key, before_weights)
        if name is None:
            notes.append(f"key {quote(key)} is not a stage: not marked")
            continue
        if name != key:
            notes.append(f"read {quote(key)} as {name}")
        if name in found:
            raise Unreadable(f"returned {name} twice (as {quote(key)} too)")
        if name == "tiles":
            found[name] = item
            continue
        if not isinstance(item, np.ndarray):
            raise Unreadable(f"returned {quote(key)} as {_describe(item)}, not an array")
        found[name] = item
    if not found:
        raise Unreadable(f"returned a dict with no stage ({', '.join(map(quote, list(items)[:6]))}); name them "
                         f"as attncli does: {', '.join(stages[4:])}")
    return found
