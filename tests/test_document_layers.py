"""A document of several layers (attncli/document/layers.py): --layer's spelling, the layers chosen,
what the layers share written once at the top, and the .npz members, read back as written; then
`attn compute` of such a document (one layer, several, all; tables and JSON; the errors)."""

import json

import numpy as np
import pytest

from attncli.base.errors import InputError
from attncli.document import layers
from attncli.document.loading import load_npz
from tests.conftest import assert_error


def layer_doc(number: int, seed: int, causal: bool = True) -> dict:
    """A layer as attn capture writes one (no reference: nothing to agree with)."""
    rng = np.random.default_rng(seed)
    return {"title": f"Tiny layer {number} (LlamaModel)", "dtype": "float64", "heads": 2,
            "X": rng.standard_normal((3, 4)).tolist(), "W_Q": rng.standard_normal((4, 4)).tolist(),
            "W_K": rng.standard_normal((4, 4)).tolist(), "W_V": rng.standard_normal((4, 4)).tolist(),
            "causal": causal, "query_labels": ["a", "b", "c"], "key_labels": ["a", "b", "c"],
            "word_ids": [0, None, 1], "model": {"name": "Tiny", "class": "LlamaModel", "layer": number}}


@pytest.fixture
def several():
    return layers.assemble([layer_doc(n, n) for n in (0, 2, 5)], "Tiny layers 0, 2, 5")


@pytest.mark.parametrize("text, count, expected", [
    ("all", 4, None), (" ALL ", 4, None), ("3", 4, [3]), ("3,0-2", 4, [3, 0, 1, 2]), ("1-2,2,1", 9, [1, 2]),
    ("7 - 9", 10, [7, 8, 9]), ("5", None, [5])])
def test_layer_numbers_are_read_in_the_order_given_each_once(text, count, expected):
    assert layers.parse_layers(text, count) == expected


@pytest.mark.parametrize("text, count, message", [
    ("", 4, "expected all, a layer number"), ("3;4", 4, "expected all"), ("-1", 4, "expected all"),
    ("3-1", 4, "runs backwards; write 1-3"), ("4", 4, "there are 4 layers (0 to 3)"),
    ("0-9", 1, "there is 1 layer (0 to 0)"), ("1e3", 4, "expected all")])
def test_bad_layer_numbers_name_the_flag_and_what_was_expected(text, count, message):
    with pytest.raises(InputError) as error:
        layers.parse_layers(text, count, "--layer")
    assert message in str(error.value) and error.value.source == "--layer"


def test_spans_are_the_layer_spelling():
    assert layers.spans([0, 1, 2, 5, 7, 8]) == "0-2, 5, 7-8"
    assert layers.spans([4]) == "4"


def test_what_every_layer_shares_is_written_once_at_the_top(several):
    assert several["model"] == {"name": "Tiny", "class": "LlamaModel", "layers": [0, 2, 5]}
    assert several["query_labels"] == ["a", "b", "c"] and several["word_ids"] == [0, None, 1]
    assert several["causal"] is True and several["title"] == "Tiny layers 0, 2, 5"
    for entry in several["layers"]:
        assert not {"query_labels", "key_labels", "word_ids", "causal"} & entry.keys()
        assert entry["model"] == {"layer": entry["model"]["layer"]}


def test_a_key_the_layers_do_not_share_stays_in_each_layer():
    docs = [layer_doc(0, 0, causal=True), layer_doc(1, 1, causal=False)]
    joined = layers.assemble(docs)
    assert "causal" not in joined and [e["causal"] for e in joined["layers"]] == [True, False]


def test_each_layer_reads_back_as_the_document_it_was(several):
    for place, number in enumerate((0, 2, 5)):
        assert layers.layer_document(several, place) == layer_doc(number, number)


def test_layers_are_chosen_by_their_number_in_the_model(several):
    assert layers.numbers(several) == [0, 2, 5]
    assert layers.select(several, [5, 0]) == [2, 0]
    assert layers.select(several, None) == [0, 1, 2]
    assert layers.chosen(several, "2") == layer_doc(2, 2)
    with pytest.raises(layers.SeveralLayers) as raised:
        layers.chosen(several, "0,5")
    assert raised.value.places == [0, 2]
    with pytest.raises(InputError, match="names layer 3, which the document does not hold; it holds layers 0, 2, 5"):
        layers.select(several, [3])


