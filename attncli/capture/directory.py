"""The model directory `attn capture` reads, checked before anything of it is loaded or run:

- MODEL is a directory, or a model id whose snapshot is in the local Hugging Face cache (its
  folder is then read as a directory: nothing is downloaded, and nothing is looked up by name).
- config.json is strict JSON of at most 4 MiB. It must not name code of the model's own
  (`auto_map`): attn capture never imports a model directory's Python (transformers is always
  called with trust_remote_code=False, and never asks on stdin). Its model type must be one
  transformers has built in and one with a capture family (capture/families.py), without a
  setting the family's record says attncli cannot express.
- Its sizes are whole numbers ≥ 1 that fit together (heads in equal groups over the kv heads, the
  hidden size in equal heads), the MLP's width by whatever name the family gives it (n_inner,
  ffn_dim, d_ff, …: the memory guard counts it), its RoPE base and norm eps finite and positive,
  its RoPE scaling's parameters as attn compute's rope.scaling takes them, its window whole keys,
  its rotated dims an even number ≥ 2, its logit softcap and query_pre_attn_scalar finite and
  positive (Gemma 2's eager path divides by a softcap of 0.0), its dtype one torch runs: a hostile
  config is one error naming its key, not an error deep in transformers or torch, and never a
  document that differs from the model.
- `architectures` names a model class transformers has for that model type, or nothing (the base
  model): never an arbitrary attribute of transformers.
- The weights are safetensors (each file's header checked here); a pickle (pytorch_model.bin and
  the like, which can run code when opened) is refused unopened.
- Every file is a regular file: a FIFO would block whatever opens it, a device never end.

Every file of the directory is an input of the run: `attn capture -o` refuses to overwrite one.
"""

from __future__ import annotations

import inspect
import math
import os
import stat
from dataclasses import dataclass
from types import SimpleNamespace

import safetensors
import torch  # noqa: F401  (before transformers: without it, the models extra's error is the only line)
import transformers
from huggingface_hub import try_to_load_from_cache
from transformers.models.auto import modeling_auto

from attncli.base.errors import quote
from attncli.base.values import describe
from attncli.capture.families import CaptureError, Family, family_of, partial_rotary, refused, rotary_dim
from attncli.capture.gguf_file import Gguf
from attncli.compute.limits import Cap
from attncli.document.json_text import parse_json
from attncli.document.loading import decode, read_bytes
from attncli.problem import rope_scaling

CONFIG_CAP = Cap(4 << 20, "a model's config.json is a few kilobytes: attn capture reads at most 4 MiB of it")
PICKLES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".h5", ".msgpack")
# The sizes every family's config has, by transformers' standard names (a config class's
# attribute_map gives a family's own: GPT-2's n_embd); True: may be null (then derived).
SIZES = {"hidden_size": False, "num_attention_heads": False, "num_hidden_layers": False, "vocab_size": False,
         "max_position_embeddings": False, "intermediate_size": True, "num_key_value_heads": True,
         "head_dim": True}
LARGEST = 2**31 - 1  # torch's sizes past this overflow its 32-bit kernels
# The MLP's width by the names families give it beside intermediate_size (GPT-J's and GPT-2's n_inner,
# OPT's ffn_dim, T5's d_ff, BART's encoder_ffn_dim, Falcon's ffn_hidden_size, DistilBERT's hidden_dim,
# DBRX's ffn_config.ffn_hidden_size): each given one checked as a size; the memory guard counts the widest.
WIDTHS = ("n_inner", "ffn_dim", "d_ff", "encoder_ffn_dim", "decoder_ffn_dim", "ffn_hidden_size", "hidden_dim",
          "intermediate_size_mlp", "moe_intermediate_size", "ffn_config.ffn_hidden_size")
BASES = ("rope_theta", "rotary_emb_base")  # the RoPE base, and GPT-NeoX's older name that transformers reads
PARTIAL = ("partial_rotary_factor", "rotary_pct")  # the rotated fraction of a head, and GPT-NeoX's older name
KV_HEADS = ("num_kv_heads", "attn_config.kv_n_heads")  # Falcon's and DBRX's names of the kv heads
DECODER_LAYERS = ("decoder_layers", "num_decoder_layers")  # an encoder-decoder's decoder: its layers count too
EPS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_eps")
DTYPES = ("float32", "float64", "bfloat16", "float16")
MAX_FILES = 10_000  # a model directory holds a few dozen files


