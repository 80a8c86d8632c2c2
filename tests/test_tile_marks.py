"""attn check marks a learner's tile tables (m, alpha, l, O per tile) with follow-through."""

import json
import math

import numpy as np
import pytest

from tests.conftest import SAMPLES, assert_error

TINY = SAMPLES / "tiny_tiles.json"
V = np.array([[1, 0], [0, 1], [1, 1], [2, 0]], float)
S = np.array([[1, 0, 2, 1], [0, 1, 0, 1]], float)  # the tiny example's logits (scale 1)


def learner(m1_a=None, decimals=None):
    """The learner's tiles for the tiny example, computed from their own numbers; `m1_a`: their
    (wrong) m of query a in tile 1; each number rounded to `decimals` and carried when given."""
    r = (lambda x: np.round(x, decimals)) if decimals is not None else (lambda x: x)
    m_old, l_old, O_old = np.full(2, -np.inf), np.zeros(2), np.zeros((2, 2))
    tiles = []
    for k0 in (0, 2):
        s = S[:, k0:k0 + 2]
        m = np.maximum(m_old, s.max(axis=1))
        if k0 == 0 and m1_a is not None:
            m[0] = m1_a
        m = r(m)
        alpha = r(np.where(np.isneginf(m_old), 0.0, np.exp(m_old - m)))
        P = r(np.exp(s - m[:, None]))
        l = r(alpha * l_old + P.sum(axis=1))
        O = r(alpha[:, None] * O_old + P @ V[k0:k0 + 2])
        tiles.append({"q_block": [0, 2], "k_block": [k0, k0 + 2], "m": m.tolist(), "alpha": alpha.tolist(),
                      "l": l.tolist(), "O": O.tolist()})
        m_old, l_old, O_old = m, l, O
    return {"tile_size": [2, 2], "tiles": tiles}


def check(run, problem_file, doc, *options):
    path = problem_file(doc, "answers.json")
    result = run("check", path, TINY, "-f", "json", *options)
    return result, json.loads(result.stdout) if result.stdout else None


def test_exact_tiles_are_all_correct(run, problem_file):
    result, doc = check(run, problem_file, learner())
    assert result.exit_code == 0 and doc["all_correct"]
    assert list(doc["stages"]) == ["tiles[q 0–2, k 0–2]", "tiles[q 0–2, k 2–4]"]
    assert doc["stages"]["tiles[q 0–2, k 0–2]"]["max"] == 2 * 5  # m, alpha, l and two O columns


def test_rounded_and_carried_is_correct(run, problem_file):
    result, doc = check(run, problem_file, learner(decimals=4))
    assert result.exit_code == 0 and doc["all_correct"], doc


def test_a_wrong_m_in_tile_1_is_carried_into_tile_2(run, problem_file):
    result, doc = check(run, problem_file, learner(m1_a=0.5))
    assert result.exit_code == 1
    first, second = doc["stages"]["tiles[q 0–2, k 0–2]"], doc["stages"]["tiles[q 0–2, k 2–4]"]
    # tile 1, query a: m wrong; alpha (e^−∞ = 0) correct; l and O follow from their m: carried
    assert first["cells"][0] == ["wrong", "correct", "carried", "carried", "carried"]
    assert first["cells"][1] == ["correct"] * 5
    # tile 2, query a: m = max(0.5, 2) = 2 is right; alpha = e^(0.5 − 2) is carried; and then l
    # and O are right: alpha · l_old = e^(0.5 − 2)(e^(1 − 0.5) + e^(0 − 0.5)) = e^−1 + e^−2 whatever
    # m they used, as long as they carried it (the online softmax forgives any running max)
    assert second["cells"][0] == ["correct", "carried", "correct", "correct", "correct"]
    assert second["expected"][0][1] == pytest.approx(math.exp(-1))
    assert second["right"] == 10 and first["right"] == 9


