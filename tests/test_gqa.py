"""Grouped-query attention, `"kv_heads": N` (issue 18): attncli against transformers' Llama layers
(tests/fixtures/gqa_reference.json, made by make_gqa_fixtures.py: repeat_kv, eager attention in
float64, autograd), against the old workaround (W_K's columns repeated by hand), and the same
problem as 2-D and 3-D Q/K/V; then every path that works per head, the words that name each
query head's kv head, the errors and the JSON round trip."""

import json
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attncli.base.errors import InputError
from attncli.compute import cost
from attncli.compute.attention import attend
from attncli.compute.blocks import attend_output
from attncli.compute.tiles import attend_tiles
from attncli.document.reading import build_problem
from attncli.document.writing import to_dict
from attncli.problem import groups
from tests.conftest import assert_error

FIXTURE = Path(__file__).parent / "fixtures" / "gqa_reference.json"
TOL = dict(rtol=0, atol=1e-12)
SAME = dict(rtol=1e-15, atol=1e-15)  # float noise: the by-hand layer's products run over other BLAS blocks


@cache
def _cases() -> tuple[dict, ...]:
    return tuple(json.loads(FIXTURE.read_text())["cases"])


CASES = _cases()


def cases():
    return pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])


def projected(inputs: dict) -> dict[str, np.ndarray]:
    """Q, K, V = X W + b in numpy, 2-D (heads side by side; K and V with kv_heads · d columns)."""
    X = np.array(inputs["X"])
    return {n: X @ np.array(inputs[f"W_{n}"]) + np.array(inputs.get(f"b_{n}", 0.0)) for n in "QKV"}


