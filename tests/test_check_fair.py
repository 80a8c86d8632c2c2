"""Issue 16, "marks that are wrong": each item a test that failed on the main it was filed against."""

import json

import numpy as np
from conftest import SAMPLES

SCOOTER = SAMPLES / "scooter.json"


def stage(run, *args, name="weights"):
    result = run("check", *args, "--format", "json")
    assert result.exit_code in (0, 1), result.stderr
    return json.loads(result.stdout)["stages"][name]


# 1. Few decimals: imprecise only when the exact value correctly rounded, else wrong

def test_a_wrong_value_with_few_decimals_is_wrong_not_imprecise(run):
    output = stage(run, SCOOTER, "--output", "0.4,1.2", name="output")  # exact 0.2775, 1.3491
    assert output["cells"] == [["wrong", "wrong"]]
    weights = stage(run, SCOOTER, "--weights", "0.1,0.7,0.2")  # exact 0.0454, 0.7679, 0.1867
    assert weights["cells"] == [["wrong", "wrong", "imprecise"]]
    rounded = stage(run, SCOOTER, "--weights", "0.0,0.8,0.2")  # each correctly rounded to 1 decimal
    assert rounded["cells"] == [["imprecise"] * 3]


def test_a_tie_at_the_decimals_written_rounds_either_way(run, problem_file):
    halves = problem_file({"Q": [[0, 0]], "K": [[1, 0], [0, 1]], "V": [[0.25], [0.25]]})
    assert stage(run, halves, "--output", "0.2", name="output")["cells"] == [["imprecise"]]
    assert stage(run, halves, "--output", "0.3", name="output")["cells"] == [["imprecise"]]
    assert stage(run, halves, "--output", "0.1", name="output")["cells"] == [["wrong"]]


# 2. A diagnosis is named only when its numbers give the learner's at their precision

def test_a_diagnosis_the_numbers_contradict_is_not_named(run):
    weights = stage(run, SCOOTER, "--weights", "1,1,1")
    # no_softmax gives the scaled scores 0.71, 1.41, 2.12: 2 at no decimals, not 1
    assert "no_softmax" not in weights["diagnosis"]
    # one query row normalised over its one query: 1 in every cell, exactly what was written
    assert weights["diagnosis"] == ["softmax_wrong_axis"]
    one_decimal = stage(run, SCOOTER, "--weights", "0.1,0.7,0.2")
    assert one_decimal["diagnosis"] == ["scale_by_dk"]  # softmax(0, 2, 1) = 0.09, 0.67, 0.24: 0.1, 0.7, 0.2


# 3. A large negative is −∞ only where the problem's cell is −∞

BIASED = {"Q": [[1, 0]], "K": [[1, 0], [-1, 0], [0, 1]], "V": [[1], [2], [3]], "bias": [[0, -1e9, 0]], "scale": 1}


def test_the_tools_own_key_passes_its_own_check_with_a_finite_bias(run, problem_file):
    problem = problem_file(BIASED)
    key = run("compute", problem, "-f", "json")
    assert key.exit_code == 0
    answers = problem_file(key.stdout, "key.json")
    result = run("check", answers, problem, "--format", "json")
    assert result.exit_code == 0, result.stdout
    assert json.loads(result.stdout)["right"] == 13
    masked = stage(run, problem, "--masked", "1, -1e9, 0", name="masked")
    assert masked["notes"] == []  # a number (equal to -1000000001 within 1e-9 of its size), not −∞
    minus_infinity = stage(run, problem, "--masked", "1, -inf, 0", name="masked")
    assert minus_infinity["cells"] == [["correct", "wrong", "correct"]]


def test_a_large_negative_where_the_problem_blocks_is_read_as_minus_infinity(run, problem_file):
    causal = problem_file({"Q": [[1, 0], [0, 1]], "K": [[1, 0], [0, 1]], "V": [[1], [2]], "mask": "causal", "scale": 1})
    masked = stage(run, causal, "--masked", "1, -1e9; 0, 1", name="masked")
    assert masked["cells"] == [["correct"] * 2] * 2
    assert masked["notes"] == ["read -1e+09 as −∞ (a large negative stands for a blocked position)"]
    wrong_place = stage(run, causal, "--masked", "1, -1e9; -1e9, 1", name="masked")
    assert wrong_place["cells"] == [["correct", "correct"], ["wrong", "correct"]]


