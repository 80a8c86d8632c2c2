"""The class views of `attn check`: summary tables, CSV gradebook, Gradescope results.json.

Marks are fabricated (the contract's StageMark with every status), so these tests do not depend
on how the marking rules decide a cell.
"""

import csv
import io
import json

import numpy as np
import pytest
from rich.console import Console

from attncli.marking.grading import Answer, StageMark
from attncli.render.gradebook import (
    class_max,
    csv_gradebook,
    diagnoses,
    gradescope,
    safe_cell,
    score,
    stage_points,
    stage_sizes,
    tallies,
)
from attncli.render.summary import print_class_summary
from tests.conftest import SAMPLES, SCOOTER

LONG = ("softmax_wrong_axis", "scale_multiplied", "mask_inverted_and_more_words", "values_transposed")


def mark(cells, diagnosis=(), notes=None) -> StageMark:
    cells = np.array(cells, dtype=object).astype(str)
    given = Answer(values=np.zeros(cells.shape), decimals=np.full(cells.shape, 4))
    notes = tuple(f"{d}: the words for {d}" for d in diagnosis) if notes is None else notes
    return StageMark(given=given, cells=cells, expected=np.zeros(cells.shape), diagnosis=tuple(diagnosis),
                     notes=notes)


def two_heads(student: int) -> dict:
    """A 2-head class: every status and long diagnosis ids spread over the stages."""
    right = [["correct", "correct", "carried", "correct"]] * 2
    bad = [["wrong", "imprecise", "missing", "correct"], ["correct", "carried", "wrong", "wrong"]]
    return {
        "heads[0].scores": mark(right),
        "heads[0].weights": mark(bad if student % 2 else right, LONG[:2] if student % 2 else ()),
        "heads[1].scores": mark(right),
        "heads[1].weights": mark(bad, LONG[2:] if student else LONG[3:]),
        "output": mark([["missing"] * 4] * 2),
    }


def class_results():
    results = [(f"student_with_a_rather_long_file_name_{i:02}.json", two_heads(i), None) for i in range(3)]
    results.append(("blank.json", None, "no answers found in blank.json: write at least one of scores, weights"))
    return results


def render(results, width=80) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None, highlight=False)
    print_class_summary(results, console)
    return console.file.getvalue()


def test_scores_count_right_cells_and_an_unmarked_file_scores_zero_of_the_class_max():
    results = class_results()
    assert list(stage_sizes(results)) == ["heads[0].scores", "heads[0].weights", "heads[1].scores",
                                          "heads[1].weights", "output"]
    assert score(results[0][1], 40) == score(results[0][1], 0)  # the class max is for unmarked files only
    s = score(results[1][1], 40)
    assert (s.right, s.max, s.percent) == (8 + 3 + 8 + 3 + 0, 40, 55.0)
    assert (score(None, 40).right, score(None, 40).max, score(None, 40).percent) == (0, 40, 0.0)
    assert tallies(results)["heads[1].weights"] == {"correct": 6, "carried": 3, "wrong": 9, "imprecise": 3,
                                                     "missing": 3}
    # Most common first: values_transposed in 3 files, mask_inverted… in 2, the others in 1.
    assert [d[:3] for d in diagnoses(results)] == [
        ("heads[1].weights", LONG[3], 3), ("heads[1].weights", LONG[2], 2),
        ("heads[0].weights", LONG[1], 1), ("heads[0].weights", LONG[0], 1)]
    assert diagnoses(results)[0][3] == f"the words for {LONG[3]}"


def test_summary_at_80_columns_cuts_nothing_and_names_every_diagnosis():
    text = render(class_results())
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    for d in LONG:
        assert d in text
    for status in ("correct", "carried", "wrong", "imprecise", "missing"):
        assert status in text
    assert "blank.json: 0 points, could not be marked: no answers found in blank.json" in text
    assert "1/3 files all correct" not in text and "0/4 files all correct; 1 could not be marked" in text
    assert "0/40" in text and "55%" in text
    # Every stage column is there, whether on the first table or a continuation.
    assert text.count("heads[1]") >= 2 and "output" in text
    # Long file names fold rather than end in an ellipsis: all their characters are present.
    assert "student_with_a_rather_lo" in text and "ng_file_name_02.json" in text


