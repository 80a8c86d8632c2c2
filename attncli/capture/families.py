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

from attncli.base.errors import InputError, quote
from attncli.capture.layouts import BERT, C_ATTN, PER_HEAD, SEPARATE, STACKED, Layout

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


def every_layer(config: Config, layer: int) -> bool:
    return True


@dataclass(frozen=True)
class Rope:
    """How a family rotates Q and K: the pairing (`half`: Llama's rotate_half, dim i with i + dims/2;
    `interleaved`: GPT-J's rotate_every_two, 2i with 2i + 1), which dims of a head (`dims(config,
    head width, the layer's rope_parameters)`), and which layers rotate at all (`on(config, layer)`).
    The base and the scaling are the layer's rope_parameters (rope_theta, rope_type and its keys)."""

    style: str = "half"
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
class Cannot:
    """A config setting a family's model may have that attncli cannot express yet: refused, naming
    `key` and `what` it does, when `when(value)` holds."""

    key: str
    what: str
    when: Callable[[Any], bool] = bool


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
    layout: Layout = SEPARATE  # where W_Q, W_K, W_V are (capture/layouts.py)
    heads: Callable[[Config], tuple[int, int]] = config_heads  # (query heads, kv heads)
    rope: Rope | None = Rope()  # None: no rotary embedding
    window: Callable[[Any, Config, int], int | None] = module_window  # (module, config, layer) → W keys or None
    alibi: bool | Callable[[Config], bool] = False
    causal: bool | Callable[[Config], bool] = True  # False: an encoder, every query sees every key
    softcap: str | None = None  # the config key of its logit softcap
    sinks: str | None = None  # the attention module's attribute of one sink logit per head
    qk_norm: Norm | None = None
    float32: str | None = None  # what its eager path computes in float32 whatever the dtype, in words
    cannot: tuple[Cannot, ...] = ()
    exercises: str = ""  # what its test exercises, for the docs' table

    def is_causal(self, config: Config) -> bool:
        return self.causal(config) if callable(self.causal) else self.causal

    def has_alibi(self, config: Config) -> bool:
        return self.alibi(config) if callable(self.alibi) else self.alibi


GEMMA_NORM = Norm(offset=1)

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
)}


def family_of(model_type) -> Family:
    """The record of `model_type`, or a CaptureError naming it and what attn capture would need."""
    found = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if found is None:
        raise CaptureError(f"model type {quote(str(model_type))} has no capture family: attncli has no record of "
                           "where its attention's projections sit or how it places positions and masks, so it "
                           f"cannot write its layers; attn capture reads {', '.join(sorted(FAMILIES))}",
                           field="model_type")
    return found


def refused(family: Family, config: dict) -> str | None:
    """What `config` (config.json as read) sets that attncli cannot express for this family, or None."""
    for cannot in family.cannot:
        if cannot.key in config and cannot.when(config[cannot.key]):
            return (f"{family.label} with {cannot.key} {quote(str(config[cannot.key]))} {cannot.what}, which attncli "
                    "cannot express yet")
    return None
