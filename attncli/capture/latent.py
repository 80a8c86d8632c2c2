"""DeepSeek-V2/V3's multi-head latent attention (MLA) as attncli's Q, K and V, given directly: its
queries and keys pass through an RMSNorm between two projections, so no one W_Q or W_K maps X to
them, but from Q, K and V on the layer is ordinary attention (RoPE on some dims, scaled scores,
the causal mask, the softmax, weights V, o_proj). As transformers' DeepseekV3Attention computes them:

    q      = q_b_proj(RMSNorm(q_a_proj(x)))   (or q_proj(x) without q_lora_rank)   per head [q_nope | q_rope]
    kv, kr = kv_a_proj_with_mqa(x)             the latent (kv_lora_rank) and one rotary key for every head
    k, v   = kv_b_proj(RMSNorm(kv))            per head [k_nope | v]
    K      = [k_nope | kr] per head

attncli rotates the leading `dims` of a head: Q and K are written with the rotary part first,
[q_rope | q_nope] and [kr | k_nope] (the same permutation of both, so Q Kᵀ is unchanged).

Attribute reading and numpy: no torch or transformers import.
"""

from __future__ import annotations

import numpy as np

from attncli.base.errors import InputError


def _linear(module, x: np.ndarray, array) -> np.ndarray:
    """x Wᵀ + b of a Linear."""
    out = x @ array(module.weight).T
    return out if getattr(module, "bias", None) is None else out + array(module.bias)


def _rms(norm, x: np.ndarray, array) -> np.ndarray:
    eps = getattr(norm, "variance_epsilon", None) or getattr(norm, "eps", 1e-6)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * array(norm.weight)


def latent_qkv(module, x: np.ndarray, x_kv: np.ndarray, config, array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Q (H, Lq, d_qk), K (H, Lk, d_qk), V (H, Lk, d_v)) of an MLA module from its inputs, the rotary
    dims first in Q and K. `array`: a tensor as float64 numpy."""
    heads, nope, rope, d_v = (config.num_attention_heads, config.qk_nope_head_dim, config.qk_rope_head_dim,
                              config.v_head_dim)
    rank = config.kv_lora_rank
    if getattr(module, "q_proj", None) is not None:
        q = _linear(module.q_proj, x, array)
    elif getattr(module, "q_b_proj", None) is not None:
        q = _linear(module.q_b_proj, _rms(module.q_a_layernorm, _linear(module.q_a_proj, x, array), array), array)
    else:
        raise InputError(f"{type(module).__name__} has neither q_proj nor q_a_proj and q_b_proj")
    q = q.reshape(len(x), heads, nope + rope).transpose(1, 0, 2)  # (H, Lq, nope + rope)
    kv = _linear(module.kv_a_proj_with_mqa, x_kv, array)  # (Lk, rank + rope)
    latent, k_rope = kv[:, :rank], kv[:, rank:]
    expanded = _linear(module.kv_b_proj, _rms(module.kv_a_layernorm, latent, array), array)
    expanded = expanded.reshape(len(x_kv), heads, nope + d_v).transpose(1, 0, 2)  # (H, Lk, nope + d_v)
    k_nope, v = expanded[..., :nope], expanded[..., nope:]
    Q = np.concatenate([q[..., nope:], q[..., :nope]], axis=-1)
    K = np.concatenate([np.broadcast_to(k_rope, (heads, *k_rope.shape)), k_nope], axis=-1)
    return Q, K, np.ascontiguousarray(v)
