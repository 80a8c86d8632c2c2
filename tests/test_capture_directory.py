"""attncli/capture/directory.py and the driver's loading, on hostile model directories (issue 24):
a directory's own code is never run (auto_map, with "y" on stdin), pickles are never opened, every
broken config, weights file or token list is one `error:` line naming what is wrong, never an
internal error; a cached model id is read as its snapshot's directory."""

import json
import os
import pickle
import shutil
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import MODELS, SAMPLES, Lazy, assert_error

pytestmark = MODELS
torch, transformers = Lazy("torch"), Lazy("transformers")  # imported by the first test that runs
safetensors_numpy = Lazy("safetensors.numpy")

TINY = SAMPLES / "models" / "tiny-llama"
EVIL = """import pathlib
pathlib.Path({marker!r}).write_text("the model directory's code ran")
"""


def model_dir(tmp_path, change=None, name="tiny"):
    """A copy of samples/models/tiny-llama with config.json updated by `change`."""
    directory = tmp_path / name
    shutil.copytree(TINY, directory)
    config = json.loads((directory / "config.json").read_text()) | (change or {})
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def tensors(directory, edit):
    """Rewrite model.safetensors after `edit(dict of arrays)`."""
    path = directory / "model.safetensors"
    arrays = safetensors_numpy.load_file(path)
    edit(arrays)
    safetensors_numpy.save_file(arrays, path, metadata={"format": "pt"})


def q_proj(arrays) -> str:
    return next(k for k in arrays if "q_proj" in k)


# --- a model directory's own code, and pickles --------------------------------------------------

def test_a_directory_with_its_own_code_is_refused_and_the_code_never_runs(run, tmp_path):
    """`echo y | attn capture ./dir` (a model type transformers does not know, with auto_map): transformers
    would ask on stdin and import evil.py; attn capture never asks, never imports, and names auto_map."""
    directory, marker = _evil(tmp_path, "evil")
    # In-process, "y" on stdin as transformers' question would read it (a real process cost 4 s of CPU
    # importing torch and transformers); evil.py would run here, and write the marker.
    done = run("capture", directory, "--ids", "3,1,4", input="y\ny\n")
    assert not marker.exists()
    assert done.exit_code == 2 and done.stdout == "", (done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"error: {directory / 'config.json'}: auto_map "
                                                                   "names Python code of the model's own"), done.stderr


def test_auto_map_beside_a_built_in_model_type_is_refused_too(run, tmp_path):
    directory, marker = _evil(tmp_path, "llama")
    assert_error(run("capture", directory, "--ids", "3,1,4", input="y\n"), "config.json: auto_map names Python code "
                 "of the model's own (evil.EvilConfig, evil.EvilModel); attn capture never runs a model directory's code")
    assert not marker.exists()


