"""One attention layer of a Hugging Face model read as attncli's keys: the projections transposed to
attncli's `x W` (a Linear's `weight` is (out, in)), fused layouts split, and the layer's variants
(RoPE, ALiBi, softcap, sliding window, sinks, QK-norm, grouped kv heads) under attncli's key names.

Pure attribute reading: no torch or transformers import (attncli/capture/driver.py runs the model). Each
family is told apart by the names of its modules, as transformers 5.x writes them:

    Llama, Mistral, Qwen2/3, Gemma 2/3, OLMo 2, gpt-oss, Phi   q_proj, k_proj, v_proj, o_proj (Phi: dense)
    Phi-3                                                       qkv_proj: rows [q; k; v]
    GPT-NeoX, BLOOM                                             query_key_value: per head [q_h; k_h; v_h]
    GPT-J                                                       q_proj, k_proj, v_proj, out_proj; interleaved rotary
    GPT-2                                                       c_attn (Conv1D, already (in, out)): columns [q | k | v]
    BERT                                                        query, key, value; output.dense
"""

from __future__ import annotations

import numpy as np

from attncli.base.errors import InputError

# Where each family keeps its layers (a path of attributes from the loaded model), tried in order.
LAYER_LISTS = (("model", "layers"), ("gpt_neox", "layers"), ("transformer", "h"), ("encoder", "layer"),
               ("model", "language_model", "layers"), ("bert", "encoder", "layer"))
ATTENTION_NAMES = ("self_attn", "attention", "attn", "self_attention")
OUTPUT_NAMES = ("o_proj", "dense", "out_proj", "c_proj")
ALIBI_TYPES = ("bloom",)
NO_ROPE = ("gpt2", "bert", "bloom")
BIDIRECTIONAL = ("bert",)  # encoders: every query sees every key
# The model types the tests capture (tests/test_capture.py); another is read by the same module names,
# with a warning: the agreement line says whether it was read right.
TESTED = ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "gemma3_text", "phi", "phi3", "gpt_neox",
          "gptj", "gpt2", "bert", "bloom", "gpt_oss", "olmo2")
# Families that compute part of attention in float32 whatever the model's dtype: GPT-J its Q Kᵀ.
FLOAT32_INSIDE = ("gptj",)
# Families whose attention module has no sliding_window of its own: the mask takes the config's (Phi-3-mini: 2047).
CONFIG_WINDOW = ("mistral", "phi3")


class CaptureError(InputError):
    """A model attncli cannot capture (yet), naming what is missing."""


def array(tensor) -> np.ndarray:
    """A tensor as float64 numpy (the exact values of a float32 tensor)."""
    return tensor.detach().to("cpu").double().numpy()


def _walk(obj, path: tuple[str, ...]):
    for name in path:
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj


def layers(model):
    """The model's list of layers."""
    for path in LAYER_LISTS:
        found = _walk(model, path)
        if found is not None and hasattr(found, "__len__"):
            return found
    raise CaptureError(f"{type(model).__name__} keeps its layers under none of "
                       f"{', '.join('.'.join(p) for p in LAYER_LISTS)}: attn capture does not know this family yet")


def attention(model, layer: int):
    """(attention module, its output projection) of layer `layer`."""
    stack = layers(model)
    if not 0 <= layer < len(stack):
        count = f"{len(stack)} layer{'s' * (len(stack) != 1)}"
        raise CaptureError(f"layer is {layer}; expected 0 to {len(stack) - 1} ({count})", field="layer")
    block = stack[layer]
    module = next((getattr(block, name) for name in ATTENTION_NAMES if hasattr(block, name)), None)
    if module is None:
        raise CaptureError(f"layer {layer} ({type(block).__name__}) has none of {', '.join(ATTENTION_NAMES)}: "
                           "attn capture does not know this family yet")
    if hasattr(module, "self") and hasattr(module, "output"):  # BERT: attention.self, attention.output.dense
        return module.self, module.output.dense
    out = next((getattr(module, name) for name in OUTPUT_NAMES if hasattr(module, name)), None)
    if out is None:
        raise CaptureError(f"{type(module).__name__} has no output projection ({', '.join(OUTPUT_NAMES)})")
    return module, out