@dataclass(frozen=True)
class ModelDir:
    """A checked model directory: `path` to load from, `name` for titles, `config` as read,
    `family`, `sizes` of its text model (given, or its config class's defaults), `model_class`
    (a transformers class name, or None for the base model), and every `files` of it."""

    path: str
    name: str
    config: dict
    family: Family
    sizes: SimpleNamespace
    model_class: str | None
    files: tuple[str, ...]
    dtype: str | None  # config.json's dtype, when it names one
    gguf: Gguf | None = None  # a GGUF file's header (capture/gguf_file.py): the config is its metadata

    @property
    def config_path(self) -> str:
        """The file the config came from: config.json, or the GGUF file."""
        return self.gguf.path if self.gguf is not None else os.path.join(self.path, "config.json")


def locate(model: str) -> str:
    """MODEL's directory: itself, or the cached snapshot of a model id (no network)."""
    if os.path.isdir(model):
        return model
    try:
        found = try_to_load_from_cache(model, "config.json")
    except Exception:  # not a valid repository id (HFValidationError), or no cache at all
        found = None
    if isinstance(found, str) and os.path.isfile(found):
        return os.path.dirname(found)
    raise CaptureError(f"MODEL {model or quote(model)} is neither a directory nor a model in the local Hugging Face cache (attn "
                       "capture never downloads: fetch it first, e.g. with hf download)", field="MODEL")


def open_model(model: str) -> ModelDir:
    """MODEL checked as the module docstring says; raises CaptureError (source: the file at fault)."""
    path = locate(model)
    source = os.path.join(path, "config.json")
    files = _files(path)
    config = _read_config(source)
    try:
        family, sizes, model_class, dtype = check_config(config)
    except CaptureError as error:
        raise error.at(source)
    _weights(path, files)
    given = os.path.basename(os.path.normpath(model)) if os.path.isdir(model) else model
    return ModelDir(path, model_name(config.get("_name_or_path") or config.get("name_or_path"), given), config,
                    family, sizes, model_class, files, dtype)


def check_config(config: dict) -> tuple[Family, SimpleNamespace, str | None, str | None]:
    """(family, the text model's sizes, model class or None, dtype or None) of a config as read
    (config.json, or the one transformers rebuilds from a GGUF's metadata), checked as the module
    docstring says; a CaptureError names the key at fault."""
    family = _family(config)
    text, text_class = _text_part(config, family)
    sizes = _sizes(text, text_class, "text_config." if text is not config else "")
    if family.decoder is not None:  # an encoder-decoder's decoder: as many layers as the encoder unless said
        sizes.decoder_layers = sizes.decoder_layers or sizes.num_hidden_layers
    else:
        sizes.decoder_layers = 0
    _numbers(text, "text_config." if text is not config else "")
    _attention(text, family, sizes, "text_config." if text is not config else "")
    return family, sizes, _model_class(config), _dtype(config)


MAX_NAME = 200  # a model's name, for titles: an id such as "HuggingFaceTB/SmolLM2-135M-Instruct"


def model_name(named, given: str) -> str:
    """The model's name for titles and the agreement line: the name its files give (config.json's
    `_name_or_path`, a GGUF's `general.name`) when that is a name and not a folder on someone's
    machine, else `given` (the directory's or file's name as the user gave it)."""
    if isinstance(named, str):
        named = " ".join(named.split())  # one line
        local = named.startswith(("/", ".", "~")) or "\\" in named or os.path.isabs(named) or named.count("/") > 1
        if named and not local:
            return named[:MAX_NAME]
    return given


def _read_config(source: str) -> dict:
    if not os.path.isfile(source):
        raise CaptureError("no such file: a model directory holds config.json beside its weights (as "
                           "save_pretrained writes them)", source)
    data, _ = read_bytes(source, CONFIG_CAP)
    config = parse_json(decode(data, source, "a model's config: a JSON object with model_type"), source)
    if not isinstance(config, dict):
        raise CaptureError(f"the top level is {describe(config)}; expected a JSON object with model_type", source)
    return config


