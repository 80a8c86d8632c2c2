"""The text of `attn compute`'s problem options read as the values they stand for
(attncli/commands/option_text.py): the words for no value, lists and single numbers, and the
option each refusal names."""

import json

import pytest

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
