"""Masks as rules of positions: causal, window, key_mask and a given matrix, ANDed; their input
keys and options, errors, JSON round trip and header lines."""

import json

import numpy as np
import pytest

from attncli.compute.attention import attend
from attncli.compute.blocks import attend_output
from attncli.document.reading import build_problem
from attncli.problem.masks import has_logit_changes, key_span, visible
from tests.conftest import SAMPLES, assert_error

Q3 = "1,0; 0,1; 1,1"
K4 = "1,0; 0,1; 1,1; 2,0"
V4 = "1; 2; 3; 4"


def problem(lq=6, lk=6, **rules):
    rng = np.random.default_rng(0)
    doc = {"Q": rng.normal(size=(lq, 2)), "K": rng.normal(size=(lk, 2)), "V": rng.normal(size=(lk, 2))}
    return build_problem(doc | rules)


def grid(p) -> list[list[int]]:
    return visible(p)[0].astype(int).tolist()


def test_window_bounds_are_inclusive():
    p = problem(window=[2, 1])
    i, j = np.arange(6)[:, None], np.arange(6)[None, :]
    assert grid(p) == ((j >= i - 2) & (j <= i + 1)).astype(int).tolist()
    assert grid(p)[3] == [0, 1, 1, 1, 1, 0]  # keys 1 … 4: two before, itself, one after


def test_null_bounds_are_unbounded():
    assert grid(problem(window=[None, 0])) == grid(problem(mask="causal"))
    assert grid(problem(window=[0, None]))[2] == [0, 0, 1, 1, 1, 1]
    everything = problem(window=[None, None])
    assert np.all(visible(everything)) and has_logit_changes(everything)


def test_hugging_face_sliding_window_is_w_minus_one_before_the_query():
    # HF sliding_window = 3 with causal: a query sees itself and the 2 keys before it.
    assert grid(problem(window=[2, 0]))[4] == [0, 0, 1, 1, 1, 0]


def test_causal_lower_right_is_causal_with_the_last_positions():
    lower_right = problem(lq=2, lk=5, mask="causal_lower_right")
    assert lower_right.q_positions.tolist() == [3, 4]
    assert grid(lower_right) == grid(problem(lq=2, lk=5, mask="causal", q_positions=[3, 4]))
    assert grid(lower_right) == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]


def test_key_mask_true_is_a_real_key():
    p = problem(lq=2, lk=3, key_mask=[1, 0, True])
    assert grid(p) == [[1, 0, 1], [1, 0, 1]]
    trace = attend(p)
    assert trace.weights[0, :, 1].tolist() == [0.0, 0.0]


def test_every_rule_is_anded():
    matrix = np.ones((6, 6), bool)
    matrix[5, 4] = False
    p = problem(causal=True, window=[3, None], key_mask=[1, 1, 0, 1, 1, 1], mask=matrix)
    i, j = np.arange(6)[:, None], np.arange(6)[None, :]
    expected = (j <= i) & (j >= i - 3) & (j != 2) & matrix
    assert grid(p) == expected.astype(int).tolist()


def test_positions_with_gaps_and_any_order():
    p = problem(lq=2, lk=4, causal=True, q_positions=[1, 7], k_positions=[3, 0, 2, 1])
    assert grid(p) == [[0, 1, 0, 1], [1, 1, 1, 1]]
    windowed = problem(lq=1, lk=4, window=[1, 1], q_positions=[10], k_positions=[9, 12, 11, 10])
    assert grid(windowed) == [[1, 0, 1, 1]]


def test_positions_alone_add_no_masked_stage():
    p = problem(q_positions=[5, 6, 7, 8, 9, 10], k_positions=[0, 2, 4, 6, 8, 10])
    assert not has_logit_changes(p) and visible(p) is None and attend(p).masked is None


def test_key_span_is_the_band_a_block_can_see():
    assert key_span(problem(lq=8, lk=8, causal=True), slice(0, 4)) == (0, 4)
    assert key_span(problem(lq=8, lk=8, window=[1, 0]), slice(4, 6)) == (3, 6)
    assert key_span(problem(lq=8, lk=8, key_mask=[1] * 5 + [0] * 3), slice(0, 8)) == (0, 5)
    assert key_span(problem(lq=2, lk=3, key_mask=[0, 0, 0]), slice(0, 2)) == (0, 0)
    assert key_span(problem(lq=8, lk=8), slice(0, 8)) == (0, 8)


