"""One attention layer of a loaded Hugging Face model read as attncli's keys, through its family's
record (capture/families.py): the projections transposed to attncli's `x W` (a Linear's `weight`
is (out, in); a Conv1D's already (in, out)), fused layouts split, and the layer's variants (RoPE,
ALiBi, softcap, sliding window, sinks, QK-norm, grouped kv heads) under attncli's key names.

Attribute reading only: no torch or transformers import (capture/driver.py runs the model).
"""

from __future__ import annotations

import numpy as np

from attncli.capture.families import CaptureError, Family, family_of, rope_parameters


def array(tensor) -> np.ndarray:
    """A tensor as float64 numpy (the exact values of a float32 tensor)."""
    return tensor.detach().to("cpu").double().numpy()


def text_config(model):
    """The config of the model's text part (a multimodal model's text_config), else its config."""
    return getattr(model.config, "text_config", None) or model.config


def family(model) -> Family:
    return family_of(model.config.model_type)


def _walk(obj, path: str, what: str):
    for name in path.split("."):
        found = getattr(obj, name, None)
        if found is None:
            raise CaptureError(f"{type(obj).__name__} has no {name} (the {what} of its family's record is {path})")
        obj = found
    return obj


def layers(model):
    """The model's list of layers, where its family keeps them."""
    return _walk(model.base_model, family(model).blocks, "layers")


def attention(model, layer: int):
    """(attention module, its output projection) of layer `layer`."""
    stack = layers(model)
    if not 0 <= layer < len(stack):
        count = f"{len(stack)} layer{'s' * (len(stack) != 1)}"
        raise CaptureError(f"layer is {layer}; expected 0 to {len(stack) - 1} ({count})", field="layer")
    found = family(model)
    return _walk(stack[layer], found.attention, "attention"), _walk(stack[layer], found.output, "output projection")


def _x_w(module, name: str) -> tuple[np.ndarray, np.ndarray | None]:
    """(W (in, out), bias or None) of a Linear (weight (out, in)) or a GPT-2 Conv1D (weight (in, out))."""
    weight = getattr(module, "weight", None)
    if weight is None or weight.dim() != 2:
        raise CaptureError(f"{name} ({type(module).__name__}) has no 2-D weight")
    bias = None if getattr(module, "bias", None) is None else array(module.bias)
    return (array(weight) if type(module).__name__ == "Conv1D" else array(weight).T), bias


def projections(found: Family, module, out, heads: int, kv_heads: int, d: int) -> dict:
    """W_Q, W_K, W_V, W_O and their biases, in attncli's `x W` convention."""
    layout, doc = found.layout, {}
    named = [getattr(module, name, None) for name in layout.modules]
    if any(m is None for m in named):
        raise CaptureError(f"{type(module).__name__} has none of {', '.join(layout.modules)}, where the "
                           f"{found.label} family keeps its projections")
    if layout.split is None:
        for key, part, name in zip("QKV", named, layout.modules):
            doc[f"W_{key}"], bias = _x_w(part, name)
            if bias is not None:
                doc[f"b_{key}"] = bias
    else:
        w, b = _x_w(named[0], layout.modules[0])
        if w.shape[1] != layout.expected(heads, kv_heads, d):
            raise CaptureError(f"{layout.modules[0]} has {w.shape[1]} output features; {layout.words} with {heads} "
                               f"heads, {kv_heads} kv heads of width {d} expects {layout.expected(heads, kv_heads, d)}")
        for key, rows in zip("QKV", layout.split(heads, kv_heads, d)):
            doc[f"W_{key}"] = w[:, rows]
            if b is not None:
                doc[f"b_{key}"] = b[rows]
    doc["W_O"], bias = _x_w(out, found.output)
    if bias is not None:
        doc["b_O"] = bias
    return doc


def head_counts(found: Family, module, config) -> tuple[int, int, int]:
    """(heads, kv heads, head width): the family's counts, the module's head width when it has one."""
    heads, kv_heads = found.heads(config)
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


