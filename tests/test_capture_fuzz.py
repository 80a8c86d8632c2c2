"""Fuzzing `attn capture` over hostile model directories (issue 24's "Done when"): tiny models of
several families (samples/models/tiny-llama, and GPT-2, BERT, BLOOM and Phi-3 models built here)
with their config.json mutated (sizes, numbers, strings, nulls, auto_map, model_type,
architectures, rope_parameters), their model.safetensors truncated, its header lying, its numbers
made NaN or huge, tensors dropped or reshaped. Every outcome agrees (capture, then attn compute
exits 0 and agrees), or is one clean `error:` line (of capture or of compute): never an internal
error, a traceback, a second line, anything on stdout, or a document that differs from its model.

Seeded (random.Random(seed)): the same cases every run. The fast suite runs a few; the slow profile
(`-m slow`, as CI runs it) runs 100 per family.
"""

import json
import random
import shutil
import struct

import numpy as np
import pytest

from tests.conftest import MODELS, SAMPLES, Lazy
from tests.test_capture import build

pytestmark = MODELS
torch, transformers = Lazy("torch"), Lazy("transformers")  # imported by the first test that runs

BASES = {
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", dict(vocab_size=16, n_embd=8, n_head=2, n_layer=2, n_positions=32)),
    "bert": ("BertConfig", "BertModel", dict(vocab_size=16, hidden_size=8, num_attention_heads=2, num_hidden_layers=1,
                                             intermediate_size=16, max_position_embeddings=32, pad_token_id=0)),
    "bloom": ("BloomConfig", "BloomForCausalLM", dict(vocab_size=16, hidden_size=8, n_head=2, n_layer=1)),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(vocab_size=16, hidden_size=8, num_attention_heads=2,
                                                   num_key_value_heads=1, num_hidden_layers=1, intermediate_size=16,
                                                   max_position_embeddings=32, pad_token_id=0)),
}
VALUES = [0, -1, 1, 2, 3, 7, 0.5, -0.5, 1e9, 10**12, 3e38, -3e38, 1e-300, "8", "", None, True, False, [], {}, [1, 2],
          {"rope_type": "linear"}]
ARCHITECTURES = ["AutoConfig", "pipeline", "__class__", "LlamaModel", "GPT2Model", "BertForMaskedLM", "torch"]
ROPE = [{"rope_type": "linear", "factor": -2.0}, {"rope_type": "linear", "factor": 2.0},
        {"rope_type": "dynamic", "factor": 2.0}, {"rope_type": "yarn", "factor": 4.0},
        {"rope_type": "default", "partial_rotary_factor": 0.25}, {"rope_type": "default", "rope_theta": 0},
        {"rope_type": "llama3", "factor": 8.0}, {"rope_type": "longrope", "short_factor": [1.0]}]


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    root = tmp_path_factory.mktemp("bases")
    found = {"llama": SAMPLES / "models" / "tiny-llama"}
    found |= {name: build(name, root, BASES) for name in BASES}
    return found


def mutate_config(config: dict, rng: random.Random) -> dict:
    kind = rng.choice(["value", "value", "benign", "benign", "drop", "auto_map", "model_type", "architectures",
                       "rope"])
    if kind == "value":
        config[rng.choice(sorted(config))] = rng.choice(VALUES)
    elif kind == "benign":  # a float scaled, a flag flipped: a model that still loads, read the same way
        key = rng.choice(sorted(k for k, v in config.items() if type(v) in (float, bool)) or sorted(config))
        value = config[key]
        config[key] = (not value) if type(value) is bool else value * rng.uniform(0.5, 2) if type(value) is float \
            else value
    elif kind == "drop":
        config.pop(rng.choice(sorted(config)))
    elif kind == "auto_map":
        config["auto_map"] = {"AutoConfig": "evil.Config"}
    elif kind == "model_type":
        config["model_type"] = rng.choice(["llama", "gpt2", "bert", "bloom", "phi3", "t5", "evil", 7])
    elif kind == "architectures":
        config["architectures"] = [rng.choice(ARCHITECTURES)]
    else:
        config["rope_parameters"] = {"rope_theta": 10000.0} | rng.choice(ROPE)
    return config


