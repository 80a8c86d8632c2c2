"""`attn compute` through CliRunner: samples, formats, options, round trips."""

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import SAMPLES, SCOOTER


@pytest.mark.parametrize("sample", sorted(p.name for p in SAMPLES.glob("*.json")))
def test_every_sample_runs_in_both_formats(run, sample):
    doc = run.json("compute", SAMPLES / sample)
    assert doc["output"] and all(np.isfinite(doc["output"]).flat)
    table = run("compute", SAMPLES / sample, "--format", "table")
    assert table.exit_code == 0 and "weights = softmax" in table.stdout


def test_scooter_table_shows_the_textbook_numbers(run):
    out = run("compute", SAMPLES / "scooter.json", "--format", "table").stdout
    for digits in ("0.0454", "0.7679", "0.1867", "0.2775", "1.3491", "2.8284", "1.4142", "1/√2 = 0.7071"):
        assert digits in out
    assert "mechanic" in out and "scooter" in out and "petrol" in out


def test_json_is_the_default_when_piped(run):
    result = run("compute", SAMPLES / "scooter.json")
    doc = json.loads(result.stdout)
    assert doc["scale"] == pytest.approx(0.7071067811865476)
    assert np.round(doc["heads"][0]["weights"], 4).tolist() == [[0.0454, 0.7679, 0.1867]]
    assert doc["query_labels"] == ["it"] and doc["warnings"] == []
    assert "masked" not in doc["heads"][0]


def test_json_output_round_trips(run, problem_file):
    for sample in SAMPLES.glob("*.json"):
        first = run("compute", sample).stdout
        again = run("compute", "-", input=first)
        assert again.exit_code == 0, again.stderr
        assert again.stdout == first, sample.name


def test_masked_json_uses_null_for_minus_infinity(run):
    doc = run.json("compute", SAMPLES / "causal.json")
    assert doc["heads"][0]["masked"][0][1:] == [None, None, None]
    assert doc["mask"] == "causal" and "top-left" in doc["mask_rule"]


def test_stdin_is_read_when_no_file_is_named(run):
    result = run("compute", input=json.dumps(SCOOTER))
    assert result.exit_code == 0
    assert np.round(json.loads(result.stdout)["output"], 4).tolist() == [[0.2775, 1.3491]]


def test_inline_matrices_need_no_file(run):
    doc = run.json("compute", "--q", "0,4", "--k", "1,0; 0,1; .5,.5", "--v", "[[2,0],[0,2],[1,-1]]")
    assert np.round(doc["output"], 4).tolist() == [[0.2775, 1.3491]]


def test_options_override_the_file(run):
    doc = run.json("compute", SAMPLES / "scooter.json", "--q", "4,0", "--scale", "1",
                   "--query-labels", "she")
    assert doc["Q"] == [[4.0, 0.0]] and doc["scale"] == 1.0 and doc["query_labels"] == ["she"]
    assert doc["heads"][0]["scaled"] == [[4.0, 0.0, 2.0]]


def test_csv_files_with_headers_and_labels(run):
    doc = run.json("compute", "--q", SAMPLES / "csv/Q.csv", "--k", SAMPLES / "csv/K.csv",
                   "--v", SAMPLES / "csv/V.csv")
    assert doc["query_labels"] == ["it"] and doc["key_labels"] == ["mechanic", "scooter", "petrol"]
    assert np.round(doc["output"], 4).tolist() == [[0.2775, 1.3491]]


def test_tsv_npy_and_json_matrix_files(run, tmp_path):
    (tmp_path / "k.tsv").write_text("1\t0\n0\t1\n0.5\t0.5\n")
    np.save(tmp_path / "v.npy", np.array(SCOOTER["V"], dtype=np.float32))
    (tmp_path / "q.json").write_text("[0, 4]")
    doc = run.json("compute", "--q", tmp_path / "q.json", "--k", tmp_path / "k.tsv", "--v", tmp_path / "v.npy")
    assert np.round(doc["output"], 4).tolist() == [[0.2775, 1.3491]]


def test_invert_mask_reads_true_as_blocked(run):
    common = ("--q", "0,4", "--k", "1,0;0,1;.5,.5", "--v", "2,0;0,2;1,-1")
    plain = run.json("compute", *common, "--mask", "0,1,1")
    inverted = run.json("compute", *common, "--mask", "1,0,0", "--invert-mask")
    assert plain["heads"][0]["weights"] == inverted["heads"][0]["weights"]
    assert plain["heads"][0]["weights"][0][0] == 0.0
    assert inverted["mask"] == [[False, True, True]]  # written back as true = may attend