def _linear(module, doc: dict, key: str) -> None:
    """W_key (in, out) and b_key from a torch Linear (weight (out, in))."""
    doc[f"W_{key}"] = array(module.weight).T
    if getattr(module, "bias", None) is not None:
        doc[f"b_{key}"] = array(module.bias)


def _per_head_fused(weight: np.ndarray, bias, heads: int, d: int, doc: dict) -> None:
    """query_key_value of GPT-NeoX and BLOOM: output rows per head [q_h; k_h; v_h] (each d rows)."""
    w = weight.reshape(heads, 3, d, -1)  # (H, 3, d, in)
    b = None if bias is None else bias.reshape(heads, 3, d)
    for i, key in enumerate("QKV"):
        doc[f"W_{key}"] = w[:, i].reshape(heads * d, -1).T
        if b is not None:
            doc[f"b_{key}"] = b[:, i].reshape(-1)


def projections(module, out, heads: int, kv_heads: int, d: int) -> dict:
    """W_Q, W_K, W_V, W_O and their biases, in attncli's `x W` convention."""
    doc: dict = {}
    if hasattr(module, "q_proj"):
        for key, name in zip("QKV", ("q_proj", "k_proj", "v_proj")):
            _linear(getattr(module, name), doc, key)
    elif hasattr(module, "qkv_proj"):  # Phi-3: rows [q (H·d); k (N·d); v (N·d)]
        w = array(module.qkv_proj.weight)
        b = None if module.qkv_proj.bias is None else array(module.qkv_proj.bias)
        ends = np.cumsum([heads * d, kv_heads * d])
        for key, part in zip("QKV", np.split(w, ends)):
            doc[f"W_{key}"] = part.T
        if b is not None:
            for key, part in zip("QKV", np.split(b, ends)):
                doc[f"b_{key}"] = part
    elif hasattr(module, "query_key_value"):
        fused = module.query_key_value
        _per_head_fused(array(fused.weight), None if fused.bias is None else array(fused.bias), heads, d, doc)
    elif hasattr(module, "c_attn"):  # GPT-2's Conv1D: weight (in, 3·hidden), columns [q | k | v]
        w, b = array(module.c_attn.weight), array(module.c_attn.bias)
        for key, part, bias in zip("QKV", np.split(w, 3, axis=1), np.split(b, 3)):
            doc[f"W_{key}"], doc[f"b_{key}"] = part, bias
    elif hasattr(module, "query"):  # BERT
        for key, name in zip("QKV", ("query", "key", "value")):
            _linear(getattr(module, name), doc, key)
    else:
        raise CaptureError(f"{type(module).__name__} has none of q_proj, qkv_proj, query_key_value, c_attn, "
                           "query: attn capture does not know its projections")
    if type(out).__name__ == "Conv1D":  # GPT-2's c_proj is already (in, out)
        doc["W_O"], doc["b_O"] = array(out.weight), array(out.bias)
    else:
        _linear(out, doc, "O")
    return doc


def head_counts(module, config) -> tuple[int, int, int]:
    """(heads, kv heads, head width)."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    d = getattr(module, "head_dim", None) or getattr(module, "head_size", None) or \
        getattr(module, "attention_head_size", None) or getattr(config, "head_dim", None) or \
        config.hidden_size // heads
    return heads, kv_heads, int(d)


def scale(module, d: int) -> float:
    """The factor on Q Kᵀ the module uses."""
    for name in ("scaling", "inv_norm_factor"):
        value = getattr(module, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return d ** -0.5


def _rope_parameters(config, layer: int) -> dict:
    """The layer's rope_parameters (Gemma 3 keeps one dict per layer type)."""
    params = dict(getattr(config, "rope_parameters", None) or {})
    types = getattr(config, "layer_types", None)
    if types and types[layer] in params and isinstance(params[types[layer]], dict):
        params = dict(params[types[layer]])
    return params


