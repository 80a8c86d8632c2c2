"""Issues 16 and 17, the second user trial: what a teacher and a hostile user found (lane
trial2-fixes). One test (or a few) per item, most severe first."""

import json

from conftest import SAMPLES

SCOOTER = SAMPLES / "scooter.json"
GOOD = {"weights": [0.05, 0.77, 0.19], "output": [0.28, 1.35]}


# 1. --points and --max-score are bounded: finite, above 0, at most 1,000,000 (no OverflowError)
def test_points_and_max_score_are_bounded(run, problem_file):
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


# 2. a problem's ask (and --require, --points) covers every answer key check marks
def _exercise(run, tmp_path, *args):
    doc = json.loads(run("exercise", *args, "--answers").stdout)
    path = tmp_path / "key.json"
    path.write_text(json.dumps(doc))
    return doc, path


def _csv_row(run, answers, key, *options):
    result = run("check", answers, "-p", key, "-f", "csv", *options)
    header, row = result.stdout.splitlines()[:2]
    return result.exit_code, dict(zip(header.split(","), row.split(",")))


def test_an_asked_tile_not_given_is_missing(run, tmp_path, problem_file):
    doc, key = _exercise(run, tmp_path, "--seed", "3", "--kind", "tiles")
    assert doc["ask"] == ["tiles"] and len(doc["heads"][0]["tiles"]) == 2
    first = problem_file({"tiles": doc["heads"][0]["tiles"][:1]}, "first.json")
    code, row = _csv_row(run, first, key)
    assert code == 1 and (row["score"], row["max"]) == ("5", "10")
    # Stages answered beyond what is asked are marked and shown but not scored (README "A teacher's
    # workflow"): a file of weights alone is 0 of the two tiles' 10 cells.
    weights = problem_file({"weights": doc["heads"][0]["weights"]}, "weights.json")
    code, row = _csv_row(run, weights, key)
    assert code == 1 and (row["score"], row["max"]) == ("0", "10") and row["weights right"] == "3"
    code, row = _csv_row(run, weights, key, "--points", "tiles=2")  # each tile table is worth 2
    assert code == 1 and (row["score"], row["max"]) == ("0", "4")
    assert _csv_row(run, weights, key, "--require", "weights")[0] == 0


def test_asked_gradients_not_given_are_missing(run, tmp_path, problem_file):
    doc, key = _exercise(run, tmp_path, "--seed", "5", "--kind", "backward")
    assert len(doc["ask"]) == 11 and "d_V" in doc["ask"]
    forward = problem_file({s: doc["heads"][0][s] for s in ("scores", "scaled", "weights", "output")}, "fwd.json")
    code, row = _csv_row(run, forward, key)
    assert code == 1 and row["d_V max"] == "6" and row["d_V right"] == "0" and row["score"] == "11"
    # --require replaces the problem's ask: only d_V is scored (2 points), the forward stages are shown
    code, row = _csv_row(run, forward, key, "--require", "d_V", "--points", "d_V=2")
    assert code == 1 and (row["score"], row["max"]) == ("0", "2") and row["weights right"] == "3"


def test_an_asked_slip_not_given_is_missing(run, tmp_path, problem_file):
    doc, key = _exercise(run, tmp_path, "--seed", "5", "--find-the-slip")
    assert doc["ask"] == ["slip"]
    scores = problem_file({"scores": doc["heads"][0]["scores"]}, "scores.json")
    code, row = _csv_row(run, scores, key)
    # Only what is asked is scored: the slip's two cells; the scores are marked and shown.
    assert code == 1 and (row["slip right"], row["slip max"], row["score"], row["max"]) == ("0", "2", "0", "2")
    assert row["scores right"] == "3"
    assert _csv_row(run, scores, key, "--points", "slip=4")[1]["max"] == "4"
    plain = problem_file({"weights": [0.05, 0.77, 0.19]}, "plain.json")
    refused = run("check", plain, "-p", SCOOTER, "--require", "slip")
    assert refused.exit_code == 2 and "plants no slip" in refused.stderr
    refused = run("check", plain, "-p", SCOOTER, "--require", "d_Q")
    assert refused.exit_code == 2 and "no dO" in refused.stderr
    assert run("check", plain, "-p", SCOOTER, "--require", "tilez").exit_code == 2


