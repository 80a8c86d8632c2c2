"""`attn capture`'s driver: run a loaded Hugging Face model (capture/loading.py) once with the
library's eager attention and hooks on one layer, and make that layer an ordinary attncli document
with the model's own results beside it. Running is as quiet and closed as loading (`quiet`,
`library`: an error inside torch is one CaptureError). The document holds:

    X              the layer's attention input (after its input norm)     (L, d_model)
    W_Q … b_O      reading.read_layer: the projections as x W, through the model type's family
    mask           causal (by index, as the eager path), key_mask from the attention mask,
                   q_positions/k_positions for a decode step, masked_rows "uniform" (the eager
                   path's fully masked rows: every score is the dtype's minimum)
    reference      {"weights": (H, Lq, Lk) eager weights, "output": (Lq, d_model) after o_proj, "dtype"}
    model          {"name", "class", "layer"}

Every number is finite and the document is one `attn compute` accepts (document/reading.py's
build_problem, the agreement's reader), or the capture is refused with the reason.

`--dtype float64` runs the model in float64 and, for an exact comparison, also computes in float64
the two things the eager path keeps in float32 whatever the dtype: the softmax and the RoPE angles
(`exact_float64`). GPT-J computes Q Kᵀ in float32 as well, Gemma 3 its QK-norm: their reference says
float32 (the family's `float32`).
"""

from __future__ import annotations

import contextlib
import inspect
from typing import NamedTuple

import numpy as np
import torch

from attncli.base.errors import InputError
from attncli.capture.families import CaptureError
from attncli.capture.gguf_file import dequantized
from attncli.capture.loading import library, quiet
from attncli.capture.reading import (
    array,
    attention,
    block_of,
    family,
    layer_count,
    norm_eps,
    norm_kind,
    norm_modules,
    read_layer,
    text_config,
)
from attncli.document import agreement
from attncli.document.reading import build_problem


def pad_left(rows: list[list[int]], pad: int) -> tuple[list[list[int]], list[list[int]]]:
    """(ids, attention mask): rows of different lengths left-padded, as generate() batches them."""
    width = max(len(r) for r in rows)
    ids = [[pad] * (width - len(r)) + list(r) for r in rows]
    mask = [[0] * (width - len(r)) + [1] * len(r) for r in rows]
    return ids, mask


@contextlib.contextmanager
def exact_float64(model):
    """The softmax and RoPE angles in float64 for a float64 model (the eager path keeps both in float32)."""
    softmax = torch.nn.functional.softmax

    def softmax64(x, dim=None, _stacklevel=3, dtype=None):
        return softmax(x, dim=dim, dtype=torch.float64 if x.dtype == torch.float64 else dtype)

    rotary = [m for m in model.modules() if type(m).__name__.endswith("RotaryEmbedding")]
    patched = [_exact_rotary(m) for m in rotary if any(n.endswith("inv_freq") for n, _ in m.named_buffers())]
    tables = {m: m.embed_positions for m in rotary if hasattr(m, "embed_positions")}  # GPT-J: a sin/cos table
    for module, table in tables.items():
        module.embed_positions = _exact_table(*table.shape).to(table.dtype)
    found = family(model)
    norms = list({id(n): n for i in range(layer_count(model)) for n in norm_modules(found, attention(model, i)[0])
                  if n is not None and _in_float32(n)}.values())  # one module may be both (Llama 4's qk_norm)
    for norm in norms:
        (_exact_rms if norm_kind(norm) == "rms" else _exact_layer)(norm, found.qk_norm.offset)
    torch.nn.functional.softmax = softmax64
    try:
        yield
    finally:
        torch.nn.functional.softmax = softmax
        for module in patched + norms:
            del module.forward
        for module, table in tables.items():
            module.embed_positions = table


def _in_float32(norm) -> bool:
    """A QK-norm of the model's own class (transformers' RMSNorms, Cohere's LayerNorm) computes in
    float32 whatever the dtype; torch's LayerNorm (and a list of them, StableLM's) in the dtype."""
    return type(norm).__name__.endswith("Norm") and not isinstance(norm, torch.nn.LayerNorm) and \
        not hasattr(norm, "norms")


def _scale(norm, offset: int):
    """What a norm multiplies by: weight + offset, or 1 for a norm without weight (Llama 4's)."""
    weight = getattr(norm, "weight", None)
    return 1.0 if weight is None else weight + offset


def _exact_layer(norm, offset: int):
    """A q_norm/k_norm LayerNorm of the model's own (Cohere's, without bias) in float64."""
    eps = norm_eps(norm)

    def forward(x):
        centred = x - x.mean(-1, keepdim=True)
        return centred * torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + eps) * _scale(norm, offset)

    norm.forward = forward


