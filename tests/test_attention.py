"""The numpy core: the textbook example by hand, masks, heads, and invariants (hypothesis)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from attncli.base.errors import InputError, NumericError
from attncli.compute.attention import attend, merge_heads, split_heads
from attncli.compute.blocks import attend_output
from attncli.document.reading import build_problem
from attncli.problem.masks import visible
from attncli.stages.table import softmax
from tests.conftest import SCOOTER


def test_scooter_matches_the_textbook_digits():
    trace = attend(build_problem(SCOOTER))
    assert trace.scale == 1 / math.sqrt(2)
    np.testing.assert_array_equal(trace.scores[0], [[0, 4, 2]])
    np.testing.assert_allclose(trace.scaled[0], [[0, 2.8284, 1.4142]], atol=5e-5)
    assert np.round(np.exp(trace.scaled[0]), 4).tolist() == [[1.0, 16.9188, 4.1133]]
    assert round(float(np.exp(trace.scaled[0]).sum()), 4) == 22.0321
    assert np.round(trace.weights[0], 4).tolist() == [[0.0454, 0.7679, 0.1867]]
    assert np.round(trace.final, 4).tolist() == [[0.2775, 1.3491]]
    assert trace.masked is None


def test_scooter_exact_values_by_the_formula():
    e = [1.0, math.exp(4 / math.sqrt(2)), math.exp(2 / math.sqrt(2))]
    weights = [x / sum(e) for x in e]
    output = [2 * weights[0] + weights[2], 2 * weights[1] - weights[2]]
    trace = attend(build_problem(SCOOTER))
    np.testing.assert_allclose(trace.weights[0, 0], weights, rtol=1e-15)
    np.testing.assert_allclose(trace.final[0], output, rtol=1e-15)


def test_softmax_is_stable_for_large_scores():
    weights, dead = softmax(np.array([[1000.0, 1000.0, -1000.0]]))
    np.testing.assert_allclose(weights, [[0.5, 0.5, 0.0]])
    assert not dead.any()


@pytest.mark.parametrize("policy, expected", [("zero", [0, 0, 0]), ("uniform", [1 / 3] * 3)])
def test_softmax_fully_masked_rows(policy, expected):
    weights, dead = softmax(np.array([[0.0, 1.0, 2.0], [-np.inf] * 3]), policy)
    assert dead.tolist() == [False, True]
    np.testing.assert_allclose(weights[1], expected)
    assert np.isfinite(weights).all()


def test_masked_rows_error_policy_names_the_row():
    doc = dict(SCOOTER, mask=[False, False, False], masked_rows="error", query_labels=["it"])
    with pytest.raises(InputError, match='every key is masked for query "it"'):
        attend(build_problem(doc))


def test_uniform_policy_gives_mean_of_values():
    doc = dict(SCOOTER, mask=[[False, False, False]], masked_rows="uniform")
    trace = attend(build_problem(doc))
    np.testing.assert_allclose(trace.final, [[1.0, 1 / 3]])
    assert "mean of V" in trace.warnings[0]


def test_split_and_merge_heads_are_contiguous_chunks():
    x = np.arange(12.0).reshape(2, 6)
    heads = split_heads(x, 3)
    assert heads.shape == (3, 2, 2)
    np.testing.assert_array_equal(heads[1], [[2, 3], [8, 9]])
    np.testing.assert_array_equal(merge_heads(heads), x)


def test_causal_is_top_left_and_lower_right_is_bottom_right():
    doc = {"Q": np.ones((2, 1)).tolist(), "K": np.ones((4, 1)).tolist(), "V": np.eye(4).tolist()}
    top_left = visible(build_problem(dict(doc, mask="causal")))[0]
    lower_right = visible(build_problem(dict(doc, mask="causal_lower_right")))[0]
    assert top_left.astype(int).tolist() == [[1, 0, 0, 0], [1, 1, 0, 0]]
    assert lower_right.astype(int).tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]


def test_bias_is_added_after_scaling_and_not_scaled():
    doc = dict(SCOOTER, bias=[[0.0, -1.0, None]])
    trace = attend(build_problem(doc))
    np.testing.assert_allclose(trace.masked[0, 0, :2], trace.scaled[0, 0, :2] + [0, -1])
    assert trace.masked[0, 0, 2] == -np.inf
    assert trace.weights[0, 0, 2] == 0.0


def test_mask_and_bias_combine_as_and():
    doc = dict(SCOOTER, bias=[[None, 0, 0]], mask=[[True, True, False]])
    trace = attend(build_problem(doc))
    assert trace.weights[0, 0].tolist() == [0.0, 1.0, 0.0]


def test_grouped_query_heads_share_kv_heads():
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(4, 3, 2)), rng.normal(size=(2, 5, 2)), rng.normal(size=(2, 5, 3))
    trace = attend(build_problem({"Q": q.tolist(), "K": k.tolist(), "V": v.tolist()}))
    for h in range(4):
        single = attend(build_problem({"Q": q[h].tolist(), "K": k[h // 2].tolist(), "V": v[h // 2].tolist()}))
        np.testing.assert_allclose(trace.output[h], single.output[0], rtol=1e-15)


def test_scores_overflow_is_an_error_not_nan():
    with pytest.raises(NumericError, match="scores = Q Kᵀ overflows float64 at head 0, query 0, key 0"):
        attend(build_problem({"Q": [1e200, 1e200], "K": [1e200, 1e200], "V": [1]}))


@pytest.mark.parametrize("scale", [1.5, -1.5, 3.0])
def test_scaling_overflow_is_an_error_not_nan(scale):
    # scores 1.5e308 are finite; times a given scale above 1 in size they are not
    problem = build_problem({"Q": [1e154], "K": [1.5e154], "V": [1], "scale": scale})
    for compute in (attend, attend_output):
        with pytest.raises(NumericError, match="scaled = scores · scale overflows float64 at head 0, query 0, key 0"):
            compute(problem)


def test_float32_overflow_is_an_error():
    with pytest.raises(NumericError, match="overflows float32"):
        attend(build_problem({"Q": [1e30], "K": [1e30], "V": [1], "dtype": "float32"}))


def test_float32_results_are_float32():
    trace = attend(build_problem(dict(SCOOTER, dtype="float32")))
    assert trace.weights.dtype == np.float32
    np.testing.assert_allclose(trace.final, [[0.27747043, 1.34914217]], rtol=1e-6)


# Invariants, over random problems.
finite = st.floats(-10, 10, allow_nan=False, width=64)


@st.composite
def problems(draw):
    lq, lk, d, dv = (draw(st.integers(1, 5)) for _ in range(4))
    q = draw(arrays(np.float64, (lq, d), elements=finite))
    k = draw(arrays(np.float64, (lk, d), elements=finite))
    v = draw(arrays(np.float64, (lk, dv), elements=finite))
    return q, k, v


@settings(max_examples=50, deadline=None)  # the slow run has 500
@given(problems())
def test_rows_sum_to_one(qkv):
    q, k, v = qkv
    trace = attend(build_problem({"Q": q, "K": k, "V": v}))
    np.testing.assert_allclose(trace.weights.sum(axis=-1), 1.0, rtol=1e-12)
    assert (trace.weights >= 0).all()


@settings(max_examples=40, deadline=None)  # the slow run has 500
@given(problems(), st.randoms(use_true_random=False))
def test_permuting_keys_and_values_together_leaves_output_unchanged(qkv, random):
    q, k, v = qkv
    order = list(range(k.shape[0]))
    random.shuffle(order)
    a = attend(build_problem({"Q": q, "K": k, "V": v}))
    b = attend(build_problem({"Q": q, "K": k[order], "V": v[order]}))
    np.testing.assert_allclose(a.final, b.final, rtol=1e-12, atol=1e-12)


@settings(max_examples=40, deadline=None)  # the slow run has 500
@given(problems())
def test_one_head_split_equals_single_head(qkv):
    q, k, v = qkv
    a = attend(build_problem({"Q": q, "K": k, "V": v}))
    b = attend(build_problem({"Q": q, "K": k, "V": v, "heads": 1}))
    c = attend(build_problem({"Q": q[None], "K": k[None], "V": v[None]}))
    np.testing.assert_array_equal(a.final, b.final)
    np.testing.assert_array_equal(a.final, c.final)


@settings(max_examples=40, deadline=None)  # the slow run has 500
@given(problems(), st.data())
def test_masked_weights_are_exactly_zero(qkv, data):
    q, k, v = qkv
    mask = data.draw(arrays(bool, (q.shape[0], k.shape[0])))
    trace = attend(build_problem({"Q": q, "K": k, "V": v, "mask": mask}))
    assert (trace.weights[0][~mask] == 0.0).all()
    live = mask.any(axis=1)
    np.testing.assert_allclose(trace.weights[0][live].sum(axis=-1), 1.0, rtol=1e-12)
    assert (trace.weights[0][~live] == 0.0).all()


@settings(max_examples=25, deadline=None)  # the slow run has 500
@given(problems(), st.integers(1, 3))
def test_heads_are_independent_column_chunks(qkv, heads):
    q, k, v = qkv
    q, k, v = (np.tile(m, (1, heads)) for m in (q, k, v))
    trace = attend(build_problem({"Q": q, "K": k, "V": v, "heads": heads}))
    d, dv = q.shape[1] // heads, v.shape[1] // heads
    for h in range(heads):
        qk, vv = slice(h * d, (h + 1) * d), slice(h * dv, (h + 1) * dv)
        alone = attend(build_problem({"Q": q[:, qk], "K": k[:, qk], "V": v[:, vv]}))
        np.testing.assert_allclose(trace.output[h], alone.output[0], rtol=1e-13, atol=1e-13)


# The same invariants explored further, in the slow profile (-m slow).
@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(problems())
def test_rows_sum_to_one_long(qkv):
    test_rows_sum_to_one.hypothesis.inner_test(qkv)


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(problems(), st.randoms(use_true_random=False))
def test_permuting_keys_and_values_together_leaves_output_unchanged_long(qkv, random):
    test_permuting_keys_and_values_together_leaves_output_unchanged.hypothesis.inner_test(qkv, random)


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(problems())
def test_one_head_split_equals_single_head_long(qkv):
    test_one_head_split_equals_single_head.hypothesis.inner_test(qkv)


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(problems(), st.data())
def test_masked_weights_are_exactly_zero_long(qkv, data):
    test_masked_weights_are_exactly_zero.hypothesis.inner_test(qkv, data)


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(problems(), st.integers(1, 3))
def test_heads_are_independent_column_chunks_long(qkv, heads):
    test_heads_are_independent_column_chunks.hypothesis.inner_test(qkv, heads)
