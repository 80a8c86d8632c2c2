"""Issue 16, "the API marks like the CLI": the same validation, answers files read the same way,
every wrong argument an InputError naming it, readable reprs."""

import json
import math

import numpy as np
import pytest
from conftest import SAMPLES, SCOOTER

from attncli import InputError, attend, check, load_answers

W = {"weights": [[0.05, 0.77, 0.19]]}
# softmax(0, ln 4.1) = 0.1961, 0.8039: 0.20, 0.80 at 2 decimals, imprecise at 1
FIFTHS = {"Q": [[1]], "K": [[0], [math.log(4.1)]], "V": [[1], [2]], "scale": 1}


@pytest.mark.parametrize("answers, settings, field, fragment", [
    (None, {}, "answers", "answers is null; expected a dict of stages or the path"),
    ({1: [[0.05, 0.77, 0.19]]}, {}, "answers", "a key is int 1"),
    (W, {"require": ("bogus",)}, "require", 'unknown stage "bogus"'),
    (W, {"require": 3}, "require", "require is the number 3"),
    (W, {"tol": -1}, "tol", "tol is the number -1"),
    (W, {"tol": float("nan")}, "tol", "expected a finite number of at least 0"),
    (W, {"tol": "0.1"}, "tol", 'tol is the string "0.1"'),
    (W, {"decimals": -1}, "decimals", "expected a whole number from 0 to 17"),
    (W, {"decimals": 2.5}, "decimals", "decimals is the number 2.5"),
    (W, {"decimals": 18}, "decimals", "from 0 to 17"),
    (W, {"decimals": True}, "decimals", "decimals is"),
])
def test_wrong_arguments_are_input_errors_naming_them(answers, settings, field, fragment):
    with pytest.raises(InputError) as caught:
        check(answers, attend(**SCOOTER), **settings)
    assert caught.value.field == field and fragment in str(caught.value)


def test_a_wrong_problem_is_an_input_error_naming_it():
    for problem in (None, 3, [1, 2]):
        with pytest.raises(InputError) as caught:
            check(W, problem)
        assert caught.value.field == "problem"


def test_require_as_a_comma_string_or_a_tuple_marks_the_same():
    trace = attend(**SCOOTER)
    assert check(W, trace, require="weights,output").score == (3, 5)
    assert check(W, trace, require=("weights", "output")).score == (3, 5)
    assert check(W, trace, require=["output"]).score == (3, 5)


def test_a_problem_may_be_a_path(tmp_path):
    assert check(W, SAMPLES / "scooter.json").score == (3, 3)
    assert check(W, str(SAMPLES / "scooter.json")).all_correct


def test_load_answers_keeps_the_decimals_written(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('{"weights": [[0.20, 0.80]]}')
    trace = attend(**FIFTHS)
    assert check(load_answers(path), trace).all_correct
    assert check(path, trace).all_correct and check(str(path), trace).all_correct
    assert check(json.loads(path.read_text()), trace)["weights"].count("imprecise") == 2  # 0.2: decimals lost


def test_csv_and_npz_answers_through_the_api(tmp_path):
    (tmp_path / "a.csv").write_text("weights\n0.05,0.77,0.19\noutput\n0.28,1.35\n")
    assert check(tmp_path / "a.csv", attend(**SCOOTER)).score == (5, 5)
    np.savez(tmp_path / "a.npz", weights=np.array([[0.0454, 0.7679, 0.1867]]))
    assert check(tmp_path / "a.npz", attend(**SCOOTER)).all_correct


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
def test_a_numpy_matrix_is_read_as_an_array():
    trace = attend(Q=np.matrix([[0, 4]]), K=np.matrix([[1, 0], [0, 1], [0.5, 0.5]]), V=SCOOTER["V"])
    assert trace.weights[0].round(4).tolist() == [[0.0454, 0.7679, 0.1867]]


def test_metadata_and_aliases_through_the_api():
    marks = check({"name": "Ada", "attention_weights": [[0.05, 0.77, 0.19]]}, attend(**SCOOTER))
    assert marks.all_correct and marks["weights"].notes == ('read "attention_weights" as weights',)


def test_reprs_are_readable_one_liners():
    trace = attend(**SCOOTER)
    assert repr(trace) == "<Trace 1 head, 1 query × 3 keys, scale 0.7071: scores, scaled, weights, output>"
    mark = check({"weights": [[1, 1, 1]]}, trace)["weights"]
    assert repr(mark) == "<StageMark 0/3 right (3 wrong; softmax_wrong_axis)>"  # 1 for 0.7679: the slip's 1
    assert repr(check(W, trace)["weights"]) == "<StageMark 3/3 right>"


# Issue 29, item 4: the API is the command line

def test_an_array_is_marked_at_the_problems_decimals():
    trace = attend(**SCOOTER)
    two = np.array([[0.05, 0.77, 0.19]])  # 2 decimals, as the problem asks
    assert check({"weights": two}, trace).all_correct
    assert check({"weights": two}, {**SCOOTER, "decimals": 2}).all_correct
    assert not check({"weights": two}, trace, decimals=4).all_correct


def test_trailing_zeros_typed_as_strings_are_kept():
    trace = attend(**FIFTHS)  # weights 0.1961, 0.8039
    assert check({"weights": [["0.20", "0.80"]]}, trace).all_correct
    assert check({"weights": [[0.20, 0.80]]}, trace)["weights"].count("imprecise") == 2  # a float keeps no zeros


def test_lenient_json_points_and_unknown_keys_as_on_the_command_line(tmp_path, run):
    path = tmp_path / "answers.json"
    path.write_text('{"weights": [0.0454, 0.7679, 0.1867,],\n "workings": "see page 2", "output": [0.3, 1.4]}')
    problem = tmp_path / "problem.json"
    problem.write_text(json.dumps(SCOOTER))
    with pytest.raises(InputError, match="invalid JSON"):
        check(path, problem)
    marks = check(path, problem, lenient_json=True, points="weights=6,output=4,imprecise=0.5")
    assert marks.points == (6 + 2 - 0.5, 10)  # output: 0.3 for 0.2775 imprecise, 1.4 for 1.3491 wrong
    assert 'unknown key "workings" not marked' in marks.note and "read leniently" in marks.note
    row = run("check", path, path, "-p", problem, "--lenient-json", "--points", "weights=6,output=4,imprecise=0.5",
              "-f", "csv").stdout.splitlines()[1].split(",")
    assert (float(row[1]), float(row[2])) == marks.points
    assert marks.gradescope(max_score=5)["score"] == 3.75
    with pytest.raises(InputError, match="unknown key"):
        check(path, problem, lenient_json=True, strict=True)
    assert load_answers(path, lenient_json=True)["workings"] == "see page 2"


@pytest.mark.parametrize("points, fragment", [("weights=0", "above 0"), ("percent=2", "from 0 to 1"),
                                              ({"bogus": 1}, 'unknown stage "bogus"'), (3, "expected")])
def test_points_are_checked_as_the_command_line_checks_them(points, fragment):
    with pytest.raises(InputError, match=fragment) as error:
        check({"weights": [0.05, 0.77, 0.19]}, attend(**SCOOTER), points=points)
    assert error.value.field == "points"