def test_a_single_layer_document_takes_only_its_own_number():
    doc = layer_doc(4, 0)
    assert layers.chosen(doc, "4") is doc and layers.chosen(doc, None) is doc
    with pytest.raises(InputError, match=r"holds one layer \(layer 4\) and no layers list; drop --layer"):
        layers.chosen(doc, "3", flag="--layer")


@pytest.mark.parametrize("value, message", [
    ([], "expected a list of layer documents"), ({"X": 1}, "expected a list of layer documents"),
    ([{"model": {"layer": 1}}, {"model": {"layer": 1}}], "holds layer 1 twice")])
def test_a_bad_layers_list_is_named(value, message):
    with pytest.raises(InputError, match=message):
        layers.numbers({"layers": value})


def test_the_npz_members_read_back_as_the_document(several, tmp_path):
    several["layers"][1]["reference"] = {"weights": np.full((2, 3, 3), 0.25), "output": np.ones((3, 4)),
                                         "dtype": "float32"}
    members = layers.npz_members(several)
    assert {"X", "W_Q"}.isdisjoint(members)  # arrays stay in their layer's folder
    assert {"layers/0/X", "layers/1/reference/weights", "query_labels", "word_ids", "model"} <= members.keys()
    assert members["layers/0/X"].dtype == np.float64  # random doubles: not exact in float32
    assert members["layers/1/reference/weights"].dtype == np.float32  # 0.25 is: half the bytes
    assert members["word_ids"].tolist() == [0, -1, 1]
    path = tmp_path / "layers.npz"
    np.savez(path, **members)
    back = load_npz(str(path))
    assert back["model"] == several["model"] and back["word_ids"] == [0, None, 1]
    assert list(back["query_labels"]) == ["a", "b", "c"] and bool(back["causal"]) is True
    for place in range(3):
        entry, again = several["layers"][place], back["layers"][place]
        assert again["model"] == entry["model"]
        np.testing.assert_array_equal(again["W_V"], entry["W_V"])
    np.testing.assert_array_equal(back["layers"][1]["reference"]["weights"], np.full((2, 3, 3), 0.25))


def test_an_npz_with_a_missing_layer_is_refused(several, tmp_path):
    members = {k: v for k, v in layers.npz_members(several).items() if not k.startswith("layers/1/")}
    path = tmp_path / "gap.npz"
    np.savez(path, **members)
    with pytest.raises(InputError, match="members of layers/2/ but none of layers/1/"):
        load_npz(str(path))


# --- attn compute of a document of several layers -------------------------------------------------

@pytest.fixture
def several_file(several, tmp_path):
    path = tmp_path / "layers.json"
    path.write_text(json.dumps(several))
    return path


def test_compute_shows_every_layer_under_its_title(run, several_file):
    result = run("compute", several_file, "--stages", "weights", "--format", "table")
    assert result.exit_code == 0, result.stderr
    titles = [line for line in result.stdout.splitlines() if line.startswith("Tiny layer ")]
    assert [t.split(" (")[0] for t in titles] == ["Tiny layer 0", "Tiny layer 2", "Tiny layer 5"]


def test_compute_of_one_layer_is_that_layer_alone(run, several, several_file, tmp_path):
    alone = tmp_path / "alone.json"
    alone.write_text(json.dumps(layer_doc(2, 2)))
    one = run("compute", several_file, "--layer", "2", "--format", "json")
    assert one.exit_code == 0, one.stderr
    assert one.stdout == run("compute", alone, "--format", "json").stdout


def test_compute_json_of_several_layers_reads_back(run, several_file):
    result = run("compute", several_file, "--layer", "5,0", "--format", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["model"]["name"] == "Tiny" and [e["model"]["layer"] for e in doc["layers"]] == [5, 0]
    assert all("weights" in entry["heads"][0] for entry in doc["layers"])
    again = run("compute", "-", "--layer", "0", "--format", "json", input=result.stdout)
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout)["heads"] == doc["layers"][1]["heads"]