def _evil(tmp_path, model_type):
    directory = model_dir(tmp_path, {"model_type": model_type, "auto_map": {
        "AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}})
    marker = tmp_path / "MARKER"
    (directory / "evil.py").write_text(EVIL.format(marker=str(marker)))
    return directory, marker


def test_transformers_is_never_asked_to_trust_remote_code(tmp_path, monkeypatch):
    """Every load (config, model, tokenizer) passes trust_remote_code=False: a model whose type is
    built in never takes a class from the directory, and nothing ever waits on stdin."""
    from attncli.capture import loading

    seen = []
    for cls in (transformers.AutoConfig, transformers.AutoTokenizer, transformers.LlamaForCausalLM):
        real = cls.from_pretrained.__func__

        def spy(klass, *args, _real=real, **kwargs):
            seen.append((klass.__name__, kwargs.get("trust_remote_code", "absent")))
            return _real(klass, *args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", classmethod(spy))
    loading.load(str(model_dir(tmp_path)), None)
    assert {name for name, _ in seen} == {"AutoConfig", "AutoTokenizer", "LlamaForCausalLM"}
    assert all(trust is False for _, trust in seen), seen


class Marker:
    """Unpickling this writes a file: proof that a pickle was opened."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return _touch, (self.path,)


def _touch(path):
    with open(path, "w") as handle:
        handle.write("a pickle was opened")


def test_a_pickled_checkpoint_is_refused_unopened(run, tmp_path):
    """pytorch_model.bin is a pickle: refused before torch sees it (so no torch warning either), one line."""
    directory = model_dir(tmp_path)
    (directory / "model.safetensors").unlink()
    marker = tmp_path / "OPENED"
    (directory / "pytorch_model.bin").write_bytes(pickle.dumps(Marker(str(marker))))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = run("capture", directory, "--ids", "3,1,4")
    assert not marker.exists() and seen == []
    assert_error(result, f"error: {directory}: holds its weights as pytorch_model.bin, a pickle (opening one can run "
                 "code), and no model.safetensors; attn capture reads safetensors only: convert the weights "
                 "(save_pretrained writes safetensors)")


# --- config.json ----------------------------------------------------------------------------------

@pytest.mark.parametrize("change, fragments", [
    ({"architectures": ["AutoConfig"]}, ('config.json: architectures is ["AutoConfig"]: no model class transformers '
                                         'has for model type "llama"; expected one of LlamaForCausalLM',)),
    ({"architectures": ["pipeline"]}, ('architectures is ["pipeline"]: no model class',)),
    ({"architectures": ["__class__"]}, ('architectures is ["__class__"]: no model class',)),
    ({"architectures": "LlamaForCausalLM"}, ("architectures is the string",)),
    ({"hidden_size": 0}, ("config.json: hidden_size is the number 0; expected a whole number from 1 to",)),
    ({"hidden_size": -8}, ("hidden_size is the number -8",)),
    ({"hidden_size": 8.5}, ("hidden_size is the number 8.5",)),
    ({"hidden_size": "8"}, ('hidden_size is the string "8"',)),
    ({"num_hidden_layers": True}, ("num_hidden_layers is true",)),
    ({"num_attention_heads": 0}, ("num_attention_heads is the number 0",)),
    ({"num_key_value_heads": 0}, ("num_key_value_heads is the number 0; expected a whole number from 1 to "
                                  "2,147,483,647 (or null)",)),
    ({"head_dim": -4}, ("head_dim is the number -4",)),
    ({"vocab_size": 10**40}, ("vocab_size is a 41-digit number",)),
    ({"num_key_value_heads": 3}, ("num_attention_heads 2 is not a multiple of num_key_value_heads 3",)),
    ({"num_attention_heads": 3, "head_dim": None}, ("hidden_size 8 is not a multiple of num_attention_heads 3",)),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 0}},
     ("rope_parameters.rope_theta is the number 0; expected a finite number > 0",)),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": -1}}, ("rope_theta is the number -1",)),
    ({"rope_parameters": {"rope_type": "zzz", "rope_theta": 10000}}, ('rope_type is the string "zzz"; expected one of '
                                                                      "default, linear",)),
    ({"rope_parameters": [1, 2]}, ("rope_parameters is a list of 2; expected a JSON object",)),
    ({"rope_parameters": {"rope_theta": 1e4, "partial_rotary_factor": 2}}, ("partial_rotary_factor is the number 2",)),
    ({"rms_norm_eps": -1}, ("rms_norm_eps is the number -1; expected a finite number ≥ 0",)),
    # keys torch tripped on (its words in the error, not the key's)
    ({"rope_scaling": {"rope_type": "linear", "factor": 0}},
     ("config.json: rope_scaling.factor is the number 0; expected a finite number > 0",)),
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4, "beta_fast": -1}},
     ("rope_parameters.beta_fast is the number -1; expected a finite number ≥ 0",)),
    ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 1e4, "factor": 8, "low_freq_factor": 1,
                          "high_freq_factor": 4, "original_max_position_embeddings": 0}},
     ("rope_parameters.original_max_position_embeddings is the number 0; expected a whole number ≥ 1",)),
    ({"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4, "factor": 2, "short_factor": [1, 0],
                          "long_factor": [1, 1]}}, ("rope_parameters.short_factor is a list of 2; expected a list of "
                                                    "one finite number > 0 per rotated pair",)),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e4}, "rope_scaling": {"rope_type": "linear", "factor": -2}},
     ("rope_scaling.factor is the number -2",)),
    ({"sliding_window": -3}, ("sliding_window is the number -3; expected a whole number of keys from 1 to",)),
    ({"sliding_window": 2.5}, ("sliding_window is the number 2.5",)),
    ({"head_dim": 3}, ("head_dim is 3; expected an even width: RoPE turns pairs of dims",)),
    ({"head_dim": None, "hidden_size": 6}, ("head_dim is 3 (hidden_size / heads); expected an even width",)),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.25}},
     ("rope_parameters.partial_rotary_factor is the number 0.25, which turns 1 of the head's 4 dims",)),
    ({"model_type": "gpt_neox", "rope_parameters": None, "rotary_pct": 0.125},
     ("rotary_pct is the number 0.125, which turns 0 of the head's 4 dims",)),  # the older name transformers reads
    ({"model_type": "gpt_neox", "rope_parameters": None, "rotary_emb_base": -1}, ("rotary_emb_base is the number -1",)),
    ({"model_type": "gptj", "rotary_dim": 1}, ("rotary_dim is the number 1; expected an even whole number from 2 to the "
                                               "head's width 4",)),
    ({"model_type": "gptj", "rotary_dim": 512}, ("rotary_dim is the number 512",)),
    ({"model_type": "gptj", "rotary_dim": 3}, ("rotary_dim is the number 3; expected an even whole number",)),
    ({"model_type": "falcon", "new_decoder_architecture": True, "num_kv_heads": 3},
     ("num_attention_heads 2 is not a multiple of num_kv_heads 3",)),
    ({"model_type": "gemma2", "attn_logit_softcapping": 0.0}, ("attn_logit_softcapping is the number 0.0; expected a "
                                                               "finite number > 0, or null for no softcap",)),
    ({"model_type": "gemma2", "query_pre_attn_scalar": 0}, ("query_pre_attn_scalar is the number 0; expected a finite "
                                                            "number > 0",)),
    ({"dtype": "float8_e4m3fn"}, ('dtype is the string "float8_e4m3fn"; expected one of float32, float64',)),
    ({"model_type": None}, ("config.json: model_type is null; expected the name of a transformers model type",)),
    ({"model_type": "nope"}, ('model_type "nope" is not a model type transformers',)),
    ({"model_type": "longt5"}, ('model type "longt5" has no capture family: attncli has no record of where its '
                                 "attention's projections sit", "attn capture reads albert, bart, bert, blenderbot, blenderbot-small, bloom, ")),
])
def test_a_hostile_config_is_one_error_naming_its_key(run, tmp_path, change, fragments):
    directory = model_dir(tmp_path, change)
    assert_error(run("capture", directory, "--ids", "3,1,4"), *fragments)


@pytest.mark.parametrize("text, fragment", [
    ('{"model_type": "llama", "hidden_size": NaN}', "NaN is not valid JSON"),
    ('{"model_type": "llama", "model_type": "gpt2"}', "model_type"),
    ("[1, 2]", "the top level is a list of 2; expected a JSON object with model_type"),
    ("", "empty file; expected a model's config"),
])
def test_a_config_that_is_not_strict_json_is_refused(run, tmp_path, text, fragment):
    directory = model_dir(tmp_path)
    (directory / "config.json").write_text(text)
    assert_error(run("capture", directory, "--ids", "3,1"), "config.json: ", fragment)


def test_a_directory_without_a_config_or_weights_is_named(run, tmp_path):
    directory = model_dir(tmp_path)
    (directory / "model.safetensors").unlink()
    assert_error(run("capture", directory, "--ids", "3,1"), f"error: {directory}: has no model.safetensors")
    (directory / "config.json").unlink()
    assert_error(run("capture", directory, "--ids", "3,1"), "config.json: no such file: a model directory holds")


# --- the weights ----------------------------------------------------------------------------------

def _raw(directory):
    raw = (directory / "model.safetensors").read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    return raw, n, json.loads(raw[8:8 + n])


def _lie(directory, edit):
    raw, n, header = _raw(directory)
    edit(header)
    text = json.dumps(header).encode()
    (directory / "model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n:])


def _truncate(directory):
    raw = (directory / "model.safetensors").read_bytes()
    (directory / "model.safetensors").write_bytes(raw[:len(raw) // 2])


def _offset(header):
    key = next(k for k in header if k != "__metadata__")
    header[key]["data_offsets"][1] += 10**9


def _shape(header):
    header[next(k for k in header if "q_proj" in k)]["shape"] = [4, 8]


@pytest.mark.parametrize("damage, fragments", [
    (_truncate, ("model.safetensors: is not a safetensors file attn capture can read (Error while deserializing "
                 "header: incomplete metadata",)),
    (lambda d: _lie(d, _offset), ("is not a safetensors file attn capture can read", "offset")),
    (lambda d: _lie(d, _shape), ("is not a safetensors file attn capture can read", "shape")),
    (lambda d: (d / "model.safetensors").write_bytes(struct.pack("<Q", 10**15) + b"{}"), ("header too large",)),
    (lambda d: tensors(d, lambda a: a.__setitem__(q_proj(a), np.zeros((4, 8), np.float32))),
     ("the weights do not match config.json: model.layers.0.self_attn.q_proj.weight is (4, 8) in the file, (8, 8) "
      "by the config",)),
    (lambda d: tensors(d, lambda a: a.pop(q_proj(a))),
     ("the weights have no model.layers.0.self_attn.q_proj.weight: transformers would run the model with random "
      "numbers in its place",)),
    (lambda d: tensors(d, lambda a: a[q_proj(a)].__setitem__((0, 0), np.nan)),
     ("W_Q of layer 0 holds NaN or ±∞: the weights hold them in float32",)),
    (lambda d: tensors(d, lambda a: a[q_proj(a)].__setitem__(slice(None), 3e38)),
     ("the model's attention weights of layer 0 hold NaN or ±∞ (its weights or config overflow float32)",)),
])
def test_broken_or_lying_weights_are_one_error(run, tmp_path, damage, fragments):
    directory = model_dir(tmp_path)
    damage(directory)
    assert_error(run("capture", directory, "--ids", "3,1,4"), *fragments)


def test_a_sharded_index_naming_a_file_elsewhere_is_refused(run, tmp_path):
    directory = model_dir(tmp_path)
    (directory / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"model.embed_tokens.weight": "../../elsewhere.safetensors"}}))
    assert_error(run("capture", directory, "--ids", "3,1"),
                 'model.safetensors.index.json: weight_map names "../../elsewhere.safetensors"; expected '
                 "the name of a .safetensors file in the model directory")


# --- the tokens -----------------------------------------------------------------------------------

@pytest.mark.parametrize("args, fragment", [
    (("--ids", "²"), 'error: --ids: is "²"; expected whole numbers ≥ 0 (digits 0-9)'),
    (("--ids", "٣,١"), 'error: --ids: is "٣,١"; expected whole numbers'),
    (("--ids", "1" * 40), "expected whole numbers ≥ 0"),
    (("--text", ""), 'error: --text: is ""; expected some text to tokenize'),
    # an empty id was dropped: 3,,1 captured the two tokens 3,1
    (("--ids", "3,,1"), 'error: --ids: is "3,,1": id 2 is empty; expected whole numbers ≥ 0'),
    (("--ids", "3,1,"), 'error: --ids: is "3,1,": id 3 is empty'),
    (("--ids", "3,1;4,,5"), 'error: --ids: is "3,1;4,,5": id 2 of sequence 2 is empty'),
    (("--ids", "3,1;;4,5"), 'error: --ids: is "3,1;;4,5": sequence 2 is empty'),
    (("--ids", ""), 'error: --ids: is ""; expected whole numbers ≥ 0'),
    (("--text", " \t"), 'error: --text: is " \\t"; expected some text to tokenize'),
])
def test_tokens_that_are_not_ids_or_text_are_refused(run, args, fragment):
    assert_error(run("capture", TINY, *args), fragment)


# --- a model id in the local cache ----------------------------------------------------------------

def test_a_cached_model_id_is_read_as_its_snapshot_directory(run, tmp_path, monkeypatch):
    """The cache's snapshot folder is a model directory like any other: checked the same way, and
    its files (links into blobs) are inputs -o refuses."""
    from huggingface_hub import constants

    snapshot = tmp_path / "hub" / "models--someone--tiny" / "snapshots" / "abc123"
    shutil.copytree(TINY, snapshot)
    (tmp_path / "hub" / "models--someone--tiny" / "refs").mkdir()
    (tmp_path / "hub" / "models--someone--tiny" / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    out = tmp_path / "layer.json"
    result = run("capture", "someone/tiny", "--ids", "3,1,4", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert json.loads(out.read_text())["model"]["name"] == "someone/tiny"
    assert_error(run("capture", "someone/tiny", "--ids", "3,1", "-o", snapshot / "config.json"),
                 "is an input of this run")
    assert_error(run("capture", "someone/other", "--ids", "3,1"), "error: MODEL someone/other is neither a directory")


def test_weights_missing_after_the_layers_do_not_matter(run, tmp_path):
    """BERT saved without its pooler (it runs after every layer): captured, and it agrees; a missing
    weight before the attention (the embeddings) is refused."""
    from tests.test_capture import build
    from tests.test_capture_fuzz import BASES

    directory = Path(build("bert", tmp_path, BASES))
    tensors(directory, lambda a: [a.pop(k) for k in [k for k in a if k.startswith("pooler.")]])
    out = tmp_path / "layer.json"
    assert run("capture", directory, "--ids", "3,1,4", "--dtype", "float64", "-o", out).exit_code == 0
    assert json.loads(run("compute", out, "--format", "json").stdout)["agreement"]["agrees"]
    tensors(directory, lambda a: a.pop("embeddings.word_embeddings.weight"))
    assert_error(run("capture", directory, "--ids", "3,1,4"), "the weights have no embeddings.word_embeddings.weight")


def test_a_fifo_in_the_directory_is_refused_before_anything_reads_it(run, tmp_path):
    """tokenizer.json as a named pipe would block the tokenizer's reader forever."""
    directory = model_dir(tmp_path)
    (directory / "tokenizer.json").unlink()
    os.mkfifo(directory / "tokenizer.json")
    assert_error(run("capture", directory, "--ids", "3,1"), f'error: {directory}: "tokenizer.json" is not a regular '
                 "file (a FIFO, a device or a socket, or a link to one)")
