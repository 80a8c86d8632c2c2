"""`attn check` reads what learners actually write: numbers as strings, −∞ in several spellings,
CSV answers files, transposed matrices, some heads only, and classes of self-contained files."""

import json

import numpy as np
import pytest

from tests.conftest import SAMPLES, SCOOTER, assert_error

CAUSAL2 = {"Q": [[1, 0], [0, 1]], "K": [[1, 0], [0, 1]], "V": [[1, 2], [3, 4]], "mask": "causal"}
# masked = [[0.7071, −∞], [0, 0.7071]]


def marks(run, path, problem, *extra):
    result = run("check", path, problem, "--format", "json", *extra)
    assert result.exit_code in (0, 1), result.stderr
    return result.exit_code, json.loads(result.stdout)


def test_numbers_written_as_strings_keep_their_decimals(run, problem_file):
    code, doc = marks(run, problem_file({"weights": ["0.0454", "0.7679", " 0.1867 "]}, "a.json"),
                      problem_file(SCOOTER))
    assert code == 0 and doc["stages"]["weights"]["correct"] == 3
    code, doc = marks(run, problem_file({"weights": ["0.05", "0.8", "0.19"]}, "a.json"), problem_file(SCOOTER))
    assert doc["stages"]["weights"]["cells"] == [["correct", "imprecise", "correct"]]


def test_numbers_written_as_strings_with_a_unicode_minus(run, problem_file):
    scaled = [["−1.7678", "1.7678", "0.3536"], ["1.7678", "−1.7678", "−2.8284"]]  # U+2212, as typeset
    code, doc = marks(run, problem_file({"scaled": scaled}, "a.json"), problem_file(EXERCISE_5))
    assert code == 0 and doc["stages"]["scaled"]["correct"] == 6


@pytest.mark.parametrize("blocked", [None, "-inf", "-Inf", "−∞", "-∞"])
def test_masked_cells_spelled_every_way(run, problem_file, blocked):
    answers = {"masked": [[0.7071, blocked], [0, 0.7071]]}
    code, doc = marks(run, problem_file(answers, "a.json"), problem_file(CAUSAL2))
    assert code == 0, doc
    assert doc["stages"]["masked"]["notes"] == []


@pytest.mark.parametrize("bare", ["-inf", "-Infinity", "−∞"])
def test_a_bare_minus_infinity_in_an_answers_file(run, problem_file, bare):
    path = problem_file('{"masked": [[0.7071, %s], [0, 0.7071]], "remark": "-inf stays text"}' % bare, "a.json")
    result = run("check", path, problem_file(CAUSAL2), "--format", "json")
    assert result.exit_code == 2 and 'unknown key "remark"' in result.stderr  # the string was left alone
    path = problem_file('{"masked": [[0.7071, %s], [0, 0.7071]]}' % bare, "a.json")
    code, _ = marks(run, path, problem_file(CAUSAL2))
    assert code == 0
    assert_error(run("check", problem_file('{"weights": [0.1, %s, 0.2]}' % bare, "w.json"), SAMPLES / "scooter.json"),
                 "weights[1] is null; expected a number")


def test_a_large_negative_is_read_as_minus_infinity_with_a_note(run, problem_file):
    answers = {"masked": [[0.7071, -1e9], [0, 0.7071]]}
    code, doc = marks(run, problem_file(answers, "a.json"), problem_file(CAUSAL2))
    assert code == 0
    assert doc["stages"]["masked"]["notes"] == ["read -1e+09 as −∞ (a large negative stands for a blocked position)"]
    answers = {"masked": [["0.7071", "-1e9"], ["0", "0.7071"]]}
    code, doc = marks(run, problem_file(answers, "a.json"), problem_file(CAUSAL2))
    assert code == 0 and doc["stages"]["masked"]["notes"][0].startswith("read -1e+09 as −∞")
    result = run("check", problem_file(CAUSAL2), "--masked", "0.7071, -inf; 0, 0.7071", "--format", "json")
    assert result.exit_code == 0, result.stdout


def test_a_large_negative_where_a_value_belongs_is_wrong(run, problem_file):
    answers = {"masked": [[-1e9, -1e9], [0, 0.7071]]}
    code, doc = marks(run, problem_file(answers, "a.json"), problem_file(CAUSAL2))
    assert code == 1 and doc["stages"]["masked"]["cells"][0] == ["wrong", "correct"]


def test_a_string_that_is_not_a_number_is_an_error(run, problem_file):
    assert_error(run("check", problem_file({"weights": ["0.1", "x", 1]}, "a.json"), SAMPLES / "scooter.json"),
                 'weights[1] is the string "x"; expected a number')


CSV_ANSWERS = """weights
0.0229,0.7860,0.1911
0.9622,0.0280,0.0097

output
-1.2585,-2.7173
-2.9232,0.8588
"""
EXERCISE_5 = {"Q": [[1.5, -0.5], [-2, -1]], "K": [[-1.5, 0.5], [1.5, -0.5], [1, 2]],
              "V": [[-3, 1], [-2, -3], [2, -2]]}


def test_a_csv_answers_file(run, problem_file):
    code, doc = marks(run, problem_file(CSV_ANSWERS, "alice.csv"), problem_file(EXERCISE_5))
    assert code == 0 and doc["stages"]["weights"]["correct"] == 6 and doc["stages"]["output"]["right"] == 4


