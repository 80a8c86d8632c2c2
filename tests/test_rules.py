"""A mask rule is one class: a throwaway rule (keys at even positions), added to the registry
(`attncli.problem.rules.RULES`) and nowhere else, reaches every path that meets masks: the input key, the
full trace, the output-only path at block sizes 1, 2 and the default, the tiles, the header and
JSON words, the JSON round trip, `--explain`'s condition and why-hidden text, and `attn check`.
Also: the mask keys that contradict, and the words said in one place."""

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

import attncli
from attncli.base import rule_words
from attncli.compute.attention import attend
from attncli.compute.blocks import attend_output
from attncli.compute.tiles import attend_tiles
from attncli.document.reading import build_problem
from attncli.problem import rules
from attncli.problem.mask_input import flag
from attncli.problem.masks import key_span, partly_hidden, visible
from attncli.problem.trace import MASKED_ROWS
from attncli.render.explain import explain
from tests.conftest import ROOT, assert_error

PACKAGE = Path(attncli.__file__).parent


@dataclass(frozen=True)
class EvenKeys(rules.Rule):
    """Keys at even positions only: `even_keys: true`."""
    keys: ClassVar = ("even_keys",)

    def seen(self, problem, rows, cols):
        return (problem.k_positions[cols] % 2 == 0)[None, :]  # (1, c)

    def keys_seen(self, problem, rows):
        return problem.k_positions % 2 == 0

    def maybe_hidden(self, problem, rows, cols):
        return problem.k_positions[cols] % 2 == 1

    def line(self, problem):
        return "even_keys: query i may attend key j when k_pos[j] is even"

    def condition(self, problem, row):
        return "k_pos is even (even_keys)"

    def why(self, problem, head, row):
        return [f"even_keys: k_pos {k} is odd" if k % 2 else None for k in map(int, problem.k_positions)]

    def input_keys(self, problem):
        return {"even_keys": True}

    @classmethod
    def read(cls, doc, reading):
        return cls() if doc.get("even_keys") is not None and flag(doc["even_keys"], "even_keys") else None


@pytest.fixture
def even(monkeypatch):
    monkeypatch.setattr(rules, "RULES", rules.RULES + (EvenKeys,))


rng = np.random.default_rng(7)
DOC = {"Q": rng.normal(size=(5, 4)).round(3).tolist(), "K": rng.normal(size=(7, 4)).round(3).tolist(),
       "V": rng.normal(size=(7, 4)).round(3).tolist(), "heads": 2}
EVEN_KEYS = [1, 0, 1, 0, 1, 0, 1]  # the same rule written as a key mask


def test_the_rule_is_unknown_until_it_is_registered():
    with pytest.raises(Exception, match='unknown key "even_keys"'):
        build_problem(DOC | {"even_keys": True})


def test_a_registered_rule_reaches_the_trace_the_output_only_path_and_the_tiles(even):
    problem = build_problem(DOC | {"even_keys": True, "mask": "causal"})
    same = build_problem(DOC | {"key_mask": EVEN_KEYS, "mask": "causal"})
    assert [type(rule) for rule in problem.rules] == [rules.Causal, EvenKeys]
    np.testing.assert_array_equal(visible(problem), visible(same))
    full = attend(problem)
    assert (full.weights[:, :, 1::2] == 0).all() and full.masked[0, 4, 3] == -np.inf
    np.testing.assert_allclose(full.final, attend(same).final, rtol=0, atol=1e-15)
    for block in (1, 2, None):
        np.testing.assert_allclose(attend_output(problem, block=block).final, full.final, rtol=0, atol=1e-12)
    for bq, bk in ((1, 1), (2, 3), (5, 7)):
        np.testing.assert_allclose(attend_tiles(problem, bq, bk).output, full.output, rtol=0, atol=1e-12)
    assert key_span(problem, slice(0, 2)) == (0, 1)  # causal ∧ even: keys 0 … 1, key 1 odd
    assert partly_hidden(problem, slice(4, 5), slice(0, 7)) == slice(1, 7)  # odd keys, and 5, 6 > 4


def test_a_registered_rule_is_said_in_the_header_the_json_and_reads_back(even, run, problem_file):
    path = problem_file(DOC | {"even_keys": True, "window": [2, 0]})
    table = run("compute", path, "-f", "table", "--stages", "output")
    assert table.exit_code == 0, table.stderr
    assert "mask: even_keys: query i may attend key j when k_pos[j] is even" in table.stdout.splitlines()
    first = run.json("compute", path)
    assert first["even_keys"] is True and "even_keys: query i may attend" in first["mask_rule"]
    assert run.json("compute", problem_file(first, "again.json")) == first
    assert_error(run("compute", problem_file(DOC | {"even_keys": 1}, "bad.json")),
                 "even_keys is the number 1; expected true or false")