# 5. One hostile file never stops a class

GOOD = {"weights": [0.05, 0.77, 0.19]}


def test_an_empty_tile_list_is_a_blank_file_and_the_class_goes_on(run, problem_file):
    good, hostile = problem_file(GOOD, "good.json"), problem_file({"tiles": []}, "tiles.json")
    for fmt in ("csv", "gradescope", "json", "table"):
        result = run("check", good, hostile, "--problem", SCOOTER, "--format", fmt)
        assert result.exit_code == 1, (fmt, result.stdout, result.stderr)
    rows = run("check", good, hostile, "--problem", SCOOTER, "--format", "csv").stdout.splitlines()
    assert rows[1].startswith(f"{good},3,3,100.0") and rows[2].startswith(f"{hostile},0,3,0.0")
    tests = json.loads(run("check", good, hostile, "--problem", SCOOTER, "-f", "gradescope").stdout)
    assert [f["results"]["score"] for f in tests["files"]] == [3, 0]


def test_a_file_no_rule_foresaw_scores_0_with_its_reason(run, problem_file, monkeypatch):
    from attncli.commands import check_run

    real = check_run.mark_document

    def fragile(trace, doc, **settings):
        if "boom" in doc:
            raise ZeroDivisionError("a slip in the marker")
        return real(trace, doc, **settings)

    monkeypatch.setattr(check_run, "mark_document", fragile)
    good, bad = problem_file(GOOD, "good.json"), problem_file(GOOD | {"boom": 1}, "bad.json")
    result = run("check", good, bad, "--problem", SCOOTER, "--format", "csv")
    assert result.exit_code == 2
    rows = result.stdout.splitlines()
    assert rows[1].startswith(f"{good},3,3,100.0")
    assert rows[2].startswith(f"{bad},0,3,0.0") and "ZeroDivisionError: a slip in the marker" in rows[2]


# 6. Two files: which is the problem is decided by content

SELF = {"Q": [0, 4], "K": [[1, 0], [0, 1], [0.5, 0.5]], "V": [[2, 0], [0, 2], [1, -1]]}


def test_two_self_contained_files_are_each_marked(run, problem_file):
    alice = problem_file(SELF | {"weights": [0.05, 0.77, 0.19]}, "alice.json")
    bob = problem_file(SELF | {"weights": [0.33, 0.33, 0.33]}, "bob.json")
    result = run("check", alice, bob, "--format", "csv")
    assert result.exit_code == 1, result.stdout
    rows = result.stdout.splitlines()
    assert rows[1].startswith(f"{alice},3,3,100.0") and rows[2].startswith(f"{bob},0,3,0.0")


def test_answers_are_never_taken_as_the_problem(run, problem_file):
    answers = problem_file({"weights": [0.05, 0.77, 0.19]}, "answers.json")
    for order in ((answers, SCOOTER), (SCOOTER, answers)):
        result = run("check", *order, "--format", "json")
        assert result.exit_code == 0, result.stderr
        assert json.loads(result.stdout)["right"] == 3


def test_two_bare_problems_ask_for_the_problem_option(run, problem_file):
    other = problem_file(SELF, "other.json")
    result = run("check", SCOOTER, other)
    assert result.exit_code == 2
    assert "hold a problem and no answers: name the problem with --problem" in result.stderr


# 4. Metadata keys, aliases, and unknown keys per key

def test_metadata_keys_are_set_aside_and_shown_in_the_gradebook(run, problem_file):
    ada = problem_file({"name": "Ada", "student_id": "s123", "comment": "done", "weights": [0.05, 0.77, 0.19]},
                       "ada.json")
    result = run("check", ada, SCOOTER, "--format", "json")
    assert result.exit_code == 0 and json.loads(result.stdout)["right"] == 3
    book = run("check", ada, "--problem", SCOOTER, "--format", "csv").stdout.splitlines()
    assert book[1].startswith(f"{ada},3,3,100.0") and book[1].endswith("name: Ada; student_id: s123; comment: done")


