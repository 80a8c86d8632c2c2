"""Tests added by the third mutation round (marking, input, --cost, options, safe text): each one
fails under a plausible mistake in recent code that the rest of the suite let through, and passes on
the real code. The mutation each test guards is named in its docstring."""

import json

import numpy as np
import pytest
from conftest import SAMPLES

from attncli.base.errors import visible
from attncli.compute import cost
from attncli.document.reading import build_problem
from attncli.marking.grading import Answer, StageMark
from attncli.render.gradebook import class_max, stage_points

SCOOTER = SAMPLES / "scooter.json"
QKV = ("--q", "1,0;0,1", "--k", "1,0;0,1", "--v", "1,0;0,1")


def _mark(shape) -> StageMark:
    cells = np.full(shape, "correct")
    given = Answer(values=np.zeros(shape), decimals=np.full(shape, 4))
    return StageMark(given=given, cells=cells, expected=np.zeros(shape), diagnosis=(), notes=())


def test_invisible_operators_up_to_u2064_are_escaped():
    """Mutation: the word joiner's range stops at U+2063, so U+2064 (invisible plus) shows nothing."""
    for c in ("\u2061", "\u2062", "\u2063", "\u2064"):
        assert visible(f"{c}ok.json") == f"\\u{ord(c):04x}ok.json"


def test_markdown_autolink_escape_ignores_case():
    """Mutation: the autolink pattern loses re.IGNORECASE: `WWW.evil.example` and `HTTPS://…` are
    autolinked by GitHub's Markdown all the same."""
    from attncli.compute.attention import attend
    from attncli.render.export import markdown

    doc = json.loads(SCOOTER.read_text())
    trace = attend(build_problem(dict(doc, key_labels=["WWW.evil.example", "b", "c"])))
    text = markdown(trace, ("weights",), 4, [], None)
    assert "WWW\\.evil.example" in text and "WWW.evil" not in text


def test_the_key_tile_is_the_ceiling_of_sram_over_4_d_itemsize():
    """Mutation: B_c = M // (4·d·itemsize), the floor: 196609 bytes over 4·64·4 is 192.001, so 193."""
    problem = build_problem({"Q": np.zeros((1024, 64)), "K": np.zeros((1024, 64)), "V": np.zeros((1024, 64)),
                             "dtype": "float32"})
    assert cost.cost(problem, 196609).tiling.block_cols == 193
    assert cost.cost(problem, 196608).tiling.block_cols == 192


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


@pytest.mark.parametrize("word", ["null", "NULL", " none ", "None"])
def test_a_whole_off_word_is_refused_whatever_its_case_and_spaces(run, word):
    """Mutations: OFF_WORDS without "null"; the word compared unstripped (" none ")."""
    result = run("compute", *QKV, "--softcap", word)
    assert result.exit_code == 2
    assert "which gives no value" in result.stderr


def test_blank_piped_stdin_beside_matrix_options_gives_nothing(run):
    """Mutation: read_piped tests `not data` rather than `not data.strip()`: whitespace on stdin
    is then parsed as a JSON document and refused."""
    result = run("compute", *QKV, "-f", "json", input="  \n\t\n")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["Q"] == [[1.0, 0.0], [0.0, 1.0]]


