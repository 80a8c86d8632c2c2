"""Accuracy against a 50-digit reference (mpmath), and the numerical edge cases."""

import math

import mpmath
import numpy as np
import pytest

from attncli.base.errors import InputError, NumericError
from attncli.compute.attention import attend
from attncli.document.reading import build_problem

EPS = np.finfo(np.float64).eps
mpmath.mp.dps = 50


def reference(q, k, v, scale):
    """Weights and outputs of one head, exactly (to 50 digits), from the float64 inputs."""
    weights, outputs, kappas = [], [], []
    for row in q:
        x = [mpmath.fsum(mpmath.mpf(a) * mpmath.mpf(b) for a, b in zip(row, key)) * scale for key in k]
        top = max(x)
        e = [mpmath.exp(xj - top) for xj in x]
        total = mpmath.fsum(e)
        w = [ej / total for ej in e]
        weights.append(w)
        outputs.append([mpmath.fsum(wj * mpmath.mpf(vj[c]) for wj, vj in zip(w, v)) for c in range(v.shape[1])])
        # κ: how much rounding in the dot products can move e^(x − max): 1 + scale · max Σ|q_a k_a|
        kappas.append(1 + float(abs(scale)) * max(float(np.abs(row * key).sum()) for key in k))
    return weights, outputs, kappas


@pytest.mark.parametrize("seed", range(60))
def test_error_is_within_the_stated_bound(seed):
    """|weight error| ≤ 2κε and |output error| ≤ 2κε Σ_j|v_j| (docs/explanations/numerics.md)."""
    rng = np.random.default_rng(seed)
    lq, lk, d, dv = rng.integers(1, 7, 4)
    magnitude = [0.1, 1.0, 10.0, 100.0][seed % 4]
    q, k, v = rng.normal(size=(lq, d)) * magnitude, rng.normal(size=(lk, d)), rng.normal(size=(lk, dv))
    trace = attend(build_problem({"Q": q, "K": k, "V": v}))
    weights, outputs, kappas = reference(q, k, v, 1 / mpmath.sqrt(d))
    for i in range(lq):
        for j in range(lk):
            assert abs(trace.weights[0, i, j] - float(weights[i][j])) <= 2 * kappas[i] * EPS
        for c in range(dv):
            bound = 2 * kappas[i] * EPS * float(np.abs(v[:, c]).sum())
            assert abs(trace.final[i, c] - float(outputs[i][c])) <= bound


def test_well_scaled_problems_are_within_a_few_ulps():
    q = np.array([[0.0, 4.0]])
    k = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    v = np.array([[2.0, 0.0], [0.0, 2.0], [1.0, -1.0]])
    trace = attend(build_problem({"Q": q, "K": k, "V": v}))
    weights, outputs, _ = reference(q, k, v, 1 / mpmath.sqrt(2))
    for got, want in zip(trace.weights[0, 0], weights[0]):
        assert abs(got - float(want)) <= 4 * np.spacing(float(want))
    for got, want in zip(trace.final[0], outputs[0]):
        assert abs(got - float(want)) <= 4 * np.spacing(float(want))


def test_near_the_float64_limit_is_an_error_not_nan():
    big = math.sqrt(np.finfo(np.float64).max) * 2
    with pytest.raises(NumericError, match="overflows float64"):
        attend(build_problem({"Q": [big, big], "K": [big, big], "V": [1.0]}))
    # Just below the limit still works, and the huge scores become a one-hot softmax.
    fine = attend(build_problem({"Q": [[1e150], [-1e150]], "K": [[1e150], [0.0]], "V": [[1.0], [2.0]]}))
    assert fine.weights[0].tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_denormal_inputs_give_uniform_weights():
    trace = attend(build_problem({"Q": [5e-324, 1e-310], "K": [[1e-310, 5e-324], [0.0, 1e-320]],
                                  "V": [[1.0], [3.0]]}))
    assert trace.weights[0, 0].tolist() == [0.5, 0.5] and trace.final[0, 0] == 2.0


@pytest.mark.parametrize("scale, expected", [(0.0, [0.5, 0.5]), (-1.0, None)])
def test_zero_and_negative_scale(scale, expected):
    trace = attend(build_problem({"Q": [2.0], "K": [[1.0], [0.0]], "V": [[1.0], [0.0]], "scale": scale}))
    if expected:
        assert trace.weights[0, 0].tolist() == expected
    else:  # a negative scale prefers the smaller score
        e = math.exp(-2.0)
        np.testing.assert_allclose(trace.weights[0, 0], [e / (e + 1), 1 / (e + 1)], rtol=1e-15)


def test_one_key_and_width_one():
    trace = attend(build_problem({"Q": [[3.0], [-7.0]], "K": [[2.0]], "V": [[5.0, -1.0]]}))
    assert trace.weights[0].tolist() == [[1.0], [1.0]] and trace.final.tolist() == [[5.0, -1.0]] * 2


@pytest.mark.parametrize("policy", ["zero", "uniform", "error"])
def test_every_key_masked_in_some_rows_under_each_policy(policy):
    doc = {"Q": [[1.0], [2.0], [3.0]], "K": [[1.0], [2.0]], "V": [[1.0], [3.0]],
           "mask": [[True, True], [False, False], [True, False]], "masked_rows": policy}
    if policy == "error":
        with pytest.raises(InputError, match="every key is masked for query 1"):
            attend(build_problem(doc))
        return
    trace = attend(build_problem(doc))
    assert trace.fully_masked == ((0, 1),) and "query 1" in trace.warnings[0]
    assert trace.final[1, 0] == (0.0 if policy == "zero" else 2.0)
    assert trace.final[2, 0] == 1.0 and np.isfinite(trace.final).all()


def test_minus_infinity_bias_combined_with_a_mask():
    doc = {"Q": [[1.0], [1.0]], "K": [[1.0], [2.0], [3.0]], "V": [[1.0], [2.0], [3.0]],
           "bias": [[None, 0, 0], [0, 0, None]], "mask": [[True, True, False], [False, True, True]]}
    trace = attend(build_problem(doc))
    assert trace.weights[0, 0].tolist() == [0.0, 1.0, 0.0]
    assert trace.weights[0, 1].tolist() == [0.0, 1.0, 0.0]
    doc["bias"] = [[None, None, 0], [0, 0, 0]]  # with the mask, row 0 has nothing left
    trace = attend(build_problem(doc))
    assert trace.fully_masked == ((0, 0),) and trace.final[0, 0] == 0.0


def test_float32_overflow_and_precision():
    with pytest.raises(NumericError, match="overflows float32"):
        attend(build_problem({"Q": [1e20, 1e20], "K": [1e20, 1e20], "V": [1.0], "dtype": "float32"}))
    trace = attend(build_problem({"Q": [0, 4], "K": [[1, 0], [0, 1], [.5, .5]], "V": [[2, 0], [0, 2], [1, -1]],
                                  "dtype": "float32"}))
    np.testing.assert_allclose(trace.final, [[0.27747043, 1.34914217]], rtol=2e-7)
