"""Issue 16, "the API marks like the CLI": the same validation, answers files read the same way,
every wrong argument an InputError naming it, readable reprs."""

import json
import math

import numpy as np
import pytest
from conftest import SAMPLES, SCOOTER

from attncli import InputError, attend, check, load_answers
from attncli.compute.attention import attend as core_attend
from attncli.document.reading import build_problem

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


@pytest.mark.parametrize("named", ["the key's", "another stage", "the stage only"])
def test_the_api_marks_a_find_the_slip_answer_as_attn_check_does(run, tmp_path, named):
    """Issue 19's leftovers from earlier trials: find-the-slip is marked by the Python API as by attn
    check."""
    from attncli import api
    from attncli.marking import slip

    key_path = tmp_path / "key.json"
    key_path.write_text(run("exercise", "--seed", "3", "--find-the-slip", "--answers").stdout, encoding="utf-8")
    key = json.loads(key_path.read_text(encoding="utf-8"))
    planted = key["slip"]
    other = next(m for m in slip.MISTAKES if slip.MISTAKES[m].stage != planted["stage"])
    answer = {"slip": {"the key's": planted, "another stage": {"stage": slip.MISTAKES[other].stage, "mistake": other},
                       "the stage only": {"stage": planted["stage"], "mistake": other}}[named]}
    answers = tmp_path / "a.json"
    answers.write_text(json.dumps(answer), encoding="utf-8")
    cli = json.loads(run("check", answers, key_path, "-f", "json").stdout)
    for problem in (key_path, str(key_path), key):  # a path or the key's document
        marks = api.check(answer, problem)
        assert marks.to_dict() == cli and list(marks) == ["slip"]
    assert cli["stages"]["slip"]["cells"] == {"the key's": [["correct", "correct"]],
                                              "another stage": [["wrong", "wrong"]],
                                              "the stage only": [["correct", "wrong"]]}[named]


def test_the_api_refuses_a_slip_against_a_problem_that_plants_none():
    """Issue 19's leftovers from earlier trials: the API refuses a slip answer against a problem that
    plants none, as attn check does."""
    from attncli import api
    from attncli.base.errors import InputError

    answer = {"slip": {"stage": "scaled", "mistake": "no_scale"}}
    for problem in (SCOOTER, core_attend(build_problem(SCOOTER))):
        with pytest.raises(InputError, match="plants no slip"):
            api.check(answer, problem)


SELF = {"Q": [0, 4], "K": [[1, 0], [0, 1], [0.5, 0.5]], "V": [[2, 0], [0, 2], [1, -1]]}


ASKING = dict(SELF, ask=["weights", "output"], decimals=3)


def test_the_api_reads_ask_and_decimals_from_the_problem(problem_file):
    """Issue 16, "marks that are wrong" (this failed on the main it was filed against): the Python API
    reads ask and decimals from the problem."""
    from attncli import check

    marks = check({"weights": [[0.045, 0.768, 0.187]]}, problem_file(ASKING))
    assert marks.score == (3, 5) and not marks.all_correct
    assert check({"weights": [[0.045, 0.768, 0.187]]}, ASKING, require=()).all_correct


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


def test_a_decimal_comma_in_a_json_string_marks_through_the_api(tmp_path):
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"scaled": [["0", "2,8284", "1.4142"]], "output": [[0.2775, 1.3491]]}))
    marks = check(path, SCOOTER)
    assert marks.all_correct
    assert any("2,8284" in note for note in marks["scaled"].notes)