def test_a_narrow_console_continues_the_stage_columns_in_another_table():
    text = render(class_results(), width=60)
    students = text[:text.index("cells per stage")]
    assert "…" not in students and "class summary (continued, 2/" in students
    assert "heads[1]" in students and "output" in students
    assert max(len(line) for line in text.splitlines()) <= 60


def test_the_summary_fits_every_console_width_and_shows_carried_cells():
    for width in range(40, 131, 6):
        text = render(class_results(), width=width)
        students = text[:text.index("cells per stage")]
        assert "…" not in students, width
        assert max(len(line) for line in text.splitlines()) <= width, width
        assert students.count("8/8 ↪2") == 8, width  # 8 right, 2 of them carried, in 8 stages of 3 files


def test_file_names_in_the_summary_are_text_not_markup_or_controls():
    results = [("[bold red]x[/]\x1b[31m.json", two_heads(0), None), ("ok.json", None, "bad \x1b[2J")]
    text = render(results, width=200)
    assert "[bold" in text and "red]x[/]\\u001b[31m.json" in text and "\x1b" not in text
    assert "bad \\u001b[2J" in text


def test_a_file_name_with_wide_characters_is_not_folded_when_there_is_room():
    # The slow hostile-text fuzzer found it: the column was sized by len(), and ⺀ takes two cells.
    name = "/tmp/hx/\x1f⺀字.json"
    text = render([(name, two_heads(0), None)], width=200)
    assert "/tmp/hx/\\u001f⺀字.json" in text


def test_csv_gradebook_one_row_per_file_with_numbers_and_safe_text():
    results = class_results() + [("=HYPERLINK(1).json", two_heads(0), None), ("-1.json", None, "@SUM(A1)")]
    rows = list(csv.reader(io.StringIO(csv_gradebook(results))))
    assert rows[0][:4] == ["file", "score", "max", "percent"]
    assert rows[0][4:6] == ["heads[0].scores points", "heads[0].scores max"]
    assert rows[0][-2:] == ["diagnoses", "note"]
    assert len(rows) == 1 + len(results)
    assert rows[2][:4] == ["student_with_a_rather_long_file_name_01.json", "22", "40", "55.0"]
    assert rows[2][-2] == (f"heads[0].weights: {LONG[0]}; heads[0].weights: {LONG[1]}; "
                           f"heads[1].weights: {LONG[2]}; heads[1].weights: {LONG[3]}")
    assert rows[4][:4] == ["blank.json", "0", "40", "0.0"] and rows[4][4] == ""
    assert rows[4][-1].startswith("no answers found")
    assert rows[5][0] == "'=HYPERLINK(1).json" and rows[6][0] == "'-1.json" and rows[6][-1] == "'@SUM(A1)"
    for start in "=+-@":
        assert safe_cell(start + "x") == "'" + start + "x"
    assert safe_cell("\tx") == "\\u0009x" and safe_cell("\rx") == "\\u000dx"  # escaped, so no longer a start
    assert safe_cell(-1.5) == -1.5 and safe_cell("a=b") == "a=b"


def test_gradescope_results_one_test_per_stage():
    doc = gradescope(two_heads(1))
    assert doc["score"] == 22 and doc["output"] == "22/40 cells right (55%)"
    assert [t["name"] for t in doc["tests"]] == list(stage_sizes([("x", two_heads(1), None)]))
    weights = doc["tests"][1]
    assert (weights["score"], weights["max_score"], weights["status"]) == (3, 8, "failed")
    assert weights["output"].splitlines() == ["3/8 right (1 carried, 3 wrong, 1 imprecise, 1 missing)",
                                              f"{LONG[0]}: the words for {LONG[0]}",
                                              f"{LONG[1]}: the words for {LONG[1]}",
                                              "too few decimals cost 1 point once for the stage"]
    assert doc["tests"][0]["status"] == "passed"
    assert gradescope(None, "no answers found") == {"score": 0, "output": "could not be marked: no answers found",
                                                     "visibility": "visible", "tests": []}


