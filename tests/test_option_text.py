"""The text of `attn compute`'s problem options read as the values they stand for
(attncli/commands/option_text.py): the words for no value, lists and single numbers, and the
option each refusal names."""

import json

import pytest

from tests.conftest import SAMPLES, assert_error

QKV = ("--q", "1,0;0,1", "--k", "1,0;0,1", "--v", "1,0;0,1")


@pytest.mark.parametrize("word", ["null", "NULL", " none ", "None"])
def test_a_whole_off_word_is_refused_whatever_its_case_and_spaces(run, word):
    """Mutations: OFF_WORDS without "null"; the word compared unstripped (" none ")."""
    result = run("compute", *QKV, "--softcap", word)
    assert result.exit_code == 2
    assert "which gives no value" in result.stderr


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


def _explained_rows(run, path, *rows):
    args = [a for r in rows for a in ("--row", r)]
    result = run("compute", path, "--explain", *args)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_row_a_label_wins_and_hash_is_an_index(run, problem_file):
    """Found by a user trial: --row: a label wins, #N is an index."""
    doc = {"Q": [[1, 0], [0, 1], [1, 1], [2, 0]], "K": [[1, 0], [0, 1]], "V": [[1], [2]],
           "query_labels": ["1", "0", "x", "y"]}
    path = problem_file(doc)
    by_label = _explained_rows(run, path, "1")
    assert by_label == _explained_rows(run, path, "#0")  # "1" is the label of row 0
    assert _explained_rows(run, path, "#1") == _explained_rows(run, path, "0")  # row 1 is labelled "0"
    assert by_label != _explained_rows(run, path, "#1")
    assert _explained_rows(run, path, "#3") == _explained_rows(run, path, "y")
    assert_error(run("compute", path, "--explain", "--row", "#4"), '--row: no query "#4"',
                 "the queries are 1, 0, x, y (by index #0 to #3)")


def test_row_a_label_several_queries_share_is_refused(run, problem_file):
    """Found by a user trial: --row: a label several queries share is refused with the indices."""
    doc = {"Q": [[1, 0], [0, 1], [1, 1], [2, 0]], "K": [[1, 0], [0, 1]], "V": [[1], [2]],
           "query_labels": ["a", "a", "b", "c"]}
    assert_error(run("compute", problem_file(doc), "--explain", "--row", "a"),
                 '--row: "a" labels 2 queries (#0, #1); give the one to explain by index: --row #0 or --row #1')


@pytest.mark.parametrize("row", ["²", "٣", "１", "-0", "9" * 5000])
def test_rows_are_ascii_digits_or_labels(run, row):
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: --row takes
    ASCII digits or a label; other digits are no index."""
    assert_error(run("compute", SAMPLES / "scooter.json", "--explain", "--row", row),
                 "--row: no query", "the queries are it")


def test_row_by_index_still_works(run):
    """Used to end in an internal error, a RuntimeWarning, a cut table or a wrong exit code: --row by index
    still works beside the digit check."""
    result = run("compute", SAMPLES / "scooter.json", "--explain", "--row", "0")
    assert result.exit_code == 0 and "0.2775" in result.stdout


QKV_OPTIONS = ["--q", "1,0;0,1", "--k", "1,0;0,1", "--v", "1;2"]


@pytest.mark.parametrize("option, value", [("--softcap", ""), ("--softcap", "none"), ("--sinks", ""),
                                           ("--sinks", "null"), ("--alibi-slopes", "None"), ("--window", ""),
                                           ("--key-mask", "null"), ("--q-positions", " ")])
def test_empty_or_null_option_values_are_refused(run, option, value):
    """Found by a hostile user (issue 17, round three of "nothing silently ignored or misread"): no value
    means "off": an option is off when it is left out, so an empty or null value is refused."""
    assert_error(run("compute", *QKV_OPTIONS, option, value), f"{option}: is", "which gives no value",
                 f"an option is off when it is left out: drop {option}")


@pytest.mark.parametrize("option, value, fragment", [
    ("--query-labels", "", '--query-labels: is "", which gives no label; labels are off when the option is left '
                           "out: drop --query-labels"),
    ("--key-labels", " ", '--key-labels: is " ", which gives no label'),
    ("--output", "", '--output: "" has no known suffix'),
])
def test_an_empty_label_list_or_output_is_refused(run, option, value, fragment):
    """`--query-labels ''` gave the query one blank label and `--output ''` wrote to stdout, both
    silently (a sweep of every string option with ''): each is refused by name."""
    result = run("compute", *QKV_OPTIONS, option, value)
    assert_error(result, fragment)


@pytest.mark.parametrize("value", ["it", "zz", ""])
def test_row_without_explain_is_refused_not_ignored(run, value):
    """--row chooses the rows --explain explains: without --explain it was ignored, whatever it named
    (`--row zz`, `--row ''`), as --carry without --explain is refused."""
    assert_error(run("compute", SAMPLES / "scooter.json", "--row", value),
                 "--row: chooses the query rows --explain explains; add --explain")


def test_a_null_side_of_a_window_is_still_unbounded(run):
    """Found by a hostile user (issue 17, round three of "nothing silently ignored or misread"): a null
    side of a window is still unbounded."""
    assert run.json("compute", *QKV_OPTIONS, "--window", "none,0")["window"] == [None, 0]
