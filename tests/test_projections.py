"""A projected problem's Q = X W_Q, K, V are stages that can be asked, required and marked, and
every head's stages can be required by path (issue 29, item 3)."""

import json

import numpy as np

from tests.conftest import assert_error

X = np.array([[1, 0, 1, 0], [0, 2, 0, 1], [1, 1, 1, 1]], float)
W_Q = np.array([[1, 0, 0, 1], [0, 1, 1, 0], [1, 0, 1, 0], [0, 1, 0, 1]], float)
W_K = np.array([[0, 1, 1, 0], [1, 0, 0, 1], [0, 1, 0, 1], [1, 0, 1, 0]], float)
W_V = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 2]], float)
W_O = np.array([[0.5, 0, 0, 0.5], [0, 0.5, 0.5, 0], [0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5]])
PROBLEM = {"X": X.tolist(), "W_Q": W_Q.tolist(), "W_K": W_K.tolist(), "W_V": W_V.tolist(), "W_O": W_O.tolist(),
           "heads": 2, "mask": "causal"}
Q, K, V = X @ W_Q, X @ W_K, X @ W_V


def run_json(run, problem_file, answers, *options, code=(0, 1)):
    problem = problem_file(PROBLEM, "problem.json")
    path = problem_file(answers, "answers.json")
    result = run("check", path, "--problem", problem, "-f", "json", *options)
    assert result.exit_code in code, result.stderr
    return json.loads(result.stdout)


def key(run, problem_file):
    """attn compute's JSON: a complete, correct answer (its heads' Q, K, V included)."""
    return run.json("compute", problem_file(PROBLEM, "problem.json"))


def test_a_wrong_q_is_marked_not_ignored(run, problem_file):
    wrong = Q.copy()
    wrong[1, 0] += 1
    doc = run_json(run, problem_file, {"Q": wrong.tolist(), "K": K.tolist(), "V": V.tolist()})
    assert doc["stages"]["Q"]["wrong"] == 1 and doc["stages"]["K"]["right"] == 12
    assert not doc["all_correct"]


def test_x_w_q_is_read_as_the_sheet_spells_it(run, problem_file):
    doc = run_json(run, problem_file, {"X W_Q": Q.tolist(), "XW_K": K.tolist(), "V = X W_V": V.tolist()})
    assert [doc["stages"][n]["right"] for n in "QKV"] == [12, 12, 12]
    assert doc["stages"]["Q"]["notes"] == ['read "X W_Q" as Q']


def test_projections_are_diagnosed(run, problem_file):
    doc = run_json(run, problem_file, {"Q": (X @ W_Q.T).tolist(), "K": (X @ W_Q).tolist()})
    assert doc["stages"]["Q"]["diagnosis"] == ["projection_transposed"]
    assert doc["stages"]["K"]["diagnosis"] == ["projection_swapped"]


def test_the_heads_are_carried_from_the_learners_own_v(run, problem_file):
    answers = key(run, problem_file)
    wrong_v = V.copy()
    wrong_v[2, 3] = 5  # a slip in V: head 1's outputs follow from it
    answers["V"] = wrong_v.tolist()
    for h in range(2):
        del answers["heads"][h]["V"]
        weights = np.array(answers["heads"][h]["weights"], float)
        answers["heads"][h]["output"] = (weights @ wrong_v[:, 2 * h:2 * h + 2]).tolist()
    doc = run_json(run, problem_file, answers)
    assert doc["stages"]["V"]["wrong"] == 1
    assert doc["stages"]["heads[0].output"]["correct"] == 6  # head 0 does not read column 3
    out = doc["stages"]["heads[1].output"]  # only the last query sees the third key (causal)
    assert (out["carried"], out["wrong"], out["cells"][2][1]) == (1, 0, "carried")


def test_per_head_outputs_can_be_required(run, problem_file):
    answers = key(run, problem_file)
    for head in answers["heads"]:
        del head["output"]
    required = "Q,K,V,scores,scaled,masked,weights,heads[0].output,heads[1].output,output"
    doc = run_json(run, problem_file, answers, "--require", required)
    assert doc["missing"] == ["heads[0].output", "heads[1].output"] and not doc["all_correct"]
    full = run_json(run, problem_file, key(run, problem_file), "--require", required)
    assert full["all_correct"] and full["right"] == doc["right"] + 12


def test_a_head_the_problem_does_not_have_cannot_be_required(run, problem_file):
    problem = problem_file(PROBLEM, "problem.json")
    answers = problem_file(key(run, problem_file), "answers.json")
    assert_error(run("check", answers, "-p", problem, "--require", "heads[2].output"), "heads[2].output",
                 "2 heads")


def test_projections_required_and_answered_head_by_head(run, problem_file):
    doc = run_json(run, problem_file, key(run, problem_file), "--require", "Q,K,V")
    assert doc["missing"] == [] and doc["all_correct"] and doc["not_answered"] == []
    blank = run_json(run, problem_file, {"output": key(run, problem_file)["output"]}, "--require", "Q,K,V,output")
    assert blank["missing"] == ["Q", "K", "V"]