def test_a_registered_rule_says_why_a_key_is_hidden(even):
    doc = DOC | {"even_keys": True, "mask": "causal", "heads": 1}
    text = explain(attend(build_problem(doc)), rows=[3])
    assert "  query 3 (q_pos 3) may attend a key when k_pos ≤ 3 (causal) and k_pos is even (even_keys)" in text
    hidden = [line for line in text if "excluded (" in line]
    assert len(hidden) == 5 and "excluded (even_keys: k_pos 1 is odd)" in hidden[0]
    assert "excluded (causal: k_pos 5 > q_pos 3; even_keys: k_pos 5 is odd)" in hidden[3]


def test_attn_check_marks_a_registered_rule(even, run, problem_file):
    doc = {"Q": [[1, 0], [0, 1]], "K": [[1, 0], [0, 1], [1, 1]], "V": [[1, 0], [0, 1], [2, 2]],
           "even_keys": True}
    weights = attend(build_problem(doc)).weights[0]
    key = problem_file(doc, "key.json")
    good = run("check", problem_file({"weights": weights.round(4).tolist()}, "good.json"), key, "-f", "json")
    assert good.exit_code == 0, good.stdout
    ignored = attend(build_problem({k: v for k, v in doc.items() if k != "even_keys"})).weights[0]
    bad = run("check", problem_file({"weights": ignored.round(4).tolist()}, "bad.json"), key, "-f", "json")
    assert bad.exit_code == 1 and json.loads(bad.stdout)["stages"]["weights"]["diagnosis"] == ["mask_ignored"]


# Mask keys that contradict: an error naming both, unless an option is documented to override.

QKV = {"Q": [[1], [2]], "K": [[1], [2]], "V": [[1], [2]]}


@pytest.mark.parametrize("word", ["causal", "causal_lower_right"])
def test_a_causal_word_with_causal_false_is_an_error_naming_both(run, problem_file, word):
    path = problem_file(QKV | {"mask": word, "causal": False})
    assert_error(run("compute", path), str(path), f'causal is false but mask is "{word}"', "keep one")


def test_consistent_mask_keys_are_read_as_one_rule():
    assert build_problem(QKV | {"mask": "causal", "causal": True}).rules == (rules.Causal(),)
    matrix = build_problem(QKV | {"mask": [[1, 1], [1, 1]], "causal": False})
    assert [type(rule) for rule in matrix.rules] == [rules.Matrix]


def test_the_mask_option_replaces_the_files_causal_key(run, problem_file):
    path = problem_file(QKV | {"causal": True})
    doc = run.json("compute", path, "--mask", "1,1;1,1")
    assert doc["mask"] == [[True, True], [True, True]] and "causal" not in doc
    assert doc["heads"][0]["weights"][0][1] > 0  # not causal: query 0 sees key 1
    word_file = problem_file(QKV | {"mask": "causal", "causal": False}, "w.json")
    word = run.json("compute", word_file, "--mask", "1,1;1,1")
    assert "causal" not in word and word["heads"][0]["weights"][0][1] > 0


def test_a_files_q_positions_with_the_lower_right_option_is_an_error_naming_both(run, problem_file):
    path = problem_file({"Q": [[1]], "K": [[1], [2]], "V": [[1], [2]], "q_positions": [0]})
    assert_error(run("compute", path, "--mask", "causal_lower_right"), str(path),
                 "q_positions is given with mask causal_lower_right")


# The words, said in one place.

def _helps(command: str) -> dict[str, str]:
    import typer.main

    from attncli.cli import app

    found = typer.main.get_command(app).commands[command]
    return {param.name: param.help for param in found.params} | {"": found.help}


def test_the_window_and_masked_rows_words_are_said_from_one_place():
    compute = _helps("compute")
    assert rule_words.window_condition("LEFT", "RIGHT") in compute["window"]
    assert rule_words.sliding_window() in compute["window"]
    assert rule_words.masked_rows_help() in compute["masked_rows"]
    # the command's docstring is its --help, so it spells the rule: with the same words
    assert f"{rule_words.window_condition('L', 'R')} ({rule_words.WINDOW_ENDS})" in compute[""]
    assert rule_words.sliding_window() in _helps("exercise")["kind"]
    assert set(rule_words.MASKED_ROWS_WORDS) == set(MASKED_ROWS)
    page = (ROOT / "docs" / "reference" / "masks-and-variants.md").read_text(encoding="utf-8")
    section = page[page.index("## Masks are rules of positions"):page.index("## Rotary positions")]
    readme = (ROOT / "docs" / "explanations" / "conventions.md").read_text(encoding="utf-8")
    assert f"`{rule_words.window_condition()}`, {rule_words.WINDOW_ENDS}" in section
    assert rule_words.sliding_window().replace("sliding_window = W", "`sliding_window = W`") in section
    for policy in ("zero", "uniform"):
        assert f"{policy}` (default): " * (policy == "zero") + rule_words.MASKED_ROWS_WORDS[policy] in readme


def test_no_module_spells_the_window_rule_or_a_masked_rows_policy_itself(sources):
    spelled = re.compile(r"q_pos ?[−-] ?(left|LEFT|L)\b|weights and output 0\b|mean of V")
    tied = {"compute.py": "its docstring is its --help; the test above ties it to rule_words"}
    found = [module.path.name for module in sources
             if module.path.name not in ("rule_words.py", *tied) and spelled.search(module.text)]
    assert found == []
