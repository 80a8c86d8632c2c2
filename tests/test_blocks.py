"""The blocked output-only path equals the full trace (1e-12 in float64), whatever the blocks."""

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attncli.base.errors import AttnError, NumericError
from attncli.compute import blocks
from attncli.compute.attention import attend
from attncli.compute.blocks import attend_output
from attncli.document.reading import build_problem


def random_problem(seed, heads=2, kv_heads=2, lq=37, lk=23, d=8, mask=True, bias=False, w_o=False, **extra):
    rng = np.random.default_rng(seed)
    doc = {"Q": rng.normal(size=(heads, lq, d)), "K": rng.normal(size=(kv_heads, lk, d)),
           "V": rng.normal(size=(kv_heads, lk, 5))}
    if mask:
        m = rng.random((heads, lq, lk)) > 0.3
        m[:, 3] = False  # a row with every key masked
        doc["mask"] = m
    if bias:
        b = rng.normal(size=(lq, lk))
        b[1, :4] = -np.inf
        doc["bias"] = b
    if w_o:
        doc["W_O"] = rng.normal(size=(heads * 5, 3))
        doc["b_O"] = rng.normal(size=3)
    return build_problem(doc | extra)


@pytest.mark.parametrize("options", [
    {}, {"mask": False}, {"bias": True}, {"bias": True, "mask": False}, {"kv_heads": 1}, {"w_o": True},
    {"masked_rows": "uniform"}, {"bias": True, "masked_rows": "uniform"}, {"scale": 3.0},
    {"alibi": True}, {"alibi": [0.5, -0.25], "bias": True, "kv_heads": 1}, {"softcap": 2.0, "scale": 3.0},
    {"sinks": [0.5, -1.0]}, {"sinks": 1000.0, "masked_rows": "uniform"}, {"sinks": -3.0, "bias": True},
    {"alibi": True, "softcap": 1.5, "sinks": 0.25, "bias": True, "w_o": True},
])
@pytest.mark.parametrize("block, threads", [(1, 1), (5, 2), (None, 1), (64, 3)])
def test_blocked_equals_full(options, block, threads):
    problem = random_problem(0, **options)
    full, blocked = attend(problem), attend_output(problem, block=block, threads=threads)
    np.testing.assert_allclose(blocked.final, full.final, rtol=0, atol=1e-12)
    np.testing.assert_allclose(blocked.output, full.output, rtol=0, atol=1e-12)
    assert blocked.warnings == full.warnings and blocked.fully_masked == full.fully_masked
    assert blocked.scores is None and blocked.weights is None


def test_large_scores_take_the_max_subtracted_path():
    problem = random_problem(1, mask=False, scale=40.0)  # |scores| far beyond e^x's range
    np.testing.assert_allclose(attend_output(problem, block=4).final, attend(problem).final, atol=1e-12)


def test_float32_blocked_is_close_to_float64():
    problem64 = random_problem(2)
    problem32 = random_problem(2, dtype="float32")
    out = attend_output(problem32, block=7).final
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, attend(problem64).final, atol=1e-5)


def test_overflow_is_reported_not_nan():
    problem = build_problem({"Q": [[1e200, 1e200]], "K": [[1e200, 1e200]], "V": [[1.0]]})
    with pytest.raises(NumericError, match="overflows float64"):
        attend_output(problem)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 9))
def test_blocks_of_any_size(seed, block):
    problem = random_problem(seed, lq=11, lk=6, bias=seed % 2 == 0)
    np.testing.assert_allclose(attend_output(problem, block=block).final, attend(problem).final, atol=1e-12)


def test_progress_is_reported_in_rows_and_only_on_a_terminal(monkeypatch):
    problem = random_problem(3, lq=10)
    seen = []
    attend(problem, progress=seen.append)
    assert seen == sorted(seen) and 0 < seen[-1] <= 10
    seen.clear()
    attend_output(problem, block=3, progress=seen.append)
    assert seen == [3, 6, 9, 10]

    from attncli.render import progress

    with progress.progress(10, 10**12) as done:  # stderr is not a terminal under pytest
        assert done is None
    monkeypatch.setattr(progress.sys.stderr, "isatty", lambda: True, raising=False)
    with progress.progress(10, 10) as done:  # too little work for a bar
        assert done is None


