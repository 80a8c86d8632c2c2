"""The capture families: one `Family` record per Hugging Face model type, saying where a layer's
attention sits in the model and how it computes, in attncli's terms. Every path of `attn capture`
that meets the model reads the record of its `config.model_type` (`family_of`): the model
directory's checks (capture/directory.py), the loading (capture/loading.py), the layer's reading
(capture/reading.py) and the run (capture/driver.py). A model type with no record is refused
before anything is loaded, naming it. A new family is one `Family(...)` in FAMILIES (and, when
its projections are fused in a new way, one split function in capture/layouts.py): the recipe is
in docs/architecture.md, and tests/test_capture_families.py adds one on a tiny model.

Pure data and attribute reading: no torch or transformers import. As transformers 5.x writes them:

    family                    projections                               positions           variants
    Llama, Mistral, Qwen2     q_proj, k_proj, v_proj, o_proj           RoPE half           GQA, window
    Gemma 2 / 3               q_proj, k_proj, v_proj, o_proj           RoPE half           softcap, window, QK-norm
    Phi                       q_proj, k_proj, v_proj, dense            RoPE half, partial  q_layernorm
    Phi-3                     qkv_proj: rows [q; k; v]                  RoPE half           GQA, config window
    GPT-NeoX, BLOOM           query_key_value: per head [q_h; k_h; v_h] RoPE half / ALiBi
    GPT-J                     q_proj, k_proj, v_proj, out_proj         RoPE interleaved    Q Kᵀ in float32
    GPT-2                     c_attn (Conv1D): columns [q | k | v]      none (learned)
    BERT                      query, key, value; output.dense          none (learned)      bidirectional
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from attncli.base.errors import InputError, quote
from attncli.capture.latent import latent_qkv
from attncli.capture.layouts import BERT, C_ATTN, GROUPED, PER_HEAD, SEPARATE, SHARDED, STACKED, Layout, per_head

Config = Any  # a transformers PretrainedConfig (the text model's, for a multimodal one)


class CaptureError(InputError):
    """A model attncli cannot capture (yet), naming what is missing."""


# --- what a record's readers are -----------------------------------------------------------------

def config_heads(config: Config) -> tuple[int, int]:
    """(query heads, kv heads): num_attention_heads, and num_key_value_heads when grouped."""
    heads = config.num_attention_heads
    return heads, getattr(config, "num_key_value_heads", None) or heads


def module_window(module, config: Config, layer: int) -> int | None:
    """The attention module's own sliding_window (W keys, itself included), per layer."""
    return getattr(module, "sliding_window", None)


def config_window(module, config: Config, layer: int) -> int | None:
    """The config's sliding_window, for families whose modules hold none (Mistral, Phi-3-mini: 2047)."""
    return getattr(config, "sliding_window", None)


def no_window(module, config: Config, layer: int) -> int | None:
    return None


def rope_parameters(config: Config, layer: int) -> dict:
    """The layer's rope_parameters (Gemma 3 keeps one dict per layer type)."""
    params = dict(getattr(config, "rope_parameters", None) or {})
    types = getattr(config, "layer_types", None)
    if types and layer < len(types) and isinstance(params.get(types[layer]), dict):
        params = dict(params[types[layer]])
    return params


def partial_rotary(config: Config, d: int, params: dict) -> int:
    """head width × partial_rotary_factor (from rope_parameters, else the config; 1 when absent)."""
    factor = params.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0)) or 1.0
    return int(d * factor)


def rotary_dim(config: Config, d: int, params: dict) -> int:
    """GPT-J: the config's rotary_dim leading dims of each head (all when absent)."""
    return int(getattr(config, "rotary_dim", None) or d)


def albert_group(config: Config, layer: int) -> int:
    """ALBERT's group of layer `layer`: num_hidden_layers run num_hidden_groups shared groups in turn."""
    return int(layer / (config.num_hidden_layers / config.num_hidden_groups))


def every_layer(config: Config, layer: int) -> bool:
    return True


def sliding_layer(config: Config, layer: int) -> bool:
    """Whether the config's layer_types names the layer sliding_attention."""
    types = getattr(config, "layer_types", None) or ()
    return layer < len(types) and types[layer] == "sliding_attention"


def sliding_window_of_type(module, config: Config, layer: int) -> int | None:
    """The config's sliding_window on the layers layer_types names sliding_attention (EXAONE 4's
    modules hold the window on every layer, and use it on those only)."""
    return getattr(config, "sliding_window", None) if sliding_layer(config, layer) else None


