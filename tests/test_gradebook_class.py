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
        "scores, scaled, weights, output\n")
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


CAUSAL = {"Q": [[1, 0], [0, 1]], "K": [[1, 0], [0, 1]], "V": [[1, 0], [0, 1]], "mask": "causal", "scale": 1}
# the exact stages (scale 1): scores = masked below the diagonal = I; weights e/(1+e) = 0.7311
CAUSAL_RIGHT = {"scores": [[1, 0], [0, 1]], "masked": [[1, None], [0, 1]],
                "weights": [[1, 0], [0.2689, 0.7311]], "output": [[1, 0], [0.2689, 0.7311]]}


def test_points_per_stage_make_ignoring_the_mask_cost_what_the_teacher_says(run, problem_file):
    problem = problem_file(CAUSAL)
    right = problem_file(CAUSAL_RIGHT, "right.json")
    no_mask = problem_file(CAUSAL_RIGHT | {"masked": [[1, 0], [0, 1]]}, "no_mask.json")
    args = ("--problem", problem, "--format", "csv")
    cells = run("check", right, no_mask, *args).stdout.splitlines()
    assert cells[2].startswith(f"{no_mask},15,16,93.8")  # one cell of 16: ignoring the mask is cheap
    points = run("check", right, no_mask, *args, "--points", "scores=1,masked=3,weights=2,output=2").stdout
    rows = points.splitlines()
    assert rows[1].startswith(f"{right},8,8,100.0")
    assert rows[2].startswith(f"{no_mask},7.25,8,90.6")  # masked: 3 points × 3/4 cells
    scope = json.loads(run("check", no_mask, "--problem", problem, "-f", "gradescope", "--points", "masked=3",
                           "--max-score", "100", "--visibility", "after_published").stdout)
    assert scope["visibility"] == "after_published" and {t["visibility"] for t in scope["tests"]} == {"after_published"}
    assert scope["score"] == round(100 * (4 + 2.25 + 4 + 4) / 15, 4)
    assert abs(sum(t["max_score"] for t in scope["tests"]) - 100) < 1e-3  # each rounded to 4 decimals


def test_points_and_visibility_are_checked(run, problem_file):
    for bad, fragment in (("weights", "is not STAGE=N"), ("wieghts=2", 'unknown stage "wieghts" (did you mean'),
                          ("weights=0", "a number above 0"), ("weights=x", "a number above 0"),
                          ("", 'is ""; expected STAGE=N')):
        result = run("check", problem_file(GOOD, "a.json"), SCOOTER, "--points", bad)
        assert result.exit_code == 2 and fragment in result.stderr and "--points" in result.stderr, bad
    assert run("check", problem_file(GOOD, "a.json"), SCOOTER, "--visibility", "sometimes").exit_code == 2


def test_lenient_json_marks_a_hand_written_file_with_a_note(run, problem_file):
    text = '{"weights": [0.05, 0.77 0.19], // my answer\n "output": [0.28, 1.35,],}'
    sloppy, good = problem_file(text, "sloppy.json"), problem_file(GOOD, "good.json")
    strict = run("check", sloppy, good, "--problem", SCOOTER, "--format", "csv").stdout.splitlines()
    assert strict[1].startswith(f"{sloppy},0,5,0.0") and "line 1, column 25" in strict[1]
    lenient = run("check", sloppy, good, "--problem", SCOOTER, "--format", "csv", "--lenient-json").stdout
    row = lenient.splitlines()[1]
    assert row.startswith(f"{sloppy},5,5,100.0")
    assert "read leniently: comments, trailing commas, missing commas between numbers" in row
    kept = problem_file('{"weights": [0.05, 0.77, 0.19], "name": "a // b, ]"}', "kept.json")
    row = run("check", kept, good, "-p", SCOOTER, "-f", "csv", "--lenient-json").stdout.splitlines()[1]
    assert row.endswith("\"name: a // b, ]\"")  # strings are never touched; a valid file is read strictly
    hopeless = problem_file('{"weights": [0.05, 0.77, 0.19]', "hopeless.json")
    row = run("check", hopeless, good, "-p", SCOOTER, "-f", "csv", "--lenient-json").stdout.splitlines()[1]
    assert row.startswith(f"{hopeless},0,5,0.0") and "invalid JSON" in row