def test_mask_option_replaces_the_files_causal_too(run, problem_file):
    """Mutation: gather forgets to drop the file's `causal` when --mask replaces its mask rule."""
    path = problem_file({"Q": [[1, 0], [0, 1]], "K": [[1, 0], [0, 1]], "V": [[1, 0], [0, 1]], "causal": True})
    result = run("compute", path, "--mask", "1,1;1,1", "-f", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert "causal" not in doc or not doc["causal"]
    assert doc["heads"][0]["weights"][0][1] > 0  # the first query sees the second key


def test_npy_with_heatmap_in_stages_names_heatmap_alone(run, problem_file, tmp_path):
    """Mutation: _binary_holds counts `heatmap` in --stages as a stage an .npy drops, naming
    --stages beside --heatmap."""
    path = problem_file({"Q": [[1, 0], [0, 1]], "K": [[1, 0], [0, 1]], "V": [[1, 0], [0, 1]]})
    result = run("compute", path, "--stages", "output,heatmap", "-o", tmp_path / "x.npy")
    assert result.exit_code == 2
    assert "--heatmap would be lost" in result.stderr and "--stages" not in result.stderr


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


PLAIN = {"Q": [[1, 2], [3, 4]], "K": [[1, 0], [0, 1]], "V": [[1, 0], [0, 1]]}  # scores = Q, scale 1/√2


def test_a_mistake_that_contradicts_an_imprecise_cell_is_not_named(run, problem_file):
    """Mutation: _diagnose checks the mistake only against correct and carried cells, not the
    imprecise ones. 0.7 is 0.7071 at one decimal (imprecise); no_scale would have written 1 there, so
    it is not what the learner did, though it gives the three wrong cells."""
    path = problem_file(PLAIN)
    scaled = _stage(run, path, "--scaled", "0.7,2;3,4", name="scaled")
    assert scaled["cells"] == [["imprecise", "wrong"], ["wrong", "wrong"]]
    assert scaled["diagnosis"] == []


def test_a_mistake_explaining_half_the_wrong_cells_is_not_named(run, problem_file):
    """Mutation: _diagnose names a mistake that explains exactly half the wrong cells (2·best <
    total instead of ≤): here transposing explains one of two."""
    path = problem_file(PLAIN)
    scores = _stage(run, path, "--scores", "1,3;99,4", name="scores")
    assert scores["cells"] == [["correct", "wrong"], ["wrong", "correct"]]
    assert scores["diagnosis"] == []


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
    result = run("check", answers, "-p", SCOOTER, "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["right"] == 3
    assert "unknown" not in result.stderr + result.stdout


def test_round_0_is_refused_beside_an_npy_file(run, tmp_path):
    """Mutation: _binary_holds tests `--round` by truth, so --round 0 (a value, not off) slips by
    and the .npy silently drops it."""
    result = run("compute", *QKV, "--round", "0", "-o", tmp_path / "x.npy")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --round: ") and "would be lost" in result.stderr
    assert not (tmp_path / "x.npy").exists()


def test_an_off_word_for_window_names_window(run):
    """Mutation: --window's reader is built with another option's flag, so its refusal names that one."""
    result = run("compute", *QKV, "--window", "null")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --window: ") and "drop --window" in result.stderr


def test_one_sink_for_every_head(run):
    """Mutation: --sinks read as a list (like --window), so one logit is a list of one that two heads
    do not match, instead of one sink for all."""
    result = run("compute", "--q", "1,0,0,1;0,1,1,0", "--k", "1,0,0,1;0,1,1,0", "--v", "1,0,0,1;0,1,1,0",
                 "--heads", "2", "--sinks", "0.5", "-f", "json")
    assert result.exit_code == 0, result.stderr
    total = sum(json.loads(result.stdout)["heads"][1]["weights"][0])
    assert total < 1


def test_rounded_and_carried_from_a_wrong_stage_is_carried_not_correct(run, problem_file):
    """Mutation: _followings gives the rounded-and-carried following the status "correct" whatever
    the learner's basis, so weights reached from their own wrong scores (scaled rounded to 2
    decimals on the way) are counted correct rather than carried."""
    path = problem_file(PLAIN)
    s = np.round(np.array([[1, 2], [3, 5]]) / np.sqrt(2), 2)  # the learner's scores[1][1] = 5 is wrong
    e = np.exp(s - s.max(1, keepdims=True))
    w = e / e.sum(1, keepdims=True)
    text = ";".join(",".join(f"{x:.6f}" for x in row) for row in w)
    result = run("check", path, "--scores", "1,2;3,5", "--weights", text, "--format", "json")
    stages = json.loads(result.stdout)["stages"]
    assert stages["scores"]["cells"] == [["correct", "correct"], ["correct", "wrong"]]
    assert stages["weights"]["cells"] == [["carried", "carried"], ["carried", "carried"]]
    assert stages["weights"]["notes"] == ["rounded scaled carried (2 decimals)"]


@pytest.mark.parametrize("cell, point", [("-0,5", "-0.5"), ("+1,25", "+1.25"), ("\u22120,75", "-0.75")])
def test_a_signed_decimal_comma_label_is_refused(cell, point):
    """Mutations: text_input's comma-decimal pattern loses its sign ([+-]?), or reads the cell
    without turning U+2212 into `-`: a signed 0,5 as a TSV row's first cell is then taken for a
    row label."""
    from attncli.base.errors import InputError
    from attncli.document.text_input import comma_decimal, parse_csv

    assert comma_decimal(cell) == point
    with pytest.raises(InputError, match="decimal written with a comma"):
        parse_csv(f"{cell}\t1\n2\t3\n", "x.tsv", "number")


def test_a_matrix_from_stdin_may_start_with_spaces_before_its_json(run):
    """Mutation: `--q -` tells JSON from CSV by the text's first character, not its first
    non-blank one."""
    result = run("compute", "--q", "-", "--k", "1,0;0,1", "--v", "1,0;0,1", "-f", "json",
                 input="  \n [[1, 0], [0, 1]]\n")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["Q"] == [[1.0, 0.0], [0.0, 1.0]]


def test_a_dash_with_spaces_reads_the_matrix_from_stdin(run):
    """Mutation: load_matrix compares the value itself with "-", so `--q " -"` is read as inline text."""
    result = run("compute", "--q", " - ", "--k", "1,0;0,1", "--v", "1,0;0,1", "-f", "json", input="[[1, 0], [0, 1]]")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["Q"] == [[1.0, 0.0], [0.0, 1.0]]


def test_points_by_a_head_path_with_a_two_digit_head(run, problem_file):
    """Mutation: --points' STAGE_PATH takes one digit for the head (heads[\\d]), refusing heads[10]."""
    cube = [[[1.0, 0.5]]] * 11  # 11 heads, one query and one key each
    problem = problem_file({"Q": cube, "K": cube, "V": cube})
    key = run("compute", problem, "-f", "json")
    answers = problem_file(key.stdout, "answers.json")
    result = run("check", answers, "-p", problem, "--points", "heads[10].weights=2,weights=3", "-f", "csv")
    assert "is not STAGE=N" not in result.stderr
    assert result.exit_code == 0, result.stderr


@pytest.mark.parametrize("key", ["Name", "STUDENT_ID", "Comment"])
def test_metadata_keys_are_read_whatever_their_case(run, problem_file, key):
    """Mutation: answer_keys compares a key with METADATA as written, so `Name` is an unknown key."""
    answers = problem_file({"weights": [[0.0454, 0.7679, 0.1867]], key: "Ada"}, "answers.json")
    result = run("check", answers, "-p", SCOOTER, "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["right"] == 3


@pytest.mark.parametrize("text, escaped", [
    ("awww.example", "awww.example"),  # www inside a word is no autolink: left as written
    ("a.www.b", "a.www.b"),
    ("x &amp; y", "x \\&amp; y"),  # an entity would show as "&"
    ("&lt;b&gt;", "\\&lt;b\\&gt;"),
    ("  - x", "  \\- x"),  # indented, still a list item
    ("  1. x", "  1\\. x"),
    (" + y", " \\+ y"),
])
def test_markdown_text_is_escaped_exactly(text, escaped):
    """Mutations: the www autolink escape loses its (?<![\\w.]) guard (escaping inside words);
    `&` is dropped from the inline specials (entities render); the line-start escape forgets
    leading spaces (an indented `- x` is still a list)."""
    from attncli.render.export import md

    assert md(text) == escaped
