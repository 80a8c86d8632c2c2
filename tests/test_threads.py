"""The output-only path on several threads: the same bytes with any number of threads, workers
that really run at once with buffers of their own, BLAS held to one thread, and `--threads`."""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from attncli.compute import blocks, pool, threads
from attncli.compute.blocks import attend_output
from attncli.document.reading import build_problem
from tests.conftest import ROOT, assert_error


def problem(seed=0, dtype="float64", heads=2, kv_heads=2, lq=29, lk=31, d=8, **extra):
    rng = np.random.default_rng(seed)
    doc = {"Q": rng.normal(size=(heads, lq, d)) * 3, "K": rng.normal(size=(kv_heads, lk, d)),
           "V": rng.normal(size=(kv_heads, lk, 5)), "dtype": dtype}
    if extra.pop("matrix_mask", False):
        mask = rng.random((heads, lq, lk)) > 0.3
        mask[:, 3] = False  # a row whose every key is masked
        extra["mask"] = mask
    if extra.pop("with_bias", False):
        extra["bias"] = rng.normal(size=(lq, lk))
    return build_problem(doc | extra)


VARIANTS = {
    "plain": {}, "causal": {"mask": "causal"}, "window": {"window": [4, 1]},
    "key mask": {"key_mask": [1] * 25 + [0] * 6}, "matrix mask, uniform": {"matrix_mask": True, "masked_rows": "uniform"},
    "bias": {"with_bias": True}, "sinks": {"sinks": [0.5, -1.0]}, "softcap": {"softcap": 2.0, "scale": 3.0},
    "alibi": {"alibi": True, "mask": "causal"}, "rope": {"rope": True, "mask": "causal"},
    "grouped": {"heads": 4, "kv_heads": 2, "rope": {"style": "interleaved"}},
    "everything": {"alibi": True, "softcap": 1.5, "sinks": 0.25, "with_bias": True, "window": [6, 0], "rope": True},
}


def outcome(trace) -> tuple[bytes, ...]:
    """Every array the output-only path gives, as bytes."""
    return (trace.output.tobytes(), trace.final.tobytes(), trace.lse.tobytes(), repr(trace.fully_masked).encode())


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", list(VARIANTS))
def test_the_same_bytes_with_any_number_of_threads(name, dtype, monkeypatch):
    """Blocks of 3 queries (10 blocks) and runs of 2 rows inside each (a 248-byte L2 budget):
    1, 2 and 4 threads give the same bytes, and so does another run length."""
    p = problem(dtype=dtype, **VARIANTS[name])
    itemsize = np.dtype(dtype).itemsize
    monkeypatch.setattr(blocks, "CHUNK_BYTES", 2 * p.heads * p.lk * itemsize)
    one = outcome(attend_output(p, block=3, threads=1))
    for count in (2, 4):
        assert outcome(attend_output(p, block=3, threads=count)) == one, count
    monkeypatch.setattr(blocks, "CHUNK_BYTES", 1)  # one row at a time
    assert outcome(attend_output(p, block=3, threads=2)) == one
    assert outcome(attend_output(p, threads=1)) == outcome(attend_output(p, threads=3))  # the blocks it picks


def test_the_blocks_do_not_depend_on_the_threads():
    """The rows per block come from the problem alone (at most an eighth of the queries, at most
    BLOCK_BYTES of scores), so every thread count computes the same blocks."""
    assert blocks.block_rows(1, 16384, 16384, 8) == 512  # 64 MiB of float64 scores
    assert blocks.block_rows(1, 32768, 32768, 4) == 512
    assert blocks.block_rows(1, 100, 10, 8) == 13  # an eighth of 100 queries, rounded up
    assert blocks.block_rows(8, 10, 10**9, 8) == 1


def test_workers_run_at_once_each_with_its_own_buffers():
    """Two workers meet at a barrier (one worker alone would wait forever: the barrier times
    out); each makes its buffers once, however many items it takes."""
    meeting, made = threading.Barrier(2, timeout=20), []

    def scratch():
        made.append(threading.get_ident())
        return {"thread": threading.get_ident()}

    def task(item, buffers):
        if item < 2:
            meeting.wait()
        assert buffers["thread"] == threading.get_ident()
        return item * 10

    assert list(pool.run(task, range(12), 2, scratch)) == [i * 10 for i in range(12)]
    assert len(made) == len(set(made)) == 2