def rope(found: Family, config, layer: int, d: int) -> dict | None:
    """attncli's `rope` for the layer, or None."""
    if found.rope is None or not found.rope.on(config, layer):
        return None
    params = rope_parameters(config, layer)
    value = {"style": found.rope.style, "base": float(params.get("rope_theta", 10000.0)),
             "dims": found.rope.dims(config, d, params)}
    kind = params.get("rope_type", "default")
    if kind != "default":  # with transformers' rope_parameters names (attncli/problem/rope_scaling.py)
        value["scaling"] = {k: v for k, v in params.items()
                            if k not in ("rope_theta", "partial_rotary_factor") and v is not None}
        if kind in ("dynamic", "longrope"):  # transformers reads the config's (the pre-training length)
            value["scaling"].setdefault("max_position_embeddings", config.max_position_embeddings)
    return value


def _norm(norm, over: str, weight_offset: int) -> dict:
    """A q_norm/k_norm module as attncli's {type, weight, bias, eps, over, weight_offset}."""
    kind = "layer" if type(norm).__name__ == "LayerNorm" or getattr(norm, "bias", None) is not None else "rms"
    value = {"type": kind, "weight": array(norm.weight), "eps": float(norm_eps(norm)), "over": over}
    if kind == "layer" and getattr(norm, "bias", None) is not None:
        value["bias"] = array(norm.bias)
    if weight_offset:
        value["weight_offset"] = weight_offset
    return value


def norm_eps(norm) -> float:
    found = next((getattr(norm, n) for n in ("variance_epsilon", "eps", "epsilon") if hasattr(norm, n)), None)
    if found is None:
        raise CaptureError(f"{type(norm).__name__} has no eps (variance_epsilon, eps or epsilon)")
    return found


def norm_modules(found: Family, module) -> tuple:
    """The attention module's (q_norm, k_norm) modules, or (None, None)."""
    if found.qk_norm is None:
        return None, None
    q, k = (getattr(module, name, None) for name in found.qk_norm.names)
    return (q, k) if q is not None and k is not None else (None, None)


def qk_norms(found: Family, module, d: int) -> dict:
    """`q_norm`/`k_norm` (Qwen3, Gemma 3: per head; OLMo 2: over the whole projection; Phi: q_layernorm)."""
    q_norm, k_norm = norm_modules(found, module)
    if q_norm is None:
        return {}
    over = "head" if q_norm.weight.shape[-1] == d else "all"
    offset = found.qk_norm.offset
    return {"q_norm": _norm(q_norm, over, offset), "k_norm": _norm(k_norm, over, offset)}


def read_layer(model, layer: int) -> dict:
    """The layer's weights and variants as attncli's keys (no X, masks or results)."""
    found, config = family(model), text_config(model)
    module, out = attention(model, layer)
    heads, kv_heads, d = head_counts(found, module, config)
    doc = projections(found, module, out, heads, kv_heads, d)
    if kv_heads != heads:  # grouped: query head h reads kv head h // (heads / kv_heads), as repeat_kv
        doc["kv_heads"] = kv_heads
    doc |= {"heads": heads, "scale": scale(module, d)}
    doc |= qk_norms(found, module, d)
    rotary = rope(found, config, layer, d)
    if rotary is not None:
        doc["rope"] = rotary
    cap = found.softcap and getattr(config, found.softcap, None)
    if cap:
        doc["softcap"] = float(cap)
    size = found.window(module, config, layer)
    if size:  # HF's sliding_window W: key > query − W, itself included, is attncli's [W − 1, 0]
        doc["window"] = [int(size) - 1, 0]
    if found.sinks and getattr(module, found.sinks, None) is not None:
        doc["sinks"] = array(getattr(module, found.sinks))
    if found.has_alibi(config):
        doc["alibi"] = True
    return doc