def test_points_and_max_score_are_bounded(run, problem_file):
    """Found by the second user trial (issues 16 and 17): --points and --max-score of 1e308 or inf ended in
    an OverflowError; they are bounded: finite, above 0, at most 1,000,000."""
    good = problem_file(GOOD, "a.json")
    for options, flag in ((("--points", "weights=1e308,output=1e308", "-f", "csv"), "--points"),
                          (("--points", "weights=inf"), "--points"), (("--points", "weights=1000001"), "--points"),
                          (("--max-score", "inf", "-f", "gradescope"), "--max-score"),
                          (("--max-score", "1e308", "-f", "gradescope"), "--max-score"),
                          (("--max-score", "0", "-f", "gradescope"), "--max-score")):
        result = run("check", good, "-p", SCOOTER, *options)
        assert result.exit_code == 2 and result.stderr.count("\n") == 1, options
        assert result.stderr.startswith(f"error: {flag}: ") and "1,000,000" in result.stderr, options
    scope = json.loads(run("check", good, "-p", SCOOTER, "--max-score", "1e6", "--points", "weights=1e6",
                           "-f", "gradescope").stdout)
    assert scope["score"] == 1e6


TWO_HEADS = {"Q": [[1, 0, 0, 1]], "K": [[1, 0, 0, 1], [0, 1, 1, 0]], "V": [[1, 0], [0, 1]], "heads": 2}


def test_points_name_heads_the_problem_has_and_each_stage_once(run, problem_file):
    """Found by the second user trial (issues 16 and 17): --points naming a head the problem does not have,
    or a stage twice, is refused."""
    good = problem_file(GOOD, "a.json")
    for points, fragment in (("heads[1].weights=2", "the problem has one head; name the stage alone (weights=…)"),
                             ("heads[0].weights=2", "the problem has one head"),
                             ("weights=1,weights=2", '"weights" is given twice (weights=1 and weights=2)')):
        result = run("check", good, "-p", SCOOTER, "--points", points)
        assert result.exit_code == 2 and result.stderr.count("\n") == 1 and "--points" in result.stderr, points
        assert fragment in result.stderr, (points, result.stderr)
    two = problem_file(TWO_HEADS, "two.json")
    answers = problem_file({"heads": [{"weights": [0.5, 0.5]}, {"weights": [0.5, 0.5]}]}, "b.json")
    result = run("check", answers, "-p", two, "--points", "heads[2].weights=2")
    assert result.exit_code == 2 and "the problem has 2 heads, numbered from 0" in result.stderr
    assert run("check", answers, "-p", two, "--points", "heads[1].weights=2", "-f", "csv").exit_code in (0, 1)


FULL = {"scores": [[0, 4, 2]], "scaled": [[0, 2.8284, 1.4142]], "weights": [[0.0454, 0.7679, 0.1867]],
        "output": [[0.2775, 1.3491]]}


def _maxima(run, problem_file, *options):
    files = [problem_file({"weights": FULL["weights"], "output": FULL["output"]}, "good.json"),
             problem_file({"weights": FULL["weights"], "output": FULL["output"]}, "good2.json"),
             problem_file(FULL, "all.json"), problem_file(b"", "blank.json"),
             problem_file(b'{"weights": [1,', "broken.json")]
    result = run("check", *files, "--problem", SAMPLES / "scooter.json", "-f", "csv", *options)
    rows = [line.split(",") for line in result.stdout.splitlines()[1:]]
    return {row[0].rsplit("/", 1)[-1]: (int(row[1]), int(row[2])) for row in rows}, result


def test_with_require_every_file_is_out_of_the_required_cells(run, problem_file):
    """Found by a user trial: gradebook maxima: with --require every file is out of the required cells."""
    maxima, _ = _maxima(run, problem_file, "--require", "weights,output")
    assert maxima == {"good.json": (5, 5), "good2.json": (5, 5), "all.json": (5, 5), "blank.json": (0, 5),
                      "broken.json": (0, 5)}
    files = [problem_file(FULL, "all.json"), problem_file(b"", "blank.json")]
    doc = json.loads(run("check", *files, "--problem", SAMPLES / "scooter.json", "-f", "gradescope",
                         "--require", "weights,output").stdout)
    full, blank = (entry["results"] for entry in doc["files"])
    assert full["score"] == 5 and full["output"].startswith("5/5 cells right")
    assert [t["max_score"] for t in full["tests"]] == [0, 0, 3, 2]
    assert full["tests"][0]["output"].startswith("not required, not scored: 3/3 right")
    assert blank["score"] == 0


def test_without_require_an_unmarked_file_is_out_of_the_common_maximum(run, problem_file):
    """Found by a user trial: gradebook maxima: without --require, a file that could not be marked is out
    of the class's common maximum."""
    maxima, _ = _maxima(run, problem_file)
    assert maxima == {"good.json": (5, 5), "good2.json": (5, 5), "all.json": (11, 11), "blank.json": (0, 5),
                      "broken.json": (0, 5)}