def _class(tmp_path, n=3):
    (tmp_path / "problem.json").write_text(json.dumps(SCOOTER))
    files = []
    for i in range(n):
        path = tmp_path / f"s{i}.json"
        scaled = [0, 4, 2] if i == 1 else [0, 2.8284, 1.4142]
        path.write_text(json.dumps({"scaled": scaled, "weights": [0.0454, 0.7679, 0.1867]}))
        files.append(path)
    return files


def test_check_format_csv_and_gradescope_through_the_cli(run, tmp_path):
    files = _class(tmp_path)
    result = run("check", *files, "--problem", tmp_path / "problem.json", "--format", "csv")
    assert result.exit_code == 1
    rows = list(csv.reader(io.StringIO(result.stdout)))
    assert [r[0].rsplit("/", 1)[-1] for r in rows[1:]] == ["s0.json", "s1.json", "s2.json"]
    assert rows[2][1:4] == ["4", "6", "66.7"] and rows[2][-2] == "scaled: no_scale"
    one = run("check", files[0], "--problem", tmp_path / "problem.json", "--format", "csv")
    assert one.exit_code == 0 and len(one.stdout.splitlines()) == 2
    grade = run("check", files[1], "--problem", tmp_path / "problem.json", "--format", "gradescope")
    doc = json.loads(grade.stdout)
    assert doc["score"] == 4 and [t["name"] for t in doc["tests"]] == ["scaled", "weights"]
    assert "no_scale" in doc["tests"][0]["output"] and doc["tests"][0]["max_score"] == 3
    many = json.loads(run("check", *files, "--problem", tmp_path / "problem.json", "--format", "gradescope").stdout)
    assert [f["results"]["score"] for f in many["files"]] == [6, 4, 6]


def test_class_table_through_the_cli(run, tmp_path):
    files = _class(tmp_path)
    table = run("check", *files, "--problem", tmp_path / "problem.json", "--format", "table").stdout
    assert "class summary" in table and "cells per stage" in table and "no_scale" in table
    assert "2/3 files all correct" in table and "class mean 88.9%" in table


def test_one_bad_submission_still_gets_a_gradescope_results_json(run, tmp_path):
    # Gradescope reads results.json whatever the exit code: an empty one is "could not be parsed",
    # so a blank or broken submission must still score 0 with the reason, as in a class.
    (tmp_path / "problem.json").write_text(json.dumps(SCOOTER))
    blank, broken = tmp_path / "blank.json", tmp_path / "broken.json"
    blank.write_text("{}")
    broken.write_text('{"weights": [0.0454, 0.7679,]}')
    # A single file with no answers exits 2 in every format, as in table and JSON (trial item 6).
    for path, code, reason in [(blank, 2, "no answers found"), (broken, 2, "invalid JSON"),
                               (tmp_path / "absent.json", 2, "no such file")]:
        result = run("check", path, "--problem", tmp_path / "problem.json", "--format", "gradescope")
        assert result.exit_code == code, result.stderr
        doc = json.loads(result.stdout)
        assert doc["score"] == 0 and doc["tests"] == [] and reason in doc["output"]
        rows = list(csv.reader(io.StringIO(run("check", path, "--problem", tmp_path / "problem.json",
                                               "--format", "csv").stdout)))
        assert rows[1][1] == "0" and reason in rows[1][-1]
    assert run("check", blank, "--problem", tmp_path / "problem.json", "--format", "json").exit_code == 2


def test_the_class_summary_warns_when_files_are_marked_out_of_different_maxima(run, tmp_path):
    # One learner answered only the scores (all right): 100% beside a full answer's 100%. The
    # teacher is told why, and how to mark every file out of the same.
    (tmp_path / "problem.json").write_text(json.dumps(SCOOTER))
    (tmp_path / "full.json").write_text(json.dumps({"weights": [0.0454, 0.7679, 0.1867], "output": [0.2775, 1.3491]}))
    (tmp_path / "scores.json").write_text(json.dumps({"scores": [0, 4, 2]}))
    files = [tmp_path / "full.json", tmp_path / "scores.json"]
    table = run("check", *files, "--problem", tmp_path / "problem.json", "--format", "table").stdout
    assert "marked out of different maxima (3 to 5 cells)" in table and "--require" in table
    same = run("check", *files, "--problem", tmp_path / "problem.json", "--format", "table",
               "--require", "scores,weights,output").stdout
    assert "different maxima" not in same and "scores.json" in same


