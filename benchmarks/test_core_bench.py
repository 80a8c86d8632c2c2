"""pytest-benchmark suite for the core (`pip install -e '.[bench]'`):

    python -m pytest benchmarks/test_core_bench.py --benchmark-columns=median,iqr

Each case is compared with plain numpy on the same input in the same run (see the group names):
attncli's stages should cost little more than the bare arithmetic.
"""

import numpy as np
import pytest

from attncli.compute.attention import attend
from attncli.compute.blocks import attend_output
from attncli.document.reading import build_problem

SIZES = {"small": (1, 3, 2), "medium": (8, 256, 64), "large": (8, 1024, 64)}


def inputs(size):
    heads, length, d = SIZES[size]
    rng = np.random.default_rng(0)
    return [rng.standard_normal((heads, length, d)) for _ in range(3)]


def bare(q, k, v):
    s = q @ k.transpose(0, 2, 1) * (1 / np.sqrt(q.shape[-1]))
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("size", SIZES)
def test_bare_numpy(benchmark, size):
    benchmark.group = size
    benchmark(bare, *inputs(size))


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("compute", [attend, attend_output], ids=["full_trace", "output_only"])
def test_attncli(benchmark, size, compute):
    benchmark.group = size
    q, k, v = inputs(size)
    trace = benchmark(compute, build_problem({"Q": q, "K": k, "V": v}))
    np.testing.assert_allclose(trace.output, bare(q, k, v), atol=1e-12)


def test_build_problem_from_json_lists(benchmark):
    q, k, v = (m[0].tolist() for m in inputs("large"))
    benchmark(build_problem, {"Q": q, "K": k, "V": v})
