"""`attn compute --do`: the backward pass through the CLI (JSON, tables, errors)."""

import json

import numpy as np

from attncli.stages import grads
from tests.conftest import SAMPLES, SCOOTER, assert_error


def test_json_has_every_gradient_per_head_and_grads_by_input(run):
    doc = run.json("compute", SAMPLES / "multihead.json", "--do", "ones")
    assert doc["dO"] == [[1.0] * 4] * 3
    for head in doc["heads"]:
        assert all(key in head for key in grads.names())  # every gradient of the backward pass's table
        assert np.array(head["d_scores"]).shape == (3, 3) and np.array(head["D"]).shape == (3,)
    assert list(doc["grads"]) == ["X", "W_Q", "W_K", "W_V", "W_O"]
    assert np.array(doc["grads"]["X"]).shape == (3, 4)
    assert np.array(doc["grads"]["W_O"]).shape == (4, 4)


def test_what_compute_writes_compute_reads_again(run, problem_file):
    first = run.json("compute", SAMPLES / "scooter.json", "--do", "0.5,-2")
    again = run.json("compute", problem_file(first))
    assert again["grads"] == first["grads"] and again["dO"] == [[0.5, -2.0]]


def test_do_from_a_file_and_inline_agree(run, problem_file, tmp_path):
    path = tmp_path / "dO.csv"
    path.write_text("0.5,-2\n")
    from_file = run.json("compute", SAMPLES / "scooter.json", "--do", path)
    inline = run.json("compute", SAMPLES / "scooter.json", "--do", "[[0.5, -2]]")
    key = run.json("compute", problem_file({**SCOOTER, "dO": [0.5, -2]}))
    assert from_file["grads"] == inline["grads"] == key["grads"]


def test_stages_selects_gradients(run):
    doc = run.json("compute", SAMPLES / "scooter.json", "--do", "ones", "--stages", "d_Q,grads")
    assert doc["heads"] == [{"d_Q": doc["grads"]["Q"]}]


def test_tables_show_each_gradient_stage_per_head(run):
    result = run("compute", SAMPLES / "scooter.json", "--do", "ones", "-f", "table")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    for title in ("d_output = dO split into heads", "d_V = weightsᵀ d_output", "d_weights = d_output Vᵀ",
                  "D = rowsum(d_output ∘ output)", "d_scores = weights ∘ (d_weights − D)",
                  "d_Q = scale · d_scores K", "d_K = scale · d_scoresᵀ Q", "grads: dQ 1×2", "grads: dV 3×2"):
        assert title in out, title
    assert "backward: dO 1×2" in out
    assert "│ it │ -0.0954 │ 0.0954 │" in out  # d_Q of the scooter with dO = ones
    assert "│ petrol   │ 0.0000 │ -0.8589 │" in out  # d_K


def test_labels_in_gradient_tables_stay_text(run, problem_file):
    doc = {**SCOOTER, "key_labels": ["[bold]x[/bold]", "b", "c"], "dO": "ones"}
    result = run("compute", problem_file(doc), "-f", "table", "--stages", "d_V")
    assert "[bold]x[/bold]" in result.stdout


def test_do_of_the_wrong_shape(run):
    result = run("compute", SAMPLES / "scooter.json", "--do", "1,2,3")
    assert_error(result, "--do", "dO has shape (1 × 3)", "expected (1 × 2)", "final output")


def test_do_of_the_wrong_shape_with_w_o(run):
    result = run("compute", SAMPLES / "multihead.json", "--do", "1,2")
    assert_error(result, "--do", "dO has shape (2)", "expected (3 × 4)", "W_O's columns")


def test_do_not_finite(run, problem_file, tmp_path):
    path = tmp_path / "dO.npy"
    np.save(path, np.array([[np.inf, 1.0]]))
    assert_error(run("compute", SAMPLES / "scooter.json", "--do", path), "dO.npy", "dO")
    assert_error(run("compute", problem_file({**SCOOTER, "dO": [None, 1]})), "p.json", "dO")


def test_do_a_word_that_is_not_ones(run, problem_file):
    result = run("compute", problem_file({**SCOOTER, "dO": "twos"}))
    assert_error(result, "dO is", "\"ones\"")


def test_do_with_output_only_stages(run):
    result = run("compute", SAMPLES / "scooter.json", "--do", "ones", "--stages", "output")
    assert_error(result, "--stages", "needs the weights")


def test_do_with_npy_output(run, tmp_path):
    result = run("compute", SAMPLES / "scooter.json", "--do", "ones", "-o", tmp_path / "o.npy")
    assert_error(result, "--output", ".npy")


def test_a_gradient_stage_without_do(run):
    result = run("compute", SAMPLES / "scooter.json", "--stages", "d_Q")
    assert_error(result, "--stages", "d_Q is a gradient", "--do ones")


def test_fully_masked_row_zero_gradient_through_cli(run, problem_file):
    doc = {**SCOOTER, "Q": [[0, 4], [1, 1]], "mask": [[True, True, False], [False, False, False]]}
    result = run("compute", problem_file(doc), "--do", "ones", "-f", "json")
    out = json.loads(result.stdout)
    assert out["grads"]["Q"][1] == [0.0, 0.0] and out["heads"][0]["d_scores"][1] == [0.0, 0.0, 0.0]
    assert out["heads"][0]["d_scores"][0][2] == 0.0  # a masked key gets no gradient


def test_npz_holds_the_gradients_and_reads_back(run, tmp_path):
    path = tmp_path / "run.npz"
    result = run("compute", SAMPLES / "multihead.json", "--do", "ones", "-o", path)
    assert result.exit_code == 0, result.stderr
    with np.load(path) as archive:
        assert archive["heads/d_scores"].shape == (2, 3, 3) and archive["grads/W_O"].shape == (4, 4)
        expected = archive["grads/X"].tolist()
    again = run.json("compute", path)
    assert again["grads"]["X"] == expected


def test_markdown_and_latex_write_the_gradients(run):
    md = run("compute", SAMPLES / "scooter.json", "--do", "ones", "-f", "markdown", "--stages", "D,d_Q")
    assert "**D** = rowsum(d_output ∘ output)" in md.stdout and "| it | 1.6266 |" in md.stdout
    assert "**d_Q** = scale · d_scores K" in md.stdout
    tex = run("compute", SAMPLES / "scooter.json", "--do", "ones", "-f", "latex", "--stages", "d_Q")
    assert r"\caption{d\_Q: $\text{scale} \cdot dS\, K$}" in tex.stdout


def test_csv_of_a_gradient_is_refused(run):
    result = run("compute", SAMPLES / "scooter.json", "--do", "ones", "-f", "csv", "--stages", "d_Q")
    assert result.exit_code == 2 and "--stages" in result.stderr


def test_gradients_that_overflow_float32_are_an_error(run):
    result = run("compute", SAMPLES / "scooter.json", "--do", "3e38,3e38", "--dtype", "float32")
    assert_error(result, "gradient", "overflows float32", "--dtype float64")