def test_a_tsv_answers_file_is_split_at_tabs(run, problem_file):
    code, doc = marks(run, problem_file("weights\n0.0454\t0.7679\t0.1867\n", "alice.tsv"), problem_file(SCOOTER))
    assert code == 0 and doc["stages"]["weights"]["correct"] == 3


def test_a_csv_answers_file_with_the_worksheets_labels(run, problem_file):
    # Copied from the worksheet's grid: a header of key names, each row starting with its query
    # (the first cell of the header empty, as pandas writes it). The labels are not answers.
    text = ("weights\n,w0,w1,w2\nq0,0.0229,0.7860,0.1911\nq1,0.9622,0.0280,0.0097\n"
            "output\nq0,-1.2585,-2.7173\nq1,-2.9232,0.8588\n"
            "scores\n,0,1,2\n0,-2.5,2.5,0.5\n1,2.5,-2.5,-4\n")
    code, doc = marks(run, problem_file(text, "alice.csv"), problem_file(EXERCISE_5))
    assert code == 0, doc
    assert doc["stages"]["weights"]["correct"] == 6 and doc["stages"]["output"]["right"] == 4
    assert doc["stages"]["scores"]["right"] == 6  # pandas' to_csv: the corner, then numbered names
    assert_error(run("check", problem_file("weights\n,a,b,c\nq0,0.1,0.2,0.7\n0.5,0.2,0.3\n", "bob.csv"),
                     problem_file(EXERCISE_5)), "bob.csv", "row 4", "label")


def test_csv_answers_in_a_class_with_heads_and_blocked_cells(run, problem_file):
    problem = problem_file({**CAUSAL2, "heads": 2, "Q": [[1, 0, 1, 0], [0, 1, 0, 1]],
                            "K": [[1, 0, 1, 0], [0, 1, 0, 1]], "V": [[1, 2], [3, 4]]})
    good = problem_file("heads[1].masked\n0.7071,-inf\n0,0.7071\n", "good.csv")
    blank_cell = problem_file("heads[0].masked\n0.7071,\n0,0.7071\n", "blank.csv")
    result = run("check", good, blank_cell, "--problem", problem, "--format", "json")
    assert result.exit_code == 0, result.stdout + result.stderr
    files = json.loads(result.stdout)["files"]
    assert files[0]["stages"]["heads[1].masked"]["right"] == 4 and files[1]["all_correct"]


@pytest.mark.parametrize("text, fragments", [
    ("0.1,0.2,0.3\n", ["alice.csv: row 1: numbers before any stage name"]),
    ("wieghts\n0.1,0.2,0.3\n", ['alice.csv: row 1: unknown stage "wieghts" (did you mean "weights"?)']),
    ("weights\n0.1,x,0.3\n", ['weights[0][1] is the string "x"; expected a number']),
    # a line meant as a stage name is one, not a row of the stage above ("weights[1] has 1 entry")
    # ("Output" is read as output with a note, as JSON reads it: test_csv_blocks_read_aliases_and_metadata_as_json_does)
    ("weights\n0.1,0.2,0.3\nouptut\n1,2\n", ['alice.csv: row 3: unknown stage "ouptut" (did you mean "output"?)']),
    ("weights\n0.1,0.2,0.3\n[bold]x\x1b[2J\n1,2\n", ['row 3: unknown stage "[bold]x\\u001b[2J"; stages are']),
    ("heads[1024].weights\n0.1,0.2,0.3\n", ['row 1: "heads[1024].weights" names head 1024']),
])
def test_csv_answer_errors(run, problem_file, text, fragments):
    assert_error(run("check", problem_file(text, "alice.csv"), SAMPLES / "scooter.json"), *fragments)


def test_a_transposed_matrix_is_wrong_and_diagnosed(run, problem_file):
    weights_t = [[0.0229, 0.9622], [0.7860, 0.0280], [0.1911, 0.0097]]  # keys × queries
    code, doc = marks(run, problem_file({"weights": weights_t}, "a.json"), problem_file(EXERCISE_5))
    weights = doc["stages"]["weights"]
    assert code == 1 and weights["wrong"] == 6 and weights["diagnosis"] == ["transposed"]
    assert weights["notes"] == ["transposed: wrote the matrix transposed: each row should be one query"]


def test_a_square_matrix_transposed_is_diagnosed(run, problem_file):
    problem = problem_file({"Q": [[1, 0], [0, 2]], "K": [[1, 1], [0, 1]], "V": [[1, 0], [0, 1]]})
    code, doc = marks(run, problem_file({"scores": [[1, 2], [0, 2]]}, "a.json"), problem)  # exact [[1, 0], [2, 2]]
    assert code == 1 and doc["stages"]["scores"]["diagnosis"] == ["transposed"]
    assert doc["stages"]["scores"]["notes"] == ["transposed: wrote the matrix transposed: each row should be one query"]