def test_a_number_wrong_from_anything_is_wrong_and_not_carried_on(run, problem_file):
    answers = learner()
    answers["tiles"][0]["l"][1] = 9.0  # a slip in tile 1
    answers["tiles"][1]["l"][1] = 5.0  # neither the exact 2.7358 nor 1 · 9 + 1.3679 from their own l
    result, doc = check(run, problem_file, answers)
    first, second = doc["stages"]["tiles[q 0–2, k 0–2]"], doc["stages"]["tiles[q 0–2, k 2–4]"]
    assert first["cells"][1] == ["correct", "correct", "wrong", "correct", "correct"]
    assert second["cells"][1] == ["correct", "correct", "wrong", "correct", "correct"]
    answers["tiles"][1]["l"][1] = 9 + 1 + math.exp(-1)  # follows from their own l of tile 1
    assert check(run, problem_file, answers)[1]["stages"]["tiles[q 0–2, k 2–4]"]["cells"][1][2] == "carried"
    assert result.exit_code == 1


def test_tiles_given_in_part_and_per_head(run, problem_file):
    answers = learner()
    answers = {"tile_size": [2, 2], "heads": [{"tiles": [{k: v for k, v in answers["tiles"][1].items()
                                                          if k in ("q_block", "k_block", "l")}]}]}
    result, doc = check(run, problem_file, answers)
    assert result.exit_code == 0 and list(doc["stages"]) == ["tiles[q 0–2, k 2–4]"]
    assert doc["stages"]["tiles[q 0–2, k 2–4]"]["max"] == 2


def test_compute_tiles_json_is_a_complete_correct_answer(run, tmp_path):
    out = tmp_path / "tiles.json"
    assert run("compute", TINY, "--tiles", "2,2", "--stages", "scores,scaled,weights,output", "-o", out).exit_code == 0
    result = run("check", out, TINY, "-f", "json")
    doc = json.loads(result.stdout)
    assert result.exit_code == 0 and doc["all_correct"] and "tiles[q 0–2, k 0–2]" in doc["stages"]


def test_the_tile_table_shows_marks(run, problem_file):
    path = problem_file(learner(m1_a=0.5), "answers.json")
    text = run("check", path, TINY, "-f", "table").stdout
    assert "tiles[q 0–2, k 0–2]" in text and "tiles[q 0–2, k 2–4]: 10/10 right (1 carried)" in text
    assert "│ a │ 0.5 ✗ 1.0000 │ 0.0 ✓ │" in text and "↪ 2.2553" in text  # what the learner's own m gives


@pytest.mark.parametrize("change, fragments", [
    (lambda d: d["tiles"][0].update(k_block=[1, 3]), ["tiles[0] has q_block [0, 2], k_block [1, 3]", "not a tile"]),
    (lambda d: d["tiles"][0].update(mm=[1, 1]), ['unknown key "mm" in tiles[0]']),
    (lambda d: d["tiles"][0].update(m=[1, 2, 3]), ["tiles[q 0–2, k 0–2].m has shape (3); expected (2)"]),
    (lambda d: d.update(tile_size=[0, 2]), ["tile_size", "two whole numbers of at least 1"]),
    (lambda d: d["tiles"].append(dict(d["tiles"][0])), ["a second time"]),
])
def test_bad_tile_answers_are_one_line_errors(run, problem_file, change, fragments):
    answers = learner()
    change(answers)
    path = problem_file(answers, "answers.json")
    assert_error(run("check", path, TINY), *fragments)


def _slipped(alpha_of):
    """The tiny example's tiles computed with alpha = alpha_of(m_old, m)."""
    m_old, l_old, O_old = np.full(2, -np.inf), np.zeros(2), np.zeros((2, 2))
    tiles = []
    for k0 in (0, 2):
        s = S[:, k0:k0 + 2]
        m = np.maximum(m_old, s.max(axis=1))
        alpha = alpha_of(m_old, m)
        P = np.exp(s - m[:, None])
        l = alpha * l_old + P.sum(axis=1)
        O = alpha[:, None] * O_old + P @ V[k0:k0 + 2]
        tiles.append({"q_block": [0, 2], "k_block": [k0, k0 + 2], "m": m.tolist(), "alpha": alpha.tolist(),
                      "l": l.tolist(), "O": O.tolist()})
        m_old, l_old, O_old = m, l, O
    return {"tile_size": [2, 2], "tiles": tiles}