@dataclass(frozen=True)
class Rope:
    """How a family rotates Q and K: the pairing (`half`: Llama's rotate_half, dim i with i + dims/2;
    `interleaved`: GPT-J's rotate_every_two, 2i with 2i + 1), which dims of a head (`dims(config,
    head width, the layer's rope_parameters)`), and which layers rotate at all (`on(config, layer)`).
    The base and the scaling are the layer's rope_parameters (rope_theta, rope_type and its keys)."""

    style: str | Callable[[Config], str] = "half"  # or chosen by the config (DeepSeek-V3's rope_interleave)
    dims: Callable[[Config, int, dict], int] = partial_rotary
    on: Callable[[Config, int], bool] = every_layer


@dataclass(frozen=True)
class Norm:
    """A family's QK-norm: the attention module's (q, k) norm modules by name, and the weight's
    offset (Gemma's norms multiply by 1 + weight). Per head or over the whole projection is read
    from the weight's length."""

    names: tuple[str, str] = ("q_norm", "k_norm")
    offset: int = 0


@dataclass(frozen=True)
class Decoder:
    """An encoder-decoder family's decoder (T5, BART, Whisper, …): `blocks` its layers from the base model;
    its self-attention at the family's `attention` and `output` paths within a layer, its
    cross-attention at `cross` and `cross_output`. `features`: the encoder's input when it is not
    tokens (Whisper's mel features): (config, batch) → the input's keyword and a fixed array."""

    blocks: str
    cross: str
    cross_output: str
    features: Callable[[Any, int], tuple[str, Any]] | None = None


PARTS = ("self", "decoder", "cross")  # a layer's self-attention (an encoder's, for an encoder-decoder), its
# decoder's self-attention, its decoder's cross-attention on the encoder's output


@dataclass(frozen=True)
class Cannot:
    """A config setting a family's model may have that attncli cannot express yet: refused, naming
    `key` and `what` it does, when `when(value)` holds. `key` None: what every model of the family
    does (its attention is not one attncli can write yet), refused whatever its config."""

    key: str | None
    what: str
    when: Callable[[Any], bool] = bool


Limit = Callable[[Config, int, dict, str], "str | None"]  # (config, layer, document, dtype) → what it cannot express


@dataclass(frozen=True)
class Family:
    """One model type as `attn capture` reads it. Paths are dotted attribute names: `blocks` from
    the base model (`model.base_model`) to its list of layers, `attention` and `output` from one
    layer to its attention module (whose input is X) and its output projection (whose output is
    the reference output)."""

    model_type: str
    label: str  # the name people call it by, for the docs and messages
    blocks: str = "layers"
    attention: str = "self_attn"
    output: str = "self_attn.o_proj"
    layout: Layout | Callable[[Config], Layout] = SEPARATE  # where W_Q, W_K, W_V are (capture/layouts.py)
    heads: Callable[[Config], tuple[int, int]] = config_heads  # (query heads, kv heads)
    rope: Rope | None = Rope()  # None: no rotary embedding
    window: Callable[[Any, Config, int], int | None] = module_window  # (module, config, layer) → W keys or None
    alibi: bool | Callable[[Config], bool | list[float]] = False  # True: the paper's slopes; a list: these slopes
    causal: bool | Callable[[Config], bool] = True  # False: an encoder, every query sees every key
    softcap: str | None = None  # the config key of its logit softcap
    sinks: str | None = None  # the attention module's attribute of one sink logit per head
    qk_norm: Norm | None = None
    shared: Callable[[Config, int], int] | None = None  # layers sharing modules (ALBERT): the list index of a layer
    decoder: Decoder | None = None  # an encoder-decoder's decoder: `blocks` is then its encoder's layers
    relative: str | None = None  # the first layer's attention's relative position bias embedding (T5)
    float32: str | None = None  # what its eager path computes in float32 whatever the dtype, in words
    no_float64: str | None = None  # why transformers cannot run it in float64, when it cannot
    cannot: tuple[Cannot, ...] = ()
    limits: tuple[Limit, ...] = ()  # what a layer may do on some inputs only (a clamp that bites): checked per document
    description: str | None = None  # the document's description: what its keys are, when not X and weights
    exercises: str = ""  # what its test exercises, for the docs' table

    def is_causal(self, config: Config) -> bool:
        return self.causal(config) if callable(self.causal) else self.causal

    def has_alibi(self, config: Config) -> bool | list[float]:
        """False, True (the paper's slopes for the heads) or the slopes, one per query head."""
        return self.alibi(config) if callable(self.alibi) else self.alibi

    def layout_for(self, config: Config) -> Layout:
        return self.layout(config) if callable(self.layout) else self.layout

    def limited(self, config: Config, layer: int, doc: dict, dtype: str) -> str | None:
        """What layer `layer` does on this document's input, run in `dtype`, that attncli cannot express, or None."""
        return next((why for why in (limit(config, layer, doc, dtype) for limit in self.limits) if why), None)


