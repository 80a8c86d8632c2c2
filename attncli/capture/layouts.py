"""Where a family keeps W_Q, W_K and W_V: three modules, or one fused module whose output features
hold all three in some order. A fused layout is its `split`: (heads H, kv heads N, head width d) →
the output features of q, of k and of v, each in head order; the reader takes those rows of a
Linear's weight (out, in) or columns of a Conv1D's (in, out), and of the bias.

    STACKED    Phi-3 qkv_proj, GPT-2 c_attn,    [q (H·d); k (N·d); v (N·d)]
               MPT/DBRX/ModernBERT Wqkv,
               Falcon multi_query, GPTBigCode
    PER_HEAD   GPT-NeoX, BLOOM, Falcon          per head [q_h; k_h; v_h] (N = H)
               query_key_value, GPTBigCode
               c_attn without multi_query
    GROUPED    Falcon new_decoder_architecture  per kv head [q_1 … q_g; k; v]
    SHARDED    CodeGen qkv_proj                 4 shards, each [q | v | k] of H·d / 4 features

A new fused layout is one split function and one Layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

Split = Callable[[int, int, int], tuple[np.ndarray, np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Layout:
    """`modules`: the attention module's attribute names, three (q, k, v) or one (fused); `split`:
    for a fused module, the output features of q, k and v; `words`: the layout in a few words."""

    modules: tuple[str, ...]
    split: Split | None = None
    words: str = ""
    direct: Callable | None = None  # Q, K, V from the inputs when no W_Q, W_K, W_V exist (capture/latent.py)

    def expected(self, heads: int, kv_heads: int, d: int) -> int:
        """A fused module's output features: H·d + 2·N·d."""
        return (heads + 2 * kv_heads) * d


def stacked(heads: int, kv_heads: int, d: int):
    """[q (H·d); k (N·d); v (N·d)]."""
    ends = np.cumsum([0, heads * d, kv_heads * d, kv_heads * d])
    return tuple(np.arange(ends[i], ends[i + 1]) for i in range(3))


def per_head(heads: int, kv_heads: int, d: int):
    """Per head h, [q_h; k_h; v_h] (each d features): GPT-NeoX's and BLOOM's query_key_value."""
    grid = np.arange(3 * heads * d).reshape(heads, 3, d)  # (H, q/k/v, d)
    return tuple(grid[:, i].reshape(-1) for i in range(3))


def grouped(heads: int, kv_heads: int, d: int):
    """Per kv head n, its group's queries then its key and value: [q_1 … q_g, k_n, v_n] (Falcon's
    new_decoder_architecture)."""
    group = heads // kv_heads
    grid = np.arange((heads + 2 * kv_heads) * d).reshape(kv_heads, group + 2, d)  # (N, g + 2, d)
    return grid[:, :group].reshape(-1), grid[:, group].reshape(-1), grid[:, group + 1].reshape(-1)


def sharded(heads: int, kv_heads: int, d: int, shards: int = 4):
    """CodeGen's qkv_proj: 4 model-parallel shards, each [q | v | k] of a quarter of the heads' width
    (H·d / 4 features each); q, k and v are each shard's part, shard after shard."""
    local = heads * d // shards
    index = np.arange(heads * d)
    start = (index // local) * 3 * local + index % local  # where q's feature sits in its shard
    return start, start + 2 * local, start + local


def STACKED(name: str) -> Layout:
    return Layout((name,), stacked, f"{name}: [q; k; v]")


SEPARATE = Layout(("q_proj", "k_proj", "v_proj"), words="q_proj, k_proj, v_proj")
BERT = Layout(("query", "key", "value"), words="query, key, value")
PER_HEAD = Layout(("query_key_value",), per_head, "query_key_value: per head [q_h; k_h; v_h]")
C_ATTN = STACKED("c_attn")
GROUPED = Layout(("query_key_value",), grouped, "query_key_value: per kv head [q_1 … q_g; k; v]")
SHARDED = Layout(("qkv_proj",), sharded, "qkv_proj: 4 shards of [q | v | k]")
