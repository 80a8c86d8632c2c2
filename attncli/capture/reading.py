"""One attention layer of a loaded Hugging Face model read as attncli's keys, through its family's
record (capture/families.py): the projections transposed to attncli's `x W` (a Linear's `weight`
is (out, in); a Conv1D's already (in, out)), fused layouts split, and the layer's variants (RoPE,
ALiBi, softcap, sliding window, sinks, QK-norm, grouped kv heads) under attncli's key names.

Attribute reading only: no torch or transformers import (capture/driver.py runs the model).
"""

from __future__ import annotations

import numpy as np

from attncli.capture.families import FAMILIES, CaptureError, Family, family_of, rope_parameters


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


def decoder_of(found: Family, part: str):
    """The family's Decoder record, for the decoder's parts ("decoder", "cross"); a CaptureError when
    the family has none."""
    if part == "self":
        return None
    if found.decoder is None:
        pairs = ", ".join(family.label for family in FAMILIES.values() if family.decoder is not None)
        raise CaptureError(f"{found.label} has no decoder: the decoder's self-attention and its cross-attention are an "
                           f"encoder-decoder model's ({pairs})", field=part)
    return found.decoder


def layers(model, part: str = "self"):
    """The model's list of layers, where its family keeps them (ALBERT's: its groups of shared layers;
    an encoder-decoder's encoder's, or for `part` "decoder" and "cross" its decoder's), from the base
    model (or its `model`, where a causal LM's base model is itself: Llama 4's)."""
    found = family(model)
    decoder = decoder_of(found, part)
    base, path = model.base_model, found.blocks if decoder is None else decoder.blocks
    if getattr(base, path.split(".")[0], None) is None and getattr(base, "model", None) is not None:
        base = base.model
    return _walk(base, path, "layers")


def layer_count(model, part: str = "self") -> int:
    """The layers a forward runs: the list's, or the config's count when layers share a module (ALBERT)."""
    found = family(model)
    return text_config(model).num_hidden_layers if found.shared and part == "self" else len(layers(model, part))


def block_of(model, layer: int, part: str = "self") -> tuple[int, int, int]:
    """(the index of layer `layer`'s module in the list, which of that module's calls in one forward
    it is, how many calls that module has in one forward): (layer, 0, 1) unless layers share modules."""
    found = family(model)
    if found.shared is None or part != "self":
        return layer, 0, 1
    config = text_config(model)
    owners = [found.shared(config, i) for i in range(layer_count(model))]
    return owners[layer], owners[:layer].count(owners[layer]), owners.count(owners[layer])


def attention(model, layer: int, part: str = "self"):
    """(attention module, its output projection) of layer `layer` (of the decoder's self-attention or
    cross-attention for `part` "decoder" or "cross")."""
    count = layer_count(model, part)
    if not 0 <= layer < count:
        raise CaptureError(f"layer is {layer}; expected 0 to {count - 1} ({count} layer{'s' * (count != 1)})",
                           field="layer")
    found, block = family(model), layers(model, part)[block_of(model, layer, part)[0]]
    paths = (found.attention, found.output) if part != "cross" else (found.decoder.cross, found.decoder.cross_output)
    return _walk(block, paths[0], "attention"), _walk(block, paths[1], "output projection")


def _x_w(module, name: str) -> tuple[np.ndarray, np.ndarray | None]:
    """(W (in, out), bias or None) of a Linear (weight (out, in)) or a GPT-2 Conv1D (weight (in, out))."""
    weight = getattr(module, "weight", None)
    if weight is None or weight.dim() != 2:
        raise CaptureError(f"{name} ({type(module).__name__}) has no 2-D weight")
    bias = None if getattr(module, "bias", None) is None else array(module.bias)
    return (array(weight) if type(module).__name__ == "Conv1D" else array(weight).T), bias


def projections(found: Family, module, out, heads: int, kv_heads: int, d: int, config=None) -> dict:
    """W_Q, W_K, W_V, W_O and their biases, in attncli's `x W` convention."""
    layout, doc = found.layout_for(config), {}
    if layout.direct is not None:  # Q, K, V given directly (capture.driver), then W_O as usual
        doc["W_O"], bias = _x_w(out, found.output)
        return doc | ({} if bias is None else {"b_O": bias})
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
        getattr(module, "qk_head_dim", None) or \
        getattr(module, "attention_head_size", None) or getattr(config, "head_dim", None) or \
        config.hidden_size // heads
    return heads, kv_heads, int(d)


