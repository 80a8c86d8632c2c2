"""Tests that catch what mutation testing got through (issue 8, rule 6): per-head mask planes in
marking, the final output carried through b_O, and --explain's bias for the explained row."""

import json

# Two heads of width 1 with different mask planes: head 1 blocks (query 1, key 0), head 0 (0, 1).
PER_HEAD_MASK = {"Q": [[1, 2], [3, 4]], "K": [[1, 0], [0, 1]], "V": [[1, 0], [0, 1]], "heads": 2,
                 "mask": [[[True, False], [True, True]], [[True, True], [False, True]]]}


def marks(run, problem_file, answers, problem):
    result = run("check", problem_file(answers, "answers.json"), problem_file(problem), "--format", "json")
    assert result.exit_code in (0, 1), result.stderr
    return json.loads(result.stdout)["stages"]


def test_each_head_is_marked_with_its_own_mask_plane(run, problem_file):
    # head 1: scaled = [[0, 2], [0, 4]]; a slip in (0, 1) is carried into masked through head 1's plane
    answers = {"heads": [{}, {"scaled": [[0, 3], [0, 4]], "masked": [[0, 3], [None, 4]]}]}
    stages = marks(run, problem_file, answers, PER_HEAD_MASK)
    assert stages["heads[1].scaled"]["wrong"] == 1
    masked = stages["heads[1].masked"]
    assert masked["cells"] == [["correct", "carried"], ["correct", "correct"]], masked


def test_each_heads_mask_ignored_is_diagnosed_on_its_own_plane(run, problem_file):
    answers = {"heads": [{"masked": [[1, None], [3, 0]]}, {"masked": [[0, 2], [0, 4]]}]}
    stages = marks(run, problem_file, answers, PER_HEAD_MASK)
    assert stages["heads[0].masked"]["right"] == 4
    # The blocked cell's scaled score is 0 here, so writing 0 for −∞ explains it equally well.
    assert stages["heads[1].masked"]["diagnosis"] == ["mask_ignored", "mask_zero"]


WITH_BIAS_OUT = {"Q": [[1, 0]], "K": [[1, 0], [0, 1]], "V": [[1, 2], [3, 4]],
                 "W_O": [[1, 0], [0, 1]], "b_O": [10, 20]}


def test_the_final_output_is_carried_through_b_O(run, problem_file):
    head_output = [[2.0, 3.0]]  # a slip: the exact head output is not this
    answers = {"heads": [{"output": head_output}], "output": [[12.0, 23.0]]}  # their output · W_O + b_O
    stages = marks(run, problem_file, answers, WITH_BIAS_OUT)
    assert stages["heads[0].output"]["wrong"] == 2
    assert stages["output"]["cells"] == [["carried", "carried"]]


def test_explain_uses_the_explained_rows_bias(run, problem_file):
    problem = problem_file({"Q": [[1, 0], [0, 1]], "K": [[1, 0], [0, 1]], "V": [[1], [2]],
                            "bias": [[0.25, 0], [0, -0.75]]})
    result = run("compute", problem, "--explain", "--row", "1")
    assert result.exit_code == 0, result.stderr
    assert "1: 0.7071 + -0.75 = -0.0429" in result.stdout
    assert "+ 0.25 =" not in result.stdout  # row 0's bias, as given
