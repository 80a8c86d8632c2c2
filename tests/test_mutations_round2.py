"""Tests added by the second mutation round (the stage table refactor): each one fails under a
plausible mistake in the new code that the rest of the suite let through, and passes on the real
code. The mutation each test guards is named in its docstring."""

import tracemalloc

import numpy as np
import pytest

from attncli import backward, limits, stages, vjps
from attncli.attention import attend
from attncli.problem import build_problem


def test_weights_vjp_is_zero_on_a_row_whose_every_key_is_masked_under_uniform():
    """Mutation: the weights vjp no longer zeroes dead rows. Under masked_rows "uniform" a dead
    row's weights are 1/Lk whatever its logits, so their gradient by the logits is 0; P ∘ (dP − D)
    alone is (dP − mean dP) / Lk there. (Through the whole backward pass the masked stage's vjp
    zeroes these cells again, so only the vjp by itself shows it.)"""
    problem = build_problem({"Q": [[1.0, 0.0], [0.0, 1.0]], "K": [[1.0, 2.0], [0.5, 0.0], [2.0, 1.0]],
                             "V": [[1.0, 0.0], [0.0, 1.0], [3.0, 2.0]], "masked_rows": "uniform",
                             "mask": [[False, False, False], [True, True, False]]})
    x = np.array([[[-np.inf, -np.inf, -np.inf], [0.5, -0.25, -np.inf]]])  # (1, 2, 3): row 0 dead
    y, dead = stages.softmax(x, "uniform")
    assert dead.tolist() == [[True, False]] and np.allclose(y[0, 0], 1 / 3)
    d = np.array([[[1.0, -2.0, 4.0], [0.5, 1.5, -1.0]]])
    block = stages.Block(problem, np.zeros((1, 2, 2)), np.zeros((1, 3, 2)), np.zeros((1, 3, 2)), 1.0)
    found = vjps.weights(block, x, y, d)
    np.testing.assert_array_equal(found[stages.PREVIOUS][0, 0], 0.0)
    live = y[0, 1] * (d[0, 1] - (d[0, 1] * y[0, 1]).sum())
    np.testing.assert_allclose(found[stages.PREVIOUS][0, 1], live)


def test_log_sum_exp_with_sinks_adds_each_heads_sink_to_every_row():
    """Mutation: `softmax.log_sum_exp` forgets the sink's e^sink in its sum. Every path's lse comes
    from the softmax's own sums, so only the function itself (stages.log_sum_exp) shows it: with
    sinks it must be ln(e^sink + Σ e^x), and a row with every key masked has lse = its sink."""
    x = np.array([[[0.0, 2.0, -1.5], [-np.inf, -np.inf, -np.inf]],
                  [[800.0, 799.0, -np.inf], [1.0, 1.0, 1.0]]])  # (2 heads, 2 rows, 3 keys)
    sinks = np.array([0.5, 800.5])[:, None, None]
    expected = [[float(np.logaddexp.reduce(np.append(row[np.isfinite(row)], s))) for row in head]
                for head, s in zip(x, (0.5, 800.5))]
    np.testing.assert_allclose(stages.log_sum_exp(x, sinks), expected, rtol=1e-15)
    assert stages.log_sum_exp(x, sinks)[0, 1] == 0.5
    lse = np.empty(x.shape[:-1])
    stages.softmax(x, sinks=sinks, lse=lse)  # the trace's lse, from the softmax's own sums
    np.testing.assert_allclose(stages.log_sum_exp(x, sinks), lse, rtol=1e-15)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_backward_count_holds_the_backward_pass_alone(dtype):
    """Mutation: `limits.score_arrays(backward=True)` one too low (`+ 1` for the two at work). The
    existing test measures attend as a whole against forward + backward counts, whose forward
    temporaries (freed before the backward pass) leave room for a backward count one short. Here
    the backward pass is measured alone, on a finished trace: it peaks at a little over 3
    (H × Lq × Lk) arrays with a mask and a softcap (3.3 in float32), within the count of 4."""
    heads, n, d = 2, 256, 4
    rng = np.random.default_rng(0)
    base = {"Q": rng.normal(size=(n, heads * d)), "K": rng.normal(size=(n, heads * d)),
            "V": rng.normal(size=(n, heads * d)), "heads": heads, "dtype": dtype, "dO": "ones"}
    one = heads * n * n * np.dtype(dtype).itemsize
    for extra in ({}, {"mask": "causal"}, {"mask": "causal", "softcap": 2.0},
                  {"mask": "causal", "softcap": 2.0, "rope": {"style": "half"}, "sinks": [0.5, -1.0]}):
        problem = build_problem(base | extra)
        trace = attend(problem)
        tracemalloc.start()
        try:
            backward.backward(trace)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak / one <= limits.score_arrays(problem, backward=True) + 0.2, (extra, peak / one)


def test_scaled_scores_that_overflow_are_refused_on_the_output_only_path():
    """Mutation: `arrays.cannot_overflow` leaves the scale out of its bound (‖q‖ ‖k‖ instead of
    ‖q‖ ‖k‖ · max(1, |scale|)), so a query whose scores are finite but whose scaled scores
    overflow skips the check on the output-only path. q = k = [1e153, 0] with scale 1000: the
    score 1e306 is finite, scaled = 1e309 overflows; the output-only path must name it, as the
    full trace does."""
    from attncli.arrays import cannot_overflow
    from attncli.blocks import attend_output
    from attncli.errors import NumericError

    Q = np.array([[[1e153, 0.0], [1.0, 0.0]]])  # (1 head, 2 rows, d 2)
    K = np.array([[[1e153, 0.0], [0.0, 1.0]]])
    with np.errstate(over="ignore"):  # 1e306 · 1000 is inf: the bound says "may overflow"
        assert cannot_overflow(Q, K, 1000.0).tolist() == [False, True]
    problem = build_problem({"Q": Q[0].tolist(), "K": K[0].tolist(), "V": [[1.0, 2.0], [3.0, 4.0]], "scale": 1000.0})
    for path in (attend, attend_output):
        with pytest.raises(NumericError, match=r"scaled = scores · scale overflows float64 at head 0, query 0, key 0"):
            path(problem)