@pytest.mark.parametrize("args, fragments", [
    (["--layer", "3"], ["--layer", "names layer 3", "holds layers 0, 2, 5"]),
    (["--layer", "x"], ["--layer", "expected all"]),
    (["--format", "csv", "--stages", "weights"], ["--format csv", "3 layers", "--layer 0"]),
    (["--cost"], ["--cost", "3 layers"]),
    (["--explain", "--format", "json"], ["--explain", "3 layers"])])
def test_compute_errors_of_several_layers_are_one_line(run, several_file, args, fragments):
    assert_error(run("compute", several_file, *args), *fragments)


def test_compute_writes_an_npy_of_one_layer_only(run, several_file, tmp_path):
    assert_error(run("compute", several_file, "-o", tmp_path / "o.npy"), "--output", ".npy file holds one layer")
    result = run("compute", several_file, "--layer", "5", "--stages", "output", "-o", tmp_path / "o.npy")
    assert result.exit_code == 0, result.stderr
    assert np.load(tmp_path / "o.npy").shape == (3, 4)


@pytest.mark.parametrize("text, message", [
    ("99999999999999999999", "layer 99999999999999999999 is out of range"), ("0-99999999999", "out of range")])
def test_a_huge_layer_number_is_out_of_range_not_unreadable(text, message):
    """Issue 28's trial: 20 digits were "expected all, a layer number…"; and 0-99999999999 is not a list built."""
    with pytest.raises(InputError) as error:
        layers.parse_layers(text, 6, "--layer")
    assert "there are 6 layers (0 to 5)" in str(error.value)
    with pytest.raises(InputError) as error:
        layers.parse_layers(text, None, "--layer", [0, 1, 2, 3, 4, 5])
    assert message in str(error.value) and "the document holds layers 0-5" in str(error.value)
    with pytest.raises(InputError) as error:
        layers.parse_layers(text, None, "--layer")
    assert "out of range" in str(error.value)


def referenced_layer(number: int, seed: int, off: float = 0.0) -> dict:
    """A layer of Q, K, V with its model's weights beside it (attncli's own, `off` added: a model that differs)."""
    from attncli import api

    rng = np.random.default_rng(seed)
    doc = {name: rng.standard_normal((3, 4)).tolist() for name in ("Q", "K", "V")} | {"heads": 2}
    trace = api.attend(np.array(doc["Q"]), np.array(doc["K"]), np.array(doc["V"]), heads=2)
    return doc | {"title": f"Tiny layer {number}", "model": {"name": "Tiny", "layer": number},
                  "reference": {"weights": (trace.weights + off).tolist(), "dtype": "float64"}}


@pytest.mark.parametrize("fmt", ["json", "table"])
def test_compute_of_several_layers_exits_1_when_one_differs_from_its_model(run, tmp_path, fmt):
    """As diff, and as for one layer: JSON as tables."""
    path = tmp_path / "layers.json"
    path.write_text(json.dumps({"layers": [referenced_layer(0, 0), referenced_layer(1, 1)]}))
    agree = run("compute", path, "--format", fmt)
    assert agree.exit_code == 0, agree.stderr
    path.write_text(json.dumps({"layers": [referenced_layer(0, 0), referenced_layer(1, 1, off=1e-3)]}))
    differ = run("compute", path, "--format", fmt)
    assert differ.exit_code == 1, differ.stderr
    assert "layer 1" in differ.stderr or "layer 1" in differ.stdout


@pytest.mark.parametrize("referenced", [False, True])
def test_tables_of_several_layers_are_each_layers_tables_one_blank_line_apart(run, tmp_path, referenced):
    """A blank line between layers, as between tables: each layer's tables end with one (two were
    written where no agreement line ended a layer), its agreement line does not."""
    path = tmp_path / "layers.json"
    docs = [referenced_layer(n, n) for n in (0, 2)] if referenced else [layer_doc(n, n) for n in (0, 2)]
    path.write_text(json.dumps(layers.assemble(docs, "Tiny layers 0, 2")))
    both = run("compute", path, "--format", "table")
    assert both.exit_code == 0, both.stderr
    alone = [run("compute", path, "--layer", n, "--format", "table").stdout for n in ("0", "2")]
    assert alone[0].rstrip("\n").endswith("(the model ran in float64)" if referenced else "╯")
    assert both.stdout == alone[0].rstrip("\n") + "\n\n" + alone[1]