def test_fully_masked_rows_warn_on_stderr_and_in_json(run):
    result = run("compute", "--q", "1,0;0,1", "--k", "1,0;0,1", "--v", "1;2", "--mask", "false,false;true,true",
                 "--query-labels", "a,b")
    assert result.exit_code == 0
    assert result.stderr.startswith('warning: head 0: every key is masked for query "a"')
    doc = json.loads(result.stdout)
    assert doc["output"][0] == [0.0] and len(doc["warnings"]) == 1
    uniform = run.json("compute", "--q", "1,0;0,1", "--k", "1,0;0,1", "--v", "1;2",
                       "--mask", "0,0;1,1", "--masked-rows", "uniform")
    assert uniform["output"][0] == [1.5]


def test_stages_and_round_select_what_is_written(run):
    doc = run.json("compute", SAMPLES / "scooter.json", "--stages", "weights,output", "--round", "4")
    assert set(doc["heads"][0]) == {"weights", "output", "lse"}
    assert doc["heads"][0]["weights"] == [[0.0454, 0.7679, 0.1867]]
    table = run("compute", SAMPLES / "scooter.json", "-f", "table", "--stages", "weights").stdout
    assert "weights = softmax" in table and "scores = Q Kᵀ" not in table


def test_multihead_json_has_a_list_of_heads_and_concat(run):
    doc = run.json("compute", SAMPLES / "multihead.json")
    assert len(doc["heads"]) == 2 and len(doc["concat"][0]) == 4 and len(doc["output"][0]) == 4
    assert doc["d_k"] == 2


def test_dtype_float32_is_reported(run):
    doc = run.json("compute", SAMPLES / "scooter.json", "--dtype", "float32")
    assert doc["dtype"] == "float32"
    assert doc["heads"][0]["weights"][0][1] == pytest.approx(0.7679179, rel=1e-6)


def test_version_and_help(run):
    assert run("--version").stdout.startswith("attn 0.")
    help_text = run("compute", "--help").stdout
    for convention in ("true = the query may attend", "top-left", "--invert-mask", "Linear.weight",
                       "j ≤ i + Lk − Lq", "AND"):
        assert convention in " ".join(help_text.split()), convention


def test_python_dash_m_works():
    result = subprocess.run([sys.executable, "-m", "attncli", "compute", str(SAMPLES / "scooter.json")],
                            capture_output=True, text=True, check=True)
    assert json.loads(result.stdout)["key_labels"] == ["mechanic", "scooter", "petrol"]


def test_masks_written_as_floats_and_huge_numbers_in_messages(run):
    doc = run.json("compute", "--q", "1", "--k", "1;2", "--v", "1;2", "--mask", "[1.0, 0.0]")
    assert doc["mask"] == [[True, False]]
    assert run.json("compute", "--q", "1", "--k", "1", "--v", "1", "--mask", "true")["mask"] == [[True]]
    result = run("compute", "--q", "1", "--k", "1", "--v", "1", "--heads", "1" + "0" * 30)
    assert result.exit_code == 2 and len(result.stderr) < 300


def test_a_warning_on_stderr_is_in_the_json_too(run, tmp_path):
    """Found by the second user trial (issues 16 and 17): every warning printed on stderr is in the JSON's
    "warnings" too, and reads back."""
    args = ("--q", "0,4", "--k", "1,0;0,1;.5,.5", "--v", "2,0;0,2;1,-1", "--alibi-slopes", "1e6",
            "--q-positions", "9007199254740992", "--dtype", "float32")
    result = run("compute", *args, "-f", "json")
    printed = [line.removeprefix("warning: ") for line in result.stderr.splitlines()]
    warnings = json.loads(result.stdout)["warnings"]
    assert result.exit_code == 0 and any("ALiBi distances" in w for w in warnings) and printed == warnings
    written = tmp_path / "o.json"
    written.write_text(result.stdout)
    again = run("compute", written, "-f", "json")
    assert again.exit_code == 0 and json.loads(again.stdout)["warnings"] == warnings
    causal = run("compute", "--q", "1,0", "--k", "1,0;0,1", "--v", "1;2", "--mask", "causal", "-f", "json")
    assert "mask causal is top-left" in json.loads(causal.stdout)["warnings"][0] and "top-left" in causal.stderr


def test_head_filters_the_tables_and_json_keeps_every_head_as_help_says(run, tmp_path):
    """Issue 28's trial: --head 3 -f json wrote every head. By design (a whole problem that reads back);
    --help says so."""
    args = ("--q", "1,0,0,1;0,1,1,0", "--k", "1,0,0,1;0,1,1,0", "--v", "1,2;3,4", "--heads", "2", "--head", "1")
    written = tmp_path / "h.json"
    written.write_text(run("compute", *args, "-f", "json").stdout)
    assert len(json.loads(written.read_text())["heads"]) == 2 and run("compute", written, "-f", "json").exit_code == 0
    said = " ".join(run("compute", "--help").stdout.replace("│", " ").split())
    assert "JSON and array files keep every head" in said