def test_some_heads_only(run, problem_file):
    computed = json.loads(run("compute", SAMPLES / "multihead.json", "--format", "json").stdout)
    answers = {"heads": [{"weights": computed["heads"][0]["weights"]}]}
    code, doc = marks(run, problem_file(answers, "a.json"), SAMPLES / "multihead.json")
    assert code == 0 and list(doc["stages"]) == ["heads[0].weights"]
    assert "heads[1].weights" in doc["not_answered"]
    answers = {"heads": [{}, {"weights": computed["heads"][1]["weights"]}]}
    assert marks(run, problem_file(answers, "a.json"), SAMPLES / "multihead.json")[0] == 0
    answers = {"heads": [{"weights": None}, {"weights": computed["heads"][1]["weights"]}]}  # a null stage too
    code, doc = marks(run, problem_file(answers, "a.json"), SAMPLES / "multihead.json")
    assert code == 0 and list(doc["stages"]) == ["heads[1].weights"]
    assert_error(run("check", problem_file({"heads": [{"wieghts": [[1]]}]}, "a.json"), SAMPLES / "multihead.json"),
                 'unknown key "wieghts" in heads[0] (did you mean "weights"?)')
    answers = {"heads": [None, {"weights": computed["heads"][1]["weights"]}]}  # null: head 0 not answered
    code, doc = marks(run, problem_file(answers, "a.json"), SAMPLES / "multihead.json")
    assert code == 0 and list(doc["stages"]) == ["heads[1].weights"]
    too_many = {"heads": [{}, {}, {}]}
    assert_error(run("check", problem_file(too_many, "a.json"), SAMPLES / "multihead.json"),
                 "heads lists 3 heads but the problem has 2")


def test_a_class_of_self_contained_files_needs_no_problem(run, problem_file):
    right = problem_file(dict(SCOOTER, weights=[0.0454, 0.7679, 0.1867]), "a.json")
    wrong = problem_file(dict(SCOOTER, scaled=[0, 4, 2]), "b.json")
    other = problem_file(dict(EXERCISE_5, weights=[[0.0229, 0.7860, 0.1911], [0.9622, 0.0280, 0.0097]]), "c.json")
    result = run("check", right, wrong, other, "--format", "json")
    assert result.exit_code == 1, result.stderr
    files = json.loads(result.stdout)["files"]
    assert [f["all_correct"] for f in files] == [True, False, True]
    assert files[1]["stages"]["scaled"]["diagnosis"] == ["no_scale"]


def test_a_file_without_a_problem_in_a_self_contained_class(run, problem_file):
    right = problem_file(dict(SCOOTER, weights=[0.0454, 0.7679, 0.1867]), "a.json")
    bare = problem_file({"weights": [0.0454, 0.7679, 0.1867]}, "b.json")
    result = run("check", right, bare, right, "--format", "json")
    assert result.exit_code == 2
    assert "b.json: holds answers but no problem (Q, K, V): name the problem with --problem" in result.stderr
    assert json.loads(result.stdout)["files"][0]["all_correct"]


def test_labels_in_the_marked_tables_are_shown_as_text(run, problem_file):
    problem = problem_file(dict(SCOOTER, query_labels=["[bold]q\x1b[31m"], key_labels=["[red]a", "b\u202e", "c"]))
    result = run("check", problem, "--weights", "0.0454, 0.7679, 0.1867", "--format", "table")
    assert result.exit_code == 0
    assert "[bold]q\\u001b[31m" in result.stdout and "[red]a" in result.stdout and "b\\u202e" in result.stdout
    assert "\x1b" not in result.stdout and "\u202e" not in result.stdout


def test_a_csv_answers_file_far_bigger_than_its_problem_is_refused_unread(run, problem_file):
    big = problem_file("weights\n" + "0.25,0.25,0.5\n" * 40_000, "big.csv")
    assert_error(run("check", big, SAMPLES / "scooter.json"), "big.csv: the file is",
                 "an answers file for this problem is at most")


def test_inline_answers_beside_a_key_are_the_only_answers(run, tmp_path):
    # A learner checks against the teacher's key (attn compute's JSON, every stage in it): the
    # key's stages are not the learner's, and the learner's --output is marked, not the key's.
    key = tmp_path / "key.json"
    key.write_text(run("compute", SAMPLES / "scooter.json", "--format", "json").stdout)
    result = run("check", key, "--output", "9, 9", "--format", "json")
    assert result.exit_code == 1, result.stdout
    doc = json.loads(result.stdout)
    assert list(doc["stages"]) == ["output"] and doc["stages"]["output"]["wrong"] == 2
    assert doc["not_answered"] == ["scores", "scaled", "weights"]
    result = run("check", key, "--weights", "0.0454, 0.7679, 0.1867", "--format", "json")
    assert result.exit_code == 0 and list(json.loads(result.stdout)["stages"]) == ["weights"]


def test_inline_answers_replace_an_answers_files_own_heads_entry(run, tmp_path):
    # Laid over an answers file, --weights replaces its weights wherever the file wrote them.
    answers = tmp_path / "a.json"
    answers.write_text(json.dumps({"heads": [{"weights": [[0.0454, 0.7679, 0.1867]]}]}))
    result = run("check", answers, SAMPLES / "scooter.json", "--weights", "0.10, 0.20, 0.70", "--format", "json")
    assert result.exit_code == 1 and json.loads(result.stdout)["stages"]["weights"]["wrong"] == 3


def test_weights_copied_with_the_tables_sum_column_say_so(run):
    # The weights table ends with a `sum` column; a learner copying the row takes it along.
    assert_error(run("check", SAMPLES / "scooter.json", "--weights", "0.0454, 0.7679, 0.1867, 1.0000"),
                 "--weights: weights has shape (1 × 4); expected (1 × 3): queries × keys",
                 "(leave out the table's sum column)")
    result = run("check", SAMPLES / "scooter.json", "--weights", "0.1, 0.2, 0.3, 0.4")
    assert "sum column" not in result.stderr  # a last column that is not the row's sum