def _mark(shape) -> StageMark:
    cells = np.full(shape, "correct")
    given = Answer(values=np.zeros(shape), decimals=np.full(shape, 4))
    return StageMark(given=given, cells=cells, expected=np.zeros(shape), diagnosis=(), notes=())


def test_a_stage_tables_points_by_head_path_beat_the_stage_name():
    """Mutation: stage_points tries the stage name before `heads[h].stage` for a tile table's path."""
    name = "heads[1].tiles[q 0-1, k 0-1]"
    assert stage_points(name, 4, {"heads[1].tiles": 5.0, "tiles": 2.0}) == 5.0
    assert stage_points(name, 4, {"tiles": 2.0}) == 2.0
    assert stage_points(name, 4, {"weights": 2.0}) == 4


def test_class_max_on_a_tie_takes_the_larger_maximum():
    """Mutation: class_max breaks a tie between maxima toward the smaller one."""
    small = {"weights": _mark((1, 3))}
    large = {"weights": _mark((1, 3)), "output": _mark((1, 2))}
    results = [("a.json", small, None), ("b.json", large, None), ("c.json", None, "unreadable")]
    assert class_max(results) == 5
    assert class_max(results[::-1]) == 5


def test_points_by_a_head_path_with_a_two_digit_head(run, problem_file):
    """Mutation: --points' STAGE_PATH takes one digit for the head (heads[\\d]), refusing heads[10]."""
    cube = [[[1.0, 0.5]]] * 11  # 11 heads, one query and one key each
    problem = problem_file({"Q": cube, "K": cube, "V": cube})
    key = run("compute", problem, "-f", "json")
    answers = problem_file(key.stdout, "answers.json")
    result = run("check", answers, "-p", problem, "--points", "heads[10].weights=2,weights=3", "-f", "csv")
    assert "is not STAGE=N" not in result.stderr
    assert result.exit_code == 0, result.stderr


def test_gradescope_names_the_submission_by_its_file_name(run, problem_file, tmp_path):
    """Found by a user trial (cosmetics): Gradescope's output names the submission by its file name, not
    the teacher's path."""
    answers = problem_file({"weightz": [[1, 2, 3]]}, "answers.json")
    alone = json.loads(run("check", answers, "--problem", SAMPLES / "scooter.json", "-f", "gradescope").stdout)
    right = problem_file({"weights": [[0.0454, 0.7679, 0.1867]]}, "b.json")
    both = json.loads(run("check", answers, right, "--problem", SAMPLES / "scooter.json", "-f", "gradescope").stdout)
    for output in (alone["output"], both["files"][0]["results"]["output"]):
        assert "no answers found in answers.json:" in output and str(tmp_path) not in output
    assert both["files"][0]["file"] == str(answers)  # the teacher's key: the path as given


SCOOTER_FILE = SAMPLES / "scooter.json"


GOOD_WEIGHTS = {"weights": [0.05, 0.77, 0.19]}


def test_without_ask_the_summary_says_how_many_stages_were_answered(run, problem_file):
    """Issue 16, "marks that are wrong" (this failed on the main it was filed against): without ask, the
    class summary says how many stages were answered."""
    files = [problem_file({"weights": [0.05, 0.77, 0.19]}, "a.json"), problem_file(GOOD_WEIGHTS, "b.json")]
    table = run("check", *files, "--problem", SCOOTER_FILE, "--format", "table").stdout
    assert "answered" in table and "1/4" in table