def _exact_rms(norm, offset: int):
    """A q_norm/k_norm RMSNorm in float64 (transformers' RMSNorms compute in float32)."""
    eps = norm_eps(norm)

    def forward(x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * _scale(norm, offset)

    norm.forward = forward


def _exact_table(positions: int, dims: int):
    """GPT-J's [sin | cos] table (positions × dims) in float64."""
    inv_freq = 1.0 / 10000 ** (torch.arange(0, dims, 2, dtype=torch.float64) / dims)
    angles = torch.arange(positions, dtype=torch.float64)[:, None] * inv_freq
    return torch.cat((torch.sin(angles), torch.cos(angles)), dim=1)


def _exact_rotary(module):
    """Wrap a rotary embedding's forward: the same cos and sin, computed in float64 (the layout of the
    original's output kept: [θ, θ] as Llama's, or θ once as gpt-oss's)."""
    original = module.forward

    def forward(x, position_ids, *args, **kwargs):
        found = original(x, position_ids, *args, **kwargs)
        if not isinstance(found, tuple):  # complex cos + i sin (Llama 4, DeepSeek-V2): rotated in float32 anyway
            return found
        cos = found[0]
        layer_type = (args or (None,))[0] if "layer_type" not in kwargs else kwargs["layer_type"]
        prefix = f"{layer_type}_" if layer_type else ""
        inv_freq = getattr(module, f"{prefix}inv_freq").to(torch.float64)
        scaling = getattr(module, f"{prefix}attention_scaling", 1.0)
        freqs = position_ids[..., None].to(torch.float64) * _exact_inv_freq(module, layer_type, inv_freq)
        emb = _layout_of(cos, freqs, scaling)
        return (emb.cos() * scaling).to(x.dtype), (emb.sin() * scaling).to(x.dtype)

    module.forward = forward
    return module


def _layout_of(cos, freqs, scaling):
    """The angles laid out as the original's cos: θ once (gpt-oss), [θ, θ] (Llama's cat) or each θ
    twice in a row (Cohere's repeat_interleave), whichever the original's float32 cos is."""
    if cos.shape[-1] == freqs.shape[-1]:
        return freqs
    interleaved = torch.repeat_interleave(freqs, 2, dim=-1)
    if torch.allclose((interleaved.cos() * scaling).to(cos.dtype), cos, atol=1e-5) and \
            not torch.allclose(interleaved, torch.cat((freqs, freqs), dim=-1)):
        return interleaved
    return torch.cat((freqs, freqs), dim=-1)


def _exact_inv_freq(module, layer_type, inv_freq):
    """1 / base^(2i/dims) in float64 for the default RoPE (transformers computes it in float32)."""
    params = module.config.rope_parameters
    params = params[layer_type] if layer_type else params
    if params.get("rope_type", "default") != "default":
        return inv_freq
    dims = 2 * inv_freq.shape[-1]
    exact = 1.0 / params["rope_theta"] ** (torch.arange(0, dims, 2, dtype=torch.float64) / dims)
    return exact if torch.allclose(exact, inv_freq, rtol=1e-6) else inv_freq


class Hooks:
    """The attention module's input (hidden states after the input norm) and the output projection's
    output, per call."""

    def __init__(self, module, out):
        self.inputs, self.outputs, self.kv = [], [], []  # kv: a cross-attention's key_value_states
        self.handles = [module.register_forward_pre_hook(self._input, with_kwargs=True),
                        out.register_forward_hook(lambda m, args, result: self.outputs.append(result))]

    def _input(self, module, args, kwargs):
        self.inputs.append(kwargs["hidden_states"] if "hidden_states" in kwargs else args[0])
        kv = kwargs.get("key_value_states", kwargs.get("encoder_hidden_states"))  # UMT5 names it the latter
        if kv is not None:
            self.kv.append(kv)

    def remove(self):
        for handle in self.handles:
            handle.remove()


class Layer(NamedTuple):
    """What one call of the model gave for one layer: X rows (B, L, d), X_kv (B, Lk, d) or None,
    weights (B, H, Lq, Lk), output (B, Lq, d)."""

    x: object
    x_kv: object
    weights: object
    output: object


def run(model, ids: list[list[int]], mask: list[list[int]], layers: list[int], decode: bool) -> dict[int, Layer]:
    """Each of `layers` from one call of the model (two for a decode step: the cache, then the step).
    A module shared by several layers (ALBERT) is hooked once and called once by each of them: layer
    i's call is its `call`-th of the forward's `calls`."""
    hooks, at = {}, {}
    for layer in layers:
        module, out = attention(model, layer)
        _, call, calls = block_of(model, layer)
        if id(module) not in hooks:
            hooks[id(module)] = Hooks(module, out)
        at[layer] = hooks[id(module)], call - calls, calls  # the layer's call among the last forward's
    ids_t, mask_t = torch.tensor(ids), torch.tensor(mask)
    try:
        with torch.no_grad():
            if not decode:
                result = model(input_ids=ids_t, attention_mask=mask_t, output_attentions=True)
                return {layer: Layer(h.inputs[last], None, result.attentions[layer], h.outputs[last])
                        for layer, (h, last, _) in at.items()}
            first = model(input_ids=ids_t[:, :-1], attention_mask=mask_t[:, :-1], use_cache=True)
            cached = getattr(first, "cache", None) or first.past_key_values
            named = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
            result = model(input_ids=ids_t[:, -1:], attention_mask=mask_t, use_cache=True, output_attentions=True,
                           **{named: cached})
            # the cache's call of the layer is `calls` calls of its module before the step's
            return {layer: Layer(h.inputs[last], torch.cat([h.inputs[last - calls], h.inputs[last]], dim=1),
                                 result.attentions[layer], h.outputs[last]) for layer, (h, last, calls) in at.items()}
    finally:
        for h in hooks.values():
            h.remove()


def run_seq2seq(model, ids: list[list[int]], mask: list[list[int]], layer: int, decode: bool, part: str):
    """`run` for an encoder-decoder model (its family's `decoder`): the ids are the decoder's tokens and
    the encoder reads the same ids (or the family's fixed features, Whisper's); (X rows, X_kv (the cache's
    inputs, or a cross-attention's encoder output) or None, weights, output) of the part's layer."""
    module, out = attention(model, layer, part)
    hooks = Hooks(module, out)
    ids_t, mask_t = torch.tensor(ids), torch.tensor(mask)
    features = family(model).decoder.features
    if features is None:
        encoder = {"input_ids": ids_t, "attention_mask": mask_t}
    else:
        key, value = features(text_config(model), len(ids))
        encoder = {key: torch.tensor(value, dtype=next(model.parameters()).dtype)}
    pick = {"self": "encoder_attentions", "decoder": "decoder_attentions", "cross": "cross_attentions"}[part]
    try:
        with torch.no_grad():
            if not decode:
                result = model(**encoder, decoder_input_ids=ids_t, decoder_attention_mask=mask_t, output_attentions=True)
                kv = hooks.kv[-1] if part == "cross" else None
                return hooks.inputs[-1], kv, getattr(result, pick)[layer], hooks.outputs[-1]
            first = model(**encoder, decoder_input_ids=ids_t[:, :-1], decoder_attention_mask=mask_t[:, :-1],
                          use_cache=True)
            before = hooks.inputs[-1]
            cached = getattr(first, "cache", None) or first.past_key_values
            named = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
            result = model(**encoder, decoder_input_ids=ids_t[:, -1:], decoder_attention_mask=mask_t, use_cache=True,
                           output_attentions=True, **{named: cached})
            x = hooks.inputs[-1]
            kv = hooks.kv[0] if part == "cross" else torch.cat([before, x], dim=1)
            return x, kv, getattr(result, pick)[layer], hooks.outputs[-1]
    finally:
        hooks.remove()


def _causal(found, model, part: str) -> bool:
    """A decoder's self-attention is causal, a cross-attention is not; a layer's own, as its family says."""
    return {"decoder": True, "cross": False}.get(part, found.is_causal(text_config(model)))


def _cross_keys(found, doc: dict, x_kv, mask: list[int], labels: list[str] | None, word_ids: list | None,
                decode: bool) -> list[int]:
    """A cross-attention's keys: X_kv, the encoder's output (every position, whatever the decoder's step);
    their labels and word ids, the encoder's tokens' (none for features); the encoder's attention mask,
    returned."""
    doc["X_kv"] = array(x_kv)
    features = found.decoder.features is not None
    if labels is not None:
        doc["query_labels"] = labels[-1:] if decode else labels
        if not features:
            doc["key_labels"] = labels
    if word_ids is not None and not features:
        doc["word_ids"] = list(word_ids)
    return [1] * len(doc["X_kv"]) if features else mask


def capture(model, ids: list[list[int]], mask: list[list[int]], layer: int = 0, batch_index: int = 0,
            decode: bool = False, labels: list[str] | None = None, name: str = "model", part: str = "self") -> dict:
    """The attncli document of one layer for one sequence of the batch (`batch_index`), as JSON values;
    for an encoder-decoder, `part` "decoder" or "cross" is its decoder's self- or cross-attention."""
    return listed(capture_layers(model, ids, mask, [layer], batch_index, decode, labels, name, part=part)[0])


def capture_layers(model, ids: list[list[int]], mask: list[list[int]], layers: list[int], batch_index: int = 0,
                   decode: bool = False, labels: list[str] | None = None, name: str = "model",
                   word_ids: list | None = None, quantization=None, part: str = "self") -> list[dict]:
    """The attncli document of each of `layers` for one sequence of the batch (`batch_index`), from
    one run of the model (an encoder-decoder's, one run per layer); arrays stay numpy arrays (`listed`
    makes them JSON values). `word_ids`: the word of each token (None for special tokens and padding);
    `quantization(layer)`: the GGUF types each layer's weights were dequantized from ({"W_Q": "Q4_1",
    …}), or None; `part`: as `capture`'s."""
    found = family(model)
    causal = _causal(found, model, part)
    if decode and not causal and part != "cross":
        raise CaptureError(f"decode is a step of a causal model's generation, but {found.label} is an encoder "
                           "(every query sees every key, no cache): capture the whole sequence, without decode",
                           field="decode")
    if decode and len(ids[0]) < 2:
        raise CaptureError("decode needs at least 2 tokens: the last is the decode step, the others the cache",
                           field="decode")
    dtype = next(model.parameters()).dtype
    if dtype == torch.float64 and found.no_float64:
        raise CaptureError(f"{found.label} cannot run in float64: {found.no_float64}; capture it in float32")
    read = {layer: read_layer(model, layer, part) for layer in layers}
    if decode:
        for layer in layers:
            _one_scaling(read[layer].get("rope", {}).get("scaling"), len(ids[0]))
    exact = exact_float64(model) if dtype == torch.float64 else contextlib.nullcontext()
    with quiet(), library(f"the {found.label} model could not run"), exact:
        if found.decoder:
            ran = {layer: Layer(*run_seq2seq(model, ids, mask, layer, decode, part)) for layer in layers}
        else:
            ran = run(model, ids, mask, layers, decode)
    docs = []
    for layer in layers:
        types = quantization(layer) if quantization is not None else None
        doc = _document(found, model, ran[layer], read[layer], layer, batch_index, len(ids[0]), causal, part,
                        decode, mask[batch_index], labels, word_ids)
        doc["title"] = f"{name} {'' if part == 'self' else f'{part} '}layer {layer} ({type(model).__name__}" + \
            (f"; weights {dequantized(types)})" if types else ")")
        # transformers computes scaled RoPE frequencies in float32 whatever the dtype (exact_float64 redoes
        # only the default ones): such a layer's float64 reference is float32's.
        float32 = dtype != torch.float64 or found.float32 is not None or "scaling" in doc.get("rope", {})
        doc["reference"]["dtype"] = "float32" if float32 and dtype == torch.float64 else _word(dtype)
        doc["model"] = {"name": name, "class": type(model).__name__, "layer": layer}
        if part != "self":  # which attention of the layer: the document's own title says it too
            doc["model"]["part"] = part
        if types:
            doc["model"]["dequantized_from"] = types
        _within_limits(found, text_config(model), layer, doc, _word(dtype))
        _finite(doc, layer, _word(dtype))
        _accepted(doc, layer)
        docs.append(doc)
    return docs


def _document(found, model, ran: Layer, read: dict, layer: int, batch_index: int, length: int, causal: bool,
              part: str, decode: bool, mask: list[int], labels: list[str] | None, word_ids: list | None) -> dict:
    """One layer's keys, in the order a reader meets them: title, X (and X_kv; or Q, K, V given
    directly), the weights and variants, the mask, the labels and word ids, the model's own results."""
    doc = {"title": None, "X": array(ran.x[batch_index])}
    weights = array(ran.weights[batch_index])
    lk = weights.shape[-1]
    if part == "cross":
        keys = _cross_keys(found, doc, ran.x_kv[batch_index], mask, labels, word_ids, decode)
    elif part == "self" and found.decoder is not None and found.decoder.features is not None:
        keys = [1] * lk  # an audio encoder's frames (Whisper's): no padding, no token labels
    else:
        keys = mask[length - lk:]
        if ran.x_kv is not None:
            doc["X_kv"] = array(ran.x_kv[batch_index])[length - lk:]  # a sliding cache keeps the last keys only
            doc["q_positions"] = [length - 1]
            doc["k_positions"] = list(range(length - lk, length))
        if labels is not None:
            doc["key_labels"] = labels[length - lk:]
            doc["query_labels"] = labels[-1:] if decode else labels
        if word_ids is not None:  # one per key, as key_labels: the word each token belongs to
            doc["word_ids"] = list(word_ids[length - lk:])
    _direct(found, model, layer, doc)
    doc |= read
    doc |= _masks(causal, keys)
    doc["reference"] = {"weights": weights, "output": array(ran.output[batch_index])}
    return doc
    return doc


def _finite(doc: dict, layer: int, dtype: str) -> None:
    """Every number of the document is finite: NaN or ±∞ in the weights, the input or the model's
    results is refused, naming where (JSON holds neither, and attncli would have nothing to agree with)."""
    for key, value in doc.items():
        if key == "reference":
            for stage, result in value.items():
                if isinstance(result, np.ndarray) and not np.isfinite(result).all():
                    raise CaptureError(f"the model's attention {stage} of layer {layer} hold NaN or ±∞ (its "
                                       f"weights or config overflow {dtype}): nothing for attncli to agree with")
        elif isinstance(value, dict):
            _finite({f"{key}.{k}": v for k, v in value.items()}, layer, dtype)
        elif isinstance(value, np.ndarray) and not np.isfinite(value).all():
            where = "the layer's input (the layers before it overflow)" if key in ("X", "X_kv") else "the weights"
            raise CaptureError(f"{key} of layer {layer} holds NaN or ±∞: {where} hold them in {dtype}")


def _direct(found, model, layer: int, doc: dict) -> None:
    """A family whose Q, K and V no single projection gives (DeepSeek's latent attention): Q, K and V
    computed from X (and X_kv) by its layout's `direct` function, in place of X."""
    config = text_config(model)
    direct = found.layout_for(config).direct
    if direct is None:
        return
    x, x_kv = doc.pop("X"), doc.pop("X_kv", None)
    doc["Q"], doc["K"], doc["V"] = direct(attention(model, layer)[0], x, x if x_kv is None else x_kv, config, array)
    if found.description:
        doc["description"] = found.description


def _within_limits(found, config, layer: int, doc: dict, dtype: str) -> None:
    """What the layer does on this input that the document cannot say (a clamp that bites, a chunk
    crossed): refused, naming it (capture/families.py's `limits`)."""
    why = found.limited(config, layer, doc, dtype)
    if why:
        raise CaptureError(f"{found.label} layer {layer} {why}")


def _accepted(doc: dict, layer: int) -> None:
    """The document is one `attn compute` reads: what it would refuse, capture refuses, with its reason."""
    try:
        build_problem(doc)
        agreement.read(doc)
    except InputError as error:
        raise CaptureError(f"layer {layer} is not a document attn compute accepts: {error.text(source=False)}")


def _one_scaling(scaling: dict | None, length: int) -> None:
    """A decode step whose RoPE scaling changes with the length (dynamic's base, longrope's factors)
    between the cache's call (length − 1 positions) and the step's (length): the model rotated the
    cached keys and the new query differently, which one document's one scaling cannot say."""
    kind = (scaling or {}).get("rope_type")
    if kind == "longrope":
        edge, name = scaling.get("original_max_position_embeddings") or scaling["max_position_embeddings"], \
            "original_max_position_embeddings"
        changes = length - 1 <= edge < length
    elif kind == "dynamic":
        edge, name = scaling["max_position_embeddings"], "max_position_embeddings"
        changes = length > edge
    else:
        return
    if changes:
        raise CaptureError(f"decode with {kind} RoPE past {name} {edge}: the model rotated the cache's "
                           f"{length - 1} keys and the step's query with different frequencies, which one "
                           "rope.scaling cannot hold; capture the whole sequence, or decode at a length where "
                           "they agree", field="decode")


def _word(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _masks(causal: bool, key_mask: list[int]) -> dict:
    """causal (by index; bidirectional for encoders), key_mask from the attention mask, and the eager
    path's fully masked rows (uniform weights)."""
    doc = {"causal": True} if causal else {}
    if not all(key_mask):
        doc["key_mask"] = [bool(k) for k in key_mask]
    doc["masked_rows"] = "uniform"
    return doc


def listed(value):
    """Arrays (also inside dicts and lists) as lists, for JSON."""
    if isinstance(value, dict):
        return {k: listed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [listed(v) for v in value]
    return value.tolist() if isinstance(value, np.ndarray) else value