def repeated(inputs: dict) -> dict:
    """The old workaround: W_K's and W_V's (and b_K's, b_V's) columns repeated per query head,
    no kv_heads."""
    heads, kv = inputs["heads"], inputs["kv_heads"]
    out = {key: value for key, value in inputs.items() if key != "kv_heads"}
    for name in ("W_K", "W_V", "b_K", "b_V"):
        if name in inputs:
            a = np.array(inputs[name])
            d = a.shape[-1] // kv
            out[name] = np.concatenate([a[..., (h // (heads // kv)) * d:(h // (heads // kv) + 1) * d]
                                        for h in range(heads)], axis=-1).tolist()
    return out


# ---- against transformers --------------------------------------------------------------------

@cases()
def test_attncli_gives_llamas_weights_output_and_gradients(case):
    problem = build_problem(case["inputs"])
    trace, expected = attend(problem), case["expected"]
    assert groups.count(problem) == case["inputs"]["kv_heads"] < problem.heads
    np.testing.assert_allclose(trace.weights, expected["weights"], **TOL)
    np.testing.assert_allclose(trace.final, expected["output"], **TOL)
    assert list(trace.gradients.grads) == list(expected["grads"])
    for name, grad in expected["grads"].items():  # d W_K, d W_V, d b_K, d b_V: summed over each group
        np.testing.assert_allclose(trace.gradients.grads[name], grad, rtol=0, atol=1e-11, err_msg=name)


@cases()
def test_the_output_alone_and_the_tiles_give_llamas_output(case):
    problem = build_problem({k: v for k, v in case["inputs"].items() if k != "dO"})
    for block in (1, 2, None):
        np.testing.assert_allclose(attend_output(problem, block=block).final, case["expected"]["output"], **TOL)
    trace = attend(problem)
    tiled = attend_tiles(problem, 2, 2)
    np.testing.assert_allclose(tiled.output, trace.output, **TOL)


@cases()
def test_the_same_layer_as_2d_and_3d_qkv(case):
    """Q, K, V projected by hand: 2-D with kv_heads, 3-D with kv heads first (kv_heads optional)."""
    inputs = case["inputs"]
    heads, kv = inputs["heads"], inputs["kv_heads"]
    qkv = projected(inputs)
    common = {k: inputs[k] for k in ("scale", "causal", "rope") if k in inputs}
    expected = np.array(case["expected"]["weights"])
    two_d = attend(build_problem({**common, **{n: m.tolist() for n, m in qkv.items()}, "heads": heads,
                                  "kv_heads": kv}))
    np.testing.assert_allclose(two_d.weights, expected, **TOL)
    split = {n: m.reshape(m.shape[0], -1, m.shape[1] // (heads if n == "Q" else kv)).transpose(1, 0, 2).tolist()
             for n, m in qkv.items()}
    for extra in ({}, {"kv_heads": kv}):
        three_d = attend(build_problem({**common, **split, **extra}))
        np.testing.assert_allclose(three_d.weights, expected, **TOL)
        np.testing.assert_array_equal(three_d.output, two_d.output)


# ---- against the old workaround --------------------------------------------------------------

@cases()
def test_kv_heads_equals_repeating_w_ks_columns_by_hand(case):
    grouped, by_hand = attend(build_problem(case["inputs"])), attend(build_problem(repeated(case["inputs"])))
    for name in grouped.stages:
        np.testing.assert_allclose(grouped.stage(name), by_hand.stage(name), **SAME, err_msg=name)
    np.testing.assert_allclose(grouped.K, by_hand.K, **SAME)
    np.testing.assert_allclose(grouped.final, by_hand.final, **SAME)
    heads, kv = case["inputs"]["heads"], case["inputs"]["kv_heads"]
    for name, mine in grouped.gradients.grads.items():
        theirs = by_hand.gradients.grads[name]
        if name in ("W_K", "W_V", "b_K", "b_V"):  # the repeated copies' gradients, summed per group
            d = mine.shape[-1] // kv
            parts = np.stack(np.split(theirs, heads, axis=-1))  # (heads, …, d)
            theirs = np.concatenate(list(parts.reshape(kv, heads // kv, *parts.shape[1:]).sum(axis=1)), axis=-1)
            assert theirs.shape[-1] == kv * d
        np.testing.assert_allclose(mine, theirs, rtol=1e-13, atol=1e-13, err_msg=name)  # sums in another order
    for name, mine in grouped.gradients.heads.items():  # per query head: what it sends its kv head
        np.testing.assert_allclose(mine, by_hand.gradients.heads[name], rtol=1e-13, atol=1e-13, err_msg=name)


@st.composite
def layers(draw):
    """A small random layer with projections: kv_heads of heads, maybe X_kv, biases, a mask."""
    kv, group, d_k, d_v = (draw(st.integers(1, 3)) for _ in range(4))
    heads, d_model, lq = kv * group, draw(st.integers(1, 4)), draw(st.integers(1, 4))
    lk = draw(st.integers(1, 4)) if draw(st.booleans()) else lq
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    doc = {"X": rng.normal(size=(lq, d_model)), "W_Q": rng.normal(size=(d_model, heads * d_k)),
           "W_K": rng.normal(size=(d_model, kv * d_k)), "W_V": rng.normal(size=(d_model, kv * d_v)),
           "b_K": rng.normal(size=kv * d_k), "b_V": rng.normal(size=kv * d_v), "heads": heads, "kv_heads": kv,
           "dO": "ones", "dtype": draw(st.sampled_from(["float64", "float32"]))}
    if lk != lq:
        doc["X_kv"] = rng.normal(size=(lk, d_model))
    if draw(st.booleans()):
        doc["causal"] = True
    return {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in doc.items()}


@settings(max_examples=40, deadline=None)
@given(layers())
def test_any_grouping_is_the_repeated_layer(doc):
    grouped, by_hand = attend(build_problem(doc)), attend(build_problem(repeated(doc)))
    tol = SAME if doc["dtype"] == "float64" else dict(rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(grouped.weights, by_hand.weights, **tol)
    np.testing.assert_allclose(grouped.final, by_hand.final, **tol)
    assert grouped.gradients.grads["W_K"].shape == np.shape(doc["W_K"])
    assert grouped.gradients.grads["b_V"].shape == np.shape(doc["b_V"])
    total = np.sum(by_hand.gradients.grads["W_K"]), np.sum(grouped.gradients.grads["W_K"])  # sums per group
    np.testing.assert_allclose(*total, rtol=1e-4 if doc["dtype"] == "float32" else 1e-12, atol=1e-5)


def test_3d_k_gradients_sum_over_each_query_group():
    rng = np.random.default_rng(5)
    Q, K, V = rng.normal(size=(4, 3, 2)), rng.normal(size=(2, 3, 2)), rng.normal(size=(2, 3, 2))
    trace = attend(build_problem({"Q": Q.tolist(), "K": K.tolist(), "V": V.tolist(), "dO": "ones"}))
    per_head = trace.gradients.heads["d_K"]  # (4, 3, 2)
    np.testing.assert_allclose(trace.gradients.grads["K"], [per_head[0] + per_head[1], per_head[2] + per_head[3]],
                               rtol=0, atol=1e-15)


# ---- the grouping in words -------------------------------------------------------------------

LAYER = CASES[0]["inputs"]  # 4 query heads over 2 kv heads, biases, causal


def small() -> dict:
    return {k: v for k, v in LAYER.items() if k != "dO"}


def test_tables_and_header_name_each_query_heads_kv_head(run, problem_file):
    out = run("compute", problem_file(small()), "--format", "table", "--stages", "inputs,weights").stdout
    assert ("grouped-query attention: 4 query heads over 2 kv heads; query head h reads K, V of kv head h // 2 "
            "(transformers' repeat_kv)") in out.splitlines()
    for h in range(4):
        assert f"weights = softmax(masked) over keys · head {h} · K, V of kv head {h // 2}" in out
        assert f"K · head {h} · K, V of kv head {h // 2}" in out


def test_3d_qkv_is_named_too_and_multi_query_says_so(run, problem_file):
    doc = {"Q": np.ones((2, 1, 2)).tolist(), "K": [[1, 0]], "V": [[1, 1]]}  # 2-D K beside 3-D Q: one kv head
    out = run("compute", problem_file(doc), "--format", "table", "--stages", "weights").stdout
    assert "grouped-query attention: 2 query heads share 1 kv head (multi-query)" in out
    assert "weights = softmax(scaled) over keys · head 1 · K, V of kv head 0" in out


def test_without_grouping_nothing_changes(run, problem_file):
    doc = {"X": LAYER["X"], "W_Q": LAYER["W_Q"], "W_K": repeated(LAYER)["W_K"], "W_V": repeated(LAYER)["W_V"],
           "heads": 4, "kv_heads": 4}
    out = run("compute", problem_file(doc), "--format", "table", "--stages", "weights").stdout
    assert "kv head" not in out and "weights = softmax(scaled) over keys · head 3\n" in out
    assert "kv_heads" not in run.json("compute", problem_file(doc))


def test_explain_projects_k_and_v_with_the_kv_heads_columns(run, problem_file):
    out = run("compute", problem_file(small()), "--explain", "--head", "3", "--row", "1", "--precision", "6").stdout
    assert 'Head 3 (K, V of kv head 1), query 1 (row 1)' in out
    assert "(kv head 1: columns 3–5 of W_K, 3–5 of W_V), for every key:" in out
    trace = attend(build_problem(small()))
    k0 = ", ".join(f"{x:.6f}" for x in trace.K[3, 0])
    assert f"  0: k = [{k0}]" in out


def test_exports_and_heatmap_name_the_kv_head(run, problem_file):
    path = problem_file(small())
    markdown = run("compute", path, "--format", "markdown", "--stages", "weights").stdout
    assert "weights (head 2 · K, V of kv head 1)" in markdown
    heatmap = run("compute", path, "--heatmap").stdout
    assert "heatmap of weights · head 1 · K, V of kv head 0" in heatmap
    tiles = run("compute", path, "--tiles", "2,2", "--format", "table").stdout
    assert "· head 3 · K, V of kv head 1" in tiles


# ---- JSON: written and read back ---------------------------------------------------------------

def test_json_writes_kv_heads_and_reads_it_back(run, problem_file, tmp_path):
    written = run.json("compute", problem_file(LAYER))
    assert written["kv_heads"] == 2 and len(written["heads"]) == 4
    assert np.array(written["W_K"]).shape == (8, 6)
    assert np.array(written["grads"]["W_K"]).shape == (8, 6)
    again = run.json("compute", problem_file(written, "out.json"))  # the next command reads it
    assert again["output"] == written["output"] and again["grads"] == written["grads"]
    written["kv_heads"] = 1
    assert_error(run("compute", problem_file(written, "bad.json")), "W_K has 6 columns but kv_heads · d_k = 1 · 3 = 3")


def test_npz_writes_kv_heads_and_reads_it_back(run, problem_file, tmp_path):
    out = tmp_path / "out.npz"
    assert run("compute", problem_file(LAYER), "-o", out).exit_code == 0
    with np.load(out) as z:
        assert int(z["kv_heads"]) == 2 and z["grads/W_K"].shape == (8, 6) and z["heads/d_K"].shape == (4, 5, 3)
    again = run.json("compute", out)
    assert again["kv_heads"] == 2
    np.testing.assert_array_equal(again["output"], attend(build_problem(LAYER)).final)


def test_backward_and_tile_explanations_run_per_query_head(run, problem_file):
    path = problem_file(LAYER)
    out = run("compute", path, "--explain", "--head", "2", "--row", "0").stdout
    assert "Head 2 (K, V of kv head 1), query 0" in out and "Backward pass" in out
    assert "d_V and d_K add up every query's share of every query head of kv head 1 (heads 2–3)" in out
    tiles = run("compute", path, "--tiles", "2,2", "--explain", "--head", "2").stdout
    assert "query 0, head 2 · K, V of kv head 1 through the tiles" in tiles


def test_3d_documents_write_kv_heads_and_check_it():
    doc = {"Q": np.ones((4, 1, 2)).tolist(), "K": np.ones((2, 3, 2)).tolist(), "V": np.ones((2, 3, 1)).tolist()}
    written = to_dict(attend(build_problem(doc)))
    assert written["kv_heads"] == 2
    assert np.array_equal(attend(build_problem(written)).final, attend(build_problem(doc)).final)
    with pytest.raises(InputError, match=r"kv_heads is 1 but K has 2 heads \(its first axis\)"):
        build_problem({**doc, "kv_heads": 1})


def test_check_marks_a_grouped_problem(run, tmp_path, problem_file):
    trace = attend(build_problem(small()))
    answers = {"heads": [{"weights": trace.weights[h].tolist(), "output": trace.output[h].tolist()} for h in range(4)],
               "output": trace.final.tolist()}
    (tmp_path / "answers.json").write_text(json.dumps(answers))
    assert run("check", tmp_path / "answers.json", problem_file(small())).exit_code == 0
    answers["heads"][3]["weights"] = trace.weights[1].tolist()  # head 1's: it reads kv head 0, head 3 kv head 1
    (tmp_path / "answers.json").write_text(json.dumps(answers))
    result = run("check", tmp_path / "answers.json", problem_file(small()), "--format", "json")
    assert result.exit_code == 1
    marks = json.loads(result.stdout)["stages"]
    wrong = [marks[f"heads[{h}].weights"]["wrong"] for h in range(4)]
    assert wrong[:3] == [0, 0, 0] and wrong[3] > 0


def test_cost_reads_kv_heads():
    problem = build_problem(small())
    shape = cost.shape_of(problem)
    assert (shape.heads, shape.kv_heads, shape.d_k, shape.d_v) == (4, 2, 3, 3)
    assert cost.cost(problem).kv_bytes_per_token == 2 * (3 + 3) * 8  # the cache holds the kv heads only


# ---- errors ------------------------------------------------------------------------------------

PROJ = {"X": np.ones((2, 4)).tolist(), "W_Q": np.ones((4, 8)).tolist(), "W_K": np.ones((4, 4)).tolist(),
        "W_V": np.ones((4, 4)).tolist()}
ERRORS = [
    ("not a divisor", dict(PROJ, heads=4, kv_heads=3),
     ["heads = 4 is not a multiple of kv_heads = 3: each kv head serves heads / kv_heads query heads"]),
    ("more kv heads", dict(PROJ, heads=2, kv_heads=4), ["kv_heads is 4 but heads is 2"]),
    ("kv_heads without heads", dict(PROJ, kv_heads=2), ["kv_heads is 2 but heads is 1"]),
    ("W_K columns", dict(PROJ, heads=4, kv_heads=1),
     ["W_K has 4 columns but kv_heads · d_k = 1 · 2 = 2 (W_Q has 8 columns: 4 heads of d_k = 2)"]),
    ("W_V columns", dict(PROJ, W_V=np.ones((4, 3)).tolist(), heads=4, kv_heads=2),
     ["kv_heads = 2 does not divide the 3 columns of W_V"]),
    ("b_K length", dict(PROJ, heads=4, kv_heads=2, b_K=[0] * 8),
     ["b_K has 8 entries; expected 4 entries, one per column of W_K"]),
    ("2-D K columns", {"Q": np.ones((1, 8)).tolist(), "K": np.ones((2, 6)).tolist(), "V": np.ones((2, 4)).tolist(),
                       "heads": 4, "kv_heads": 2}, ["K has 6 columns but kv_heads · d_k = 2 · 2 = 4"]),
    ("fraction", dict(PROJ, heads=4, kv_heads=1.5), ["kv_heads is the number 1.5; expected a whole number ≥ 1"]),
    ("string", dict(PROJ, heads=4, kv_heads="2"), ['kv_heads is the string "2"; expected a whole number ≥ 1']),
    ("zero", dict(PROJ, heads=4, kv_heads=0), ["kv_heads is the number 0; expected a whole number ≥ 1"]),
    ("3-D against kv_heads", {"Q": np.ones((4, 1, 2)).tolist(), "K": np.ones((2, 1, 2)).tolist(),
                              "V": np.ones((2, 1, 2)).tolist(), "kv_heads": 4}, ["kv_heads is 4 but K has 2 heads"]),
    ("no kv_heads hint", dict(PROJ, heads=4),
     ["W_K has 4 columns but W_Q has 8: d_k must match; for grouped-query attention give kv_heads"]),
]


@pytest.mark.parametrize("name, doc, fragments", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_name_both_sizes(run, problem_file, name, doc, fragments):
    path = problem_file(doc)
    assert_error(run("compute", path), f"{path}: ", *fragments)


def test_grouped_w_o_and_do_take_every_query_heads_output():
    doc = dict(PROJ, heads=4, kv_heads=2, W_O=np.ones((8, 3)).tolist(), dO=np.ones((2, 3)).tolist())
    trace = attend(build_problem(doc))
    assert trace.concat.shape == (2, 8) and trace.gradients.grads["W_K"].shape == (4, 4)
    with pytest.raises(InputError, match="W_O has 4 rows but the heads' outputs side by side have 8 columns"):
        build_problem(dict(doc, W_O=np.ones((4, 3)).tolist()))
    with pytest.raises(InputError, match=r"dO has shape \(2 × 4\); expected \(2 × 8\)"):
        build_problem(dict(PROJ, heads=4, kv_heads=2, dO=np.ones((2, 4)).tolist()))


# ---- the reference page ------------------------------------------------------------------------

def test_check_names_a_kv_head_taken_by_tiling(run, tmp_path, problem_file):
    """Query head 1 of 4 over 2 kv heads reads kv head 0; tiling K and V gives it kv head 1."""
    trace = attend(build_problem(small()))
    tiled = [(h % 2) * 2 for h in range(4)]  # a query head that reads kv head h mod 2: 0, 2, 0, 2
    learner = attend(build_problem({"Q": trace.Q.tolist(), "K": trace.K[tiled].tolist(), "V": trace.V[tiled].tolist(),
                                    "causal": True, "scale": trace.scale}))
    answers = {"heads": [{"scores": trace.scores[h].tolist(), "output": trace.output[h].tolist()} for h in range(4)]}
    answers["heads"][1] = {"scores": learner.scores[1].tolist(), "output": learner.output[1].tolist()}
    (tmp_path / "answers.json").write_text(json.dumps(answers))
    result = run("check", tmp_path / "answers.json", problem_file(small()), "--format", "json")
    marks = json.loads(result.stdout)["stages"]
    assert marks["heads[1].scores"]["diagnosis"] == ["kv_head_tiled"]
    assert marks["heads[1].output"]["diagnosis"] == ["kv_head_tiled"]
    assert marks["heads[0].scores"]["diagnosis"] == [] and marks["heads[0].scores"]["wrong"] == 0


def test_the_kv_heads_hint_needs_a_whole_fraction_of_qs_columns():
    """Mutation: `hint` drops `q % k == 0`, so a K of 3 columns beside a Q of 4 (no kv_heads can
    explain that) is told to give kv_heads."""
    assert "kv_heads" in groups.hint("K", np.zeros((2, 4)), np.zeros((2, 2)))
    assert groups.hint("K", np.zeros((2, 4)), np.zeros((2, 3))) == ""
    with pytest.raises(InputError) as error:
        build_problem({"Q": np.ones((2, 4)).tolist(), "K": np.ones((3, 3)).tolist(), "V": np.ones((3, 2)).tolist()})
    assert "kv_heads" not in error.value.message