def scale(module, d: int) -> float:
    """The factor on Q Kᵀ the module uses."""
    for name in ("scaling", "inv_norm_factor", "softmax_scale"):
        value = getattr(module, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return d ** -0.5


def rope(found: Family, config, layer: int, d: int) -> dict | None:
    """attncli's `rope` for the layer, or None."""
    if found.rope is None or not found.rope.on(config, layer):
        return None
    params = rope_parameters(config, layer)
    style = found.rope.style(config) if callable(found.rope.style) else found.rope.style
    value = {"style": style, "base": float(params.get("rope_theta", 10000.0)),
             "dims": found.rope.dims(config, d, params)}
    kind = params.get("rope_type", "default")
    if kind != "default":  # with transformers' rope_parameters names (attncli/problem/rope_scaling.py)
        value["scaling"] = {k: v for k, v in params.items()
                            if k not in ("rope_theta", "partial_rotary_factor") and v is not None}
        if kind in ("dynamic", "longrope"):  # transformers reads the config's (the pre-training length)
            value["scaling"].setdefault("max_position_embeddings", config.max_position_embeddings)
    return value


def norm_kind(norm) -> str:
    """"layer" for a LayerNorm (torch's, Cohere's: it subtracts the mean), else "rms"."""
    name = type(norm).__name__
    return "layer" if ("LayerNorm" in name and "RMS" not in name) or getattr(norm, "bias", None) is not None \
        else "rms"


def _norm(norm, over: str, weight_offset: int, d: int) -> dict:
    """A q_norm/k_norm module as attncli's {type, weight, bias, eps, over, weight_offset}: a weight of
    (heads, d_k) (Cohere's), or a list of one norm per head (StableLM's `norms`), as one row per head;
    a norm without weight (Llama 4's) multiplies by ones."""
    parts = list(getattr(norm, "norms", None) or [norm])
    kind = norm_kind(parts[0])
    if getattr(norm, "weight", None) is None and len(parts) == 1:
        weight = np.ones(d)
    else:
        weight = np.stack([array(part.weight) for part in parts]) if len(parts) > 1 else array(norm.weight)
    value = {"type": kind, "weight": weight, "eps": float(norm_eps(parts[0])), "over": over}
    if kind == "layer" and getattr(parts[0], "bias", None) is not None:
        value["bias"] = np.stack([array(part.bias) for part in parts]) if len(parts) > 1 else array(norm.bias)
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
    first = next(iter(getattr(q_norm, "norms", None) or [q_norm]))
    weight = getattr(first, "weight", None)
    over = "head" if weight is None or weight.shape[-1] == d else "all"
    offset = found.qk_norm.offset
    return {"q_norm": _norm(q_norm, over, offset, d), "k_norm": _norm(k_norm, over, offset, d)}


def relative_bias(found: Family, model, part: str, layer: int = 0) -> dict | None:
    """T5's relative position bias of a self-attention (the first layer's embedding serves every layer,
    or each layer has its own: UMT5; the encoder's buckets are bidirectional, the decoder's causal); None
    for a cross-attention."""
    if found.relative is None or part == "cross":
        return None
    own, _ = attention(model, layer, part)
    first = own if getattr(own, found.relative, None) is not None else attention(model, 0, part)[0]
    embedding = getattr(first, found.relative, None)
    if embedding is None:
        raise CaptureError(f"{type(first).__name__} of layer 0 has no {found.relative}, where the {found.label} "
                           "family keeps its relative position bias")
    config = text_config(model)
    return {"buckets": int(config.relative_attention_num_buckets),
            "max_distance": int(config.relative_attention_max_distance), "bidirectional": part == "self",
            "embedding": array(embedding.weight)}


def read_layer(model, layer: int, part: str = "self") -> dict:
    """The layer's weights and variants as attncli's keys (no X, masks or results)."""
    found, config = family(model), text_config(model)
    module, out = attention(model, layer, part)
    heads, kv_heads, d = head_counts(found, module, config)
    doc = projections(found, module, out, heads, kv_heads, d, config)
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
    if isinstance(size, tuple):  # (before, after): a bidirectional window (ModernBERT: |i − j| ≤ w)
        doc["window"] = [int(size[0]), int(size[1])]
    elif size:  # HF's sliding_window W: key > query − W, itself included, is attncli's [W − 1, 0]
        doc["window"] = [int(size) - 1, 0]
    if found.sinks and getattr(module, found.sinks, None) is not None:
        doc["sinks"] = array(getattr(module, found.sinks))
    alibi = found.has_alibi(config)
    if alibi:  # True: the paper's slopes; a list: the family's own
        doc["alibi"] = alibi
    relative = relative_bias(found, model, part, layer)
    if relative is not None:
        doc["relative_bias"] = relative
    return doc
