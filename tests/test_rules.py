"""A mask rule is one class: a throwaway rule (keys at even positions), added to the registry
(`attncli.problem.rules.RULES`) and nowhere else, reaches every path that meets masks: the input key, the
full trace, the output-only path at block sizes 1, 2 and the default, the tiles, the header and
JSON words, the JSON and .npz round trips, `--explain`'s condition and why-hidden text, and `attn
check`. A second throwaway rule, ORed with the window (global keys), goes through the same paths
and `--cost`. Prefix-LM (`prefix`, causal OR the prefix) against a dense numpy mask on every path.
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
from attncli.compute import cost
from attncli.compute.attention import attend
from attncli.compute.blocks import attend_output
from attncli.compute.tiles import attend_tiles
from attncli.document.reading import build_problem
from attncli.marking import mistakes
from attncli.problem import rules
from attncli.problem.mask_input import flag, positions
from attncli.problem.masks import key_span, partly_hidden, visible
from attncli.problem.trace import MASKED_ROWS
from attncli.problem.visibility import hidden_because
from attncli.render.explain import explain
from tests.conftest import ROOT, assert_error

PACKAGE = Path(attncli.__file__).parent


@dataclass(frozen=True)
class EvenKeys(rules.Rule):
    """Keys at even positions only: `even_keys: true`."""
    keys: ClassVar = {"even_keys": "true: only the keys at even positions"}

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


def test_a_registered_rule_reads_back_from_the_npz_the_tool_wrote(even, run, problem_file, tmp_path):
    path = tmp_path / "even.npz"
    assert run("compute", problem_file(DOC | {"even_keys": True}), "-o", path).exit_code == 0
    with np.load(path) as archive:
        assert archive["even_keys"].item() is True
    assert run.json("compute", path)["even_keys"] is True  # read back: its key is the schema's


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


# A throwaway rule ORed with another: keys every query sees, whatever the window (Longformer's and
# BigBird's global tokens, on the keys' side). One class, registered; nothing else.

@dataclass(frozen=True)
class GlobalKeys(rules.Rule):
    """`global_keys: [k_pos, …]`: keys every query may see, ORed with the window."""
    at: tuple[int, ...]
    keys: ClassVar = {"global_keys": "the positions of keys every query sees, whatever the window"}
    widens: ClassVar = rules.Window

    def seen(self, problem, rows, cols):
        return np.isin(problem.k_positions[cols], self.at)[None, :]  # (1, c)

    def keys_seen(self, problem, rows):
        return np.isin(problem.k_positions, self.at)

    def maybe_hidden(self, problem, rows, cols):
        return ~np.isin(problem.k_positions[cols], self.at)

    def line(self, problem):
        return f"global keys {list(self.at)}: every query may attend them"

    def condition(self, problem, row):
        return f"k_pos is one of {list(self.at)} (global)"

    def why(self, problem, head, row):
        return [None if k in self.at else f"k_pos {k} is not global" for k in map(int, problem.k_positions)]

    def input_keys(self, problem):
        return {"global_keys": list(self.at)}

    @classmethod
    def read(cls, doc, reading):
        found = doc.get("global_keys")
        return None if found is None else cls(tuple(map(int, positions(found, "global_keys", len(found), "global key"))))


@pytest.fixture
def global_keys(monkeypatch):
    monkeypatch.setattr(rules, "RULES", rules.RULES + (GlobalKeys,))


WIDE = {"Q": rng.normal(size=(7, 4)).round(3).tolist(), "K": rng.normal(size=(7, 4)).round(3).tolist(),
        "V": rng.normal(size=(7, 2)).round(3).tolist(), "heads": 2, "window": [1, 0], "global_keys": [0, 4]}


def _window_or_global(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """The dense reference: q_pos − 1 ≤ k_pos ≤ q_pos, or k_pos one of 0 and 4."""
    return ((k[None, :] >= q[:, None] - 1) & (k[None, :] <= q[:, None])) | np.isin(k, [0, 4])[None, :]


def test_a_rule_that_widens_another_is_ored_with_it_on_every_path(global_keys):
    problem = build_problem(WIDE)
    assert [type(rule) for rule in problem.rules] == [rules.AnyOf]
    assert [type(part) for part in problem.rules[0].parts] == [rules.Window, GlobalKeys]
    dense = _window_or_global(problem.q_positions, problem.k_positions)
    np.testing.assert_array_equal(visible(problem)[0], dense)
    full = attend(problem)
    same = attend(build_problem({k: v for k, v in WIDE.items() if k not in ("window", "global_keys")}
                                | {"mask": dense.tolist()}))
    np.testing.assert_allclose(full.final, same.final, rtol=0, atol=1e-15)
    for block in (1, 2, None):
        np.testing.assert_allclose(attend_output(problem, block=block).final, full.final, rtol=0, atol=1e-12)
    for bq, bk in ((1, 1), (2, 3), (7, 7)):
        np.testing.assert_allclose(attend_tiles(problem, bq, bk).output, full.output, rtol=0, atol=1e-12)
    _spans_cover_the_dense_mask(problem, dense)


def _spans_cover_the_dense_mask(problem, dense: np.ndarray) -> None:
    """For every run of queries: key_span holds every key some of them sees, and partly_hidden
    every column where one of them is hidden (the output-only path, the tiles and --cost skip and
    mask by these)."""
    lq, lk = dense.shape
    for start in range(lq):
        for stop in range(start + 1, lq + 1):
            rows = slice(start, stop)
            first, end = key_span(problem, rows)
            seen = np.flatnonzero(dense[rows].any(axis=0))
            assert all(first <= j < end for j in seen), (rows, first, end, seen)
            hidden = partly_hidden(problem, rows, slice(0, lk))
            blocked = np.flatnonzero(~dense[rows].all(axis=0))
            assert blocked.size == 0 or (hidden is not None and all(hidden.start <= j < hidden.stop for j in blocked))


def test_a_rule_that_widens_another_is_said_written_and_read_back(global_keys, run, problem_file, tmp_path):
    path = problem_file(WIDE)
    table = run("compute", path, "-f", "table", "--stages", "weights")
    assert table.exit_code == 0, table.stderr
    assert "or global keys [0, 4]: every query may attend them" in table.stdout
    written = run.json("compute", path)
    assert written["window"] == [1, 0] and written["global_keys"] == [0, 4]
    assert written["mask_rule"].startswith("either window [1, 0]: ")
    assert run.json("compute", problem_file(written, "again.json")) == written
    npz = tmp_path / "wide.npz"
    assert run("compute", path, "-o", npz).exit_code == 0
    assert run.json("compute", npz) == written
    counted = run.json("compute", path, "--cost", "--sram", "256")["cost"]
    assert counted["visible_tiles"] <= counted["tiles"]
    assert run.json("compute", problem_file({**WIDE, "cost": counted}, "counted.json"), "--cost", "--sram", "256")
    alone = {k: v for k, v in WIDE.items() if k != "window"}
    assert_error(run("compute", problem_file(alone, "alone.json")),
                 "global_keys widens the window rule, and there is no window rule: give window too")


def test_a_rule_that_widens_another_says_why_a_key_is_hidden(global_keys):
    text = explain(attend(build_problem(WIDE | {"heads": 1})), rows=[5])
    assert "  query 5 (q_pos 5) may attend a key when (5 − 1 ≤ k_pos ≤ 5 + 0 (window [1, 0]) or k_pos is one of " \
           "[0, 4] (global))" in text
    hidden = [line for line in text if "excluded (" in line]
    assert len(hidden) == 4 and "excluded (window [1, 0]: k_pos 1 < 5 − 1 and k_pos 1 is not global)" in hidden[0]


def test_attn_check_marks_a_rule_that_widens_another(global_keys, run, problem_file):
    doc = WIDE | {"heads": 1}
    weights = attend(build_problem(doc)).weights[0]
    key = problem_file(doc, "key.json")
    good = run("check", problem_file({"weights": weights.round(4).tolist()}, "good.json"), key, "-f", "json")
    assert good.exit_code == 0, good.stdout
    window_only = attend(build_problem({k: v for k, v in doc.items() if k != "global_keys"})).weights[0]
    bad = run("check", problem_file({"weights": window_only.round(4).tolist()}, "bad.json"), key, "-f", "json")
    assert bad.exit_code == 1 and json.loads(bad.stdout)["stages"]["weights"]["wrong"] > 0


def test_a_window_inside_an_or_is_the_one_a_marking_mistake_moves(global_keys):
    """window_off_by_one moves the window where it stands, inside the OR."""
    problem = build_problem(WIDE)
    moved = mistakes._window_moved(+1)(problem)
    assert [type(part) for part in moved.rules[0].parts] == [rules.Window, GlobalKeys]
    assert (moved.rules[0].parts[0].left, moved.rules[0].parts[0].right) == (2, 0)


# Prefix-LM: the first P keys for every query, the others causally. Every path against a dense mask.

def _prefix_lm(q: np.ndarray, k: np.ndarray, P: int) -> np.ndarray:
    """The dense reference, from numpy alone: (Lq, Lk), key j visible to query i when k_pos[j] < P
    or k_pos[j] ≤ q_pos[i]."""
    return (k[None, :] < P) | (k[None, :] <= q[:, None])


def _numpy_attention(doc: dict, seen: np.ndarray) -> np.ndarray:
    """softmax(Q Kᵀ / √d_k, hidden keys −∞) V per head, heads side by side: an independent reference."""
    heads = doc.get("heads", 1)
    Q, K, V = (np.array(doc[name], dtype=np.float64) for name in "QKV")
    out = []
    for h in range(heads):
        q, k, v = (np.split(x, heads, axis=1)[h] for x in (Q, K, V))
        logits = np.where(seen, q @ k.T / np.sqrt(q.shape[1]), -np.inf)
        top = np.max(logits, axis=1, keepdims=True)
        e = np.exp(logits - np.where(np.isfinite(top), top, 0))
        total = e.sum(axis=1, keepdims=True)
        out.append(np.divide(e, total, out=np.zeros_like(e), where=total > 0) @ v)
    return np.concatenate(out, axis=1)


PRNG = np.random.default_rng(21)
PREFIXED = {"Q": PRNG.normal(size=(6, 4)).tolist(), "K": PRNG.normal(size=(8, 4)).tolist(),
            "V": PRNG.normal(size=(8, 4)).tolist(), "heads": 2}
CASES = {  # extra keys -> (q_positions, k_positions) the reference reads
    "top-left": ({}, np.arange(6), np.arange(8)),
    "lower-right": ({"mask": "causal_lower_right"}, np.arange(2, 8), np.arange(8)),
    "given positions": ({"q_positions": [5, 0, 3, 3, 9, 1], "k_positions": [4, 0, 7, 2, 2, 6, 1, 3]},
                        np.array([5, 0, 3, 3, 9, 1]), np.array([4, 0, 7, 2, 2, 6, 1, 3])),
    "decode step": ({"Q": PRNG.normal(size=(1, 4)).tolist(), "q_positions": [7]}, np.array([7]), np.arange(8)),
}


@pytest.mark.parametrize("P", [0, 1, 3, 8, 20])
@pytest.mark.parametrize("case", sorted(CASES))
def test_prefix_lm_is_the_dense_mask_on_every_path(case, P):
    extra, q, k = CASES[case]
    doc = PREFIXED | extra | {"prefix": P}
    problem = build_problem(doc)
    dense = _prefix_lm(q, k, P)
    np.testing.assert_array_equal(visible(problem)[0], dense)
    full = attend(problem)
    np.testing.assert_allclose(full.final, _numpy_attention(doc, dense), rtol=1e-13, atol=1e-14)
    np.testing.assert_array_equal(np.isneginf(full.masked), np.broadcast_to(~dense, full.masked.shape))
    for block in (1, 2, None):
        np.testing.assert_allclose(attend_output(problem, block=block).final, full.final, rtol=1e-13, atol=1e-14)
    for bq, bk in ((1, 1), (2, 3), (4, 8)):
        np.testing.assert_allclose(attend_tiles(problem, bq, bk).output, full.output, rtol=1e-13, atol=1e-14)
    _spans_cover_the_dense_mask(problem, dense)
    for row in range(problem.lq):  # --explain says why exactly the hidden keys are hidden
        assert [why is not None for why in hidden_because(problem, 0, row)] == list(~dense[row]), row


@pytest.mark.parametrize("P", [0, 2, 5])
def test_prefix_lm_gradients_and_costs_are_those_of_its_dense_mask(P):
    """The backward pass and --cost's tiles under prefix equal those of the same mask given as a matrix."""
    dO = PRNG.normal(size=(6, 4)).tolist()
    ruled = build_problem(PREFIXED | {"prefix": P, "dO": dO})
    given = build_problem(PREFIXED | {"mask": _prefix_lm(np.arange(6), np.arange(8), P).tolist(), "dO": dO})
    for name, grad in attend(ruled).gradients.grads.items():
        np.testing.assert_allclose(grad, attend(given).gradients.grads[name], rtol=1e-13, atol=1e-14, err_msg=name)
    for sram in (64, 256, 1024):
        by_rule, by_matrix = cost.cost(ruled, sram).tiling, cost.cost(given, sram).tiling
        assert (by_rule.visible_tiles, by_rule.cells, by_rule.key_loads) == \
            (by_matrix.visible_tiles, by_matrix.cells, by_matrix.key_loads)