def test_aliases_are_read_as_their_stage_with_a_note(run, problem_file):
    for key in ("attention_weights", "attn_weights", "probs", "softmax", "attention", "Weights"):
        weights = stage(run, problem_file({key: [0.05, 0.77, 0.19]}, "a.json"), SCOOTER)
        assert weights["right"] == 3 and weights["notes"] == [f'read "{key}" as weights'], key
    scaled = stage(run, problem_file({"logits": [0, 2.83, 1.41]}, "a.json"), SCOOTER, name="scaled")
    assert scaled["right"] == 3  # the scaled scores: what this problem's softmax reads
    causal = problem_file({"Q": [[1, 0], [0, 1]], "K": [[1, 0], [0, 1]], "V": [[1], [2]], "mask": "causal",
                           "scale": 1})
    masked = stage(run, problem_file({"logits": [[1, "-inf"], [0, 1]]}, "a.json"), causal, name="masked")
    assert masked["right"] == 4
    both = run("check", problem_file({"softmax": [0.05, 0.77, 0.19], "weights": [0.05, 0.77, 0.19]}, "b.json"),
               SCOOTER)
    assert both.exit_code == 2 and 'both "weights" and "softmax" (read as weights) are given' in both.stderr


def test_did_you_mean_prefers_the_stages_a_learner_could_mean(run, problem_file):
    result = run("check", problem_file({"attention_weight": [0.05, 0.77, 0.19]}, "a.json"), SCOOTER)
    assert result.exit_code == 2 and '(did you mean "weights"?)' in result.stderr
    assert "d_weights" not in result.stderr


def test_an_unknown_key_in_a_class_is_a_note_and_the_rest_is_marked(run, problem_file):
    odd = problem_file({"weights": [0.05, 0.77, 0.19], "foo": 1}, "odd.json")
    good = problem_file(GOOD, "good.json")
    result = run("check", odd, good, "--problem", SCOOTER, "--format", "csv")
    rows = result.stdout.splitlines()
    assert rows[1].startswith(f"{odd},3,3,100.0") and 'unknown key ""foo"" not marked' in rows[1]
    table = run("check", odd, good, "--problem", SCOOTER, "--format", "table").stdout
    assert 'unknown key "foo" not marked' in table


# 8. A problem carries what it asks: "ask" (stages) and "decimals", required by default

ASKING = dict(SELF, ask=["weights", "output"], decimals=3)


