"""`attn capture` of a GGUF file (capture/source.py, capture/gguf_file.py): a tiny random Llama written
as llama.cpp lays one out (tests/fixtures/make_tiny_gguf.py: quantized projections, GGML's rotary
order), captured through transformers' own GGUF loading and agreeing with the dequantized model;
the header's checks; a directory holding one; and --layer all / ranges into one document."""

import json
import struct
from importlib.util import find_spec

import numpy as np
import pytest

from attncli.capture.families import CaptureError
from tests.conftest import MODELS, Lazy, assert_error

# Skipped without the models extra or gguf, found without importing them: importing torch,
# transformers and gguf at the top cost every xdist worker 3 s of CPU at collection.
pytestmark = [MODELS, pytest.mark.skipif(find_spec("gguf") is None, reason="needs gguf (the models extra)")]
gguf_file = Lazy("attncli.capture.gguf_file")  # imports gguf
make = Lazy("tests.fixtures.make_tiny_gguf", "make")  # imports torch, transformers and gguf


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama.Q8_0.gguf"
    make(path)
    return path


@pytest.fixture(scope="module")
def every_layer(tiny, tmp_path_factory):
    """Both layers of the tiny GGUF in one run, as JSON."""
    from typer.testing import CliRunner

    from attncli.cli import app

    path = tmp_path_factory.mktemp("docs") / "layers.json"
    result = CliRunner().invoke(app, ["capture", str(tiny), "--ids", "3,1,4,1,5", "--layer", "all", "-o", str(path)])
    assert result.exit_code == 0, result.stderr
    return path


def test_the_header_is_read(tiny):
    header = gguf_file.read(str(tiny))
    assert header.architecture == "llama" and header.name == "Tiny Llama" and header.version == 3
    assert header.quantization(1) == {"W_Q": "Q8_0", "W_K": "Q8_0", "W_V": "Q8_0", "W_O": "Q8_0"}
    assert header.tensors["blk.0.attn_q.weight"].shape == (64, 64)
    assert header.weights == sum(t.elements for t in header.tensors.values()) > 64 * 64 * 8


def test_the_header_says_what_the_weights_were_dequantized_from():
    assert gguf_file.dequantized({"W_Q": "Q4_1", "W_K": "Q4_1"}) == "dequantized from GGUF Q4_1"
    assert gguf_file.dequantized({"W_Q": "F32", "W_K": "F16"}) == "read from GGUF F32 (W_Q) and F16 (W_K)"
    assert gguf_file.dequantized({"W_Q": "Q4_K", "W_K": "Q4_K", "W_V": "Q6_K"}) == \
        "dequantized from GGUF Q4_K (W_Q, W_K) and Q6_K (W_V)"


def test_every_layer_agrees_with_the_dequantized_model(run, every_layer):
    doc = json.loads(every_layer.read_text())
    assert doc["title"] == "Tiny Llama layers 0-1 (LlamaModel; weights dequantized from GGUF Q8_0)"
    assert doc["model"] == {"name": "Tiny Llama", "class": "LlamaModel", "layers": [0, 1]}
    assert doc["query_labels"] == ["3", "1", "4", "1", "5"] and doc["causal"] is True
    assert [e["model"]["dequantized_from"]["W_Q"] for e in doc["layers"]] == ["Q8_0", "Q8_0"]
    result = run("compute", every_layer, "--stages", "weights", "--format", "table")
    assert result.exit_code == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("agrees with")]
    assert [line.split(" to ")[0] for line in lines] == ["agrees with Tiny Llama layer 0",
                                                         "agrees with Tiny Llama layer 1"]


