"""`attn check` reads what learners actually write: numbers as strings, −∞ in several spellings,
CSV answers files, transposed matrices, some heads only, and classes of self-contained files."""

import json

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
    # ("Output" is read as output with a note, as JSON reads it: tests/test_trial3.py)
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


# Issue 29, item 3: the words a class writes, did-you-mean through them, commas and columns

@pytest.mark.parametrize("word, stage", [
    ("scaled_scores", "scaled"), ("Scaled Scores", "scaled"), ("softmax_weights", "weights"), ("context", "output"),
    ("attention_output", "output"), ("masked_logits", "scaled"), ("raw_scores", "scores"),
    ("scaled = scores / √d_k", "scaled"),  # a worksheet title copied as the key
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


@pytest.mark.parametrize("word, stage", [("scaled_score", "scaled"), ("contexts", "output"),
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