@pytest.mark.parametrize("policy", ["zero", "uniform"])
def test_a_block_with_every_key_hidden_follows_the_policy(policy):
    p = problem(lq=4, lk=3, causal=True, q_positions=[-2, -1, 5, 6], masked_rows=policy)
    blocked, full = attend_output(p, block=2), attend(p)
    np.testing.assert_allclose(blocked.output, full.output, rtol=0, atol=1e-12)
    assert blocked.fully_masked == full.fully_masked == ((0, 0), (0, 1))
    if policy == "uniform":  # the mean of ALL values, not of the keys a block looked at
        np.testing.assert_allclose(full.output[0, 0], p.inputs["V"].mean(axis=0), atol=1e-12)


def test_each_decoding_step_is_a_row_of_full_causal_attention():
    """A KV-cache step: one query at position t over the first t + 1 keys, causal."""
    rng = np.random.default_rng(3)
    X = {"Q": rng.normal(size=(6, 4)), "K": rng.normal(size=(6, 4)), "V": rng.normal(size=(6, 3))}
    full = attend(build_problem(X | {"mask": "causal"})).final
    for t in range(6):
        step = build_problem({"Q": X["Q"][t:t + 1], "K": X["K"][:t + 1], "V": X["V"][:t + 1],
                              "q_positions": [t], "mask": "causal"})
        np.testing.assert_allclose(attend(step).final[0], full[t], rtol=0, atol=1e-15)
        np.testing.assert_allclose(attend_output(step).final[0], full[t], rtol=0, atol=1e-15)


def test_the_decode_sample_is_the_last_row_of_full_causal_attention(run):
    doc = json.loads((SAMPLES / "decode_step.json").read_text())
    t = doc["q_positions"][0]
    assert len(doc["Q"]) == 1 and len(doc["K"]) == t + 1 and doc["mask"] == "causal"
    step = run.json("compute", SAMPLES / "decode_step.json")["output"]
    full = attend(build_problem({"Q": doc["K"], "K": doc["K"], "V": doc["V"], "mask": "causal"})).final
    # the sample's query is its last key's query: Q_t; compare with a full run whose last query is it
    whole = attend(build_problem({"Q": doc["K"][:-1] + doc["Q"], "K": doc["K"], "V": doc["V"],
                                  "mask": "causal"})).final
    assert full.shape[0] == t + 1
    np.testing.assert_allclose(step[0], whole[t], rtol=0, atol=1e-15)


def test_options_are_read_and_echoed_so_json_reads_back_the_same(run, problem_file):
    doc = run.json("compute", "--q", Q3, "--k", K4, "--v", V4, "--q-positions", "1,2,3",
                   "--k-positions", "0,1,2,5", "--window", "1,none", "--key-mask", "1,1,0,true",
                   "--mask", "causal")
    assert doc["q_positions"] == [1, 2, 3] and doc["k_positions"] == [0, 1, 2, 5]
    assert doc["window"] == [1, None] and doc["key_mask"] == [True, True, False, True]
    assert doc["mask"] == "causal"
    assert "window [1, ∞]" in doc["mask_rule"] and "key_mask: true = a real key" in doc["mask_rule"]
    again = run.json("compute", problem_file(doc))
    assert again == doc


def test_a_matrix_with_causal_reads_back_as_both(run, problem_file):
    first = run.json("compute", problem_file({"Q": [[1], [2]], "K": [[1], [2]], "V": [[1], [2]],
                                              "mask": [[1, 1], [0, 1]], "causal": True}))
    assert first["causal"] is True and first["mask"] == [[True, True], [False, True]]
    assert first["heads"][0]["masked"][0][1] is None and first["heads"][0]["masked"][1][0] is None
    assert run.json("compute", problem_file(first)) == first


def test_lower_right_reads_back_as_the_word(run, problem_file):
    first = run.json("compute", "--q", "1,0; 0,1", "--k", K4, "--v", V4, "--mask", "causal_lower_right")
    assert first["mask"] == "causal_lower_right" and "q_positions" not in first
    assert run.json("compute", problem_file(first)) == first