# --- what some families compute in their own way ---------------------------------------------------

def _dotted(config: Config, path: str):
    """config.a.b (a sub-config or a dict) or None."""
    for name in path.split("."):
        config = config.get(name) if isinstance(config, dict) else getattr(config, name, None)
    return config


def _bfloat16(x: np.ndarray) -> np.ndarray:
    """float64 → bfloat16 (round to nearest even), as float64: torch's .bfloat16()."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def _keys(doc: dict) -> int:
    """How many key positions the document's keys span (0 … n − 1)."""
    positions = doc.get("k_positions")
    return int(positions[-1]) + 1 if positions else len(doc["X_kv"] if "X_kv" in doc else doc["X"])


def falcon_heads(config: Config) -> tuple[int, int]:
    """Falcon's kv heads: num_kv_heads with new_decoder_architecture, 1 with multi_query, else every head."""
    heads = config.num_attention_heads
    return heads, (config.num_kv_heads if config.new_decoder_architecture else 1 if config.multi_query else heads)


def falcon_layout(config: Config) -> Layout:
    return GROUPED if config.new_decoder_architecture else STACKED("query_key_value") if config.multi_query \
        else PER_HEAD


def falcon_slopes(config: Config) -> np.ndarray:
    """Falcon's ALiBi slopes as it uses them: the paper's (as float32 powers of a float32 base), rounded
    to bfloat16 (build_alibi_tensor)."""
    heads = config.num_attention_heads
    lower = 1 << (heads.bit_length() - 1)
    base = np.float32(2.0 ** -(2.0 ** -(np.log2(lower) - 3)))
    slopes = [np.power(base, np.float32(k), dtype=np.float32) for k in range(1, lower + 1)]
    if lower != heads:
        extra = np.float32(2.0 ** -(2.0 ** -(np.log2(2 * lower) - 3)))
        slopes += [np.power(extra, np.float32(k), dtype=np.float32) for k in range(1, 2 * (heads - lower), 2)]
    return _bfloat16(np.array(slopes, np.float64))