@pytest.mark.parametrize("mistake, alpha_of", [
    ("no_rescale", lambda m_old, m: np.where(np.isneginf(m_old), 0.0, 1.0)),
    ("alpha_inverted", lambda m_old, m: np.where(np.isneginf(m_old), 0.0, np.exp(m - np.where(np.isneginf(m_old), 0, m_old)))),
])
def test_tile_mistakes_are_diagnosed(run, problem_file, mistake, alpha_of):
    result, doc = check(run, problem_file, _slipped(alpha_of))
    second = doc["stages"]["tiles[q 0–2, k 2–4]"]
    assert result.exit_code == 1
    assert second["cells"][0] == ["correct", "wrong", "carried", "carried", "carried"]  # alpha's slip carried on
    assert second["diagnosis"] == [mistake] and second["notes"][-1].startswith(mistake + ": ")
    assert doc["stages"]["tiles[q 0–2, k 0–2]"]["diagnosis"] == []  # tile 1 is right (alpha = e^−∞ = 0)


def test_the_api_marks_tiles_too():
    from attncli import attend, check

    doc = json.loads(TINY.read_text())
    marks = check(learner(m1_a=0.5), attend(**{k: doc[k] for k in ("Q", "K", "V", "scale")}))
    assert marks["tiles[q 0–2, k 0–2]"].count("carried") == 3 and marks.score == (19, 20)


def _one_alpha_left_out(field: str, other=None):
    """The tiny example's tiles with alpha left out of `field` (l or O) only: the running max of
    query a rises in the second tile, so alpha < 1 there. `other` (l, O) -> (l, O) changes them after."""
    m_old, l_old, O_old = np.full(2, -np.inf), np.zeros(2), np.zeros((2, 2))
    tiles = []
    for k0 in (0, 2):
        s = S[:, k0:k0 + 2]
        m = np.maximum(m_old, s.max(axis=1))
        alpha = np.where(np.isneginf(m_old), 0.0, np.exp(m_old - m))
        left_out = np.where(np.isneginf(m_old), 0.0, 1.0)
        P = np.exp(s - m[:, None])
        l = (left_out if field == "l" else alpha) * l_old + P.sum(axis=1)
        O = (left_out if field == "O" else alpha)[:, None] * O_old + P @ V[k0:k0 + 2]
        if other is not None and k0 == 2:
            l, O = other(l, O)
        tiles.append({"q_block": [0, 2], "k_block": [k0, k0 + 2], "m": m.tolist(), "alpha": alpha.tolist(),
                      "l": np.round(l, 4).tolist(), "O": np.round(O, 4).tolist()})
        m_old, l_old, O_old = m, l, O
    return {"tile_size": [2, 2], "tiles": tiles}


@pytest.mark.parametrize("field, mistake", [("l", "l_without_alpha"), ("O", "O_without_alpha")])
def test_l_or_O_without_alpha_is_named_only_when_it_gives_the_learners_numbers(run, problem_file, field, mistake):
    _, doc = check(run, problem_file, _one_alpha_left_out(field))
    second = doc["stages"]["tiles[q 0–2, k 2–4]"]
    wrong = [name for name, cell in zip(["m", "alpha", "l", "O_0", "O_1"], second["cells"][0]) if cell == "wrong"]
    assert wrong and all(name.startswith(field) for name in wrong)  # only query a's l (or O) is wrong
    assert second["diagnosis"] == [mistake] and second["notes"][-1].startswith(f"{mistake}: ")
    # Other wrong numbers in the same cells: no diagnosis (it must recompute to the learner's numbers).
    off = {"l": lambda l, O: (l + 0.5, O), "O": lambda l, O: (l, O + 0.5)}[field]
    _, doc = check(run, problem_file, _one_alpha_left_out("neither", off))
    assert doc["stages"]["tiles[q 0–2, k 2–4]"]["diagnosis"] == []
    # Both left out, alpha written right: no_rescale (l and O not multiplied by alpha).
    both = _one_alpha_left_out(field)
    both["tiles"][1] = _one_alpha_left_out("l")["tiles"][1] | {"O": _one_alpha_left_out("O")["tiles"][1]["O"]}
    _, doc = check(run, problem_file, both)
    assert doc["stages"]["tiles[q 0–2, k 2–4]"]["diagnosis"] == ["no_rescale"]