def test_an_npz_output_reads_back_with_its_rules(run, tmp_path):
    path = tmp_path / "out.npz"
    args = ("--q", Q3, "--k", K4, "--v", V4, "--window", "none,1", "--key-mask", "1,0,1,1",
            "--k-positions", "0,2,4,6", "--mask", "causal_lower_right")
    assert run("compute", *args, "--output", path).exit_code == 0
    again = run.json("compute", path)
    assert again["window"] == [None, 1] and again["key_mask"] == [True, False, True, True]
    assert again["k_positions"] == [0, 2, 4, 6] and again["mask"] == "causal_lower_right"
    assert again["output"] == run.json("compute", *args)["output"]


def test_default_positions_are_not_echoed(run):
    doc = run.json("compute", "--q", Q3, "--k", K4, "--v", V4)
    assert not {"q_positions", "k_positions", "window", "key_mask", "causal"} & doc.keys()


def test_header_says_each_rule_with_its_convention(run):
    result = run("compute", "--q", Q3, "--k", K4, "--v", V4, "--window", "1,0", "--key-mask", "1,1,0,1",
                 "--q-positions", "1,2,3", "--mask", "causal", "-f", "table", "--stages", "output")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "mask: causal: query i may attend key j when k_pos[j] ≤ q_pos[i] (by the positions given)" in lines
    assert "mask: window [1, 0]: query i may attend key j when q_pos[i] − 1 ≤ k_pos[j] ≤ q_pos[i] + 0 " \
           "(bounds inclusive)" in lines
    assert any(line.startswith("mask: key_mask: true = a real key") and "1 of 4 keys is padding" in line
               for line in lines)
    assert "mask: all of these rules apply together (AND)" in lines
    assert "positions: q_positions [1, 2, 3]" in lines


def test_output_only_and_full_agree_through_the_cli(run, tmp_path):
    args = ("compute", "--q", Q3, "--k", K4, "--v", V4, "--window", "0,1", "--key-mask", "0,1,1,1")
    full = run.json(*args)["output"]
    only = run.json(*args, "--stages", "output")["output"]
    np.testing.assert_allclose(only, full, rtol=0, atol=1e-12)


@pytest.mark.parametrize("option, value, fragments", [
    ("--q-positions", "1,2", ["--q-positions", "q_positions has 2 entries; expected 3"]),
    ("--q-positions", "1,2,1.5", ["q_positions[2] is the number 1.5; expected a whole number"]),
    ("--q-positions", "1,2,x", ["q_positions[2] is the string \"x\"; expected a whole number"]),
    ("--q-positions", "1,2,true", ["q_positions[2] is true; expected a whole number"]),
    ("--k-positions", "0,1,2," + "9" * 25, ["--k-positions", "k_positions[3]", "is a 25-digit number; expected a whole number from -2^53 to 2^53"]),
    ("--window", "-1,0", ["--window", "window[0] is the number -1", "use null for unbounded"]),
    ("--window", "2", ["window has 1 entry; expected 2"]),
    ("--window", "1,2,3", ["window has 3 entries; expected 2"]),
    ("--window", "1,0.5", ["window[1] is the number 0.5; expected a whole number ≥ 0 or null"]),
    ("--key-mask", "1,1,0", ["--key-mask", "key_mask has 3 entries; expected 4"]),
    ("--key-mask", "1,1,0,2", ["key_mask[3] is the number 2; expected true/false or 1/0"]),
])
def test_bad_rule_options_are_one_error_line(run, option, value, fragments):
    assert_error(run("compute", "--q", Q3, "--k", K4, "--v", V4, option, value), *fragments)


@pytest.mark.parametrize("rules, fragments", [
    ({"mask": "causal_lower_right", "q_positions": [0, 1, 2]},
     ["q_positions is given with mask causal_lower_right", "give mask causal with the positions"]),
    ({"q_positions": "1,2,3"}, ["q_positions is the string", "expected a list of 3"]),
    ({"q_positions": [1, 2, 2 ** 60]}, ["q_positions[2]", "to 2^53"]),
    ({"window": [None, -3]}, ["window[1] is the number -3", "use null for unbounded, not -1"]),
    ({"window": 3}, ["window is the number 3; expected a list of 2"]),
    ({"key_mask": "yes"}, ["key_mask is the string"]),
    ({"causal": 1}, ["causal is the number 1; expected true or false"]),
])
def test_bad_rule_keys_name_the_file_and_field(run, problem_file, rules, fragments):
    path = problem_file({"Q": [[1], [2], [3]], "K": [[1], [2], [3], [4]], "V": [[1], [2], [3], [4]]} | rules)
    assert_error(run("compute", path), str(path), *fragments)


