"""`attn check` on a RoPE problem: Q_rope and K_rope are marked, a learner's own Q_rope and
K_rope are carried into their scores, and swapped pairings are diagnosed (rope_wrong_pairing)."""

import json

import numpy as np

from attncli.problem.rope import Rope, rotate

Q = np.array([[1.0, 0.0, 2.0, 1.0], [0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 2.0]])
K = np.array([[1.0, 2.0, 0.0, 1.0], [0.0, 1.0, 1.0, 1.0], [2.0, 0.0, 1.0, 0.0]])
V = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
PROBLEM = {"Q": Q.tolist(), "K": K.tolist(), "V": V.tolist(), "mask": "causal", "rope": True}
POS = np.arange(3)


def rope(x, style="half"):
    return rotate(x[None], POS, Rope(style, 10000.0, 4))[0]


def r4(x):
    return np.round(x, 6).tolist()  # 4 decimals would write cos(0.01) as 1.0


def check(run, tmp_path, answers):
    (tmp_path / "problem.json").write_text(json.dumps(PROBLEM))
    (tmp_path / "answers.json").write_text(json.dumps(answers))
    result = run("check", tmp_path / "answers.json", tmp_path / "problem.json", "--format", "json")
    assert result.exit_code in (0, 1), result.stderr
    return result.exit_code, json.loads(result.stdout)["stages"]


def test_rotated_q_and_k_are_marked(run, tmp_path):
    code, stages = check(run, tmp_path, {"Q_rope": r4(rope(Q)), "K_rope": r4(rope(K))})
    assert code == 0
    assert stages["Q_rope"]["right"] == 12 and stages["K_rope"]["right"] == 12
    np.testing.assert_allclose(stages["K_rope"]["expected"], rope(K), atol=1e-15)


def test_wrong_pairing_is_diagnosed_and_carried_into_the_scores(run, tmp_path):
    q_wrong, k_wrong = rope(Q, "interleaved"), rope(K, "interleaved")
    scores = q_wrong @ k_wrong.T  # the learner's own rotated Q and K, multiplied correctly
    code, stages = check(run, tmp_path, {"Q_rope": r4(q_wrong), "K_rope": r4(k_wrong), "scores": r4(scores)})
    assert code == 1
    assert stages["Q_rope"]["diagnosis"] == ["rope_wrong_pairing"]
    assert stages["K_rope"]["diagnosis"] == ["rope_wrong_pairing"]
    assert any("rotate_half" in note for note in stages["Q_rope"]["notes"])
    cells = np.array(stages["scores"]["cells"])
    assert set(cells.ravel()) <= {"correct", "carried"} and (cells == "carried").any()


def test_wrong_pairing_in_the_scores_alone_is_diagnosed(run, tmp_path):
    scores = rope(Q, "interleaved") @ rope(K, "interleaved").T
    code, stages = check(run, tmp_path, {"scores": r4(scores)})
    assert code == 1 and stages["scores"]["diagnosis"] == ["rope_wrong_pairing"]


def test_a_slip_in_q_rope_is_carried_into_the_scores(run, tmp_path):
    q_rope = rope(Q)
    q_rope[1, 0] += 1.0  # one wrong cell
    code, stages = check(run, tmp_path, {"Q_rope": r4(q_rope), "scores": r4(q_rope @ rope(K).T)})
    assert code == 1
    assert np.array(stages["Q_rope"]["cells"])[1, 0] == "wrong"
    assert "wrong" not in np.array(stages["scores"]["cells"])  # follows from their Q_rope and the exact K_rope


def test_unrotated_scores_are_wrong(run, tmp_path):
    code, stages = check(run, tmp_path, {"scores": r4(Q @ K.T)})
    assert code == 1 and (np.array(stages["scores"]["cells"]) == "wrong").any()


def test_a_rotated_answer_to_a_problem_without_rope_is_refused(run):
    from tests.conftest import assert_error

    result = run("check", "--Q_rope", "1,2", "-", input=json.dumps({"Q": [[0, 4]], "K": [[1, 0]], "V": [[1]]}))
    assert_error(result, "--Q_rope: Q_rope is given, but this problem has no rope (rotary positions)")


def test_unrotated_q_and_k_are_diagnosed(run, tmp_path):
    code, stages = check(run, tmp_path, {"scores": r4(Q @ K.T)})
    assert code == 1 and stages["scores"]["diagnosis"] == ["rope_skipped"]
    code, stages = check(run, tmp_path, {"K_rope": r4(K)})
    assert stages["K_rope"]["diagnosis"] == ["rope_skipped"]


def test_csv_answers_name_the_rotated_stages_with_their_capitals(run, tmp_path):
    (tmp_path / "problem.json").write_text(json.dumps(PROBLEM))
    rows = lambda m: "\n".join(",".join(repr(x) for x in row) for row in r4(m))  # noqa: E731
    (tmp_path / "answers.csv").write_text(f"Q_rope\n{rows(rope(Q))}\nheads[0].K_rope\n{rows(rope(K))}\n")
    result = run("check", tmp_path / "answers.csv", tmp_path / "problem.json", "--format", "json")
    assert result.exit_code == 0, result.stderr
    stages = json.loads(result.stdout)["stages"]
    assert stages["Q_rope"]["right"] == 12 and stages["K_rope"]["right"] == 12


def test_the_latex_worksheet_writes_theta_as_math(run):
    result = run("exercise", "--seed", "3", "--kind", "rope", "--answers", "--format", "latex")
    assert result.exit_code == 0, result.stderr
    assert "θ" not in result.stdout and r"$\theta_i$" in result.stdout