# 3. a CSV answers file with a stage block twice is refused, naming the stage and both rows
def test_a_csv_stage_block_given_twice_is_refused(run, problem_file):
    twice = problem_file("weights\n0.05,0.77,0.19\noutput\n0.28,1.35\nweights\n0.1,0.8,0.1\n", "twice.csv")
    result = run("check", twice, "-p", SCOOTER)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "weights is given twice, at rows 1 and 5; keep one block" in result.stderr
    heads = problem_file("heads[0].weights\n0.05,0.77,0.19\nheads[00].weights\n0.1,0.8,0.1\n", "heads.csv")
    assert "heads[0].weights is given twice, at rows 1 and 3" in run("check", heads, "-p", SCOOTER).stderr
    once = problem_file("weights\n0.05,0.77,0.19\noutput\n0.28,1.35\n", "once.csv")
    assert run("check", once, "-p", SCOOTER).exit_code == 0


# 4. --points naming a head the problem does not have, or a stage twice, is refused
TWO_HEADS = {"Q": [[1, 0, 0, 1]], "K": [[1, 0, 0, 1], [0, 1, 1, 0]], "V": [[1, 0], [0, 1]], "heads": 2}


def test_points_name_heads_the_problem_has_and_each_stage_once(run, problem_file):
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


# 5. every warning printed on stderr is in the JSON's "warnings" too (and reads back)
def test_a_warning_on_stderr_is_in_the_json_too(run, tmp_path):
    args = ("--q", "0,4", "--k", "1,0;0,1;.5,.5", "--v", "2,0;0,2;1,-1", "--alibi-slopes", "1e6",
            "--q-positions", "9007199254740992", "--dtype", "float32")
    result = run("compute", *args, "-f", "json")
    printed = [line.removeprefix("warning: ") for line in result.stderr.splitlines()]
    warnings = json.loads(result.stdout)["warnings"]
    assert result.exit_code == 0 and any("ALiBi distances" in w for w in warnings) and printed == warnings
    written = tmp_path / "o.json"
    written.write_text(result.stdout)
    again = run("compute", written, "-f", "json")
    assert again.exit_code == 0 and json.loads(again.stdout)["warnings"] == warnings
    causal = run("compute", "--q", "1,0", "--k", "1,0;0,1", "--v", "1;2", "--mask", "causal", "-f", "json")
    assert "mask causal is top-left" in json.loads(causal.stdout)["warnings"][0] and "top-left" in causal.stderr


# 6. attn check given a problem set says so, as compute does
def test_check_given_a_problem_set_says_how_to_pick_one(run, problem_file):
    problems = json.loads(run("exercise", "--count", "3", "--answers").stdout)
    assert len(problems["problems"]) == 3
    path = problem_file(problems, "set.json")
    for args in ((path,), (path, "--weights", "1,2"), (problem_file(GOOD, "a.json"), path),
                 (problem_file(GOOD, "b.json"), "-p", path)):
        result = run("check", *args)
        assert result.exit_code == 2 and result.stderr.count("\n") == 1, args
        assert "a problem set of 3 problems (from attn exercise): pick one, e.g. jq '.problems[0]'" in result.stderr
    assert "a problem set of 3 problems" in run("compute", path).stderr


