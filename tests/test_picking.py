"""--query and --key in attn compute's views (commands/option_text.picks, render/text.kept): a picked row or
key is never elided from a table or heatmap, nor a picked query's largest weights; the title names what is
left out; labels read as text (Ġit as it); a label found twice is refused naming both places."""

import json

import numpy as np
import pytest
from conftest import assert_error

TOKENS = ["[CLS]", "the", "mechanic", "fixed", "the", "sc", "##oot", "##er", "because", "it", "was", "leaking",
          "petrol", ".", "[SEP]"]
BYTES = ["The", "Ġmechanic", "Ġfixed", "Ġthe", "Ġscoot", "er", "Ġbecause", "Ġit", "Ġwas", "Ġleaking", "Ġpetrol",
         ".", "Ġand", "Ġthen", "Ġstopped"]


@pytest.fixture
def sentence(problem_file):
    rng = np.random.default_rng(3)
    q, k = rng.normal(size=(15, 8)), rng.normal(size=(15, 8))
    k[6] = q[9] * 3  # "##oot": the key "it" attends most, in the elided middle
    return problem_file({"Q": q.round(3).tolist(), "K": k.round(3).tolist(), "V": rng.normal(size=(15, 8)).round(3).tolist(),
                         "heads": 2, "query_labels": TOKENS, "key_labels": TOKENS,
                         "word_ids": [None, 0, 1, 2, 3, 4, 4, 4, 5, 6, 7, 8, 9, 10, None]})


def rows_of(text: str) -> list[str]:
    return [line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│")]


def test_a_picked_query_is_never_elided_and_the_title_says_what_is(run, sentence):
    plain = run("compute", sentence, "--stages", "weights", "--head", "0", "-f", "table").stdout
    assert "it" not in rows_of(plain) and "middle elided" in plain
    out = run("compute", sentence, "--stages", "weights", "--head", "0", "--query", "it", "-f", "table").stdout
    assert rows_of(out)[:7] == ["", "[CLS]", "the", "mechanic", "fixed", "the", "⋮"] and "it" in rows_of(out)
    assert "(15×15, rows 5–8 elided: --full shows all)" in out
    assert "head 1" not in out  # --head 0: one head's tables
    for query in ("#9", "9", "it"):
        assert rows_of(run("compute", sentence, "--stages", "weights", "--head", "0", "--query", query, "-f",
                           "table").stdout) == rows_of(out)


def test_a_picked_query_keeps_its_largest_weights_and_a_picked_word_its_tokens(run, sentence):
    out = run("compute", sentence, "--stages", "scores", "--head", "1", "--query", "it", "--key", "scooter",
              "-f", "table").stdout
    header = [cell.strip() for cell in next(line for line in out.splitlines() if "[CLS]" in line).split("│")]
    assert {"sc", "##oot", "##er"} <= set(header)


def test_the_heatmap_alone_keeps_the_picked_row(run, sentence):
    out = run("compute", sentence, "--heatmap", "--head", "0", "--query", "it").stdout
    assert "heatmap of weights · head 0 (15×15, rows 5–8 elided" in out
    assert "weights = softmax" not in out  # --heatmap shows the heatmap alone
    assert any(line.startswith("it ") for line in out.splitlines())
    both = run("compute", sentence, "--heatmap", "--stages", "weights", "--head", "0").stdout
    assert "weights = softmax" in both and "heatmap of weights" in both


def test_labels_found_twice_or_not_at_all_are_refused(run, sentence):
    assert_error(run("compute", sentence, "--query", "the", "-f", "table"), "--query", "#1", "#4")
    assert_error(run("compute", sentence, "--key", "bicycle", "-f", "table"), "--key", 'no key "bicycle"')


@pytest.mark.parametrize("option, value, fragment", [
    ("--query", "", '--query: is ""; expected query labels, words or positions (#N), comma-separated'),
    ("--key", "", '--key: is ""; expected key labels'),
    ("--query", "it,,#2", '--query: is "it,,#2": item 2 is empty'),
])
def test_an_empty_pick_is_refused_by_name(run, sentence, option, value, fragment):
    """`--query ''` (attn compute, attn heads) was accepted and picked nothing: an empty pick is
    refused, naming the option and the empty item's place."""
    assert_error(run("compute", sentence, option, value, "-f", "table"), fragment)


def test_a_missing_pick_names_the_queries_in_the_plural(run, sentence):
    assert_error(run("compute", sentence, "--query", "bicycle", "-f", "table"), "; the 15 queries are ")


def test_byte_level_labels_read_as_text_in_tables_and_stay_raw_in_json(run, problem_file):
    rng = np.random.default_rng(0)
    path = problem_file({"Q": rng.normal(size=(15, 4)).tolist(), "K": rng.normal(size=(15, 4)).tolist(),
                         "V": rng.normal(size=(15, 4)).tolist(), "query_labels": BYTES, "key_labels": BYTES})
    out = run("compute", path, "--stages", "weights", "--query", "it", "--key", "scooter", "-f", "table").stdout
    assert "Ġ" not in out and "it" in rows_of(out) and " scoot " in out
    assert json.loads(run("compute", path, "-f", "json").stdout)["query_labels"] == BYTES