def test_threaded_blocks_print_nothing_but_the_error(tmp_path):
    """In a real process attn runs blocks on several threads (BLAS set to one thread each);
    numpy's error state is per thread, so overflow must stay silent there too."""
    import subprocess
    import sys

    env = {k: v for k, v in __import__("os").environ.items() if not k.endswith("_NUM_THREADS")}
    done = subprocess.run([sys.executable, "-m", "attncli", "compute", "--q", "1e200,1e200;1,1", "--k",
                           "1e200,1e200;1,1", "--v", "1;2", "--stages", "output"],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [  # the full trace's message, word for word
        "error: scores = Q Kᵀ overflows float64 at head 0, query 0, key 0 (its largest finite value "
        "is 1.8e+308); scale the inputs down"]


# --- The blocked path equals the full trace on every finite input ---------------------------------
# Both subtract the row max before e^x, so neither overflows nor underflows where the other does
# not; both refuse exactly when Q Kᵀ, · scale, + bias or weights V overflow the dtype.

def test_tiny_values_far_below_the_max_score_do_not_underflow(run):
    """e^(−576) · 1e-75 underflows to 0; with the max subtracted it is 1 · 1e-75."""
    args = ("compute", "--q=-24", "--k", "24;24", "--v", "1e-75;3e-75", "--scale", "1")
    blocked, full = run.json(*args, "--stages", "output"), run.json(*args)
    assert blocked["output"] == full["output"] == [[2e-75]]


def test_huge_values_beside_a_large_score_do_not_overflow(run):
    """e^576 · 1e60 overflows; the full trace's weights are (1, e^−576), so its output is 1e60."""
    args = ("compute", "--q", "24", "--k", "24;0", "--v", "1e60;0", "--scale", "1")
    blocked, full = run.json(*args, "--stages", "output"), run.json(*args)
    assert blocked["output"] == full["output"] == [[1e60]]


def test_weights_times_values_overflow_only_where_the_full_trace_does():
    """Σ e^x v overflows before the division by Σ e^x (2e308 / 2); the full trace divides first."""
    problem = build_problem({"Q": [[1.0]], "K": [[1.0], [1.0]], "V": [[1e308], [1e308]]})
    assert attend_output(problem).final.tolist() == attend(problem).final.tolist() == [[1e308]]
    uniform = build_problem({"Q": [[1.0]], "K": [[1.0], [1.0]], "V": [[1e308], [1e308]], "mask": [[False, False]],
                             "masked_rows": "uniform"})  # the mean of V, without Σ V overflowing
    assert attend_output(uniform).final.tolist() == attend(uniform).final.tolist() == [[1e308]]


def test_overflow_at_a_masked_key_is_refused_as_the_full_trace_does():
    """Q Kᵀ overflowing is an error even where the mask hides it; scaled + bias only where not masked."""
    hidden = build_problem({"Q": [[1e200]], "K": [[1e200], [1.0]], "V": [[1.0], [2.0]], "mask": [[False, True]]})
    for compute in (attend, attend_output):
        with pytest.raises(NumericError, match=r"^scores = Q Kᵀ overflows float64 at head 0, query 0, key 0"):
            compute(hidden)
    bias = {"Q": [[1e154]], "K": [[1e154], [1.0]], "V": [[1.0], [2.0]], "scale": 1.0, "bias": [[1e308, 0.0]]}
    shown, masked = build_problem(bias), build_problem(bias | {"mask": [[False, True]]})
    for compute in (attend, attend_output):
        with pytest.raises(NumericError, match=r"^scaled \+ bias overflows float64 at head 0, query 0, key 0"):
            compute(shown)
        assert compute(masked).final.tolist() == [[2.0]]


@functools.cache  # one strategy per range: hypothesis spent most of the test building them anew
def _magnitude(low, high):
    """±10^e with e uniform in [low, high], or 0."""
    exponents = st.floats(low, high, allow_nan=False)
    return st.one_of(st.just(0.0), st.tuples(st.sampled_from([-1.0, 1.0]), exponents).map(lambda t: t[0] * 10 ** t[1]))


@st.composite
def rules(draw, lq, lk):
    """Mask rules of positions: positions with gaps, repeats and any order, causal (top-left or
    lower-right), a window with null bounds, key padding; any of them, or none."""
    doc = {}
    spread = st.integers(-3, 3 * max(lq, lk))
    lower_right = draw(st.booleans()) and draw(st.booleans())
    if draw(st.booleans()) and not lower_right:
        doc["q_positions"] = draw(st.lists(spread, min_size=lq, max_size=lq))
    if draw(st.booleans()):
        doc["k_positions"] = draw(st.lists(spread, min_size=lk, max_size=lk))
    if lower_right:
        doc["mask"] = "causal_lower_right"
        if min(doc.get("k_positions", [0])) > lk - 1:  # every key after every query: refused (test_masks.py: test_causal_lower_right_with_keys_after_every_query_is_refused)
            doc["k_positions"][0] = lk - 1
    elif draw(st.booleans()):
        doc["causal"] = True
    if draw(st.booleans()):
        doc["window"] = draw(st.lists(st.one_of(st.none(), st.integers(0, 6)), min_size=2, max_size=2))
    if draw(st.booleans()):
        doc["key_mask"] = draw(st.lists(st.booleans(), min_size=lk, max_size=lk))
    return doc


@settings(max_examples=40, deadline=None)  # the slow run has 400
@given(st.data(), st.integers(1, 12), st.integers(1, 12), st.integers(0, 2**32 - 1))
def test_blocks_skip_hidden_keys_and_equal_the_full_trace(data, lq, lk, seed):
    """Positions, causal, windows, key masks and a given matrix, ANDed, with ALiBi, softcap and
    sinks; blocks of any size skip
    the keys hidden from every row of the block and still equal the full trace to 1e-12."""
    rng = np.random.default_rng(seed)
    doc = {"Q": rng.normal(size=(2, lq, 3)), "K": rng.normal(size=(lk, 3)), "V": rng.normal(size=(lk, 2))}
    doc |= data.draw(rules(lq, lk))
    if data.draw(st.booleans()) and "mask" not in doc:
        doc["mask"] = rng.random((2, lq, lk)) > 0.2
    doc["masked_rows"] = data.draw(st.sampled_from(["zero", "uniform"]))
    if data.draw(st.booleans()):
        doc["alibi"] = data.draw(st.one_of(st.just(True), st.lists(st.floats(-2, 2), min_size=2, max_size=2)))
    if data.draw(st.booleans()):
        doc["softcap"] = data.draw(st.floats(0.1, 50))
    if data.draw(st.booleans()):
        doc["sinks"] = data.draw(st.lists(st.floats(-50, 50), min_size=2, max_size=2))
    problem = build_problem(doc)
    block = data.draw(st.integers(1, lq))
    full, blocked = attend(problem), attend_output(problem, block=block)
    np.testing.assert_allclose(blocked.output, full.output, rtol=0, atol=1e-12)
    assert blocked.fully_masked == full.fully_masked and blocked.warnings == full.warnings


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(st.data(), st.integers(1, 12), st.integers(1, 12), st.integers(0, 2**32 - 1))
def test_blocks_skip_hidden_keys_and_equal_the_full_trace_long(data, lq, lk, seed):
    test_blocks_skip_hidden_keys_and_equal_the_full_trace.hypothesis.inner_test(data, lq, lk, seed)


@st.composite
def extreme_problems(draw):
    """Scaled scores anywhere in [−700, 700] built from Q and K of extreme magnitudes (K = diag(k),
    Q = scores / (k · scale)), values from 1e-300 to 1e300, masks with fully masked rows, biases
    with −∞; or raw Q and K up to 1e200, which mostly overflow (both paths must refuse)."""
    lq, lk = draw(st.integers(1, 5)), draw(st.integers(1, 4))
    if draw(st.booleans()):
        scale = 10 ** draw(st.floats(-100, 100))
        k = [draw(_magnitude(-150, 150).filter(bool)) for _ in range(lk)]
        scaled = np.array(draw(st.lists(st.lists(st.floats(-700, 700), min_size=lk, max_size=lk),
                                        min_size=lq, max_size=lq)))
        with np.errstate(over="ignore", under="ignore"):
            Q = scaled / (np.array(k) * scale)
        if not np.isfinite(Q).all():
            Q = np.clip(np.nan_to_num(Q), -1e300, 1e300)
        doc = {"Q": Q, "K": np.diag(k), "scale": scale}
    else:
        doc = {"Q": [[draw(_magnitude(-200, 200)) for _ in range(2)] for _ in range(lq)],
               "K": [[draw(_magnitude(-200, 200)) for _ in range(2)] for _ in range(lk)]}
        if draw(st.booleans()):
            doc["scale"] = 10 ** draw(st.floats(-300, 300))
    doc["V"] = [[draw(_magnitude(-300, 300)) for _ in range(2)] for _ in range(lk)]
    if draw(st.booleans()):
        mask = np.array(draw(st.lists(st.booleans(), min_size=lq * lk, max_size=lq * lk))).reshape(lq, lk)
        mask[draw(st.integers(0, lq - 1))] = draw(st.booleans())  # sometimes a row with every key masked
        doc["mask"] = mask
    if draw(st.booleans()):
        doc["bias"] = [[draw(st.one_of(st.floats(-700, 700), st.just(-np.inf), _magnitude(250, 308)))
                        for _ in range(lk)] for _ in range(lq)]
    doc |= draw(rules(lq, lk))
    doc["masked_rows"] = draw(st.sampled_from(["zero", "uniform"]))
    return build_problem(doc), draw(st.integers(1, lq))


def _outcome(compute, problem, **options):
    try:
        return compute(problem, **options)
    except AttnError as error:
        return type(error)


@settings(max_examples=30, deadline=None)  # the slow run has 600
@given(extreme_problems())
def test_blocked_equals_full_on_extreme_magnitudes(case):
    problem, block = case
    full, blocked = _outcome(attend, problem), _outcome(attend_output, problem, block=block)
    if isinstance(full, type) or isinstance(blocked, type):
        assert blocked == full  # both refuse, with the same kind of error
        return
    # Within 1e-12 of what rounding can move: Σ_j weights_j |v_j|, plus a few subnormal spacings
    # (products below 2^-1022 keep fewer digits, in both paths alike).
    scale = np.abs(full.weights) @ np.abs(full.V)  # (H, Lq, d_v)
    floor = 4 * problem.lk * np.nextafter(0.0, 1.0)
    assert np.all(np.abs(blocked.output - full.output) <= 1e-12 * scale + floor)
    assert blocked.fully_masked == full.fully_masked and blocked.warnings == full.warnings


@pytest.mark.slow
@settings(max_examples=600, deadline=None)
@given(extreme_problems())
def test_blocked_equals_full_on_extreme_magnitudes_long(case):
    test_blocked_equals_full_on_extreme_magnitudes.hypothesis.inner_test(case)


@pytest.mark.parametrize("doc", [
    {"Q": [[1e154]], "K": [[1e155], [1e-300]], "V": [[1.0], [1.0]]},  # one key overflows, the other is tiny
    {"Q": [[1e19]], "K": [[1e20]], "V": [[1.0]], "dtype": "float32"},  # 1e39: between float32's max and 4 times it
])
def test_the_output_only_path_names_the_same_overflow_as_the_full_trace(doc):
    # The output-only path skips the overflow check for rows whose Cauchy–Schwarz bound is far below
    # the largest float: the bound must use the largest key and stay below the dtype's maximum.
    message = f"scores = Q Kᵀ overflows {doc.get('dtype', 'float64')} at head 0, query 0, key 0"
    for compute in (attend, attend_output):
        with pytest.raises(NumericError, match=message):
            compute(build_problem(doc))


def test_scaled_scores_that_overflow_are_refused_on_the_output_only_path():
    """Mutation: `arrays.cannot_overflow` leaves the scale out of its bound (‖q‖ ‖k‖ instead of
    ‖q‖ ‖k‖ · max(1, |scale|)), so a query whose scores are finite but whose scaled scores
    overflow skips the check on the output-only path. q = k = [1e153, 0] with scale 1000: the
    score 1e306 is finite, scaled = 1e309 overflows; the output-only path must name it, as the
    full trace does."""
    from attncli.base.arrays import cannot_overflow
    from attncli.base.errors import NumericError
    from attncli.compute.blocks import attend_output

    Q = np.array([[[1e153, 0.0], [1.0, 0.0]]])  # (1 head, 2 rows, d 2)
    K = np.array([[[1e153, 0.0], [0.0, 1.0]]])
    with np.errstate(over="ignore"):  # 1e306 · 1000 is inf: the bound says "may overflow"
        assert cannot_overflow(Q, K, 1000.0).tolist() == [False, True]
    problem = build_problem({"Q": Q[0].tolist(), "K": K[0].tolist(), "V": [[1.0, 2.0], [3.0, 4.0]], "scale": 1000.0})
    for path in (attend, attend_output):
        with pytest.raises(NumericError, match=r"scaled = scores · scale overflows float64 at head 0, query 0, key 0"):
            path(problem)


def _long(lq: int, **keys):
    return build_problem({"Q": np.ones((lq, 1)).tolist(), "K": np.ones((lq, 1)).tolist(),
                          "V": np.ones((lq, 1)).tolist(), **keys})


def test_a_causal_block_holds_at_most_masked_rows():
    """Mutation: `narrowed` drops `min(step, MASKED_ROWS)`: a causal problem's blocks of 1000 rows
    become half the middle block's band rather than 256."""
    assert blocks.narrowed(_long(4000, mask="causal"), 1000) == blocks.MASKED_ROWS == 256
    assert blocks.narrowed(_long(4000), 1000) == 1000  # no mask rules: as given


def test_a_window_narrows_blocks_to_half_its_band():
    """Mutation: a quarter of the window's band rather than a half (at least MIN_ROWS)."""
    assert blocks.narrowed(_long(4000, window=[399, 0]), 1000) == 399 // 2
    assert blocks.narrowed(_long(4000, window=[99, 0]), 1000) == blocks.MIN_ROWS


def test_a_block_at_most_min_rows_is_never_widened():
    """Mutation: `narrowed` drops its early return for steps of at most MIN_ROWS: a narrow window's
    `max(MIN_ROWS, band // 2)` then turns the 60 rows asked for into 64."""
    assert blocks.narrowed(_long(4000, window=[99, 0]), 60) == 60
