"""The backward pass (attncli/compute/backward.py): finite differences, shapes, policies."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attncli.compute.attention import attend
from attncli.document.reading import build_problem


def loss(doc):
    """sum(final output ∘ dO), whose gradient the backward pass gives."""
    trace = attend(build_problem(doc))
    return float((trace.final * np.array(doc["dO"])).sum())


def finite_differences(doc, name, h=1e-6):
    """Central differences of `loss` by every element of input `name`."""
    x = np.array(doc[name], dtype=np.float64)
    grad = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[index] += h
        down[index] -= h
        grad[index] = (loss({**doc, name: up}) - loss({**doc, name: down})) / (2 * h)
    return grad


@st.composite
def problems(draw):
    """Small problems: heads split or pre-split (with GQA), or projections with W_O and biases;
    an optional mask matrix (rows may be fully masked), bias, scale, masked-rows policy, softcap,
    RoPE and sinks (whose own gradient is checked too)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    lq, lk = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    heads = draw(st.sampled_from([1, 2]))
    form = draw(st.sampled_from(["split", "presplit", "gqa", "projected"]))
    doc = {}
    if form == "projected":
        doc.update(X=rng.normal(size=(lq, 3)), X_kv=rng.normal(size=(lk, 3)), W_Q=rng.normal(size=(3, 2 * heads)),
                   W_K=rng.normal(size=(3, 2 * heads)), W_V=rng.normal(size=(3, heads)), b_Q=rng.normal(size=2 * heads),
                   b_V=rng.normal(size=heads), W_O=rng.normal(size=(heads, 2)), b_O=rng.normal(size=2), heads=heads)
    elif form == "split":
        doc.update(Q=rng.normal(size=(lq, 2 * heads)), K=rng.normal(size=(lk, 2 * heads)),
                   V=rng.normal(size=(lk, heads)), heads=heads)
    else:
        kv = 1 if form == "gqa" else heads
        doc.update(Q=rng.normal(size=(2 * heads if form == "gqa" else heads, lq, 2)),
                   K=rng.normal(size=(kv, lk, 2)), V=rng.normal(size=(kv, lk, 2)))
    if draw(st.booleans()):
        doc["mask"] = rng.random((lq, lk)) < 0.7
        doc["masked_rows"] = draw(st.sampled_from(["zero", "uniform"]))
    if draw(st.booleans()):
        doc["bias"] = rng.normal(size=(lq, lk))
    if draw(st.booleans()):
        doc["scale"] = float(rng.uniform(0.2, 1.5))
    if draw(st.booleans()):
        doc["softcap"] = float(rng.uniform(0.5, 3.0))
    if draw(st.booleans()):  # every head's d_k is 2: one rotated pair
        doc["rope"] = {"style": draw(st.sampled_from(["half", "interleaved"])), "base": 3.0}
    if draw(st.booleans()):
        query_heads = 2 * heads if form == "gqa" else heads
        doc["sinks"] = rng.normal(size=query_heads)
    problem = build_problem({**doc, "dO": "ones"})
    doc["dO"] = rng.normal(size=problem.dO.shape)
    return doc


@settings(max_examples=10, deadline=None)  # the slow run has 100
@given(problems())
def test_gradients_agree_with_finite_differences(doc):
    grads = attend(build_problem(doc)).gradients.grads
    differentiable = [k for k in doc if k not in ("heads", "mask", "bias", "scale", "masked_rows", "dO", "softcap",
                                                  "rope")]
    assert set(grads) == set(differentiable)
    for name in differentiable:
        np.testing.assert_allclose(grads[name], finite_differences(doc, name), rtol=1e-5, atol=1e-6,
                                   err_msg=name)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(problems())
def test_gradients_agree_with_finite_differences_long(doc):
    test_gradients_agree_with_finite_differences.hypothesis.inner_test(doc)


SCOOTER = {"Q": [0, 4], "K": [[1, 0], [0, 1], [0.5, 0.5]], "V": [[2, 0], [0, 2], [1, -1]]}


def test_ones_is_the_gradient_of_the_sum():
    ones = attend(build_problem({**SCOOTER, "dO": "ones"})).gradients
    explicit = attend(build_problem({**SCOOTER, "dO": [[1, 1]]})).gradients
    for name in ("Q", "K", "V"):
        np.testing.assert_array_equal(ones.grads[name], explicit.grads[name])