def test_one_thread_runs_in_the_caller():
    seen = set()
    assert list(pool.run(lambda item, buffers: seen.add(threading.get_ident()) or item, range(3), 1, dict)) == [0, 1, 2]
    assert seen == {threading.get_ident()}


def test_blas_runs_one_thread_while_the_pool_runs_and_is_put_back():
    found = pool._openblas()
    if not found:
        pytest.skip("numpy here is not linked with OpenBLAS")
    set_threads, get_threads = found[0]
    set_threads(2)
    try:
        with pool.one_blas_thread():
            assert get_threads() == 1
        assert get_threads() == 2
    finally:
        set_threads(1)


def test_workers_default_to_every_core():
    assert threads.workers(None) == threads.cores() >= 1
    assert threads.workers(3) == 3


def test_before_numpy_sets_blas_up_and_keeps_the_users_choices():
    code = ("import os; from attncli.compute.threads import before_numpy; before_numpy(); "
            "print(os.environ['OPENBLAS_NUM_THREADS'], os.environ['OMP_NUM_THREADS'], os.environ['MKL_NUM_THREADS'])")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")} | {"MKL_NUM_THREADS": "3"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert done.stdout.split() == ["1", "1", "3"]
    late = subprocess.run([sys.executable, "-c", "import numpy; " + code], capture_output=True, text=True,
                          env=env | {"OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"}, cwd=ROOT)
    assert late.stdout.split() == ["2", "2", "3"]  # numpy already loaded: nothing changes


def test_threads_option_gives_the_same_file(run, tmp_path, problem_file):
    rng = np.random.default_rng(1)
    path = problem_file({"Q": rng.normal(size=(40, 4)).tolist(), "K": rng.normal(size=(50, 4)).tolist(),
                         "V": rng.normal(size=(50, 3)).tolist(), "mask": "causal"})
    written = []
    for count in (1, 2, 3):
        target = tmp_path / f"out{count}.npy"
        result = run("compute", path, "--output", target, "--threads", count)
        assert result.exit_code == 0, result.stderr
        written.append(target.read_bytes())
    assert written[0] == written[1] == written[2]


def test_threads_without_the_output_only_path_is_refused(run, problem_file):
    path = problem_file({"Q": [[1, 0]], "K": [[1, 0]], "V": [[1]]})
    assert_error(run("compute", path, "--threads", "2", "--format", "json"), "--threads", "--stages output")
    assert run("compute", path, "--threads", "2", "--stages", "output", "--format", "json").exit_code == 0


def test_before_numpy_leaves_the_environment_alone_once_numpy_is_loaded(monkeypatch):
    """Mutation: `before_numpy` drops its `numpy in sys.modules` return: with numpy loaded (BLAS
    has read its thread count already) it still writes the variables, which then reach every
    child process."""
    from attncli.compute import threads

    for variable in threads.BLAS_THREADS:
        monkeypatch.delenv(variable, raising=False)
    threads.before_numpy()  # numpy is loaded in the test process
    assert [v for v in threads.BLAS_THREADS if v in os.environ] == []


def test_no_more_workers_than_blocks(monkeypatch):
    """Found by an engineer's trial of captured layers: the output-only path never starts more workers
    (each with its own scratch buffers) than it has blocks."""
    asked = []
    run = pool.run

    def counting(task, items, threads, scratch):
        asked.append((threads, len(items)))
        return run(task, items, threads, scratch)

    monkeypatch.setattr(blocks.pool, "run", counting)
    rng = np.random.default_rng(0)
    problem = build_problem({"Q": rng.normal(size=(20, 4)), "K": rng.normal(size=(9, 4)), "V": rng.normal(size=(9, 4))})
    expected = attend_output(problem, threads=1).final
    assert np.array_equal(attend_output(problem, threads=100000).final, expected)
    assert asked[-1][0] == asked[-1][1] < 100000