def rope(module, config, layer: int, d: int) -> dict | None:
    """attncli's `rope` for the layer, or None."""
    if config.model_type in NO_ROPE:
        return None
    if config.model_type == "gptj":
        return {"style": "interleaved", "base": 10000.0, "dims": int(config.rotary_dim or d)}
    params = _rope_parameters(config, layer)
    factor = params.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0)) or 1.0
    value = {"style": "half", "base": float(params.get("rope_theta", 10000.0)), "dims": int(d * factor)}
    kind = params.get("rope_type", "default")
    if kind != "default":  # with transformers' rope_parameters names (attncli/problem/rope_scaling.py)
        value["scaling"] = {k: v for k, v in params.items()
                            if k not in ("rope_theta", "partial_rotary_factor") and v is not None}
        if kind in ("dynamic", "longrope"):  # transformers reads the config's (the pre-training length)
            value["scaling"].setdefault("max_position_embeddings", config.max_position_embeddings)
    return value


def window(module, config) -> list[int] | None:
    """A sliding window of W keys (HF: key > query − W, itself included) as attncli's [W − 1, 0]."""
    size = getattr(module, "sliding_window", None) if hasattr(module, "sliding_window") else \
        getattr(config, "sliding_window", None) if config.model_type in CONFIG_WINDOW else None
    return None if not size else [int(size) - 1, 0]


def _norm(norm, over: str, weight_offset: int) -> dict:
    """A q_norm/k_norm module as attncli's {type, weight, bias, eps, over, weight_offset}."""
    kind = "layer" if type(norm).__name__ == "LayerNorm" or getattr(norm, "bias", None) is not None else "rms"
    eps = next(getattr(norm, n) for n in ("variance_epsilon", "eps", "epsilon") if hasattr(norm, n))
    value = {"type": kind, "weight": array(norm.weight), "eps": float(eps), "over": over}
    if kind == "layer" and getattr(norm, "bias", None) is not None:
        value["bias"] = array(norm.bias)
    if weight_offset:
        value["weight_offset"] = weight_offset
    return value


def norm_modules(module) -> tuple:
    """The attention module's (q_norm, k_norm) modules, or (None, None)."""
    pairs = [(getattr(module, q, None), getattr(module, k, None))
             for q, k in (("q_norm", "k_norm"), ("q_layernorm", "k_layernorm"))]
    return next(((q, k) for q, k in pairs if q is not None), (None, None))


def weight_offset(config) -> int:
    """1 for the Gemma family's norms, which multiply by (1 + weight)."""
    return 1 if config.model_type.startswith("gemma") else 0


def qk_norms(module, config, heads: int, d: int) -> dict:
    """`q_norm`/`k_norm` (Qwen3, Gemma 3: per head; OLMo 2: over the whole projection; Phi: q_layernorm)."""
    q_norm, k_norm = norm_modules(module)
    if q_norm is None:
        return {}
    over = "head" if q_norm.weight.shape[-1] == d else "all"
    offset = weight_offset(config)
    return {"q_norm": _norm(q_norm, over, offset), "k_norm": _norm(k_norm, over, offset)}


def read_layer(model, layer: int) -> dict:
    """The layer's weights and variants as attncli's keys (no X, masks or results)."""
    config = getattr(model.config, "text_config", None) or model.config
    module, out = attention(model, layer)
    heads, kv_heads, d = head_counts(module, config)
    doc = projections(module, out, heads, kv_heads, d)
    if kv_heads != heads:  # grouped: query head h reads kv head h // (heads / kv_heads), as repeat_kv
        doc["kv_heads"] = kv_heads
    doc |= {"heads": heads, "scale": scale(module, d)}
    doc |= qk_norms(module, config, heads, d)
    found = rope(module, config, layer, d)
    if found is not None:
        doc["rope"] = found
    cap = getattr(module, "attn_logit_softcapping", None) or getattr(config, "attn_logit_softcapping", None)
    if cap:
        doc["softcap"] = float(cap)
    if window(module, config) is not None:
        doc["window"] = window(module, config)
    if getattr(module, "sinks", None) is not None:
        doc["sinks"] = array(module.sinks)
    if config.model_type in ALIBI_TYPES:
        doc["alibi"] = True
    return doc