def test_D_is_rowsum_of_d_output_times_output_and_of_d_weights_times_weights():
    trace = attend(build_problem({**SCOOTER, "dO": [[0.5, -2]]}))
    g = trace.gradients.heads
    np.testing.assert_allclose(g["D"], (g["d_output"] * trace.output).sum(-1), atol=1e-15)
    np.testing.assert_allclose(g["D"], (g["d_weights"] * trace.weights).sum(-1), atol=1e-15)


def test_uniform_masked_rows_send_gradient_to_V_only():
    doc = {**SCOOTER, "Q": [[0, 4], [1, 1]], "mask": [[True, False, True], [False, False, False]],
           "masked_rows": "uniform", "dO": [[1, 2], [3, 4]]}
    g = attend(build_problem(doc)).gradients
    assert not g.grads["Q"][1].any() and not g.heads["d_scores"][0, 1].any()
    # the uniform row sends dO/3 to every value
    row0 = attend(build_problem({**doc, "dO": [[0, 0], [3, 4]]})).gradients.grads["V"]
    np.testing.assert_allclose(row0, np.tile([[1.0, 4 / 3]], (3, 1)), atol=1e-15)


def test_a_row_blocked_by_a_minus_infinity_bias_sends_nothing_to_its_scores():
    """No mask rule hides its keys (the masked stage's vjp lets the gradient through): the softmax's
    own vjp gives 0 on a row whose every logit is −∞, as finite differences do."""
    doc = {**SCOOTER, "Q": [[0, 4], [1, 1]], "bias": [[0, 1, 0], [-np.inf] * 3], "masked_rows": "uniform",
           "dO": [[1, 2], [3, 4]]}
    g = attend(build_problem(doc)).gradients
    assert not g.heads["d_scores"][0, 1].any() and not g.grads["Q"][1].any()
    for name in ("Q", "K", "V"):
        np.testing.assert_allclose(g.grads[name], finite_differences(doc, name), atol=1e-8, err_msg=name)


def test_gradients_are_read_only():
    g = attend(build_problem({**SCOOTER, "dO": "ones"})).gradients
    with pytest.raises(ValueError):
        g.grads["Q"][0, 0] = 1.0
    with pytest.raises(TypeError):
        g.heads["d_Q"] = None


def test_no_dO_no_gradients():
    assert attend(build_problem(SCOOTER)).gradients is None


def test_the_readme_tiny_example_backward():
    import json

    from tests.conftest import SAMPLES

    doc = {**json.loads((SAMPLES / "tiny_tiles.json").read_text()), "dO": [[1, 0], [0, 1]]}
    g = attend(build_problem(doc)).gradients
    r = lambda name: np.round(g.heads[name][0], 4).tolist()  # noqa: E731
    assert r("d_weights") == [[1, 0, 1, 2], [0, 1, 1, 0]]
    assert r("D") == [1.1243, 0.5]
    assert r("d_scores") == [[-0.0244, -0.0813, -0.0664, 0.1722], [-0.0672, 0.1828, 0.0672, -0.1828]]
    assert r("d_Q") == [[0.0149, 0.0909], [-0.1155, 0.0]]
    assert r("d_K") == [[-0.0244, -0.0672], [-0.0813, 0.1828], [-0.0664, 0.0672], [0.1722, -0.1828]]
    assert r("d_V") == [[0.1966, 0.1345], [0.0723, 0.3655], [0.5344, 0.1345], [0.1966, 0.3655]]


def test_the_api_takes_dO_and_marks_gradients():
    from attncli import attend as api_attend
    from attncli import check

    trace = api_attend(**SCOOTER, dO="ones")
    assert np.round(trace.gradients.grads["Q"], 4).tolist() == [[-0.0954, 0.0954]]
    marks = check({"d_Q": [[-0.0954, 0.0954]]}, trace)
    assert marks.all_correct


def test_the_backward_pass_is_refused_before_it_runs_out_of_memory(monkeypatch):
    from attncli.compute import limits
    from attncli.compute.limits import ResourceError

    left = iter([1 << 20, 50])  # the forward pass fits; then 50 bytes remain
    monkeypatch.setattr(limits, "available_bytes", lambda: next(left))
    with pytest.raises(ResourceError, match="the backward pass's 4 score-sized arrays"):
        attend(build_problem({**SCOOTER, "dO": "ones"}))