def _family(config: dict) -> Family:
    if "auto_map" in config:
        named = config["auto_map"]
        shown = ", ".join(str(v) for v in named.values()) if isinstance(named, dict) else describe(named)
        raise CaptureError(f"auto_map names Python code of the model's own ({shown}); attn capture never runs a model "
                           "directory's code: it reads model types transformers has built in", field="auto_map")
    kind = config.get("model_type")
    if not isinstance(kind, str):
        raise CaptureError(f"model_type is {describe(kind)}; expected the name of a transformers model type, as "
                           "\"llama\"", field="model_type")
    if kind not in transformers.CONFIG_MAPPING:
        raise CaptureError(f"model_type {quote(kind)} is not a model type transformers {transformers.__version__} "
                           "has built in (attn capture never runs a model directory's own code)", field="model_type")
    family = family_of(kind)
    why = refused(family, config)
    if why is not None:
        raise CaptureError(why, field="model_type")
    return family


def _text_part(config: dict, family: Family) -> tuple[dict, type]:
    """(the text model's config as read, its config class): a multimodal config's text_config."""
    outer = transformers.CONFIG_MAPPING[config["model_type"]]
    text = config.get("text_config")
    if "text_config" not in getattr(outer, "sub_configs", {}):
        return config, outer
    if text is None:
        return {}, outer.sub_configs["text_config"]
    if not isinstance(text, dict):
        raise CaptureError(f"text_config is {describe(text)}; expected a JSON object", field="text_config")
    kind = text.get("model_type")
    if kind is not None and kind not in transformers.CONFIG_MAPPING:
        raise CaptureError(f"text_config.model_type {quote(str(kind))} is not a model type transformers has built in",
                           field="text_config.model_type")
    return text, transformers.CONFIG_MAPPING[kind] if kind else outer.sub_configs["text_config"]


def _sizes(text: dict, config_class: type, prefix: str) -> SimpleNamespace:
    """The text model's sizes by standard name: each given one checked, the others the class's defaults."""
    names = getattr(config_class, "attribute_map", {}) or {}
    defaults = None
    found = {}
    for size, nullable in SIZES.items():
        key = names.get(size, size)
        if key in text:
            value = text[key]
            if not (value is None and nullable) and not (type(value) is int and 1 <= value <= LARGEST):
                raise CaptureError(f"{prefix}{key} is {describe(value)}; expected a whole number from 1 to {LARGEST:,}"
                                   + (" (or null)" if nullable else ""), field=prefix + key)
        else:
            defaults = defaults or config_class()
            value = getattr(defaults, size, None)
        found[size] = value
    missing = [size for size, nullable in SIZES.items() if found[size] is None and not nullable and
               size != "max_position_embeddings"]  # ALiBi models (BLOOM) have no position limit
    if missing:
        raise CaptureError(f"{prefix}config has no {missing[0]}; expected a whole number ≥ 1", field=prefix + missing[0])
    s = SimpleNamespace(**found)
    s.num_key_value_heads = s.num_key_value_heads or s.num_attention_heads
    if s.num_attention_heads % s.num_key_value_heads:
        raise CaptureError(f"{prefix}{names.get('num_attention_heads', 'num_attention_heads')} {s.num_attention_heads} "
                           f"is not a multiple of num_key_value_heads {s.num_key_value_heads}; expected the query "
                           "heads in equal groups over the kv heads", field=prefix + "num_key_value_heads")
    for key in KV_HEADS:
        kv_heads = _size(text, key, prefix, config_class)
        if kv_heads and s.num_attention_heads % kv_heads:
            raise CaptureError(f"{prefix}{names.get('num_attention_heads', 'num_attention_heads')} "
                               f"{s.num_attention_heads} is not a multiple of {key} {kv_heads}; expected the query "
                               "heads in equal groups over the kv heads", field=prefix + key)
    if s.head_dim is None and s.hidden_size % s.num_attention_heads:
        raise CaptureError(f"{prefix}{names.get('hidden_size', 'hidden_size')} {s.hidden_size} is not a multiple of "
                           f"{names.get('num_attention_heads', 'num_attention_heads')} {s.num_attention_heads}; "
                           "expected equal heads (or give head_dim)", field=prefix + "hidden_size")
    s.head_dim = s.head_dim or s.hidden_size // s.num_attention_heads
    widths = [_size(text, key, prefix, config_class) for key in WIDTHS]
    ratio = text.get("expansion_ratio")  # MPT: the MLP is expansion_ratio × d_model wide
    if ratio is not None and not _number(ratio, lambda x: 0 < x * s.hidden_size <= LARGEST):
        raise CaptureError(f"{prefix}expansion_ratio is {describe(ratio)}; expected a finite number > 0 (the MLP's "
                           "width over d_model, as 4)", field=prefix + "expansion_ratio")
    widths.append(int(ratio * s.hidden_size) if ratio is not None else None)
    s.intermediate_size = max([w for w in widths if w] + [s.intermediate_size or 4 * s.hidden_size])
    s.decoder_layers = max([n for n in (_size(text, key, prefix, config_class) for key in DECODER_LAYERS) if n] +
                           [0])
    s.experts = next((text[k] for k in ("num_local_experts", "num_experts", "n_routed_experts")
                      if type(text.get(k)) is int and text[k] >= 1), 1)
    return s