def falcon_alibi(config: Config) -> bool | list[float]:
    """Falcon's ALiBi, when `alibi`: its slopes divided by √head_dim (it divides the terms, which
    then are not scaled with Q Kᵀ)."""
    if not config.alibi:
        return False
    return (falcon_slopes(config) / np.sqrt(config.hidden_size // config.num_attention_heads)).tolist()


def falcon_rounding(config: Config, layer: int, doc: dict, dtype: str) -> str | None:
    """Falcon rounds each ALiBi term slope · j to bfloat16: exact for small j and slopes of few bits
    (4 heads: powers of two), otherwise a rounding attncli's alibi has no word for."""
    if not config.alibi:
        return None
    slopes = falcon_slopes(config)
    j = np.arange(_keys(doc), dtype=np.float64)
    exact = slopes[:, None] * j[None, :]  # (H, keys)
    off = np.argwhere(_bfloat16(exact) != exact)
    if not len(off):
        return None
    head, key = (int(i) for i in off[0])
    return (f"rounds its ALiBi terms slope · j to bfloat16 (head {head}: {exact[head, key]:.9g} at key position {key} "
            f"becomes {_bfloat16(exact)[head, key]:.9g}), a rounding attncli's alibi cannot express yet; capture "
            "fewer tokens")


def mpt_alibi(config: Config) -> list[float]:
    """MPT's slopes (build_mpt_alibi_tensor, alibi_bias_max 8): 2^(−8k/n') for n' the next power of two
    of the heads; for fewer heads the odd ones, then the even ones; in float32."""
    heads = config.n_heads
    power = 1 << (heads - 1).bit_length()
    slopes = 1.0 / np.power(np.float32(2), np.arange(1, power + 1, dtype=np.float32) * np.float32(8 / power),
                            dtype=np.float32)
    if power != heads:
        slopes = np.concatenate([slopes[1::2], slopes[::2]])[:heads]
    return slopes.astype(np.float64).tolist()


def clipped(path: str) -> Limit:
    """A limit for `clip_qkv` (at `path` in the config): the model clamps Q, K and V to ±clip after
    the projection; where no projected number of the document passes it, the clamp changes nothing."""
    def limit(config: Config, layer: int, doc: dict, dtype: str) -> str | None:
        clip = _dotted(config, path)
        if not clip:
            return None
        x, x_kv = np.asarray(doc["X"]), np.asarray(doc.get("X_kv", doc["X"]))
        beyond = sum(int((np.abs(source @ np.asarray(doc[f"W_{k}"]) + np.asarray(doc.get(f"b_{k}", 0.0))) > clip).sum())
                     for k, source in (("Q", x), ("K", x_kv), ("V", x_kv)))
        if not beyond:
            return None
        return (f"clamps Q, K and V to ±{clip:g} ({path}), which changes {beyond} of this layer's projected numbers "
                "here: attncli cannot express the clamp yet")
    return limit


def mpt_padding(config: Config, layer: int, doc: dict, dtype: str) -> str | None:
    """MPT fills masked scores with the dtype's minimum and casts them to float32 for its softmax:
    in float64 that minimum is −∞ in float32, and a query whose every key is masked (a left-padded
    row) gets NaN from the model itself (and the layers after it NaN inputs)."""
    if dtype != "float64" or all(doc.get("key_mask", [True])):
        return None
    return ("fills masked scores with float64's minimum, −∞ once its softmax casts them to float32: the padded "
            "queries, whose every key is masked, are NaN in the model itself; capture this sequence in float32, "
            "or without padding")


def llama4_limit(config: Config, layer: int, doc: dict, dtype: str) -> str | None:
    """Llama 4's RoPE layers attend in chunks of attention_chunk_size tokens, its layers without RoPE
    scale Q by a temperature from position floor_scale − 1 on: neither within a short sequence."""
    keys = _keys(doc)
    types = getattr(config, "layer_types", None) or ()
    chunk = getattr(config, "attention_chunk_size", None)
    if layer < len(types) and types[layer] == "chunked_attention" and chunk and keys > chunk:
        return (f"attends in chunks of {chunk} tokens (attention_chunk_size), and these {keys} positions cross a "
                "chunk: chunked attention, which attncli cannot express yet; capture fewer tokens")
    if not config.no_rope_layers[layer] and config.attn_temperature_tuning and keys >= config.floor_scale:
        return (f"scales Q by a temperature that grows from position {config.floor_scale - 1} on (floor_scale, "
                "attn_temperature_tuning), which attncli cannot express yet; capture fewer tokens")
    return None


def latent_rope(config: Config, d: int, params: dict) -> int:
    """DeepSeek: the qk_rope_head_dim rotary dims of each head (written first: capture/latent.py)."""
    return int(config.qk_rope_head_dim)


LATENT = Layout(("kv_a_proj_with_mqa", "kv_b_proj"), words="latent: q_a → RMSNorm → q_b, kv_a → RMSNorm → kv_b",
                direct=latent_qkv)
LATENT_WORDS = ("Q, K, V: DeepSeek's multi-head latent attention (q_a_proj → RMSNorm → q_b_proj; kv_a_proj_with_mqa "
                "→ RMSNorm → kv_b_proj, with one rotary key for every head), computed by attn capture from the layer's "
                "input and weights; each head's rotary dims come first in Q and K (the scores are the same)")
def whisper_features(config: Config, batch: int) -> tuple[str, np.ndarray]:
    """Whisper's encoder reads mel features, not tokens: a fixed input (normal noise, seed 0) of the
    length its positions take, num_mel_bins × 2 · max_source_positions frames, for each sequence."""
    frames = 2 * config.max_source_positions
    noise = np.random.default_rng(0).normal(size=(1, config.num_mel_bins, frames))
    return "input_features", np.repeat(noise, batch, axis=0)


C_ATTN_PER_HEAD = Layout(("c_attn",), per_head, "c_attn: per head [q_h; k_h; v_h]")  # GPTBigCode without multi_query
GEMMA_NORM = Norm(offset=1)
BERT_LIKE = dict(blocks="encoder.layer", attention="attention.self", output="attention.output.dense", layout=BERT,
                 rope=None, window=no_window, causal=lambda config: bool(getattr(config, "is_decoder", False)))
T5_LIKE = dict(blocks="encoder.block", attention="layer.0.SelfAttention", output="layer.0.SelfAttention.o",
               layout=Layout(("q", "k", "v"), words="q, k, v"), rope=None, window=no_window, causal=False,
               decoder=Decoder("decoder.block", "layer.1.EncDecAttention", "layer.1.EncDecAttention.o"),
               relative="relative_attention_bias")
BART_LIKE = dict(blocks="encoder.layers", output="self_attn.out_proj", rope=None, window=no_window, causal=False,
                 decoder=Decoder("decoder.layers", "encoder_attn", "encoder_attn.out_proj"))
INTERLEAVED = Rope("interleaved")  # rotate_half over pairs (2i, 2i + 1), cos and sin repeat_interleave'd

FAMILIES: dict[str, Family] = {f.model_type: f for f in (
    Family("llama", "Llama", exercises="grouped kv heads, q/k/v/o biases, RoPE base 500000, each RoPE scaling type"),
    Family("mistral", "Mistral", window=config_window, exercises="sliding window, with a decode step against the cache"),
    Family("qwen2", "Qwen2", exercises="q/k/v biases, sliding layers"),
    Family("qwen3", "Qwen3", qk_norm=Norm(), exercises="QK-norm per head"),
    Family("gemma2", "Gemma 2", softcap="attn_logit_softcapping",
           exercises="softcap, `query_pre_attn_scalar`, alternating sliding windows"),
    Family("gemma3_text", "Gemma 3", softcap="attn_logit_softcapping", qk_norm=GEMMA_NORM,
           exercises="QK-norm per head with (1 + weight), sliding windows"),
    Family("gemma3", "Gemma 3 (multimodal)", blocks="language_model.layers", softcap="attn_logit_softcapping",
           qk_norm=GEMMA_NORM, exercises="the text model of Gemma3ForConditionalGeneration"),
    Family("olmo2", "OLMo 2", qk_norm=Norm(), exercises="QK-norm over the whole projection"),
    Family("phi", "Phi", output="self_attn.dense", qk_norm=Norm(("q_layernorm", "k_layernorm")),
           exercises="partial rotary, `dense` output; with `qk_layernorm`, QK-norm as a LayerNorm per head"),
    Family("phi3", "Phi-3", layout=STACKED("qkv_proj"), window=config_window,
           exercises="fused `qkv_proj`, grouped kv heads, the sliding window its config holds (as Mistral's)"),
    Family("gpt_neox", "GPT-NeoX", attention="attention", output="attention.dense", layout=PER_HEAD,
           exercises="fused per-head `query_key_value`, partial rotary"),
    Family("gptj", "GPT-J", blocks="h", attention="attn", output="attn.out_proj", window=no_window,
           rope=Rope("interleaved", dims=rotary_dim), float32="Q Kᵀ",
           exercises="interleaved rotary on the first `rotary_dim` dims (its Q Kᵀ in float32: 1e-6)"),
    Family("gpt2", "GPT-2", blocks="h", attention="attn", output="attn.c_proj", layout=C_ATTN, rope=None,
           window=no_window, exercises="Conv1D `c_attn`, no RoPE"),
    Family("bert", "BERT", blocks="encoder.layer", attention="attention.self", output="attention.output.dense",
           layout=BERT, rope=None, window=no_window, causal=lambda config: bool(getattr(config, "is_decoder", False)),
           exercises="bidirectional (no causal mask; causal with `is_decoder`), post-norm"),
    Family("bloom", "BLOOM", blocks="h", attention="self_attention", output="self_attention.dense", layout=PER_HEAD,
           rope=None, window=no_window, alibi=True,
           exercises="ALiBi with 4 and with 6 heads (the paper's slopes for a count that is not a power of two), "
                     "fused per-head `query_key_value`"),
    Family("gpt_oss", "gpt-oss", sinks="sinks", exercises="sinks, grouped kv heads, sliding layers"),
    Family("mixtral", "Mixtral", window=config_window,
           exercises="the sliding window its config holds, grouped kv heads, experts after the attention"),
    Family("starcoder2", "StarCoder2", window=config_window,
           exercises="the sliding window its config holds, q/k/v/o biases"),
    Family("helium", "Helium", rope=INTERLEAVED, exercises="interleaved RoPE (rotate_half over pairs 2i, 2i + 1)"),
    Family("glm", "GLM", rope=INTERLEAVED, exercises="interleaved RoPE on the first half of each head (partial)"),
    Family("glm4", "GLM-4", rope=INTERLEAVED,
           exercises="interleaved partial RoPE, norms after the attention (X is still its input)"),
    Family("ernie4_5", "ERNIE 4.5", rope=INTERLEAVED, float32="its RoPE rotation",
           exercises="interleaved RoPE, rotated in float32 whatever the dtype (1e-6)"),
    Family("cohere", "Command R (Cohere)", rope=INTERLEAVED, qk_norm=Norm(), float32="its RoPE rotation",
           exercises="interleaved RoPE (rotated in float32: 1e-6), a parallel block; with `use_qk_norm`, a "
                     "LayerNorm per head with each head's own weight (heads × d_k)"),
    Family("cohere2", "Command R7B (Cohere 2)", rope=Rope("interleaved", on=sliding_layer), float32="its RoPE rotation",
           exercises="sliding layers with interleaved RoPE (rotated in float32: 1e-6), full layers without RoPE"),
    Family("smollm3", "SmolLM3", rope=Rope(on=lambda config, layer: bool(config.no_rope_layers[layer])),
           exercises="every `no_rope_layer_interval`-th layer without RoPE"),
    Family("exaone4", "EXAONE 4", window=sliding_window_of_type, qk_norm=Norm(),
           rope=Rope(on=lambda config, layer: config.sliding_window is None or sliding_layer(config, layer)),
           exercises="sliding layers with RoPE, global layers without, QK-norm per head, post-norm"),
    Family("stablelm", "StableLM", qk_norm=Norm(("q_layernorm", "k_layernorm")),
           exercises="partial rotary; with `qk_layernorm`, one LayerNorm per head (each its own weight)"),
    Family("roberta", "RoBERTa", **BERT_LIKE, exercises="BERT's attention: bidirectional, post-norm"),
    Family("xlm-roberta", "XLM-RoBERTa", **BERT_LIKE, exercises="BERT's attention: bidirectional, post-norm"),
    Family("electra", "ELECTRA", **BERT_LIKE,
           exercises="BERT's attention after a projection of smaller embeddings"),
    Family("albert", "ALBERT", blocks="encoder.albert_layer_groups", attention="albert_layers.0.attention",
           output="albert_layers.0.attention.dense", layout=BERT, rope=None, window=no_window, causal=False,
           shared=albert_group, cannot=(Cannot("inner_group_num", "runs several different layers in each group",
                                               lambda n: n != 1),),
           exercises="every layer one shared module (layer i: the module's i-th call), bidirectional"),
    Family("distilbert", "DistilBERT", blocks="transformer.layer", attention="attention", output="attention.out_lin",
           layout=Layout(("q_lin", "k_lin", "v_lin"), words="q_lin, k_lin, v_lin"), rope=None, window=no_window,
           causal=False, exercises="`q_lin`, `k_lin`, `v_lin`, `out_lin`, bidirectional"),
    Family("codegen", "CodeGen", blocks="h", attention="attn", output="attn.out_proj", layout=SHARDED,
           rope=Rope("interleaved", dims=rotary_dim), window=no_window, float32="Q Kᵀ",
           exercises="fused `qkv_proj` in 4 shards of [q | v | k], interleaved rotary on `rotary_dim` dims "
                     "(its Q Kᵀ in float32: 1e-6)"),
    Family("falcon", "Falcon", blocks="h", attention="self_attention", output="self_attention.dense",
           layout=falcon_layout, heads=falcon_heads, window=no_window, alibi=falcon_alibi,
           rope=Rope(on=lambda config, layer: not config.alibi), limits=(falcon_rounding,),
           exercises="rotary; ALiBi (its slopes in bfloat16, divided by √d); `multi_query` (one kv head); "
                     "`new_decoder_architecture` (per kv head [q … q; k; v])"),
    Family("gpt_bigcode", "GPTBigCode (StarCoder)", blocks="h", attention="attn", output="attn.c_proj",
           layout=lambda config: STACKED("c_attn") if config.multi_query else C_ATTN_PER_HEAD, rope=None,
           window=no_window,
           heads=lambda config: (config.num_attention_heads, 1 if config.multi_query else config.num_attention_heads),
           exercises="multi-query: `c_attn` [q; k; v] with one kv head; without `multi_query`, `c_attn` per head "
                     "[q_h; k_h; v_h]; learned positions"),
    Family("mpt", "MPT", blocks="blocks", attention="attn", output="attn.out_proj", layout=STACKED("Wqkv"), rope=None,
           window=no_window, alibi=mpt_alibi, limits=(mpt_padding, clipped("attn_config.clip_qkv")),
           float32="its softmax and ALiBi terms",
           exercises="ALiBi with MPT's slopes (fewer heads than a power of two: odd slopes, then even), fused "
                     "`Wqkv`; `clip_qkv` where it bites is refused (its softmax in float32: 1e-6)"),
    Family("dbrx", "DBRX", blocks="blocks", attention="norm_attn_norm.attn", output="norm_attn_norm.attn.out_proj",
           layout=STACKED("Wqkv"), heads=lambda config: (config.n_heads, config.attn_config.kv_n_heads),
           window=no_window, limits=(clipped("attn_config.clip_qkv"),),
           exercises="fused `Wqkv` with grouped kv heads; `clip_qkv` where it bites is refused"),
    Family("olmo", "OLMo", limits=(clipped("clip_qkv"),),
           exercises="`clip_qkv` that changes nothing agrees; one that clamps a number is refused"),
    Family("xglm", "XGLM", output="self_attn.out_proj", rope=None, window=no_window,
           no_float64="its attention clamps the scores at float64's minimum held in a float32 tensor, which "
                      "overflows (transformers' XGLM runs in float32, float16 and bfloat16 only)",
           exercises="sinusoidal positions, Q scaled before Q Kᵀ, its softmax in the model's dtype"),
    Family("modernbert", "ModernBERT", attention="attn", output="attn.Wo", layout=STACKED("Wqkv"), causal=False,
           float32="its RoPE rotation",
           window=lambda module, config, layer: (config.sliding_window, config.sliding_window)
           if sliding_layer(config, layer) else None,
           exercises="bidirectional: local layers see |i − j| ≤ local_attention / 2, global layers every key; "
                     "RoPE bases per layer type (rotated in float32: 1e-6); fused `Wqkv`"),
    Family("llama4_text", "Llama 4", rope=Rope("interleaved", on=lambda config, layer: bool(config.no_rope_layers[layer])),
           qk_norm=Norm(("qk_norm", "qk_norm")), limits=(llama4_limit,), float32="its RoPE rotation and QK-norm",
           exercises="complex (interleaved) RoPE on 3 of 4 layers, a weightless RMSNorm after it (the same as "
                     "before it: a rotation keeps the norm), chunks and temperature refused past their lengths"),
    Family("deepseek_v2", "DeepSeek-V2", layout=LATENT, heads=lambda config: (config.num_attention_heads,) * 2,
           rope=Rope("interleaved", dims=latent_rope), float32="its latent RMSNorms and complex RoPE",
           description=LATENT_WORDS,
           exercises="multi-head latent attention as Q, K, V given directly (the rotary dims first), complex "
                     "(interleaved) RoPE on them, d_v ≠ d_k"),
    Family("deepseek_v3", "DeepSeek-V3", layout=LATENT, heads=lambda config: (config.num_attention_heads,) * 2,
           rope=Rope(lambda config: "interleaved" if config.rope_interleave else "half", dims=latent_rope),
           float32="its latent RMSNorms", description=LATENT_WORDS,
           exercises="multi-head latent attention as Q, K, V given directly, RoPE interleaved (`rope_interleave`) "
                     "or in halves"),
    Family("t5", "T5", **T5_LIKE,
           exercises="relative position bias by buckets (bidirectional in the encoder, causal in the decoder), "
                     "no 1/√d scale; the decoder's self-attention and its cross-attention"),
    Family("bart", "BART", **BART_LIKE,
           exercises="learned positions; the decoder's self-attention (causal) and its cross-attention (X_kv: the "
                     "encoder's output)"),
    Family("mbart", "mBART", **BART_LIKE,
           exercises="BART's attention with norms before it (X is the attention's input, after "
                     "self_attn_layer_norm); the decoder's self- and cross-attention"),
    Family("marian", "Marian (Opus-MT)", **BART_LIKE,
           exercises="sinusoidal positions, BART's attention; the decoder's self- and cross-attention"),
    Family("m2m_100", "M2M-100", **BART_LIKE,
           exercises="sinusoidal positions, pre-norm BART attention; the decoder's self- and cross-attention"),
    Family("pegasus", "Pegasus", **BART_LIKE,
           exercises="sinusoidal positions, pre-norm BART attention; the decoder's self- and cross-attention"),
    Family("plbart", "PLBART", **BART_LIKE, exercises="BART's attention; the decoder's self- and cross-attention"),
    Family("blenderbot", "Blenderbot", **BART_LIKE,
           exercises="pre-norm BART attention; the decoder's self- and cross-attention"),
    Family("blenderbot-small", "Blenderbot Small", **BART_LIKE,
           exercises="post-norm BART attention; the decoder's self- and cross-attention"),
    Family("mt5", "mT5", **T5_LIKE,
           exercises="T5's attention (relative position bias, scale 1); the decoder's self- and cross-attention"),
    Family("umt5", "UMT5", **T5_LIKE,
           exercises="T5's attention with a relative position bias of each layer's own; the decoder's self- and "
                     "cross-attention (`encoder_hidden_states`)"),
    Family("whisper", "Whisper", blocks="encoder.layers", output="self_attn.out_proj", rope=None, window=no_window,
           causal=False, decoder=Decoder("decoder.layers", "encoder_attn", "encoder_attn.out_proj",
                                         features=whisper_features),
           exercises="an audio encoder (a fixed input of noise features), k_proj without bias; the decoder's self- "
                     "and cross-attention"),
    Family("hunyuan_v1_dense", "Hunyuan", cannot=(Cannot(None, "normalises Q and K (query_layernorm, key_layernorm) "
                                                         "after RoPE, where attncli's q_norm and k_norm come before it"),),
           exercises="refused: QK-norm after RoPE"),
    Family("diffllama", "DiffLlama", cannot=(Cannot(None, "computes differential attention (two softmaxes per head, "
                                                          "the second subtracted with a learned λ, then a norm)"),),
           exercises="refused: differential attention"),
    Family("bitnet", "BitNet", cannot=(Cannot(None, "normalises the heads' output (attn_sub_norm, an RMSNorm) "
                                                    "before o_proj"),),
           exercises="refused: a norm between the heads and o_proj"),
    Family("jetmoe", "JetMoE", cannot=(Cannot(None, "picks each token's query and output projections among experts "
                                                    "(a mixture of attention heads, routed per token)"),),
           exercises="refused: per-token expert projections"),
    Family("deberta-v2", "DeBERTa-v2", blocks="encoder.layer", attention="attention.self",
           output="attention.output.dense", rope=None, window=no_window, causal=False,
           cannot=(Cannot(None, "adds disentangled relative-position scores (content-to-position and "
                                "position-to-content, from its relative embeddings), scales by 1/√(d · (1 + their "
                                "count)) and masks padded queries as well as keys"),),
           exercises="refused: disentangled attention"),
    Family("opt", "OPT", blocks="decoder.layers", output="self_attn.out_proj", rope=None, window=no_window,
           exercises="learned positions, Q scaled before Q Kᵀ, `out_proj`"),
)}


def family_of(model_type) -> Family:
    """The record of `model_type`, or a CaptureError naming it and what attn capture would need."""
    found = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if found is None:
        raise CaptureError(f"model type {quote(str(model_type))} has no capture family: attncli has no record of "
                           "where its attention's projections sit or how it places positions and masks, so it "
                           f"cannot write its layers; attn capture reads {', '.join(sorted(readable()))}",
                           field="model_type")
    return found


def status(family: Family) -> str:
    """What attn capture does with the family's layers, in words, for the docs' table: agrees (to
    float64's precision, or float32's where the model computes part of its layer in float32), or
    refused and why."""
    always = next((cannot for cannot in family.cannot if cannot.key is None), None)
    if always is not None:
        return f"refused: {always.what}"
    if family.no_float64:
        return "agrees in float32 (transformers cannot run it in float64)"
    if family.float32:
        return f"agrees to 1e-6 (it computes {family.float32} in float32)"
    return "agrees to 1e-12 (float64)"


def table() -> list[str]:
    """docs/real-models.md's families table: one row per record, in order (tests/test_capture_docs.py)."""
    def cell(text: str) -> str:  # a | of the words (CodeGen's [q | v | k]) would end the cell
        return text.replace("|", "\\|")

    return ["| family | model type | what its test exercises | attn capture |", "|---|---|---|---|"] + [
        f"| {cell(f.label)} | `{f.model_type}` | {cell(f.exercises)} | {cell(status(f))} |" for f in FAMILIES.values()]


def readable() -> tuple[str, ...]:
    """The model types attn capture writes (those whose record refuses every model left out)."""
    return tuple(t for t, f in FAMILIES.items() if not any(cannot.key is None for cannot in f.cannot))


def refused(family: Family, config: dict) -> str | None:
    """What `config` (config.json as read) sets that attncli cannot express for this family, or None."""
    for cannot in family.cannot:
        if cannot.key is None:
            return f"{family.label} {cannot.what}, which attncli cannot express yet"
        if cannot.key in config and cannot.when(config[cannot.key]):
            return (f"{family.label} with {cannot.key} {quote(str(config[cannot.key]))} {cannot.what}, which attncli "
                    "cannot express yet")
    return None