def test_a_problems_ask_is_required_and_its_decimals_apply(run, problem_file):
    problem = problem_file(ASKING)
    partial = problem_file({"weights": [0.045, 0.768, 0.187]}, "a.json")
    result = run("check", partial, problem, "--format", "json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["missing"] == ["output"] and (doc["right"], doc["max"]) == (3, 5)
    two = stage(run, problem_file({"weights": [0.05, 0.77, 0.19]}, "b.json"), problem)
    assert two["cells"] == [["imprecise"] * 3]  # 3 decimals asked
    override = run("check", partial, problem, "--format", "json", "--require", "weights", "--decimals", "2")
    assert override.exit_code == 0  # the options win over the problem's


def test_ask_and_decimals_are_checked(run, problem_file):
    for bad, fragment in (({"ask": ["wieghts"]}, "ask is"), ({"ask": "weights"}, "ask is"),
                          ({"decimals": 2.5}, "decimals is the number 2.5"), ({"decimals": 40}, "from 0 to 17")):
        result = run("check", problem_file({"weights": [0.05, 0.77, 0.19]}, "a.json"), problem_file(SELF | bad))
        assert result.exit_code == 2 and fragment in result.stderr, bad


def test_the_api_reads_ask_and_decimals_from_the_problem(problem_file):
    from attncli import check

    marks = check({"weights": [[0.045, 0.768, 0.187]]}, problem_file(ASKING))
    assert marks.score == (3, 5) and not marks.all_correct
    assert check({"weights": [[0.045, 0.768, 0.187]]}, ASKING, require=()).all_correct


def test_without_ask_the_summary_says_how_many_stages_were_answered(run, problem_file):
    files = [problem_file({"weights": [0.05, 0.77, 0.19]}, "a.json"), problem_file(GOOD, "b.json")]
    table = run("check", *files, "--problem", SCOOTER, "--format", "table").stdout
    assert "answered" in table and "1/4" in table


# 9. No more credit for showing less: carrying on from a too-coarse stage is rounding early

def test_carrying_on_from_a_stage_with_too_few_decimals_costs_the_precision_once(run):
    # hidden, the early rounding costs the output its precision mark (1 point of 2) ...
    alone = stage(run, SCOOTER, "--output", "0.2000,1.4000", name="output")
    assert alone["cells"] == [["wrong", "wrong"]] and alone["diagnosis"] == ["rounded_early"]
    assert (alone["points"], alone["worth"]) == (1, 2)
    # ... shown, it costs the weights' (2 of 3), and the output computed from them is carried (issue 29)
    shown = json.loads(run("check", SCOOTER, "--weights", "0.0,0.8,0.2", "--output", "0.2000,1.4000",
                           "-f", "json").stdout)
    assert shown["stages"]["output"]["cells"] == [["carried", "carried"]] and shown["stages"]["output"]["points"] == 2
    assert (shown["stages"]["weights"]["imprecise"], shown["stages"]["weights"]["points"]) == (3, 2)
    # from weights wrong at 4 decimals (a real slip, precisely written) the output is still carried
    carried = run("check", SCOOTER, "--weights", "0.1000,0.7000,0.2000", "--output", "0.4000,1.2000", "-f", "json")
    assert json.loads(carried.stdout)["stages"]["output"]["cells"] == [["carried", "carried"]]


# 7. Students setting their own problem; size caps; .npz answer bombs

def test_a_file_setting_its_own_easy_problem_is_flagged_in_a_class(run, problem_file):
    files = [problem_file(SELF | {"weights": [0.05, 0.77, 0.19]}, f"s{i}.json") for i in range(3)]
    cheat = problem_file({"Q": [[0]], "K": [[0]], "V": [[0]], "weights": [[1]], "output": [[0]]}, "cheat.json")
    result = run("check", *files, cheat, "--format", "csv")
    row = result.stdout.splitlines()[4]
    assert row.startswith(f"{cheat},2,2,100.0") and "its problem differs from the class's (3 of 4 files share one)" in row
    assert f"warning: {cheat}: its problem differs" in result.stderr
    with_problem = run("check", *files, cheat, "--problem", SCOOTER, "--format", "csv").stdout.splitlines()[4]
    assert with_problem.startswith(f"{cheat},0,") and "hold their own problem" in with_problem


def test_a_files_own_problem_is_size_capped(run, problem_file):
    big = problem_file({"Q": [[0]] * 9000, "K": [[0]] * 9000, "V": [[0]] * 9000, "weights": [[1]]}, "big.json")
    files = [problem_file(SELF | {"weights": [0.05, 0.77, 0.19]}, f"s{i}.json") for i in range(2)]
    result = run("check", *files, big, "--format", "csv")
    row = result.stdout.splitlines()[3]
    assert row.startswith(f"{big},0,") and "its own problem has 81,000,000 scores" in row


def test_an_npz_answers_bomb_is_refused_from_its_zip_directory(run, tmp_path, problem_file):
    import numpy as np

    bomb = tmp_path / "bomb.npz"
    np.savez_compressed(bomb, weights=np.zeros((1, 3)), output=np.zeros((4000, 2000)))
    assert bomb.stat().st_size < 200_000  # 61 MiB of zeros, compressed
    result = run("check", bomb, problem_file(GOOD, "good.json"), "--problem", SCOOTER, "--format", "csv")
    row = result.stdout.splitlines()[1]
    assert row.startswith(f"{bomb},0,") and "its arrays unpack to 61 MiB; an answers file for this problem" in row


def test_a_students_file_name_reaches_the_terminal_as_text(run, problem_file):
    """The class's stderr lines name students' files: a name's controls are escaped, as in errors."""
    files = [problem_file(SELF | {"weights": [0.05, 0.77, 0.19]}, f"s{i}.json") for i in range(3)]
    cheat = problem_file({"Q": [[0]], "K": [[0]], "V": [[0]], "weights": [[1]]}, "a\x1b[2J\u202eb.json")
    result = run("check", *files, cheat, "--format", "csv")
    assert "a\\u001b[2J\\u202eb.json: its problem differs" in result.stderr
    assert "\x1b" not in result.stderr and "\u202e" not in result.stderr


def test_the_decimals_noted_are_the_decimals_written_not_the_minus_infinity_cells():
    from attncli.marking.grading import Answer

    masked = Answer(values=np.array([[1.4, -np.inf], [0.0, 0.7]]), decimals=np.array([[1, -1], [1, 1]]))
    assert masked.precision == 1  # a −∞ cell has no decimals (it counted as 4)
    assert Answer(values=np.full((1, 2), -np.inf), decimals=np.full((1, 2), -1)).precision == 0
