"""`attn check` with gradients: a learner's backward pass marked, with follow-through."""

import json
from dataclasses import replace

import numpy as np

from attncli.compute.attention import attend
from attncli.document.reading import build_problem
from attncli.marking.grading import marked_gradient
from attncli.marking.marking_backward import _recompute
from attncli.stages import grads
from attncli.stages import table as stages
from tests.conftest import assert_error, checker

PROBLEM = {"Q": [[0, 4], [1, 1]], "K": [[1, 0], [0, 1], [0.5, 0.5]], "V": [[2, 0], [0, 2], [1, -1]],
           "mask": [[True, True, False], [True, True, True]], "dO": [[0.5, -2], [1, 1]]}
G = attend(build_problem(PROBLEM)).gradients.heads


def r4(x):
    return np.round(np.asarray(x), 4).tolist()


check = checker(PROBLEM)


def test_right_gradients_are_correct(run, tmp_path):
    answers = {name: r4(G[name][0]) for name in ("d_weights", "D", "d_scores", "d_Q", "d_K", "d_V")}
    code, marks = check(run, tmp_path, answers)
    assert code == 0 and marks["all_correct"]
    assert set(marks["stages"]) == set(answers)
    assert marks["stages"]["D"]["max"] == 2 and marks["stages"]["d_K"]["max"] == 6


def test_a_wrong_d_scores_is_carried_into_d_q_and_d_k(run, tmp_path):
    d_scores = G["d_scores"][0].copy()
    d_scores[0, 0] += 0.5  # one slip
    scale = 1 / np.sqrt(2)
    K, Q = np.array(PROBLEM["K"]), np.array(PROBLEM["Q"])
    answers = {"d_scores": r4(d_scores), "d_Q": r4(scale * d_scores @ K), "d_K": r4(scale * d_scores.T @ Q)}
    code, marks = check(run, tmp_path, answers)
    assert code == 1
    assert marks["stages"]["d_scores"]["wrong"] == 1
    assert marks["stages"]["d_Q"]["carried"] >= 1 and marks["stages"]["d_Q"]["wrong"] == 0
    assert marks["stages"]["d_K"]["wrong"] == 0
    assert any("from your own d_scores" in note for note in marks["stages"]["d_Q"]["notes"])


def test_a_wrong_d_q_is_wrong(run, tmp_path):
    d_Q = G["d_Q"][0].copy()
    d_Q[1, 1] = 7.0
    code, marks = check(run, tmp_path, {"d_Q": r4(d_Q)})
    assert code == 1 and marks["stages"]["d_Q"]["wrong"] == 1


def test_compute_json_with_do_is_a_complete_answer(run, tmp_path):
    (tmp_path / "problem.json").write_text(json.dumps(PROBLEM))
    written = run("compute", tmp_path / "problem.json", "-f", "json", "--round", "4")
    (tmp_path / "answers.json").write_text(written.stdout)
    result = run("check", tmp_path / "answers.json", "--problem", tmp_path / "problem.json", "--format", "json")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "d_K" in json.loads(result.stdout)["stages"]


def test_gradients_marked_in_tables(run, tmp_path):
    (tmp_path / "problem.json").write_text(json.dumps(PROBLEM))
    (tmp_path / "answers.json").write_text(json.dumps({"d_K": r4(G["d_K"][0]), "D": r4(G["D"][0])}))
    result = run("check", tmp_path / "answers.json", tmp_path / "problem.json", "--format", "table")
    assert result.exit_code == 0, result.stderr
    assert "d_K: 6/6 right" in result.stdout and "D: 2/2 right" in result.stdout


def test_gradients_without_do_in_the_problem(run, tmp_path):
    problem = {k: v for k, v in PROBLEM.items() if k != "dO"}
    (tmp_path / "problem.json").write_text(json.dumps(problem))
    (tmp_path / "answers.json").write_text(json.dumps({"d_Q": [[0, 0], [0, 0]]}))
    result = run("check", tmp_path / "answers.json", tmp_path / "problem.json")
    assert_error(result, "d_Q is given", "no dO")


def test_diagnoses_d_scores_without_D_and_a_missing_scale(run, tmp_path):
    trace = attend(build_problem(PROBLEM))
    P, dP = trace.weights[0], G["d_weights"][0]
    K = np.array(PROBLEM["K"])
    code, marks = check(run, tmp_path, {"d_scores": r4(P * dP)})
    assert marks["stages"]["d_scores"]["diagnosis"] == ["softmax_gradient_without_D"]
    code, marks = check(run, tmp_path, {"d_Q": r4(G["d_scores"][0] @ K)})
    assert marks["stages"]["d_Q"]["diagnosis"] == ["gradient_without_scale"]
    assert any("the scale was left out" in note for note in marks["stages"]["d_Q"]["notes"])


def test_a_csv_answers_file_with_gradients(run, tmp_path):
    (tmp_path / "problem.json").write_text(json.dumps(PROBLEM))
    rows = "\n".join(",".join(str(x) for x in row) for row in r4(G["d_Q"][0]))
    (tmp_path / "answers.csv").write_text(f"d_Q\n{rows}\nD\n" + "\n".join(str(x) for x in r4(G["D"][0])) + "\n")
    result = run("check", tmp_path / "answers.csv", tmp_path / "problem.json", "--format", "json")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert set(json.loads(result.stdout)["stages"]) == {"d_Q", "D"}


def test_follow_through_recomputes_by_the_stage_tables_vjps(monkeypatch):
    """A learner's d_V and d_weights are recomputed from their own weights and d_output by the
    output stage's vjp in the table (a vjp changed there changes them), and d_scores by the
    softmax's P ∘ (dP − D) with their own D."""
    trace = attend(build_problem(PROBLEM))
    own = {name: marked_gradient(trace, 0, name) for name in grads.names()}
    own |= {"weights": trace.weights[0] + 0.1, "output": trace.output[0], "D": own["D"] + 1}
    scaled = {stages.PREVIOUS: 3 * own["d_output"] @ trace.V[0].T, "V": 3 * own["weights"].T @ own["d_output"]}
    expected = own["weights"] * (own["d_weights"] - own["D"])
    expected[0, 2] = 0  # masked
    np.testing.assert_allclose(_recompute(trace, 0, "d_scores", own), expected)
    output = stages.get("output")
    table = tuple(replace(s, vjp=lambda block, x, y, d: {k: v[None] for k, v in scaled.items()}) if s is output
                  else s for s in stages.STAGES)
    monkeypatch.setattr(stages, "STAGES", table)
    np.testing.assert_allclose(_recompute(trace, 0, "d_V", own), scaled["V"])
    np.testing.assert_allclose(_recompute(trace, 0, "d_weights", own), scaled[stages.PREVIOUS])