def mutate_weights(path, rng: random.Random) -> None:
    raw = path.read_bytes()
    try:
        n = struct.unpack("<Q", raw[:8])[0]
        header, body = json.loads(raw[8:8 + n]), bytearray(raw[8 + n:])
    except (struct.error, ValueError):  # already truncated or flipped: cut it shorter
        path.write_bytes(raw[:rng.randrange(len(raw) + 1)])
        return
    names = sorted(k for k in header if k != "__metadata__")
    name = rng.choice(names)
    kind = rng.choice(["truncate", "flip", "shape", "offsets", "dtype", "nan", "huge", "drop", "scale", "scale"])
    if kind == "truncate":
        path.write_bytes(raw[:rng.randrange(len(raw))])
        return
    if kind == "flip":
        data = bytearray(raw)
        data[rng.randrange(min(len(data), 8 + n))] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(data))
        return
    entry = header[name]
    if kind == "shape":
        entry["shape"] = list(reversed(entry["shape"])) if len(entry["shape"]) > 1 else [entry["shape"][0] * 2]
    elif kind == "offsets":
        entry["data_offsets"][rng.randrange(2)] += rng.choice([-4, 4, 10**6])
    elif kind == "dtype":
        entry["dtype"] = rng.choice(["F64", "I8", "BOOL", "XYZ"])
    elif kind in ("nan", "huge", "scale") and entry["dtype"] == "F32":
        start = entry["data_offsets"][0]
        chunk = bytes(body[start:entry["data_offsets"][1]])
        values = np.frombuffer(chunk[:len(chunk) // 4 * 4], np.float32).copy()
        if values.size:
            if kind == "scale":  # weights of another size, still ordinary numbers
                values *= rng.choice([0.5, 2.0, -1.0])
            else:
                values[rng.randrange(values.size)] = np.nan if kind == "nan" else rng.choice([3e38, -3e38, 1e30])
            with np.errstate(over="ignore"):
                values *= rng.choice([1.0, 1e18]) if kind == "huge" else 1.0
            body[start:start + 4 * values.size] = values.tobytes()
    elif kind == "drop":
        start, end = header.pop(name)["data_offsets"]
        for other in names:  # close the gap: later tensors move down
            if other != name and header[other]["data_offsets"][0] >= end:
                header[other]["data_offsets"] = [o - (end - start) for o in header[other]["data_offsets"]]
        del body[start:end]
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + bytes(body))


def hostile(base, tmp_path, seed: int):
    """A copy of `base` with one to three mutations, and the capture's options."""
    rng = random.Random(seed)
    directory = tmp_path / f"m{seed}"
    shutil.copytree(base, directory)
    config = json.loads((directory / "config.json").read_text())
    vocab = config.get("vocab_size", 16)
    for _ in range(rng.randint(1, 3)):
        if rng.random() < 0.55:
            config = mutate_config(config, rng)
        else:
            mutate_weights(directory / "model.safetensors", rng)
    (directory / "config.json").write_text(json.dumps(config))
    ids = ",".join(str(rng.randrange(vocab if isinstance(vocab, int) and 0 < vocab < 100 else 16))
                   for _ in range(rng.randint(2, 6)))
    options = ["--ids", ids, "--dtype", rng.choice(["float32", "float64"])]
    return directory, options + (["--decode"] if rng.random() < 0.25 else [])


def clean_error(result) -> bool:
    lines = result.stderr.splitlines()
    return (result.exit_code == 2 and result.stdout == "" and len(lines) == 1 and lines[0].startswith("error: ")
            and "internal error" not in lines[0] and "Traceback" not in result.stderr)


def outcome(run, directory, options, tmp_path) -> str:
    """'agrees', 'refused' (one clean line), or what went wrong."""
    out = tmp_path / f"{directory.name}.json"
    captured = run("capture", directory, *options, "-o", out)
    if captured.exit_code != 0:
        return "refused" if clean_error(captured) else f"capture: {captured.exit_code} {captured.stderr!r}"
    computed = run("compute", out, "--format", "json")
    if computed.exit_code == 0 and json.loads(computed.stdout)["agreement"]["agrees"]:
        return "agrees"
    if clean_error(computed):
        return "refused"
    return f"compute: {computed.exit_code} {computed.stderr!r}"


@pytest.mark.parametrize("family, seed", [("llama", 3), ("gpt2", 5), ("bloom", 11)])
def test_a_few_hostile_directories_agree_or_are_refused(run, bases, tmp_path, family, seed):
    directory, options = hostile(bases[family], tmp_path, seed)
    assert outcome(run, directory, options, tmp_path) in ("agrees", "refused")


@pytest.mark.slow
@pytest.mark.parametrize("family", ["llama", *BASES])
def test_hostile_directories_agree_or_are_refused(run, bases, tmp_path, family):
    seen = {}
    for seed in range(100):
        directory, options = hostile(bases[family], tmp_path, seed)
        found = outcome(run, directory, options, tmp_path)
        assert found in ("agrees", "refused"), (seed, options, found)
        seen[found] = seen.get(found, 0) + 1
        shutil.rmtree(directory)
    assert seen.get("agrees", 0) >= 5 and seen.get("refused", 0) >= 20, seen  # both kinds of outcome are reached