def _size(text: dict, key: str, prefix: str, config_class: type) -> int | None:
    """A size by one of WIDTHS' or DECODER_LAYERS' names that this model type has (`a.b`: b of the
    sub-object a): given, checked as a whole number from 1 to LARGEST (or null); absent, the config
    class's default; None when neither (or the model type has no such key)."""
    outer, _, inner = key.rpartition(".")
    if not _has(config_class, outer or inner):
        return None
    place = text.get(outer) if outer else text
    if not isinstance(place, dict) or inner not in place:
        return None if outer else _default(config_class, key)
    value = place[inner]
    if value is not None and not (type(value) is int and 1 <= value <= LARGEST):
        raise CaptureError(f"{prefix}{key} is {describe(value)}; expected a whole number from 1 to {LARGEST:,} (or null)",
                           field=prefix + key)
    return value


def _parameters(config_class: type) -> dict:
    try:
        return dict(inspect.signature(config_class.__init__).parameters)
    except (ValueError, TypeError):
        return {}


def _has(config_class: type, key: str) -> bool:
    """Whether the config class takes `key` (an argument, a field or an attribute of its own)."""
    return key in _parameters(config_class) or key in getattr(config_class, "__dataclass_fields__", {}) or \
        key in getattr(config_class, "__annotations__", {}) or hasattr(config_class, key)


def _default(config_class: type, key: str) -> int | None:
    """The config class's default of `key` when it is a size (read off its signature or class: no
    config is built)."""
    found = _parameters(config_class).get(key)
    default = found.default if found is not None else getattr(config_class, key, None)
    return default if type(default) is int and 1 <= default <= LARGEST else None


def _numbers(text: dict, prefix: str) -> None:
    """RoPE bases, partial rotary factors, the scaling's parameters and norm eps: finite, positive
    (0 < factor ≤ 1; each scaling parameter as attn compute's rope.scaling takes it)."""
    places = [(text, prefix)]
    for name in ("rope_parameters", "rope_scaling"):
        params = text.get(name)
        if isinstance(params, dict):
            places.append((params, f"{prefix}{name}."))
            places += [(v, f"{prefix}{name}.{k}.") for k, v in params.items() if isinstance(v, dict)]
        elif params is not None:
            raise CaptureError(f"{prefix}{name} is {describe(params)}; expected a JSON object", field=prefix + name)
    for place, at in places:
        for base in BASES:
            theta = place.get(base)
            if theta is not None and not _number(theta, lambda x: x > 0):
                raise CaptureError(f"{at}{base} is {describe(theta)}; expected a finite number > 0 (the RoPE base, "
                                   "as 10000)", field=at + base)
        for name in PARTIAL:
            factor = place.get(name)
            if factor is not None and not _number(factor, lambda x: 0 < x <= 1):
                raise CaptureError(f"{at}{name} is {describe(factor)}; expected a number in (0, 1]", field=at + name)
        kind = place.get("rope_type", place.get("type"))
        known = ("default",) + tuple(transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS)
        if place is not text and kind is not None and kind not in known:
            raise CaptureError(f"{at}rope_type is {describe(kind)}; expected one of {', '.join(known)}",
                               field=at + "rope_type")
        if place is not text and kind not in (None, "default"):
            for key, value in place.items():
                wanted = rope_scaling.expected(key, value)
                if wanted is not None:
                    raise CaptureError(f"{at}{key} is {describe(value)}; expected {wanted}", field=at + key)
    for key in EPS:
        if key in text and not _number(text[key], lambda x: x >= 0):
            raise CaptureError(f"{prefix}{key} is {describe(text[key])}; expected a finite number ≥ 0 (as 1e-06)",
                               field=prefix + key)


