"""`attn check`: exact, carried and wrong cells; every diagnosis from a fabricated mistake."""

import json
import math

import numpy as np
import pytest

from tests.conftest import SAMPLES, SCOOTER, assert_error, checker

Q = np.array([[1.0, 0.0, 2.0], [0.0, 1.0, 1.0]])
K = np.array([[1.0, 1.0, 0.0], [0.0, 2.0, 1.0], [2.0, 0.0, 1.0]])
V = np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 1.0], [1.0, 1.0, 0.0]])
MASK = np.array([[True, True, False], [False, True, True]])
PROBLEM = {"Q": Q.tolist(), "K": K.tolist(), "V": V.tolist(), "mask": MASK.tolist()}


def softmax_rows(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# The exact pipeline, written out independently of attncli.
SCORES = Q @ K.T
SCALED = SCORES / math.sqrt(3)
MASKED = np.where(MASK, SCALED, -np.inf)
WEIGHTS = softmax_rows(MASKED)
OUTPUT = WEIGHTS @ V


def r4(x):
    return np.round(x, 4).tolist()


check = checker(PROBLEM)


def test_all_correct_exits_0(run, tmp_path):
    code, doc = check(run, tmp_path, {"scores": r4(SCORES), "scaled": r4(SCALED), "weights": r4(WEIGHTS),
                                      "output": r4(OUTPUT)})
    assert code == 0 and doc["all_correct"]
    assert doc["stages"]["weights"] == {"right": 6, "max": 6, "correct": 6, "carried": 0, "wrong": 0,
                                        "imprecise": 0, "missing": 0, "points": 6, "worth": 6,
                                        "cells": [["correct"] * 3] * 2,
                                        "expected": doc["stages"]["weights"]["expected"], "diagnosis": [],
                                        "notes": []}
    assert np.allclose(doc["stages"]["weights"]["expected"], WEIGHTS, atol=1e-15)
    assert np.allclose(doc["stages"]["output"]["expected"], OUTPUT, atol=1e-15)
    assert (doc["right"], doc["max"], doc["missing"], doc["not_answered"]) == (24, 24, [], ["masked"])


def test_precision_follows_what_the_learner_wrote(run, tmp_path):
    weights = np.round(WEIGHTS, 2)
    weights[0, 0] += 0.01  # one unit in the last place: still correct
    code, doc = check(run, tmp_path, {"weights": weights.tolist()})
    assert code == 0
    weights[0, 0] += 0.01  # two units: wrong
    code, doc = check(run, tmp_path, {"weights": weights.tolist()})
    assert code == 1 and doc["stages"]["weights"]["cells"][0][0] == "wrong"


def test_tolerance_replaces_the_decimals_rule(run, tmp_path):
    code, _ = check(run, tmp_path, {"weights": (WEIGHTS + 0.004).tolist()}, PROBLEM, "--tol", "0.005")
    assert code == 0
    code, _ = check(run, tmp_path, {"weights": (WEIGHTS + 0.006).tolist()}, PROBLEM, "--tol", "0.005")
    assert code == 1


def test_an_early_slip_is_carried_forward(run, tmp_path):
    scores = SCORES.copy()
    scores[0, 1] = 5.0  # wrong
    scaled = scores / math.sqrt(3)
    weights = softmax_rows(np.where(MASK, scaled, -np.inf))
    code, doc = check(run, tmp_path, {"scores": scores.tolist(), "scaled": r4(scaled), "weights": r4(weights),
                                      "output": r4(weights @ V)})
    assert code == 1
    stages = doc["stages"]
    assert stages["scores"]["wrong"] == 1 and stages["scores"]["correct"] == 5
    assert stages["scaled"]["carried"] == 1 and stages["scaled"]["wrong"] == 0
    assert stages["weights"]["carried"] == 2 and stages["weights"]["wrong"] == 0  # row 0 changed
    assert stages["output"]["wrong"] == 0


def test_outputs_from_the_learners_rounded_weights_are_accepted(run, tmp_path):
    weights = np.round(WEIGHTS, 2)
    code, doc = check(run, tmp_path, {"weights": weights.tolist(), "output": r4(weights @ V)})
    assert code == 0
    assert doc["stages"]["output"]["carried"] + doc["stages"]["output"]["correct"] == 6


def _diagnosed(run, tmp_path, answers, problem=PROBLEM):
    code, doc = check(run, tmp_path, answers, problem)
    assert code == 1
    return {stage: mark["diagnosis"] for stage, mark in doc["stages"].items()}


FABRICATED = {
    "no_scale": {"scaled": r4(SCORES)},
    "scale_by_dk": {"scaled": r4(SCORES / 3)},
    "scale_multiplied": {"scaled": r4(SCORES * math.sqrt(3))},
    "transposed_k": {"scores": r4(Q @ K)},
    "no_exp": {"weights": r4(np.where(MASK, SCALED, 0) / np.where(MASK, SCALED, 0).sum(axis=1, keepdims=True))},
    "softmax_wrong_axis": {"weights": r4(np.exp(MASKED) / np.exp(MASKED).sum(axis=0, keepdims=True))},
    "mask_ignored": {"weights": r4(softmax_rows(SCALED))},
    "mask_inverted": {"weights": r4(softmax_rows(np.where(~MASK, SCALED, -np.inf)))},
    "values_transposed": {"weights": r4(WEIGHTS), "output": r4(WEIGHTS @ V.T)},
    "rounded_early": {"weights": r4(softmax_rows(np.where(MASK, np.round(SCALED, 1), -np.inf)))},
    "mask_zero": {"masked": r4(np.where(MASK, SCALED, 0.0))},
    "percent": {"weights": np.round(WEIGHTS * 100, 2).tolist()},
    "argmax": {"weights": [[f"{x:.2f}" for x in row] for row in
                           (MASKED == MASKED.max(axis=1, keepdims=True)).astype(float)]},
}


@pytest.mark.parametrize("mistake", sorted(FABRICATED))
def test_each_mistake_is_named(run, tmp_path, mistake):
    diagnoses = _diagnosed(run, tmp_path, FABRICATED[mistake])
    assert [mistake] in diagnoses.values(), diagnoses  # named, and nothing else for that stage


def test_no_softmax_is_named(run, tmp_path):
    scaled = np.array([[0.0, 4.0, 2.0]]) / math.sqrt(2)
    diagnoses = _diagnosed(run, tmp_path, {"weights": r4(scaled)}, SCOOTER)
    assert diagnoses["weights"] == ["no_softmax"]


def test_masked_zeros_then_their_softmax_is_one_slip(run, tmp_path):
    # A learner writes 0 where −∞ belongs, then takes the softmax of that: the masked stage is
    # diagnosed, and the weights follow from it (carried), not a second mistake.
    masked = np.where(MASK, SCALED, 0.0)
    _, doc = check(run, tmp_path, {"masked": r4(masked), "weights": r4(softmax_rows(masked))})
    assert doc["stages"]["masked"]["diagnosis"] == ["mask_zero"]
    assert doc["stages"]["weights"]["wrong"] == 0 and doc["stages"]["weights"]["carried"] > 0


@pytest.mark.parametrize("answers, note", [
    # 4 / 1.41 = 2.8369: the learner rounded √2 before dividing (exact 2.8284)
    ({"scaled": "0, 2.8369, 1.4184"}, "√d_k was rounded to 2 decimals (1.41) before dividing"),
    ({"scaled": "0, 2.8571, 1.4286"}, "√d_k was rounded to 1 decimal (1.4) before dividing"),
    ({"scaled": "0, 2.8400, 1.4200"}, "the scale 1/√d_k was rounded to 2 decimals (0.71) before multiplying"),
    # the weights alone, from scores divided by 1.41 (nothing else written down)
    ({"weights": "0.0451, 0.7688, 0.1861"}, "√d_k was rounded to 2 decimals (1.41) before dividing"),
])
def test_a_rounded_square_root_is_named(run, answers, note):
    options = [part for stage, text in answers.items() for part in (f"--{stage}", text)]
    result = run("check", SAMPLES / "scooter.json", *options, "--format", "json")
    assert result.exit_code == 1, result.stderr
    (mark,) = json.loads(result.stdout)["stages"].values()
    assert mark["diagnosis"] == ["rounded_early"] and f"rounded_early: right method, but {note}" in mark["notes"]


def test_rounded_early_says_where_and_how(run, tmp_path):
    _, doc = check(run, tmp_path, FABRICATED["rounded_early"])
    assert doc["stages"]["weights"]["notes"] == [
        "rounded_early: right method, but scaled was rounded to 1 decimal before the next step"]


def test_table_view_marks_cells_and_summarises(run):
    result = run("check", SAMPLES / "scooter.json", "--scores", "0,4,2", "--scaled", "0,4,2",
                 "--weights", "0.0159,0.8668,0.1173", "--format", "table")
    assert result.exit_code == 1
    out = result.stdout
    assert "│ it │      0 ✓ │ 4 ✗ 2.8284 │ 2 ✗ 1.4142 │" in out
    assert "0.8668 ↪ 0.8668" in out  # a carried cell shows what the learner's own scaled gives
    assert "scaled: 1/3 right (2 wrong)\n  no_scale: forgot to divide the scores by √d_k" in out
    assert "weights: 3/3 right (3 carried)" in out and out.rstrip().endswith("some answers are not right")


def test_compute_output_is_a_complete_correct_answer(run):
    for sample in ("scooter", "multihead", "causal", "cross"):
        computed = run("compute", SAMPLES / f"{sample}.json").stdout
        result = run("check", "-", "--problem", SAMPLES / f"{sample}.json", input=computed)
        assert result.exit_code == 0, (sample, result.stderr)
        assert json.loads(result.stdout)["all_correct"]


def test_one_file_holds_problem_and_answers(run, problem_file):
    path = problem_file(dict(SCOOTER, weights=[0.0454, 0.7679, 0.1867]))
    assert run("check", path).exit_code == 0


def test_a_class_of_200_is_marked_in_one_process(run, tmp_path):
    (tmp_path / "problem.json").write_text(json.dumps(SCOOTER))
    files = []
    for i in range(200):
        path = tmp_path / f"student{i:03}.json"
        scaled = [0, 4, 2] if i % 4 == 0 else [0, 2.8284, 1.4142]  # every 4th forgot to scale
        path.write_text(json.dumps({"scaled": scaled, "weights": [0.0454, 0.7679, 0.1867]}))
        files.append(path)
    result = run("check", *files, "--problem", tmp_path / "problem.json", "--format", "json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert len(doc["files"]) == 200 and not doc["all_correct"]
    assert sum(f["all_correct"] for f in doc["files"]) == 150
    assert doc["files"][0]["stages"]["scaled"]["diagnosis"] == ["no_scale"]
    table = run("check", *files[:3], "--problem", tmp_path / "problem.json", "--format", "table").stdout
    assert "class summary" in table and "2/3 files all correct" in table and "no_scale" in table


def test_a_bad_file_in_a_class_is_reported_and_the_rest_marked(run, tmp_path):
    (tmp_path / "problem.json").write_text(json.dumps(SCOOTER))
    (tmp_path / "good.json").write_text(json.dumps({"weights": [0.0454, 0.7679, 0.1867]}))
    (tmp_path / "bad.json").write_text("{")
    result = run("check", tmp_path / "good.json", tmp_path / "bad.json", "--problem", tmp_path / "problem.json",
                 "--format", "json")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and "bad.json: invalid JSON" in result.stderr
    files = json.loads(result.stdout)["files"]
    assert files[0]["all_correct"] and "invalid JSON" in files[1]["error"]


@pytest.mark.parametrize("answers, fragments", [
    ({"weights": [0.1, 0.9]}, ["weights has shape (1 × 2); expected (1 × 3): queries × keys"]),
    ({"output": [[1, 2, 3]]}, ["output has shape (1 × 3); expected (1 × 2): queries × value columns"]),
    ({"weigths": [1, 2, 3]}, ['unknown key "weigths" (did you mean "weights"?)']),
    ({"masked": [0, 1, 2]}, ["masked is given, but this problem has no mask, bias or ALiBi"]),
    ({"weights": ["a", 1, 2]}, ['weights[0] is the string "a"; expected a number']),
    ([1, 2], ["the top level is a list of 2; expected a JSON object of answers"]),
])
def test_answer_errors(run, tmp_path, answers, fragments):
    (tmp_path / "answers.json").write_text(json.dumps(answers))
    assert_error(run("check", tmp_path / "answers.json", SAMPLES / "scooter.json"), "answers.json: ", *fragments)


def test_usage_errors(run, tmp_path):
    assert_error(run("check", SAMPLES / "scooter.json", "--weights", "1,2"), "--weights: weights has shape")
    assert_error(run("check", SAMPLES / "multihead.json", "--weights", "1,2,3"),
                 "weights is given at the top level, but the problem has 2 heads")
    assert_error(run("check", tmp_path / "nope.json", SAMPLES / "scooter.json"), "nope.json: no such file")


def test_a_wide_stage_table_is_split_to_fit_the_terminal():
    # Six keys of "0.0438 ✗ 0.0338" are ~116 columns: on an 80-column terminal every row wrapped.
    import io

    from rich.console import Console

    from attncli.api import attend
    from attncli.api import check as check_api
    from attncli.render.marks import print_marks

    keys = [[1, 0], [0, 1], [1, 1], [-1, 0], [0, -1], [2, 1]]
    trace = attend(Q=[[1, 2], [0.5, -1]], K=keys, V=keys)
    given = np.round(trace.weights[0] + 0.01, 4)
    marks = check_api({"weights": given.tolist()}, trace)
    console = Console(file=io.StringIO(), width=80, color_system=None, highlight=False)
    print_marks(trace, dict(marks), console, 4)
    out = console.file.getvalue()
    assert max(len(line) for line in out.splitlines()) <= 80, out
    assert "weights (columns 0–" in out and "weights (columns " in out.split("weights (columns 0–")[1]
    assert "…" not in out and out.count(" ✗ ") == 12 + 1  # no cell cut, each shown once (and the legend)
    assert f"{trace.weights[0][1, 5]:.4f}" in out


def test_inline_answers_with_a_complete_key_mark_only_what_was_given(run, tmp_path):
    # `attn compute`'s JSON is a complete key. With --problem it is only the problem: its stages
    # are not the learner's answers. Without, it is answers and problem in one file, and an
    # inline stage replaces the file's own (it was hidden behind the key's heads[0]).
    key = tmp_path / "key.json"
    key.write_text(run("compute", SAMPLES / "scooter.json", "--format", "json").stdout)
    wrong = "0.0159,0.8668,0.1173"
    result = run("check", "--weights", wrong, "--problem", key, "--format", "json")
    assert result.exit_code == 1, result.stdout
    doc = json.loads(result.stdout)
    assert list(doc["stages"]) == ["weights"] and doc["stages"]["weights"]["wrong"] == 3
    result = run("check", key, "--weights", wrong, "--format", "json")
    assert result.exit_code == 1, result.stdout
    assert json.loads(result.stdout)["stages"]["weights"]["wrong"] == 3


# Two heads of width 1 with different mask planes: head 1 blocks (query 1, key 0), head 0 (0, 1).
PER_HEAD_MASK = {"Q": [[1, 2], [3, 4]], "K": [[1, 0], [0, 1]], "V": [[1, 0], [0, 1]], "heads": 2,
                 "mask": [[[True, False], [True, True]], [[True, True], [False, True]]]}


def _stage_marks(run, problem_file, answers, problem):
    result = run("check", problem_file(answers, "answers.json"), problem_file(problem), "--format", "json")
    assert result.exit_code in (0, 1), result.stderr
    return json.loads(result.stdout)["stages"]


def test_each_head_is_marked_with_its_own_mask_plane(run, problem_file):
    """Mutation testing got this through (issue 8, rule 6): marking read head 0's mask plane for every
    head; a slip in head 1 is carried into masked through head 1's own plane."""
    # head 1: scaled = [[0, 2], [0, 4]]; a slip in (0, 1) is carried into masked through head 1's plane
    answers = {"heads": [{}, {"scaled": [[0, 3], [0, 4]], "masked": [[0, 3], [None, 4]]}]}
    stages = _stage_marks(run, problem_file, answers, PER_HEAD_MASK)
    assert stages["heads[1].scaled"]["wrong"] == 1
    masked = stages["heads[1].masked"]
    assert masked["cells"] == [["correct", "carried"], ["correct", "correct"]], masked


def test_each_heads_mask_ignored_is_diagnosed_on_its_own_plane(run, problem_file):
    """Mutation testing got this through (issue 8, rule 6): mask_ignored is diagnosed on each head's own
    mask plane."""
    answers = {"heads": [{"masked": [[1, None], [3, 0]]}, {"masked": [[0, 2], [0, 4]]}]}
    stages = _stage_marks(run, problem_file, answers, PER_HEAD_MASK)
    assert stages["heads[0].masked"]["right"] == 4
    # The blocked cell's scaled score is 0 here, so writing 0 for −∞ explains it equally well.
    assert stages["heads[1].masked"]["diagnosis"] == ["mask_ignored", "mask_zero"]


WITH_BIAS_OUT = {"Q": [[1, 0]], "K": [[1, 0], [0, 1]], "V": [[1, 2], [3, 4]],
                 "W_O": [[1, 0], [0, 1]], "b_O": [10, 20]}


def test_the_final_output_is_carried_through_b_O(run, problem_file):
    """Mutation testing got this through (issue 8, rule 6): the final output is carried through W_O and b_O
    from the learner's own head output."""
    head_output = [[2.0, 3.0]]  # a slip: the exact head output is not this
    answers = {"heads": [{"output": head_output}], "output": [[12.0, 23.0]]}  # their output · W_O + b_O
    stages = _stage_marks(run, problem_file, answers, WITH_BIAS_OUT)
    assert stages["heads[0].output"]["wrong"] == 2
    assert stages["output"]["cells"] == [["carried", "carried"]]


def test_the_expected_value_is_shown_at_the_decimals_the_learner_wrote(run):
    out = run("check", SAMPLES / "scooter.json", "--weights", "0.04539,0.76792,0.18000", "-f", "table").stdout
    assert "0.18000 ✗ 0.18669" in out  # not 0.1867 beside five decimals (issue 29)


def test_a_carried_cell_shows_what_the_learners_own_stage_gives(run):
    out = run("check", SAMPLES / "scooter.json", "--scaled", "0,4,2", "--weights", "0.0159,0.8668,0.1173",
              "-f", "table").stdout
    assert "0.0159 ↪ 0.0159" in out and "0.0454" not in out.split("weights")[1].split("scaled:")[0]
    doc = json.loads(run("check", SAMPLES / "scooter.json", "--scaled", "0,4,2", "--weights", "0.0159,0.8668,0.1173",
                         "-f", "json").stdout)["stages"]["weights"]
    assert np.allclose(doc["followed"], [[0.015876, 0.866813, 0.117310]], atol=1e-6)


def test_a_quick_check_needs_no_problem_file(run):
    result = run("check", "--q", "0,4", "--k", "1,0; 0,1; .5,.5", "--v", "2,0; 0,2; 1,-1",
                 "--weights", "0.0454, 0.7679, 0.1867", "-f", "json")
    assert result.exit_code == 0 and json.loads(result.stdout)["stages"]["weights"]["correct"] == 3
    assert_error(run("check", "--q", "0,4", "--k", "1,0; 0,1", "--v", "2,0; 0,2; 1,-1", "--weights", "1,0,0"),
                 "--v: V has 3 rows but K has 2")


def test_inline_q_k_v_replace_the_problem_files(run, problem_file):
    answers = problem_file({"weights": [[0.0454, 0.7679, 0.1867]]}, "a.json")
    other = problem_file({"Q": [[1, 1]], "K": [[1, 0], [0, 1], [0.5, 0.5]], "V": [[2, 0], [0, 2], [1, -1]]})
    doc = json.loads(run("check", answers, "-p", other, "--q", "0,4", "-f", "json").stdout)
    assert doc["all_correct"]


# `--tol inf` (and 1e400, which reads as inf) marked every cell correct, where the API refuses it;
# `--tol nan` said it "should be greater than or equal to 0".
@pytest.mark.parametrize("tol, found", [("inf", "inf"), ("1e400", "inf"), ("nan", "nan"), ("-1", "-1"),
                                        ("-inf", "-inf")])
def test_tol_is_a_finite_number_of_at_least_0(run, tol, found):
    assert_error(run("check", SAMPLES / "scooter.json", "--weights", "0.1,0.1,0.1", "--tol", tol),
                 f"error: --tol: expected a finite number ≥ 0, found {found}")


@pytest.mark.parametrize("args, message", [
    (("posenc", "--base", "nan"), "--base: expected a finite number ≥ 1, found nan"),
    (("check", SAMPLES / "scooter.json", "--weights", "0.1,0.1,0.1", "--max-score", "nan", "-f", "gradescope"),
     "--max-score: expected a finite number from 0 to 1,000,000, found nan"),
    (("compute", SAMPLES / "scooter.json", "--rope", "--rope-base", "1e400"), "--rope-base: expected a finite number, "
     "found inf"),
])
def test_every_float_option_refuses_what_is_not_a_finite_number_saying_what_it_expected(run, args, message):
    assert_error(run(*args), message)


# `attn check big.json --weights "0.5,0.5;0.5,0.5"` computed the whole 4000² problem (4.9 s, 2.3 GB)
# before saying the answer's shape was wrong: inline answers are checked against the problem's
# shapes first. (Computing is replaced by a failure here: the shape error must come before it.)
@pytest.mark.parametrize("problem, option, value, message", [
    ("scooter.json", "--weights", "0.5,0.5;0.5,0.5", "--weights: weights has shape (2 × 2); expected (1 × 3): "
     "queries × keys"),
    ("scooter.json", "--output", "1,2,3", "--output: output has shape (1 × 3); expected (1 × 2): queries × value "
     "columns"),
    ("multihead.json", "--output", "0.5,0.5;0.5,0.5", "--output: output has shape (2 × 2); expected (3 × 4)"),
    ("multihead.json", "--scores", "[[[1, 0]], [[1, 0]]]", "--scores: heads[0].scores has shape (1 × 2); expected "
     "(3 × 3)"),
    ("rope.json", "--Q_rope", "1,2;3,4", "--Q_rope: Q_rope has shape (2 × 2); expected (2 × 4): queries × dims"),
])
def test_an_inline_answer_of_the_wrong_shape_is_refused_before_computing(run, monkeypatch, problem, option, value,
                                                                         message):
    from attncli.commands import check_run

    def never(problem, *args, **kwargs):
        raise AssertionError("computed before the answer's shape was checked")

    monkeypatch.setattr(check_run.attention, "attend", never)
    assert_error(run("check", SAMPLES / problem, option, value), message)


def test_inline_answers_of_the_right_shape_are_still_marked_as_before(run):
    weights = run.json("compute", SAMPLES / "rope.json")["heads"][0]["weights"]
    marked = json.loads(run("check", SAMPLES / "rope.json", "--weights", json.dumps(weights), "-f", "json").stdout)
    assert marked["right"] == marked["max"] == len(weights) * len(weights[0])
    column = run("check", SAMPLES / "scooter.json", "--weights", "0.0454;0.7679;0.1867", "-f", "json")
    weights = json.loads(column.stdout)["stages"]["weights"]  # one query's column read as its row (issue 29)
    assert weights["correct"] == 3 and "read a column as the one query's row" in weights["notes"][0]


def test_a_single_answers_file_of_the_wrong_shape_is_refused_before_computing(run, monkeypatch, tmp_path):
    from attncli.commands import check_run

    monkeypatch.setattr(check_run.attention, "attend", lambda *a, **k: pytest.fail("computed first"))
    for doc, message in (({"weights": [[0.5, 0.5], [0.5, 0.5]]}, "w.json: weights has shape (2 × 2); expected (1 × 3)"),
                         ({"output": [[1, 2, 3]]}, "w.json: output has shape (1 × 3); expected (1 × 2)")):
        (tmp_path / "w.json").write_text(json.dumps(doc))
        assert_error(run("check", tmp_path / "w.json", SAMPLES / "scooter.json"), message)
    (tmp_path / "h.json").write_text(json.dumps({"heads": [{"weights": [[0.5, 0.5]]}, {}]}))
    assert_error(run("check", tmp_path / "h.json", "--problem", SAMPLES / "multihead.json"),
                 "h.json: heads[0].weights has shape (1 × 2); expected (3 × 3): queries × keys")


# A decimal comma in a JSON string costs nothing: the cell is read as the decimal it means, with a note

COMMA = {"scores": [[0, 4, 2]], "scaled": [["0", "2,8284", "1.4142"]], "weights": [[0.0454, 0.7679, 0.1867]],
         "output": [[0.2775, 1.3491]]}
COMMA_NOTE = 'read scaled[0][1] "2,8284" as 2.8284, a decimal written with a comma; write decimals with a point'


def test_a_decimal_comma_in_a_json_string_is_read_as_its_decimal_with_a_note(run, problem_file):
    answers, problem = problem_file(COMMA, "a.json"), problem_file(SCOOTER)
    result = run("check", answers, problem, "-f", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["stages"]["scaled"]["cells"] == [["correct"] * 3]
    assert doc["stages"]["scaled"]["notes"] == [COMMA_NOTE]


def test_a_decimal_comma_in_a_class_costs_nothing(run, problem_file):
    files = [problem_file(COMMA, "a.json"), problem_file(COMMA, "b.json")]
    problem = problem_file(SCOOTER)
    csv_lines = run("check", *files, "-p", problem, "-f", "csv").stdout.splitlines()
    assert [line.split(",")[1:4] for line in csv_lines[1:]] == [["11", "11", "100.0"]] * 2
    grades = json.loads(run("check", *files, "-p", problem, "-f", "gradescope").stdout)
    assert [f["results"]["score"] for f in grades["files"]] == [11, 11]
    assert COMMA_NOTE in json.dumps(grades, ensure_ascii=False).replace('\\"', '"')


def test_an_unknown_report_suffix_lists_checks_own(run, tmp_path):
    """A user trial: attn check -o c.txt listed compute's suffixes (.json, .md, …), which check does not write."""
    result = run("check", SAMPLES / "scooter.json", "-o", tmp_path / "c.txt")
    assert_error(result, '--report: "', 'c.txt" has no known suffix; expected .html')
    assert ".json" not in result.stderr
