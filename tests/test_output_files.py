"""--output (.json, .npy, .npz) written atomically, .npy/.npz read back, output-only stages."""

import json
import os

import numpy as np
import pytest

from attncli.attention import attend
from attncli.problem import build_problem
from attncli.render import files
from tests.conftest import SAMPLES, assert_error


def test_npy_holds_the_final_output(run, tmp_path):
    path = tmp_path / "out.npy"
    result = run("compute", SAMPLES / "multihead.json", "--output", path)
    assert result.exit_code == 0 and result.stdout == ""
    expected = run.json("compute", SAMPLES / "multihead.json")["output"]
    np.testing.assert_allclose(np.load(path), expected, rtol=0, atol=1e-12)


def test_npz_holds_every_stage_and_reads_back_as_a_problem(run, tmp_path):
    path = tmp_path / "all.npz"
    assert run("compute", SAMPLES / "causal.json", "-o", path).exit_code == 0
    with np.load(path) as archive:
        assert {"heads/scores", "heads/scaled", "heads/masked", "heads/weights", "heads/output", "output",
                "Q", "K", "V", "mask", "scale"} <= set(archive.files)
        weights = archive["heads/weights"]
    again = run.json("compute", path)
    np.testing.assert_array_equal(again["heads"][0]["weights"], weights[0])
    assert again["mask"] == "causal" and again["query_labels"] == ["the", "cat", "sat", "down"]


def test_npz_round_trips_projections_and_heads(run, tmp_path):
    path = tmp_path / "mh.npz"
    assert run("compute", SAMPLES / "multihead.json", "-o", path).exit_code == 0
    assert run.json("compute", path)["output"] == run.json("compute", SAMPLES / "multihead.json")["output"]


def test_json_output_file_is_the_stdout_document(run, tmp_path):
    path = tmp_path / "out.json"
    assert run("compute", SAMPLES / "scooter.json", "-o", path).exit_code == 0
    assert path.read_text() == run("compute", SAMPLES / "scooter.json").stdout


def test_an_interrupted_write_leaves_no_file(tmp_path, monkeypatch):
    trace = attend(build_problem({"Q": [1.0], "K": [1.0], "V": [1.0]}))
    target = tmp_path / "out.npz"
    target.write_bytes(b"old")

    def broken(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(files.np, "savez", broken)
    with pytest.raises(KeyboardInterrupt):
        files.write_output(trace, str(target), ".npz")
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["out.npz"]


def test_output_errors(run, tmp_path):
    assert_error(run("compute", SAMPLES / "scooter.json", "-o", tmp_path / "x.txt"),
                 '--output: "', 'has no known suffix; expected .json, .md, .tex, .csv, .npy or .npz')
    assert_error(run("compute", SAMPLES / "scooter.json", "-o", tmp_path / "no" / "x.npy"), "does not exist")


def test_npz_input_errors(run, tmp_path):
    np.savez(tmp_path / "p.npz", Q=np.array([[1.0, 2.0]]), K=np.array([[1.0, 2.0, 3.0]]), V=np.array([[1.0]]))
    assert_error(run("compute", tmp_path / "p.npz"), "p.npz: K has 3 columns but Q has 2")
    np.savez(tmp_path / "o.npz", Q=np.array([{"a": 1}], dtype=object))
    assert_error(run("compute", tmp_path / "o.npz"), "pickles are refused")
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    assert_error(run("compute", tmp_path / "bad.npz"), "bad.npz: cannot read .npz")


def test_stages_output_uses_the_blocked_path_and_agrees(run):
    blocked = run.json("compute", SAMPLES / "random_4x8.json", "--stages", "output")
    full = run.json("compute", SAMPLES / "random_4x8.json")
    assert set(blocked["heads"][0]) == {"output"}
    np.testing.assert_allclose(blocked["output"], full["output"], rtol=0, atol=1e-12)
    table = run("compute", SAMPLES / "scooter.json", "--stages", "output", "-f", "table").stdout
    assert "0.2775" in table and "1.3491" in table


def test_npy_and_npz_must_hold_what_their_names_say(run, tmp_path):
    np.save(tmp_path / "one.npy", np.ones(3))
    (tmp_path / "one.npz").write_bytes((tmp_path / "one.npy").read_bytes())
    assert_error(run("compute", tmp_path / "one.npz"), "one.npz: cannot read .npz: it holds one array")
    np.savez(tmp_path / "many.npz", Q=np.ones(2))
    assert_error(run("compute", "--q", tmp_path / "many.npz", "--k", "1", "--v", "1"),
                 "many.npz: an .npz archive holds several arrays")
