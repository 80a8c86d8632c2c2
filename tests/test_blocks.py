"""The blocked output-only path equals the full trace (1e-12 in float64), whatever the blocks."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attncli.attention import attend
from attncli.blocks import attend_output
from attncli.errors import NumericError
from attncli.problem import build_problem


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
])
@pytest.mark.parametrize("block, workers", [(1, 1), (5, 2), (None, 1), (64, 3)])
def test_blocked_equals_full(options, block, workers):
    problem = random_problem(0, **options)
    full, blocked = attend(problem), attend_output(problem, block=block, workers=workers)
    np.testing.assert_allclose(blocked.final, full.final, rtol=0, atol=1e-12)
    np.testing.assert_allclose(blocked.output, full.output, rtol=0, atol=1e-12)
    assert blocked.warnings == full.warnings and blocked.masked_rows == full.masked_rows
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
    assert done.stderr.splitlines() == [
        "error: scaled = scores · scale overflows float64 at head 0, query 0; scale the inputs down"]