def test_the_capture_reads_the_quantized_weights_not_float_ones(every_layer, tiny):
    """Q8_0 moves every weight a little: the captured W_Q is the dequantized one, in float32."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(str(tiny))
    tensor = next(t for t in reader.tensors if t.name == "blk.1.attn_v.weight")
    stored = dequantize(tensor.data, tensor.tensor_type).reshape(32, 64)  # 2 kv heads of 16
    captured = np.array(json.loads(every_layer.read_text())["layers"][1]["W_V"])
    np.testing.assert_allclose(captured, stored.T, rtol=0, atol=1e-7)  # x W: the transpose of torch's weight


def test_one_layer_of_several_is_that_layer(run, tiny, every_layer, tmp_path):
    path = tmp_path / "one.json"
    result = run("capture", tiny, "--ids", "3,1,4,1,5", "--layer", "1", "-o", path)
    assert result.exit_code == 0, result.stderr
    one = json.loads(path.read_text())
    assert one["model"]["layer"] == 1 and one["title"].startswith("Tiny Llama layer 1 (")
    both = json.loads(every_layer.read_text())
    assert one["W_Q"] == both["layers"][1]["W_Q"] and one["reference"] == both["layers"][1]["reference"]


def test_a_range_of_layers_as_npz_reads_back(run, tiny, tmp_path):
    path = tmp_path / "layers.npz"
    result = run("capture", tiny, "--ids", "3,1,4", "--layer", "1,0", "--dtype", "float64", "-o", path)
    assert result.exit_code == 0, result.stderr
    names = set(np.load(path).files)
    assert {"layers/0/X", "layers/1/W_Q", "layers/0/reference/weights", "model", "query_labels"} <= names
    result = run("compute", path, "--layer", "0", "--stages", "weights", "--format", "table")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1].startswith("agrees with Tiny Llama layer 0 to ")
    as_json = run("compute", path, "--layer", "1", "--format", "json")  # the .npz's arrays written as JSON lists
    assert as_json.exit_code == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert doc["agreement"]["agrees"] and doc["model"]["layer"] == 1 and len(doc["reference"]["weights"]) == 4


def test_a_directory_holding_one_gguf_is_that_file(run, tiny, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / tiny.name).write_bytes(tiny.read_bytes())
    path = tmp_path / "d.json"
    result = run("capture", folder, "--ids", "1,2", "-o", path)
    assert result.exit_code == 0, result.stderr
    assert json.loads(path.read_text())["model"]["name"] == "Tiny Llama"
    (folder / "other.gguf").write_bytes(tiny.read_bytes())
    assert_error(run("capture", folder, "--ids", "1,2"), "holds 2 GGUF files", "name the one to capture")


def test_without_a_name_the_file_names_the_model(run, tmp_path):
    path = tmp_path / "unnamed.gguf"
    make(path, name=None, layers=1)
    out = tmp_path / "u.json"
    result = run("capture", path, "--ids", "1,2", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert json.loads(out.read_text())["model"]["name"] == "unnamed"


def test_layer_numbers_past_the_model_are_refused(run, tiny):
    assert_error(run("capture", tiny, "--ids", "1,2", "--layer", "1-2"), "--layer", "there are 2 layers (0 to 1)")


def header(version=3, tensors=0, metadata=0) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, tensors, metadata)


def text(value: str) -> bytes:
    return struct.pack("<Q", len(value.encode())) + value.encode()


@pytest.mark.parametrize("data, message", [
    (b"GGUF\x03\x00", "is 6 bytes; a GGUF file starts with a 24-byte header"),
    (header(version=1), "is GGUF version 1; attn capture reads versions 2 and 3"),
    (header(metadata=10 ** 12), "is truncated or damaged"),
    (header(), "has no general.architecture"),
    (header(metadata=1) + text("general.architecture") + struct.pack("<I", 13), "has value type 13"),
    (header(metadata=2) + (text("a") + struct.pack("<I", 4) + struct.pack("<I", 1)) * 2, "key \"a\" is given twice"),
])
def test_a_bad_header_is_one_error_naming_the_file(tmp_path, data, message):
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    with pytest.raises(CaptureError) as error:
        gguf_file.read(str(path))
    assert message in str(error.value) and str(path) in str(error.value)


def test_a_truncated_download_names_the_tensor_and_the_bytes_missing(run, tiny, tmp_path):
    path = tmp_path / "cut.gguf"
    path.write_bytes(tiny.read_bytes()[:-1000])
    assert_error(run("capture", path, "--ids", "1,2"), "cut.gguf", "is truncated: tensor", "ends at byte")


def test_a_file_that_is_not_gguf_is_named(run, tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"\x00" * 64)
    assert_error(run("capture", path, "--ids", "1,2"), "weights.bin", "not a GGUF file")


def test_json_that_attn_could_not_read_back_is_not_written(run, tiny, tmp_path, monkeypatch):
    # what capture writes, compute reads: JSON past the text input cap is refused, an .npz suggested
    monkeypatch.setenv("ATTN_MAX_INPUT", "65536")
    monkeypatch.chdir(tmp_path)
    result = run("capture", tiny, "--ids", "1,2,3", "--layer", "all", "-o", "big.json")
    assert_error(result, "--output", "big.json would hold about", "attn reads at most 64 KiB", "-o big.npz")
    assert not (tmp_path / "big.json").exists()
    quiet = run("capture", tiny, "--ids", "1,2,3", "--layer", "all")  # no -o: an .npz, not unreadable JSON
    assert quiet.exit_code == 0 and quiet.stdout == "" and "Tiny-Llama-layers-0-1.npz" in quiet.stderr
    assert run("compute", "Tiny-Llama-layers-0-1.npz", "--layer", "1", "--stages", "weights").exit_code == 0


def test_a_big_document_with_no_output_goes_to_an_npz_named_after_the_model(run, tiny, tmp_path, monkeypatch):
    from attncli.commands import capture_run

    monkeypatch.setattr(capture_run, "JSON_MOST", 1000)  # a real model's layer is 13-18 MB of JSON
    monkeypatch.chdir(tmp_path)
    result = run("capture", tiny, "--ids", "1,2,3", "--layer", "all")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "" and "Tiny-Llama-layers-0-1.npz" in result.stderr
    assert {"layers/1/W_Q", "model"} <= set(np.load(tmp_path / "Tiny-Llama-layers-0-1.npz").files)
    again = run("capture", tiny, "--ids", "1,2,3", "--layer", "all")
    assert_error(again, "--output", "Tiny-Llama-layers-0-1.npz is there already", "-o FILE.npz")