# 7. a label column or header row of decimal-comma numbers (TSV, quoted CSV) is refused
def test_decimal_commas_are_never_taken_as_labels_or_a_header(run, problem_file):
    for text, name, fragment in (("2,5\t3\n1,5\t4\n", "a.tsv", '"2,5", read as the row\'s label'),
                                 ("0,5\t1,25\n2\t3\n", "b.tsv", '"0,5", read as a header'),
                                 ('"0,5","1,25"\n2,3\n', "c.csv", '"0,5", read as a header')):
        result = run("compute", "--q", problem_file(text, name), "--k", "1,1", "--v", "1", "-f", "json")
        assert result.exit_code == 2 and result.stderr.count("\n") == 1, text
        assert fragment in result.stderr and "write decimals with a point" in result.stderr, result.stderr
    labels = problem_file("a\t1.5\nb\t2.5\n", "labels.tsv")
    assert run("compute", "--q", labels, "--k", "1", "--v", "1", "-f", "json").exit_code == 0
    header = problem_file("d0\td1\n0.5\t1.25\n", "header.tsv")
    assert run("compute", "--q", header, "--k", "1,1", "--v", "1", "-f", "json").exit_code == 0


# 8. attn compute refuses a bad ask or decimals, with attn check's words
def test_compute_refuses_a_bad_ask_or_decimals_as_check_does(run, problem_file):
    problem = {"Q": [[1, 0]], "K": [[1, 0], [0, 1]], "V": [[1], [2]]}
    answers = problem_file({"weights": [[0.73, 0.27]]}, "a.json")
    for setting, fragment in ((("ask", ["wieghts"]), 'naming an unknown stage "wieghts" (did you mean "weights"?)'),
                              (("ask", "weights"), "ask is"), (("decimals", -1), "decimals is the number -1"),
                              (("decimals", True), "decimals is true"), (("decimals", 2.5), "decimals is")):
        path = problem_file(problem | dict([setting]), "p.json")
        computed, checked = run("compute", path, "-f", "json"), run("check", answers, "-p", path)
        assert computed.exit_code == checked.exit_code == 2, setting
        assert fragment in computed.stderr and computed.stderr == checked.stderr, (computed.stderr, checked.stderr)
    fine = problem_file(problem | {"ask": ["weights", "d_V", "tiles"], "decimals": 3}, "fine.json")
    assert run("compute", fine, "-f", "json").exit_code == 0


# 9. a matrix option of - reads that matrix from stdin (as a .csv file is read); stdin is then not the document
def test_a_matrix_option_of_dash_reads_the_matrix_from_stdin(run):
    result = run("compute", "--q", "-", "--k", "1,0,0", "--v", "1", "-f", "json", input="1,0,0\n")
    assert result.exit_code == 0 and json.loads(result.stdout)["Q"] == [[1, 0, 0]]
    result = run("compute", "--q", "-", "--k", "1,0", "--v", "1", "-f", "json", input="[[1, 0], [0, 1]]")
    assert result.exit_code == 0 and json.loads(result.stdout)["Q"] == [[1, 0], [0, 1]]
    labelled = run("compute", "--q", "-", "--k", "1,0;0,1", "--v", "1;2", "-f", "json", input="a,1,0\nb,0,1\n")
    assert json.loads(labelled.stdout)["query_labels"] == ["a", "b"]
    for args, stdin, fragment in ((("--q", "-", "--k", "-", "--v", "1"), "1,0,0\n", "--q: is -, and so is --k"),
                                  (("-", "--q", "-", "--k", "1,0,0", "--v", "1"), "1,0,0\n", "and so is FILE"),
                                  (("--q", "-", "--k", "1,0,0", "--v", "1"), "", "stdin is empty"),
                                  (("--q", "-", "--k", "1,0", "--v", "1"), "1,0\n", "two whole numbers")):
        refused = run("compute", *args, input=stdin)
        assert refused.exit_code == 2 and refused.stderr.count("\n") == 1 and fragment in refused.stderr, args
    piped = run("compute", "--q", "1,0;0,1", "--k", "1,0;0,1", "--v", "1;2", "-f", "json", input='{"mask": "causal"}')
    assert json.loads(piped.stdout)["mask_rule"].startswith("causal")  # stdin as the document, as before