def test_prefix_lm_with_a_window_and_a_key_mask_ands_them(run, problem_file):
    doc = PREFIXED | {"prefix": 3, "window": [1, 0], "key_mask": [1, 1, 0, 1, 1, 1, 1, 1]}
    q, k = np.arange(6), np.arange(8)
    window = (k[None, :] >= q[:, None] - 1) & (k[None, :] <= q[:, None])
    dense = _prefix_lm(q, k, 3) & window & np.array(doc["key_mask"], bool)[None, :]
    problem = build_problem(doc)
    np.testing.assert_array_equal(visible(problem)[0], dense)
    np.testing.assert_allclose(attend(problem).final, _numpy_attention(doc, dense), rtol=1e-13, atol=1e-14)


def test_prefix_is_read_written_and_explained(run, problem_file, tmp_path):
    doc = {"Q": [[1, 0], [0, 1], [1, 1], [2, 0]], "K": [[1, 0], [0, 1], [1, 1], [2, 0]], "V": [[1], [2], [3], [4]]}
    by_option = run.json("compute", problem_file(doc), "--prefix", "2")
    assert by_option["mask"] == "causal" and by_option["prefix"] == 2
    assert by_option == run.json("compute", problem_file(doc | {"prefix": 2}, "file.json"))
    assert by_option == run.json("compute", problem_file(doc | {"prefix": 2, "causal": True}, "both.json"))
    assert run.json("compute", problem_file(by_option, "again.json")) == by_option
    npz = tmp_path / "prefix.npz"
    assert run("compute", problem_file(doc | {"prefix": 2}), "-o", npz).exit_code == 0
    assert run.json("compute", npz) == by_option
    assert by_option["mask_rule"] == ("either causal: query i may attend key j when k_pos[j] ≤ q_pos[i] (top-left "
                                      "with the default positions 0 … L − 1, as PyTorch is_causal=True), or prefix "
                                      "2: query i may attend key j when k_pos[j] < 2 (prefix-LM, as T5 and PaLM: "
                                      "every query sees the prefix in both directions)")
    text = explain(attend(build_problem(doc | {"prefix": 2})), rows=[1])
    assert "  query 1 (q_pos 1) may attend a key when (k_pos ≤ 1 (causal) or k_pos < 2 (prefix))" in text
    assert [line for line in text if "excluded (" in line][0].endswith(
        "excluded (causal: k_pos 2 > q_pos 1 and prefix 2: k_pos 2 ≥ 2)")