def test_a_stage_written_twice_with_different_values_is_an_error(run, problem_file):
    # A one-head document may hold a stage at the top level and in heads[0] (as `attn compute`
    # writes the output): equal, that is one answer; different, no choice is made silently.
    problem = problem_file(SCOOTER, "p.json")
    right = [[0.0454, 0.7679, 0.1867]]
    twice = problem_file({"weights": [[0.5, 0.25, 0.25]], "heads": [{"weights": right}]}, "a.json")
    assert_error(run("check", twice, problem), "a.json: weights is given at the top level and in heads[0], "
                 "with different values; keep one")
    output = problem_file({"output": [[0.2775, 1.3491]], "heads": [{"output": [[9, 9]]}]}, "o.json")
    assert_error(run("check", output, problem), "output is given at the top level and in heads[0]")
    same = problem_file({"weights": right, "output": [[0.2775, 1.3491]],
                         "heads": [{"weights": right, "output": [[0.2775, 1.3491]]}]}, "s.json")
    assert run("check", same, problem, "-f", "json").exit_code == 0


SCOOTER_FILE = SAMPLES / "scooter.json"


def test_a_large_negative_must_be_at_most_minus_1e9(run, problem_file):
    """Mutation: LARGE_NEGATIVE = -1e8: -5e8 in a blocked cell is a (wrong) number, not −∞."""
    causal = problem_file({"Q": [[1, 0], [0, 1]], "K": [[1, 0], [0, 1]], "V": [[1], [2]], "mask": "causal", "scale": 1})
    result = run("check", causal, "--masked", "1, -5e8; 0, 1", "--format", "json")
    masked = json.loads(result.stdout)["stages"]["masked"]
    assert masked["cells"] == [["correct", "wrong"], ["correct", "correct"]]
    assert masked["notes"] == []


def _stage(run, *args, name):
    result = run("check", *args, "--format", "json")
    assert result.exit_code in (0, 1), result.stderr
    return json.loads(result.stdout)["stages"][name]


def test_a_large_negative_in_a_transposed_answer_is_read_where_the_problem_blocks(run, problem_file):
    """Mutation: _as_blocked does not turn the blocked cells round for an answer written keys ×
    queries, so its -1e9 are never read as −∞."""
    path = problem_file({"Q": [[1, 0], [0, 1]], "K": [[1, 0], [0, 1], [1, 1]], "V": [[1], [2], [3]],
                         "mask": "causal", "scale": 1})
    masked = _stage(run, path, "--masked", "1,0;-1e9,1;-1e9,-1e9", name="masked")
    assert "read -1e+09 as −∞ (a large negative stands for a blocked position)" in masked["notes"]
    assert "transposed" in masked["diagnosis"]


