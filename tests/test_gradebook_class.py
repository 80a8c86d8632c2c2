"""Issue 16, "a teacher's gradebook": empty files, the summary's count, syntax errors located,
points per stage, Gradescope's max score and visibility, lenient JSON."""

import json

from conftest import SAMPLES

SCOOTER = SAMPLES / "scooter.json"
GOOD = {"weights": [0.05, 0.77, 0.19], "output": [0.28, 1.35]}


def test_an_empty_file_says_so_and_counts_as_a_blank(run, problem_file):
    empty, good = problem_file("", "empty.json"), problem_file(GOOD, "good.json")
    alone = run("check", empty, SCOOTER)
    assert alone.exit_code == 2 and alone.stderr == (
        f"error: {empty}: empty file: no answers; write at least one of "
        "Q_rope, K_rope, scores, scaled, capped, masked, weights, output\n")
    result = run("check", empty, good, "--problem", SCOOTER, "--format", "csv")
    assert result.exit_code == 1  # a blank in a class, as "no answers found"
    assert result.stdout.splitlines()[1].startswith(f"{empty},0,5,0.0,,,,,,\"empty file: no answers")
    blank_csv = problem_file("\n\n", "blank.csv")
    assert "empty file" in run("check", blank_csv, good, "-p", SCOOTER, "-f", "csv").stdout


def test_the_summary_counts_every_file(run, problem_file):
    files = [problem_file(GOOD, "a.json"), problem_file("{", "b.json"), problem_file({}, "c.json")]
    table = run("check", *files, "--problem", SCOOTER, "--format", "table").stdout
    assert "1/3 files all correct; 2 could not be marked" in table


def test_a_json_syntax_error_is_located_in_the_gradebook_and_gradescope(run, problem_file):
    bad = problem_file('{"weights": [0.05, 0.77\n 0.19]}', "bad.json")
    good = problem_file(GOOD, "good.json")
    book = run("check", bad, good, "--problem", SCOOTER, "--format", "csv").stdout.splitlines()
    assert book[1].startswith(f"{bad},0,5,0.0") and "invalid JSON at line 2, column 2" in book[1]
    scope = json.loads(run("check", bad, good, "--problem", SCOOTER, "--format", "gradescope").stdout)
    assert scope["files"][0]["results"]["score"] == 0
    assert "invalid JSON at line 2, column 2" in scope["files"][0]["results"]["output"]
