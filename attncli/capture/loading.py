"""Loading a checked model directory (capture/directory.py) with transformers, quietly and closed:
transformers is always called with trust_remote_code=False (a model directory's own code is never
imported; directory.py refuses an `auto_map` before this), stdin reads as empty and stdout goes to
stderr while it works, its warnings are dropped, and an error inside transformers or torch is one
CaptureError naming it. The model is built with the eager attention path (the one that returns
attention weights) and every weight that reaches the attention must come from the files.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import warnings

import torch
import transformers

from attncli.base.errors import AttnError
from attncli.capture import gguf_file
from attncli.capture.directory import ModelDir, library_error
from attncli.capture.families import CaptureError
from attncli.capture.source import open_source

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}


@contextlib.contextmanager
def quiet():
    """While transformers and torch work: no prompt can be answered (stdin is empty), nothing
    reaches stdout (it goes to stderr), their warnings and notes are dropped, and the loading bar
    shows only on a terminal."""
    transformers.logging.set_verbosity_error()  # its notes on deprecations are not the user's
    if not sys.stderr.isatty():
        transformers.utils.logging.disable_progress_bar()
    stdin = sys.stdin
    sys.stdin = io.StringIO("")
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
            warnings.simplefilter("ignore")
            yield
    finally:
        sys.stdin = stdin


SMALL_RUN = 256  # tokens (sequences × length) up to which the model runs on one thread


@contextlib.contextmanager
def threads(tokens: int):
    """Torch on one thread for a short run: its matrices (a few dozen rows) gain nothing from a
    second thread, and on a busy machine the threads' waiting for each other costs more than the
    work (SmolLM2's 30 layers on 12 tokens, measured with the machine's two cores shared: 10 s and
    2.3 s of CPU on two threads, 0.5 s and 0.13 s on one). Longer runs keep torch's own choice."""
    before = torch.get_num_threads()
    if tokens <= SMALL_RUN:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def library(what: str, source: str | None = None):
    """An error inside transformers or torch while doing `what`, as one CaptureError."""
    try:
        yield
    except AttnError:
        raise
    except Exception as error:  # whatever the library raises on a hostile model: one line naming it
        raise CaptureError(f"{what}: {library_error(error)}", source) from error


def load(model: str | ModelDir, dtype: str | None):
    """(model, tokenizer or None) from a model directory or GGUF file (checked: source.open_source),
    eager attention."""
    found = model if isinstance(model, ModelDir) else open_source(model)
    config = load_config(found)
    return load_model(found, config, dtype), load_tokenizer(found)


def _gguf(found: ModelDir) -> dict:
    """from_pretrained's arguments for a GGUF: the file's name in its folder."""
    return {} if found.gguf is None else {"gguf_file": os.path.basename(found.gguf.path)}


def load_config(found: ModelDir):
    """The transformers config of a checked directory (or of a GGUF: the config rebuilt from its metadata,
    as checked)."""
    with quiet(), library(f"transformers cannot build a {found.family.label} config from it", found.config_path):
        if found.gguf is not None:  # what AutoConfig.from_pretrained(gguf_file=) builds from the same dict
            return transformers.AutoConfig.for_model(**found.config)
        return transformers.AutoConfig.from_pretrained(found.path, local_files_only=True, trust_remote_code=False)


def load_tokenizer(found: ModelDir):
    """The tokenizer saved beside the model (or in the GGUF), or None (then --text is refused; --ids still work)."""
    with quiet(), gguf_file.faster():
        try:
            return transformers.AutoTokenizer.from_pretrained(found.path, local_files_only=True,
                                                              trust_remote_code=False, **_gguf(found))
        except Exception:  # none saved, or one transformers cannot build without running code
            return None


def load_model(found: ModelDir, config, dtype: str | None):
    """The model of a checked directory, with the eager attention path, in inference mode."""
    cls = getattr(transformers, found.model_class) if found.model_class else transformers.AutoModel
    if not (isinstance(cls, type) and (cls is transformers.AutoModel or issubclass(cls, transformers.PreTrainedModel))):
        raise CaptureError(f"architectures names {found.model_class}, which is not a transformers model class",
                           found.config_path)
    kwargs = {"config": config, "attn_implementation": "eager", "local_files_only": True, "trust_remote_code": False,
              "ignore_mismatched_sizes": True, "output_loading_info": True}
    kwargs |= _gguf(found) or {"use_safetensors": True}  # a GGUF: dequantized by transformers, to float32 or dtype
    if dtype is not None:
        kwargs["dtype"] = DTYPES[dtype]
    if dtype == "float64":  # mixture-of-experts layers' grouped matmul has no float64 kernel
        kwargs["experts_implementation"] = "eager"
    where = found.gguf.path if found.gguf else found.path
    with quiet(), gguf_file.faster(), library(f"transformers cannot load this {found.family.label} model", where):
        model, info = cls.from_pretrained(found.path, **kwargs)
    _loaded(model, info, found)
    model.train(False)  # inference mode: no dropout
    return model


def _loaded(model, info: dict, found: ModelDir) -> None:
    """Every weight of the base model came from the files, in the config's shape."""
    where, config = (found.gguf.path, "its metadata") if found.gguf else (found.path, "config.json")
    mismatched = sorted(info.get("mismatched_keys") or (), key=str)
    if mismatched:
        key, stored, expected = mismatched[0]
        more = f" (and {len(mismatched) - 1} more)" if len(mismatched) > 1 else ""
        raise CaptureError(f"the weights do not match {config}: {key} is {tuple(stored)} in the file, "
                           f"{tuple(expected)} by the config{more}", where)
    missing = sorted(k for k in info.get("missing_keys") or () if k.startswith(_before_the_attention(model, found)))
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise CaptureError(f"the weights have no {missing[0]}{more}: transformers would run the model with random "
                           "numbers in its place", where)


def _before_the_attention(model, found: ModelDir) -> tuple[str, ...]:
    """The weight names that reach a layer's attention: the base model's modules up to and including
    its stack of layers (embeddings, the layers), not those after it (a final norm, BERT's pooler, a
    language-model head), which transformers may fill at random without touching the layer."""
    base = model.base_model
    prefix = "" if base is model else f"{model.base_model_prefix}."
    names = [name for name, _ in base.named_children()]
    top = found.family.blocks.split(".")[0]
    upto = names[:names.index(top) + 1] if top in names else names
    return tuple(f"{prefix}{name}." for name in upto)