def _attention(text: dict, family: Family, sizes: SimpleNamespace, prefix: str) -> None:
    """What shapes a layer's attention beside its sizes, checked as attn compute would take it: the
    window (whole keys), the logit softcap and the query_pre_attn_scalar (finite, > 0), and the rotated
    dims (an even number of a head's, at least 2)."""
    for key, least in (("sliding_window", 1), ("local_attention", 2)):
        value = text.get(key)
        if value is not None and not (type(value) is int and least <= value <= LARGEST):
            raise CaptureError(f"{prefix}{key} is {describe(value)}; expected a whole number of keys from {least} to "
                               f"{LARGEST:,} (or null: no window)", field=prefix + key)
    cap = text.get(family.softcap) if family.softcap else None
    if cap is not None and not _number(cap, lambda x: x > 0):
        raise CaptureError(f"{prefix}{family.softcap} is {describe(cap)}; expected a finite number > 0, or null for no "
                           "softcap (transformers' eager attention divides the scores by it: 0 is not \"off\" there, "
                           "it makes every score 0 · tanh(±∞))", field=prefix + family.softcap)
    scalar = text.get("query_pre_attn_scalar")
    if scalar is not None and not _number(scalar, lambda x: x > 0):
        raise CaptureError(f"{prefix}query_pre_attn_scalar is {describe(scalar)}; expected a finite number > 0 (the "
                           "scores are scaled by its inverse square root, as 256)", field=prefix + "query_pre_attn_scalar")
    _rotated(text, family, sizes, prefix)


def _rotated(text: dict, family: Family, sizes: SimpleNamespace, prefix: str) -> None:
    """GPT-J's and CodeGen's rotary_dim, and the dims a partial_rotary_factor leaves of a head: an even
    number from 2 to head_dim (RoPE turns pairs of dims)."""
    if family.rope is None or text.get("alibi") is True:
        return
    d = sizes.head_dim
    if family.rope.dims is rotary_dim:
        value = text.get("rotary_dim")
        if value is not None and not (type(value) is int and 2 <= value <= d and value % 2 == 0):
            raise CaptureError(f"{prefix}rotary_dim is {describe(value)}; expected an even whole number from 2 to the "
                               f"head's width {d} (RoPE turns pairs of dims), or null (every dim)",
                               field=prefix + "rotary_dim")
    elif family.rope.dims is partial_rotary:
        factors = 0
        for name, key in [(place, key) for place in ("rope_parameters", "rope_scaling", None) for key in PARTIAL]:
            place = text.get(name) if name else text
            factor = place.get(key) if isinstance(place, dict) else None
            factors += factor is not None
            if factor is not None and (int(d * factor) % 2 or int(d * factor) < 2):
                at = f"{prefix}{name}.{key}" if name else f"{prefix}{key}"
                raise CaptureError(f"{at} is {describe(factor)}, which turns {int(d * factor)} of the head's {d} dims; "
                                   "expected a factor that leaves an even number of dims, at least 2 (RoPE turns "
                                   "pairs of dims)", field=at)
        if not factors and d % 2:
            raise CaptureError(f"{prefix}head_dim is {d}{' (hidden_size / heads)' if text.get('head_dim') is None else ''}; "
                               "expected an even width: RoPE turns pairs of dims", field=prefix + "head_dim")


def _number(value, test) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and test(value)