@pytest.mark.parametrize("key, value", [("decimals", 4), ("ask", ["weights"])])
def test_an_answers_files_own_ask_and_decimals_are_set_aside(run, problem_file, key, value):
    """Mutation: ASKED loses "decimals" (or "ask"): an answers file that is a filled-in exercise,
    with its marking settings, is then refused for an unknown key."""
    answers = problem_file({"weights": [[0.0454, 0.7679, 0.1867]], key: value}, "answers.json")
    result = run("check", answers, "-p", SCOOTER_FILE, "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["right"] == 3
    assert "unknown" not in result.stderr + result.stdout


@pytest.mark.parametrize("key", ["Name", "STUDENT_ID", "Comment"])
def test_metadata_keys_are_read_whatever_their_case(run, problem_file, key):
    """Mutation: answer_keys compares a key with METADATA as written, so `Name` is an unknown key."""
    answers = problem_file({"weights": [[0.0454, 0.7679, 0.1867]], key: "Ada"}, "answers.json")
    result = run("check", answers, "-p", SCOOTER_FILE, "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["right"] == 3


GOOD = {"weights": [0.05, 0.77, 0.19], "output": [0.28, 1.35]}


def test_a_csv_stage_block_given_twice_is_refused(run, problem_file):
    """Found by the second user trial (issues 16 and 17): a CSV answers file with a stage block twice is
    refused, naming the stage and both rows."""
    twice = problem_file("weights\n0.05,0.77,0.19\noutput\n0.28,1.35\nweights\n0.1,0.8,0.1\n", "twice.csv")
    result = run("check", twice, "-p", SCOOTER_FILE)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "weights is given twice, at rows 1 and 5; keep one block" in result.stderr
    heads = problem_file("heads[0].weights\n0.05,0.77,0.19\nheads[00].weights\n0.1,0.8,0.1\n", "heads.csv")
    assert "heads[0].weights is given twice, at rows 1 and 3" in run("check", heads, "-p", SCOOTER_FILE).stderr
    once = problem_file("weights\n0.05,0.77,0.19\noutput\n0.28,1.35\n", "once.csv")
    assert run("check", once, "-p", SCOOTER_FILE).exit_code == 0


def test_check_given_a_problem_set_says_how_to_pick_one(run, problem_file):
    """Found by the second user trial (issues 16 and 17): attn check given a problem set says how to pick
    one, as compute does."""
    problems = json.loads(run("exercise", "--count", "3", "--answers").stdout)
    assert len(problems["problems"]) == 3
    path = problem_file(problems, "set.json")
    for args in ((path,), (path, "--weights", "1,2"), (problem_file(GOOD, "a.json"), path),
                 (problem_file(GOOD, "b.json"), "-p", path)):
        result = run("check", *args)
        assert result.exit_code == 2 and result.stderr.count("\n") == 1, args
        assert "a problem set of 3 problems (from attn exercise): pick one, e.g. jq '.problems[0]'" in result.stderr
    assert "a problem set of 3 problems" in run("compute", path).stderr


def _npz(run, tmp_path, name, change=None, only=None):
    path = tmp_path / "c.npz"
    if not path.exists():
        assert run("compute", SCOOTER_FILE, "-o", path).exit_code == 0
    with np.load(path) as archive:
        arrays = {key: archive[key] for key in archive.files}
    if change:
        arrays = change(arrays)
    if only:
        arrays = {key: arrays[key] for key in only}
    out = tmp_path / name
    np.savez(out, **arrays)
    return out


def test_npz_heads_members_are_marked(run, tmp_path):
    """Found by the third user trial of attn check (issue 16): an .npz's heads/<stage> members are the
    per-head answers, marked as the JSON's heads are."""
    good = _npz(run, tmp_path, "good.npz")
    result = run("check", good, "-p", SCOOTER_FILE, "-f", "csv")
    assert result.exit_code == 0 and result.stdout.splitlines()[1].split(",")[1:3] == ["11", "11"]
    half = _npz(run, tmp_path, "half.npz", lambda a: a | {"heads/weights": np.full_like(a["heads/weights"], 0.5)})
    result = run("check", half, "-p", SCOOTER_FILE, "-f", "csv")
    assert result.exit_code == 1 and result.stdout.splitlines()[1].split(",")[1:3] == ["8", "11"]
    nan = _npz(run, tmp_path, "nan.npz", lambda a: a | {"heads/weights": np.full_like(a["heads/weights"], np.nan)})
    result = run("check", nan, "-p", SCOOTER_FILE)
    assert result.exit_code == 2 and "heads[0].weights[0][0] is nan" in result.stderr
    only = _npz(run, tmp_path, "only.npz", only=("heads/weights",))
    result = run("check", only, "-p", SCOOTER_FILE, "-f", "json")
    assert result.exit_code == 0 and json.loads(result.stdout)["stages"]["weights"]["right"] == 3
    for files in ((only, SCOOTER_FILE), (SCOOTER_FILE, only)):  # told from the problem by its heads/ members
        assert run("check", *files, "-f", "csv").stdout.splitlines()[1].split(",")[1:3] == ["3", "3"], files
    tampered = _npz(run, tmp_path, "k.npz", lambda a: a | {"heads/K": a["heads/K"] + 1})
    result = run("check", tampered, "-p", SCOOTER_FILE)
    assert result.exit_code == 2 and "heads[0].K" in result.stderr


def test_npz_heads_member_headers_are_checked_before_reading(run, tmp_path):
    """Found by the third user trial of attn check (issue 16): an .npz's heads/<stage> members' headers are
    checked before they are read."""
    two = _npz(run, tmp_path, "two.npz", lambda a: a | {"heads/weights": np.zeros((2, 1, 3))})
    result = run("check", two, "-p", SCOOTER_FILE)
    assert result.exit_code == 2 and "heads/weights is declared float64 (2, 1, 3)" in result.stderr
    big = _npz(run, tmp_path, "big.npz", lambda a: a | {"heads/weights": np.zeros((1, 1, 500))})
    assert "heads/weights is declared" in run("check", big, "-p", SCOOTER_FILE).stderr


def test_csv_blocks_read_aliases_and_metadata_as_json_does(run, problem_file):
    """Found by the third user trial of attn check (issue 16): CSV answers sort their keys as JSON's do:
    aliases read with a note, metadata set aside."""
    weights = "0.0454,0.7679,0.1867\n"
    alias = problem_file("attention_weights\n" + weights, "alias.csv")
    doc = json.loads(run("check", alias, "-p", SCOOTER_FILE, "-f", "json").stdout)
    assert doc["all_correct"] and doc["stages"]["weights"]["notes"] == ['read "attention_weights" as weights']
    meta = problem_file("name,Ada\nweights\n" + weights + "student_id,12345\n", "meta.csv")
    result = run("check", meta, "-p", SCOOTER_FILE)
    assert result.exit_code == 0, result.stderr
    row = run("check", meta, meta, "-p", SCOOTER_FILE, "-f", "csv").stdout.splitlines()[1]
    assert row.endswith(",name: Ada; student_id: 12345")
    other_case = problem_file("weights\n" + weights + "Output\n0.2775,1.3491\n", "case.csv")
    doc = json.loads(run("check", other_case, "-p", SCOOTER_FILE, "-f", "json").stdout)
    assert doc["all_correct"] and doc["stages"]["output"]["notes"] == ['read "Output" as output']
    both = problem_file("Weights\n" + weights + "weights\n" + weights, "both.csv")
    assert "keep one" in run("check", both, "-p", SCOOTER_FILE).stderr
    # a block's first row is still a header, even when its corner is a metadata word (pandas' index name)
    header = problem_file("heads[0].probs\nid,mechanic,scooter,petrol\nit," + weights, "header.csv")
    assert run("check", header, "-p", SCOOTER_FILE).exit_code == 0


def test_csv_decimal_comma_cells_are_read_at_their_cell(run, problem_file):
    """Found by the third user trial of attn check (issue 16): a decimal-comma cell in answers CSV is
    refused, naming its own cell (never taken as a label)."""
    for text, cell in (('weights\n"0,0454","0,7679","0,1867"\n', 'weights[0][0] "0,0454"'),
                       ('weights\n0.0454,"0,7679",0.1867\n', 'weights[0][1] "0,7679"'),
                       ('weights\n,a,b,c\nit,0.0454,"0,7679",0.1867\n', 'weights[0][1] "0,7679"'),
                       ("weights\n0.0454\t0,7679\t0.1867\n", 'weights[0][1] "0,7679"')):
        name = "a.tsv" if "\t" in text else "a.csv"
        result = run("check", problem_file(text, name), "-p", SCOOTER_FILE, "-f", "json")
        assert result.exit_code == 0, (text, result.stderr)
        notes = json.loads(result.stdout)["stages"]["weights"]["notes"]
        assert notes == [f"read {cell} as {cell.split(chr(34))[1].replace(',', '.')}, a decimal written with a "
                         "comma; write decimals with a point"], text


def test_an_empty_answers_file_says_answers_were_expected(run, problem_file):
    """Found by a user trial: an empty answers file is "empty file: no answers", with what was expected."""
    empty = problem_file(b"", "answers.json")
    assert_error(run("check", empty, "--problem", SAMPLES / "scooter.json"),
                 "answers.json: empty file: no answers; write at least one of")
    result = run("check", empty, "--problem", SAMPLES / "scooter.json", "-f", "gradescope")
    assert "empty file: no answers" in json.loads(result.stdout)["output"]


def test_messages_nan_in_answers_and_the_problems_own_stages(run, problem_file):
    """Found by a user trial (messages that said the wrong thing): NaN in answers, and the stages of the
    problem at hand."""
    nan = problem_file('{"weights": [[NaN, 1, 0]]}', "nan.json")
    result = run("check", nan, "--problem", SAMPLES / "scooter.json")
    assert_error(result, "NaN is not valid JSON; write −∞ as null (a bias's blocked cells, or an answer's masked ones)")
    for content in ("{}", ""):
        result = run("check", problem_file(content, "a.json"), "--problem", SAMPLES / "scooter.json")
        assert_error(result, "write at least one of scores, scaled, weights, output")
    result = run("check", problem_file("{}", "a.json"), "--problem", SAMPLES / "rope.json")
    assert "write at least one of Q_rope, K_rope, scores, scaled, masked, weights, output" in result.stderr


def _marks_of(run, *args, name="weights"):
    result = run("check", *args, "--format", "json")
    assert result.exit_code in (0, 1), result.stderr
    return json.loads(result.stdout)["stages"][name]


BIASED = {"Q": [[1, 0]], "K": [[1, 0], [-1, 0], [0, 1]], "V": [[1], [2], [3]], "bias": [[0, -1e9, 0]], "scale": 1}


def test_the_tools_own_key_passes_its_own_check_with_a_finite_bias(run, problem_file):
    """Issue 16, "marks that are wrong" (this failed on the main it was filed against): a large negative is
    −∞ only where the problem's cell is −∞: the tool's own key passes its own check with a finite
    bias of -1e9."""
    problem = problem_file(BIASED)
    key = run("compute", problem, "-f", "json")
    assert key.exit_code == 0
    answers = problem_file(key.stdout, "key.json")
    result = run("check", answers, problem, "--format", "json")
    assert result.exit_code == 0, result.stdout
    assert json.loads(result.stdout)["right"] == 13
    masked = _marks_of(run, problem, "--masked", "1, -1e9, 0", name="masked")
    assert masked["notes"] == []  # a number (equal to -1000000001 within 1e-9 of its size), not −∞
    minus_infinity = _marks_of(run, problem, "--masked", "1, -inf, 0", name="masked")
    assert minus_infinity["cells"] == [["correct", "wrong", "correct"]]


def test_a_large_negative_where_the_problem_blocks_is_read_as_minus_infinity(run, problem_file):
    """Issue 16, "marks that are wrong" (this failed on the main it was filed against): a large negative is
    −∞ where the problem blocks, and only there."""
    causal = problem_file({"Q": [[1, 0], [0, 1]], "K": [[1, 0], [0, 1]], "V": [[1], [2]], "mask": "causal", "scale": 1})
    masked = _marks_of(run, causal, "--masked", "1, -1e9; 0, 1", name="masked")
    assert masked["cells"] == [["correct"] * 2] * 2
    assert masked["notes"] == ["read -1e+09 as −∞ (a large negative stands for a blocked position)"]
    wrong_place = _marks_of(run, causal, "--masked", "1, -1e9; -1e9, 1", name="masked")
    assert wrong_place["cells"] == [["correct", "correct"], ["wrong", "correct"]]


GOOD_WEIGHTS = {"weights": [0.05, 0.77, 0.19]}


SELF = {"Q": [0, 4], "K": [[1, 0], [0, 1], [0.5, 0.5]], "V": [[2, 0], [0, 2], [1, -1]]}


def test_two_self_contained_files_are_each_marked(run, problem_file):
    """Issue 16, "marks that are wrong" (this failed on the main it was filed against): with two files,
    which is the problem is decided by content: two self-contained files are each marked."""
    alice = problem_file(SELF | {"weights": [0.05, 0.77, 0.19]}, "alice.json")
    bob = problem_file(SELF | {"weights": [0.33, 0.33, 0.33]}, "bob.json")
    result = run("check", alice, bob, "--format", "csv")
    assert result.exit_code == 1, result.stdout
    rows = result.stdout.splitlines()
    assert rows[1].startswith(f"{alice},3,3,100.0") and rows[2].startswith(f"{bob},0,3,0.0")


def test_answers_are_never_taken_as_the_problem(run, problem_file):
    """Issue 16, "marks that are wrong" (this failed on the main it was filed against): with two files,
    answers are never taken as the problem, whatever the order."""
    answers = problem_file({"weights": [0.05, 0.77, 0.19]}, "answers.json")
    for order in ((answers, SCOOTER_FILE), (SCOOTER_FILE, answers)):
        result = run("check", *order, "--format", "json")
        assert result.exit_code == 0, result.stderr
        assert json.loads(result.stdout)["right"] == 3


def test_two_bare_problems_ask_for_the_problem_option(run, problem_file):
    """Issue 16, "marks that are wrong" (this failed on the main it was filed against): two bare problems
    ask for --problem."""
    other = problem_file(SELF, "other.json")
    result = run("check", SCOOTER_FILE, other)
    assert result.exit_code == 2
    assert "hold a problem and no answers: name the problem with --problem" in result.stderr


def test_metadata_keys_are_set_aside_and_shown_in_the_gradebook(run, problem_file):
    """Issue 16, "marks that are wrong" (this failed on the main it was filed against): metadata keys are
    set aside and shown in the gradebook."""
    ada = problem_file({"name": "Ada", "student_id": "s123", "comment": "done", "weights": [0.05, 0.77, 0.19]},
                       "ada.json")
    result = run("check", ada, SCOOTER_FILE, "--format", "json")
    assert result.exit_code == 0 and json.loads(result.stdout)["right"] == 3
    book = run("check", ada, "--problem", SCOOTER_FILE, "--format", "csv").stdout.splitlines()
    assert book[1].startswith(f"{ada},3,3,100.0") and book[1].endswith("name: Ada; student_id: s123; comment: done")


def test_aliases_are_read_as_their_stage_with_a_note(run, problem_file):
    """Issue 16, "marks that are wrong" (this failed on the main it was filed against): aliases are read as
    their stage, with a note."""
    for key in ("attention_weights", "attn_weights", "probs", "softmax", "attention", "Weights"):
        weights = _marks_of(run, problem_file({key: [0.05, 0.77, 0.19]}, "a.json"), SCOOTER_FILE)
        assert weights["right"] == 3 and weights["notes"] == [f'read "{key}" as weights'], key
    scaled = _marks_of(run, problem_file({"logits": [0, 2.83, 1.41]}, "a.json"), SCOOTER_FILE, name="scaled")
    assert scaled["right"] == 3  # the scaled scores: what this problem's softmax reads
    causal = problem_file({"Q": [[1, 0], [0, 1]], "K": [[1, 0], [0, 1]], "V": [[1], [2]], "mask": "causal",
                           "scale": 1})
    masked = _marks_of(run, problem_file({"logits": [[1, "-inf"], [0, 1]]}, "a.json"), causal, name="masked")
    assert masked["right"] == 4
    both = run("check", problem_file({"softmax": [0.05, 0.77, 0.19], "weights": [0.05, 0.77, 0.19]}, "b.json"),
               SCOOTER_FILE)
    assert both.exit_code == 2 and 'both "weights" and "softmax" (read as weights) are given' in both.stderr


def test_did_you_mean_prefers_the_stages_a_learner_could_mean(run, problem_file):
    """Issue 16, "marks that are wrong" (this failed on the main it was filed against): did-you-mean
    prefers the stages a learner could mean."""
    result = run("check", problem_file({"attention_weight": [0.05, 0.77, 0.19]}, "a.json"), SCOOTER_FILE)
    assert result.exit_code == 2 and '(did you mean "weights"?)' in result.stderr
    assert "d_weights" not in result.stderr


def test_an_unknown_key_in_a_class_is_a_note_and_the_rest_is_marked(run, problem_file):
    """Issue 16, "marks that are wrong" (this failed on the main it was filed against): an unknown key in a
    class is a note, and the rest is marked."""
    odd = problem_file({"weights": [0.05, 0.77, 0.19], "foo": 1}, "odd.json")
    good = problem_file(GOOD_WEIGHTS, "good.json")
    result = run("check", odd, good, "--problem", SCOOTER_FILE, "--format", "csv")
    rows = result.stdout.splitlines()
    assert rows[1].startswith(f"{odd},3,3,100.0") and 'unknown key ""foo"" not marked' in rows[1]
    table = run("check", odd, good, "--problem", SCOOTER_FILE, "--format", "table").stdout
    assert 'unknown key "foo" not marked' in table


# Issue 29, item 3: the words a class writes, did-you-mean through them, commas and columns

@pytest.mark.parametrize("word, stage", [
    ("scaled_scores", "scaled"), ("Scaled Scores", "scaled"), ("softmax_weights", "weights"), ("context", "output"),
    ("attention_output", "output"), ("masked_logits", "scaled"), ("raw_scores", "scores"),
    ("scaled = scores / √d_k", "scaled"),  # a worksheet title copied as the key
    # a plural reads as its singular, for every word of the alias table
    ("contexts", "output"), ("attentions", "weights"), ("outputs", "output"), ("context_vectors", "output"),
    ("dot_products", "scores"), ("similarities", "scores"), ("attention_matrices", "weights"),
    ("Scaled_Scores", "scaled"),
])
def test_aliases_a_class_writes_are_read_with_a_note(run, problem_file, word, stage):
    values = {"scores": [0, 4, 2], "scaled": [0, 2.8284, 1.4142], "weights": [0.0454, 0.7679, 0.1867],
              "output": [0.2775, 1.3491]}[stage]
    code, doc = marks(run, problem_file({word: values}, "a.json"), problem_file(SCOOTER))
    assert code == 0 and list(doc["stages"]) == [stage]
    assert doc["stages"][stage]["notes"] == [f'read "{word}" as {stage}']


@pytest.mark.parametrize("values, stage", [([0, 4, 2], "scores"), ([0, 2.8284, 1.4142], "scaled"),
                                           ([0.0454, 0.7679, 0.1867], "weights")])
def test_attention_scores_is_read_as_the_stage_it_holds(run, problem_file, values, stage):
    code, doc = marks(run, problem_file({"attention_scores": values}, "a.json"), problem_file(SCOOTER))
    assert code == 0 and list(doc["stages"]) == [stage]


def test_a_scaled_stage_labelled_scaled_scores_counts_in_a_class(run, problem_file):
    problem = problem_file(SCOOTER)
    files = [problem_file({"scaled_scores": [0, 2.8284, 1.4142], "weights": [0.0454, 0.7679, 0.1867]}, f"{i}.json")
             for i in range(2)]
    result = run("check", *files, "-p", problem, "--require", "scaled,weights", "-f", "csv")
    assert result.stdout.splitlines()[1].split(",")[1:4] == ["6", "6", "100.0"]


@pytest.mark.parametrize("word, stage", [("scaled_score", "scaled"), ("contxt", "output"),
                                         ("softmax_weight", "weights")])
def test_did_you_mean_points_to_the_stage_an_alias_is(run, problem_file, word, stage):
    result = run("check", problem_file({word: [0, 2.8284, 1.4142]}, "a.json"), problem_file(SCOOTER))
    assert_error(result, f'unknown key "{word}"', f'did you mean "{stage}"?')


@pytest.mark.parametrize("output", ["3,1", "0,2", "0.2775,1.3491"])
def test_commas_in_a_one_row_answer_are_two_numbers(run, output):
    doc = json.loads(run("check", SAMPLES / "scooter.json", "--output", output, "-f", "json").stdout)
    assert not any("did you mean" in note for note in doc["stages"]["output"]["notes"])


def test_a_decimal_comma_where_one_number_is_due_is_still_caught(run, problem_file):
    problem = problem_file({"Q": [[1]], "K": [[1]], "V": [[2]]})
    assert_error(run("check", problem, "--output", "0,7311"), "did you mean 0.7311?")


def test_one_querys_answer_written_as_a_column_is_its_row(run, problem_file):
    code, doc = marks(run, problem_file({"weights": [[0.0454], [0.7679], [0.1867]]}, "a.json"),
                      problem_file(SCOOTER))
    assert code == 0 and doc["stages"]["weights"]["correct"] == 3 and doc["stages"]["weights"]["diagnosis"] == []
    assert doc["stages"]["weights"]["notes"] == ["read a column as the one query's row (each row of an answer is "
                                                 "one query)"]


def test_a_class_writing_contexts_and_attentions_is_marked_in_full(run, problem_file):
    files = [problem_file({"attentions": [0.0454, 0.7679, 0.1867], "contexts": [0.2775, 1.3491]}, f"{i}.json")
             for i in range(2)]
    result = run("check", *files, "-p", problem_file(SCOOTER), "-f", "csv")
    assert [line.split(",")[1:4] for line in result.stdout.splitlines()[1:]] == [["5", "5", "100.0"]] * 2
    assert "unknown key" not in result.stdout


@pytest.mark.parametrize("option, meant", [
    ("--output=0,2775 1,3491", "0.2775 1.3491"), ("--output=0,2775; 1,3491", "0.2775 1.3491"),
    ("--weights=0,0454,0,7679,0,1867", "0.0454 0.7679 0.1867"), ("--weights=0,0454 0,7679 0,1867", "0.0454 0.7679 0.1867"),
])
def test_inline_decimal_commas_that_give_the_stages_shape_are_named(run, option, meant):
    result = run("check", SAMPLES / "scooter.json", option)
    assert_error(result, f"did you mean {meant}?", "Write decimals with a point")
    assert "separate the entries of a row with commas" not in result.stderr


def test_a_decimal_comma_hint_is_never_piled_with_precision_advice(run):
    doc = json.loads(run("check", SAMPLES / "scooter.json", "--output", "0,2775", "-f", "json").stdout)
    output = doc["stages"]["output"]
    assert output["imprecise"] == 0 and output["wrong"] == 2
    assert any("did you mean 0.2775?" in note for note in output["notes"])
    assert not any("imprecise" in note or "decimals cost" in note for note in output["notes"])


def test_inline_decimal_commas_do_not_change_what_an_ordinary_reading_fits(run, problem_file):
    problem = problem_file({"Q": [[1, 0], [0, 1]], "K": [[1, 0], [0, 1]], "V": [[2, 0], [0, 2]]})
    result = run("check", problem, "--output", "0,2775; 1,3491", "-f", "json")  # two queries' rows: 2 × 2
    assert result.exit_code == 1 and "did you mean" not in result.stdout