def test_help_states_the_conventions(run):
    text = " ".join(run("compute", "--help", env={"COLUMNS": "200"}).stdout.split())
    for fragment in ("--q-positions", "--k-positions", "--window", "--key-mask",
                     "q_pos − LEFT ≤ k_pos ≤ q_pos + RIGHT", "sliding_window = W with causal is window [W − 1, 0]",
                     "key_padding_mask"):
        assert fragment in text, fragment


def test_causal_with_fewer_queries_warns_only_without_positions(run):
    plain = run("compute", "--q", "1,0", "--k", K4, "--v", V4, "--mask", "causal", "-f", "json")
    assert "use causal_lower_right or give their q_positions" in plain.stderr
    placed = run("compute", "--q", "1,0", "--k", K4, "--v", V4, "--mask", "causal", "--q-positions", "3",
                 "-f", "json")
    assert placed.exit_code == 0 and placed.stderr == ""


@pytest.mark.parametrize("mask", ["causal", "causal_lower_right"])
def test_the_causal_header_words_say_the_inclusive_rule_the_mask_applies(mask):
    """Mutation: `Causal.line` (the table header and JSON's mask_rule) says k_pos[j] < q_pos[i]
    while the rule, and its per-row `condition` in --explain, let a query see its own position.
    The words are checked against the mask itself: the key at the query's own position is seen."""
    from attncli.problem import masks, visibility

    problem = build_problem({"Q": [[1.0, 0.0], [0.0, 1.0]], "K": [[1.0, 2.0], [0.5, 0.0], [2.0, 1.0]],
                             "V": [[1.0, 0.0], [0.0, 1.0], [3.0, 2.0]], "mask": mask})
    seen = masks.visible(problem)[0]
    for i, q in enumerate(problem.q_positions):
        assert seen[i, list(problem.k_positions).index(q)]  # a query sees the key at its own position
    assert "query i may attend key j when k_pos[j] ≤ q_pos[i]" in masks.rule_lines(problem)[0]
    last = int(problem.q_positions[-1])
    assert visibility.row_rule(problem, len(problem.q_positions) - 1) == f"k_pos ≤ {last} (causal)"


def test_mask_option_replaces_the_files_causal_too(run, problem_file):
    """Mutation: gather forgets to drop the file's `causal` when --mask replaces its mask rule."""
    path = problem_file({"Q": [[1, 0], [0, 1]], "K": [[1, 0], [0, 1]], "V": [[1, 0], [0, 1]], "causal": True})
    result = run("compute", path, "--mask", "1,1;1,1", "-f", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert "causal" not in doc or not doc["causal"]
    assert doc["heads"][0]["weights"][0][1] > 0  # the first query sees the second key


def test_the_causal_header_says_when_positions_are_given(run):
    """Found by a user trial (cosmetics): the causal header says when positions are given."""
    given = run.json("compute", SAMPLES / "causal.json", "--q-positions", "1,2,3,4", "--k-positions", "1,2,3,4")
    assert given["mask_rule"] == "causal: query i may attend key j when k_pos[j] ≤ q_pos[i] (by the positions given)"
    default = run.json("compute", SAMPLES / "causal.json")
    assert "(top-left with the default positions 0 … L − 1, as PyTorch is_causal=True)" in default["mask_rule"]


def test_causal_lower_right_with_keys_after_every_query_is_refused(run):
    """Found by a hostile user (issue 17, round three of "nothing silently ignored or misread"):
    causal_lower_right with keys after every query is refused."""
    three = ["--q", "1,0;0,1;1,1", "--k", "1,0;0,1;1,1", "--v", "1;2;3", "--mask", "causal_lower_right"]
    assert_error(run("compute", *three, "--k-positions", "5,6,7"),
                 "--k-positions: k_positions start at 5, after every query position that mask causal_lower_right "
                 "sets (Lk − Lq … Lk − 1 = 0 … 2)", "give mask causal with the queries' q_positions")
    some = run("compute", *three, "--k-positions", "2,6,7", "--format", "json")
    assert some.exit_code == 0 and "every key is masked for query 0, 1" in some.stderr  # some rows: a warning