def _model_class(config: dict) -> str | None:
    """The first of `architectures` that transformers has as a model class for this model type."""
    names = config.get("architectures") or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise CaptureError(f"architectures is {describe(names)}; expected a list of model class names, as "
                           "[\"LlamaForCausalLM\"]", field="architectures")
    known = set()
    for mapping in (getattr(modeling_auto, n) for n in dir(modeling_auto) if n.startswith("MODEL_") and
                    n.endswith("_MAPPING_NAMES")):
        value = mapping.get(config["model_type"])
        known |= set(value if isinstance(value, (tuple, list)) else [value] if value else [])
    found = next((n for n in names if n in known), None)
    if names and found is None:
        raise CaptureError(f"architectures is [{', '.join(quote(n) for n in names)}]: no model class transformers has for "
                           f"model type {quote(config['model_type'])}; expected one of "
                           f"{', '.join(sorted(known)[:6])}{', …' if len(known) > 6 else ''}", field="architectures")
    return found


def _dtype(config: dict) -> str | None:
    value = config.get("dtype", config.get("torch_dtype"))
    if value in (None, "auto"):
        return None
    if value not in DTYPES:
        raise CaptureError(f"dtype is {describe(value)}; expected one of {', '.join(DTYPES)} (or choose the dtype to "
                           "run it in)", field="dtype")
    return value


def _files(path: str) -> tuple[str, ...]:
    """Every file of the directory (links followed to files, not to folders), each a regular file: a
    FIFO would block the reader that opens it (the tokenizer's, transformers'), a device never end."""
    found = []
    for folder, _, names in os.walk(path):
        found += [os.path.join(folder, n) for n in names]
        if len(found) > MAX_FILES:
            raise CaptureError(f"holds more than {MAX_FILES:,} files; expected a model directory (config.json, "
                               "weights, tokenizer)", path)
    for file in found:
        try:
            regular = stat.S_ISREG(os.stat(file).st_mode)
        except OSError:  # a dangling link: nothing will read it
            continue
        if not regular:
            raise CaptureError(f"{quote(os.path.relpath(file, path))} is not a regular file (a FIFO, a device or a "
                               "socket, or a link to one); expected a model directory of files", path)
    return tuple(found)


def _weights(path: str, files: tuple[str, ...]) -> None:
    """safetensors weights whose headers hold; a directory with only pickles is refused unopened."""
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.isfile(index):
        shards = _shards(index, path)
    elif os.path.isfile(os.path.join(path, "model.safetensors")):
        shards = ["model.safetensors"]
    else:
        pickles = sorted(os.path.relpath(f, path) for f in files if f.endswith(PICKLES))
        if pickles:
            raise CaptureError(f"holds its weights as {pickles[0]}, a pickle (opening one can run code), and no "
                               "model.safetensors; attn capture reads safetensors only: convert the weights "
                               "(save_pretrained writes safetensors)", path)
        raise CaptureError("has no model.safetensors (nor model.safetensors.index.json): the weights "
                           "save_pretrained writes", path)
    for shard in shards:
        where = os.path.join(path, shard)
        try:
            with safetensors.safe_open(where, framework="np"):
                pass  # opening reads and checks the header: every tensor's dtype, shape and offsets
        except (safetensors.SafetensorError, OSError) as error:
            raise CaptureError(f"is not a safetensors file attn capture can read ({_first(error)})", where)


def _shards(index: str, path: str) -> list[str]:
    data, _ = read_bytes(index, CONFIG_CAP)
    doc = parse_json(decode(data, index, "a JSON object with weight_map"), index)
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CaptureError(f"weight_map is {describe(weight_map)}; expected a JSON object of tensor names to "
                           "safetensors files", index)
    shards = sorted(set(weight_map.values()), key=str)
    for shard in shards:
        if not (isinstance(shard, str) and shard.endswith(".safetensors") and os.path.basename(shard) == shard
                and os.path.isfile(os.path.join(path, shard))):
            named = quote(shard) if isinstance(shard, str) else describe(shard)
            raise CaptureError(f"weight_map names {named}; expected the name of a .safetensors file in "
                               "the model directory", index)
    return shards


def _first(error: Exception) -> str:
    text = " ".join(str(error).split())
    return text[:300] or type(error).__name__


def library_error(error: Exception) -> str:
    """An error raised inside transformers or torch, as one short line: its type and message."""
    return f"{type(error).__name__}: {_first(error)}"
