"""MODEL as `attn capture` takes it: a model directory (checked by capture/directory.py), or a GGUF
file, or a directory holding one GGUF file and no config.json. A GGUF's header is checked first
(capture/gguf_file.py: counts bounded, every tensor inside the file); then transformers rebuilds the
config from its metadata, as `from_pretrained(..., gguf_file=...)` does, and that config is checked
as a config.json is (directory.check_config: its family, sizes and numbers), each error naming the
GGUF's own key where transformers' mapping gives it (llama.attention.head_count). Nothing of the
file runs: a GGUF holds metadata and tensors, and transformers is called with trust_remote_code=False.
"""

from __future__ import annotations

import os

import transformers

from attncli.base.errors import quote
from attncli.capture import gguf_file
from attncli.capture.directory import ModelDir, check_config, library_error, model_name, open_model
from attncli.capture.families import CaptureError

try:  # transformers' GGUF key → config key mapping, per architecture (to name a GGUF's keys in errors)
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING
except ImportError:  # moved in another transformers: errors then name the config's keys only
    GGUF_CONFIG_MAPPING = {}

SUFFIX = ".gguf"


def open_source(model: str) -> ModelDir:
    """MODEL checked: a GGUF file (or a directory holding one), else a model directory."""
    found = gguf_path(model)
    return open_model(model) if found is None else open_gguf(found, model)


def gguf_path(model: str) -> str | None:
    """The GGUF file MODEL names: itself, or the one .gguf of a directory without config.json."""
    if os.path.isdir(model):
        if os.path.exists(os.path.join(model, "config.json")):
            return None
        try:
            names = sorted(n for n in os.listdir(model) if n.lower().endswith(SUFFIX))
        except OSError:
            return None
        if len(names) > 1:
            shown = ", ".join(quote(n) for n in names[:4]) + (", …" if len(names) > 4 else "")
            raise CaptureError(f"holds {len(names)} GGUF files ({shown}) and no config.json; name the one to "
                               "capture: attn capture DIRECTORY/FILE.gguf", model)
        return os.path.join(model, names[0]) if names else None
    if os.path.isfile(model):
        if gguf_file.is_gguf(model) or model.lower().endswith(SUFFIX):
            return model
        raise CaptureError("is a file, but not a GGUF file (its first bytes are not GGUF); expected a model "
                           "directory (config.json and safetensors weights) or a .gguf file", model)
    return None


def open_gguf(path: str, given: str) -> ModelDir:
    """A GGUF file checked: its header, then the config transformers rebuilds from its metadata."""
    header = gguf_file.read(path)
    config = _config(path, header.architecture)
    try:
        family, sizes, model_class, _ = check_config(config)
    except CaptureError as error:
        raise _named(error, header).at(path)
    sizes.weights = header.weights  # exact: the memory guard's numbers (capture/guard.py)
    sizes.dequantized = True  # transformers holds the dequantized tensors beside the model's while loading
    base = os.path.basename(path)
    name = model_name(header.name, base[:-len(SUFFIX)] if base.lower().endswith(SUFFIX) else base)
    return ModelDir(os.path.dirname(os.path.abspath(path)), name, config, family, sizes, model_class,
                    (path,), None, header)


def _config(path: str, architecture: str) -> dict:
    """The config dict transformers rebuilds from the file's metadata (its own mapping of GGUF keys)."""
    folder, name = os.path.split(os.path.abspath(path))
    try:
        with gguf_file.faster():
            config, _ = transformers.PretrainedConfig.get_config_dict(folder, gguf_file=name, local_files_only=True)
    except Exception as error:  # an architecture transformers cannot read from GGUF, or a value it trips on
        raise CaptureError(f"transformers cannot rebuild a config from its metadata (architecture "
                           f"{quote(architecture)}): {library_error(error)}", path)
    if not isinstance(config, dict):
        raise CaptureError("transformers rebuilt no config from its metadata", path)
    return config


def _named(error: CaptureError, header) -> CaptureError:
    """A config key in an error named as the GGUF says it: `llama.attention.head_count (num_attention_heads)`."""
    arch = header.architecture
    mapping = GGUF_CONFIG_MAPPING.get(arch, {})
    key = next((g for g, hf in mapping.items() if hf == error.field), None)
    if key is not None and error.message.startswith(error.field):
        error.message = f"{arch}.{key} ({error.field})" + error.message[len(error.field):]
    return error