def test_prefix_alone_and_beside_causal_are_the_same_rules_in_the_same_order(run, problem_file):
    """The rule a prefix widens stands where causal stands, given or implied: the JSON reads back."""
    doc = {"Q": [[1], [2], [3]], "K": [[1], [2], [3]], "V": [[1], [2], [3]], "prefix": 1, "window": [1, 0]}
    alone, both = build_problem(doc), build_problem(doc | {"mask": "causal"})
    assert alone.rules == both.rules and [type(rule) for rule in alone.rules] == [rules.AnyOf, rules.Window]
    written = run.json("compute", problem_file(doc))
    assert run.json("compute", problem_file(written, "again.json")) == written


def test_prefix_under_the_mask_option_keeps_its_own_key(run, problem_file):
    path = problem_file({"Q": [[1], [2], [3]], "K": [[1], [2], [3]], "V": [[1], [2], [3]], "prefix": 2})
    lower = run.json("compute", path, "--mask", "causal_lower_right")
    assert lower["mask"] == "causal_lower_right" and lower["prefix"] == 2
    matrix = run.json("compute", path, "--mask", "1,1,1;1,1,1;1,0,1")  # ANDed with prefix-LM
    assert matrix["heads"][0]["weights"][0][2] == 0 and matrix["heads"][0]["weights"][2][1] == 0


@pytest.mark.parametrize("doc, message", [
    ({"prefix": 1.5}, "prefix is the number 1.5; expected a whole number ≥ 0"),
    ({"prefix": -1}, "prefix is the number -1; expected a whole number ≥ 0"),
    ({"prefix": True}, "prefix is true; expected a whole number ≥ 0"),
    ({"prefix": "2"}, 'prefix is the string "2"; expected a whole number ≥ 0'),
    ({"prefix": 2, "causal": False}, "prefix is given but causal is false: prefix-LM is causal after its prefix"),
])
def test_a_bad_prefix_is_an_error_naming_it(run, problem_file, doc, message):
    path = problem_file(QKV | doc)
    assert_error(run("compute", path), str(path), message)


def test_a_negative_prefix_option_is_refused(run, problem_file):
    result = run("compute", problem_file(QKV), "--prefix", "-1")
    assert result.exit_code == 2 and result.stdout == "" and "--prefix" in result.stderr


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