def test_the_gradescope_text_says_the_scaled_score(run, problem_file):
    problem = problem_file({"Q": [[0, 4]], "K": [[1, 0], [0, 1], [0.5, 0.5]], "V": [[2, 0], [0, 2], [1, -1]]})
    answers = problem_file({"weights": [0.0454, 0.7679, 0.1867], "output": [0.2775, 1.5]}, "a.json")
    doc = json.loads(run("check", answers, "-p", problem, "-f", "gradescope", "--max-score", "10").stdout)
    assert doc["score"] == 8 and doc["output"].startswith("8/10 points (80%)")  # not "4/5 cells right"
    plain = json.loads(run("check", answers, "-p", problem, "-f", "gradescope").stdout)
    assert plain["score"] == 4 and plain["output"].startswith("4/5 cells right (80%)")


# Gradescope's `output` copied a student's metadata with its control characters (an ESC that
# colours Gradescope's log view, a newline that forges a line, a bidi override); the CSV gradebook
# escaped them. Both say the same visible text now.
def test_gradescope_output_escapes_a_students_metadata_as_the_gradebook_does(run, tmp_path):
    answers = tmp_path / "ada.json"
    answers.write_text(json.dumps({"name": "Ada\x1b[31mRED\nscore: 100%", "student": "x\u202ey",
                                   "weights": [[0.0454, 0.7679, 0.1867]]}))
    results = json.loads(run("check", answers, "--problem", SAMPLES / "scooter.json", "-f", "gradescope").stdout)
    note = "name: Ada\\u001b[31mRED\\u000ascore: 100%; student: x\\u202ey"
    assert results["output"] == "3/3 cells right (100%)\n" + note
    gradebook = run("check", answers, "--problem", SAMPLES / "scooter.json", "-f", "csv").stdout
    assert list(csv.reader(io.StringIO(gradebook)))[1][-1] == note
    texts = [results["output"]] + [test["output"] for test in results["tests"]]
    assert not any(c in text for text in texts for c in "\x1b\u202e")
    unread = gradescope(None, f"{tmp_path}/b\x1bad.json: is a directory", file=f"{tmp_path}/b\x1bad.json")
    assert unread["output"] == "could not be marked: b\\u001bad.json: is a directory"


@pytest.mark.parametrize("options", [[], ["--points", "weights=6,output=2,imprecise=0.5"]])
def test_csv_gradebook_stage_columns_are_points_that_add_up_to_the_score(run, problem_file, options):
    """A stage's columns count what the score counts (points, a slip's cost once), not cells:
    `weights right 3/9` beside a score of 37.5 did not add up."""
    problem = problem_file(SCOOTER)
    files = [problem_file({"weights": [0.0454, 0.7679, 0.1867], "output": [0.2775, 1.3491]}, "full.json"),
             problem_file({"weights": [0.0, 0.8, 0.2], "output": [0.3, 1.3]}, "rounded.json"),
             problem_file({"weights": [0.3333, 0.3333, 0.3333], "output": [0.2775, 1.3491]}, "wrong.json")]
    result = run("check", *files, "-p", problem, "-f", "csv", *options)
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert list(rows[0])[4:8] == ["weights points", "weights max", "output points", "output max"]
    for row in rows:
        assert float(row["weights points"]) + float(row["output points"]) == pytest.approx(float(row["score"]))
        assert float(row["weights max"]) + float(row["output max"]) == pytest.approx(float(row["max"]))
    assert rows[1]["score"] != rows[0]["score"]  # the rounded file loses something, in its stages' columns too


def test_the_class_tables_stage_cells_are_points_that_add_up_to_the_score(run, problem_file):
    problem = problem_file(SCOOTER)
    files = [problem_file({"weights": [0.0, 0.8, 0.2], "output": [0.3, 1.3]}, "rounded.json"),
             problem_file({"weights": [0.3333, 0.3333, 0.3333], "output": [0.2775, 1.3491]}, "wrong.json")]
    table = run("check", *files, "-p", problem, "-f", "table", "--points", "weights=6,output=2").stdout
    row = next(line for line in table.splitlines() if "rounded.json" in line)
    assert [cell.strip() for cell in row.split("│")[2:-1]] == ["6/8", "75%", "2/4", "5/6", "1/2"]
    unscored = run("check", *files, "-p", problem, "-f", "table", "--require", "output").stdout
    assert "not scored" in next(line for line in unscored.splitlines() if "rounded.json" in line)
