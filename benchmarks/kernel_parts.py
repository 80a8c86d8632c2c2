"""Where the output-only kernel's time goes, against PyTorch's fused kernel, on one core.

    python benchmarks/kernel_parts.py              # 16384² float64 and 32768² float32, 5 rounds
    python benchmarks/kernel_parts.py --ideas      # also the variants tried on the kernel (sketches)
    python benchmarks/kernel_parts.py --quick      # small sizes, 1 round: a smoke run

One process, BLAS and torch on one thread each, every figure the CPU time of this thread
(`time.thread_time`: other jobs on a shared machine change it much less than wall time), the
cases in rotating order, the median over the rounds. Per score (one query × one key, d = 64):

- `attend_output`: the whole output-only path, `blocks.attend_output(problem, threads=1)`;
- `torch`: PyTorch's fused `scaled_dot_product_attention` (its CPU flash-attention kernel);
- the parts, on blocks of 512 queries as blocks.py makes them: Q Kᵀ into the block's scores, the
  product with V and its ones column, e^x, and one elementwise pass (x · scale; the kernel makes
  three more: max, − max, ÷ sums), and Q Kᵀ and · [V 1] on key tiles of 1024 (in cache: what a
  tiled kernel could reach).

Then the bounds, as ratios to torch: the products alone (the floor of bench.py), and the products
with numpy's e^x: no numpy kernel can run below that second line, whatever it fuses. `--ideas`
times sketches of the changes tried on the kernel (plain numpy, no mask, the same arithmetic as
blocks.py), so the measurements in docs/performance.md can be repeated.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ["OPENBLAS_NUM_THREADS"] = "1"  # before numpy loads: one BLAS thread, as each worker has
import numpy as np  # noqa: E402

from attncli.compute.blocks import attend_output  # noqa: E402
from attncli.document.reading import build_problem  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
import output_only  # noqa: E402  (benchmarks/output_only.py: the machine's description)

D = 64
BLOCK, TILE = 512, 1024


def machine() -> str:
    """The CPU, the vectors numpy dispatches to (AVX-512 gives it a SIMD float64 e^x) and OpenBLAS's kernels."""
    pinned = os.environ.get("OPENBLAS_CORETYPE")
    return (f"{output_only.cpu_name()}, {output_only.simd()}; numpy {np.__version__}; OpenBLAS kernels: "
            f"{output_only.openblas_kernels()}" + (f" (pinned by OPENBLAS_CORETYPE={pinned})" if pinned else
                                                   " (its own choice)"))


def inputs(n: int, dtype: str):
    rng = np.random.default_rng(0)
    return [rng.standard_normal((n, D)).astype(dtype) for _ in range(3)]


def parts(n: int, dtype: str, blocks: int = 4) -> dict:
    """The parts, each over `blocks` blocks of BLOCK queries × n keys: name -> callable."""
    q, k, v = inputs(n, dtype)
    v1 = np.concatenate([v, np.ones((n, 1), dtype)], axis=1)
    x, both = np.empty((BLOCK, n), dtype), np.empty((BLOCK, D + 1), dtype)
    tile = np.empty((BLOCK, TILE), dtype)
    scale = np.dtype(dtype).type(1 / np.sqrt(D))
    rows = [slice(i * BLOCK, (i + 1) * BLOCK) for i in range(blocks)]
    src = (np.random.default_rng(1).standard_normal((BLOCK, n)) - 4).astype(dtype)  # e^x's arguments, ≤ 0 mostly

    def tiled():
        for r in rows:
            for t in range(0, n, TILE):
                np.matmul(q[r], k[t:t + TILE].T, out=tile)
                np.matmul(tile, v1[t:t + TILE], out=both)

    return {"Q Kᵀ (block)": lambda: [np.matmul(q[r], k.T, out=x) for r in rows],
            "· [V 1] (block)": lambda: [np.matmul(x, v1, out=both) for _ in rows],
            "e^x": lambda: [np.exp(src, out=x) for _ in rows],
            "one pass (x · scale)": lambda: [np.multiply(x, scale, out=x) for _ in rows],
            "Q Kᵀ and · [V 1] on key tiles": tiled}, blocks * BLOCK * n


def whole(n: int, dtype: str, torch_threads: int = 1) -> dict:
    q, k, v = inputs(n, dtype)
    problem = build_problem({"Q": q, "K": k, "V": v, "dtype": dtype})
    cases = {"attend_output": lambda: attend_output(problem, threads=1)}
    try:
        import torch
    except ImportError:
        return cases
    torch.set_num_threads(torch_threads)
    tq, tk, tv = (torch.from_numpy(a)[None, None] for a in (q, k, v))

    def fused():
        with torch.no_grad():
            torch.nn.functional.scaled_dot_product_attention(tq, tk, tv)
    cases["torch"] = fused
    return cases


def timed(cases: dict, rounds: int) -> dict[str, float]:
    """Median thread CPU seconds of each case, in rotating order, after one warm-up run each."""
    for run in cases.values():
        run()
    seconds = {name: [] for name in cases}
    names = list(cases)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            start = time.thread_time()
            cases[name]()
            seconds[name].append(time.thread_time() - start)
    return {name: statistics.median(s) for name, s in seconds.items()}


def report(n: int, dtype: str, rounds: int) -> None:
    cases, scores = parts(n, dtype, blocks=min(4, n // BLOCK))
    per = {name: s / scores * 1e9 for name, s in timed(cases, rounds).items()}
    big = {name: s / (n * n) * 1e9 for name, s in timed(whole(n, dtype), rounds).items()}
    print(f"\n{n}², {dtype}, d = {D}, one thread (median of {rounds} rounds, CPU time per score):\n")
    print("| case | ns per score | ratio to torch |\n|---|---|---|")
    torch = big.get("torch")
    products = per["Q Kᵀ (block)"] + per["· [V 1] (block)"]
    rows = {**{name: per[name] for name in per}, **big,
            "bound: the products alone (block)": products,
            "bound: the products (block) + e^x": products + per["e^x"],
            "bound: the products on key tiles + e^x": per["Q Kᵀ and · [V 1] on key tiles"] + per["e^x"]}
    for name, ns in rows.items():
        print(f"| {name} | {ns:.2f} | {f'{ns / torch:.2f}×' if torch else ''} |")


# --- Sketches of the changes tried (no mask, plain numpy, the arithmetic of blocks.py) -------------

def sketch(n: int, dtype: str, b: int = BLOCK, chunk: int = 2 << 20, tiles: int = 0, fold: bool = False,
           sums: bool = False):
    """The output of the no-mask problem the way blocks.py computes it, with one change:
    chunk: bytes of rows per run of the elementwise stages; tiles: keys per tile, scores kept
    keys-major (each tile's Q Kᵀ written in cache, scaled and its max taken there; then e^x and
    · [V 1] tile by tile, the products summed); fold: the scale (a power of two here) multiplied
    into Q instead of the scores; sums: the row sums by np.sum after e^x, · V without the ones column."""
    q, k, v = inputs(n, dtype)
    v1 = np.concatenate([v, np.ones((n, 1), dtype)], axis=1)
    scale = np.dtype(dtype).type(1 / np.sqrt(D))
    out = np.empty((n, D), dtype)
    if tiles:
        xT, tm, rm = np.empty((n, b), dtype), np.empty((n // tiles, b), dtype), np.empty(b, dtype)
        acc, part = np.empty((b, D + 1), dtype), np.empty((b, D + 1), dtype)

        def run():
            for r in range(0, n, b):
                for i, t in enumerate(range(0, n, tiles)):
                    xt = xT[t:t + tiles]
                    np.matmul(k[t:t + tiles], q[r:r + b].T, out=xt)
                    np.multiply(xt, scale, out=xt)
                    np.max(xt, axis=0, out=tm[i])
                np.max(tm, axis=0, out=rm)
                for t in range(0, n, tiles):
                    xt = xT[t:t + tiles]
                    xt -= rm
                    np.exp(xt, out=xt)
                    np.matmul(xt.T, v1[t:t + tiles], out=part if t else acc)
                    if t:
                        np.add(acc, part, out=acc)
                np.divide(acc[:, :D], acc[:, D:], out=out[r:r + b])
        return run
    x, rm, sm = np.empty((b, n), dtype), np.empty((b, 1), dtype), np.empty((b, 1), dtype)
    both = np.empty((b, D if sums else D + 1), dtype)
    qs = q * scale if fold else q
    step = max(1, chunk // (n * x.itemsize))

    def run():
        for r in range(0, n, b):
            np.matmul(qs[r:r + b], k.T, out=x)
            for a in range(0, b, step):
                p = x[a:a + step]
                if not fold:
                    np.multiply(p, scale, out=p)
                np.max(p, axis=-1, keepdims=True, out=rm[a:a + step])
                p -= rm[a:a + step]
                np.exp(p, out=p)
                if sums:
                    np.sum(p, axis=-1, keepdims=True, out=sm[a:a + step])
            if sums:
                np.matmul(x, v, out=both)
                np.divide(both, sm, out=out[r:r + b])
            else:
                np.matmul(x, v1, out=both)
                np.divide(both[:, :D], both[:, D:], out=out[r:r + b])
    return run


IDEAS = {"as blocks.py does it (512 rows, runs of 2 MiB)": {},
         "runs of 256 KiB (a Zen 2 core's L2 is 512 KiB)": {"chunk": 256 << 10},
         "runs of 1 MiB": {"chunk": 1 << 20},
         "blocks of 1024 rows": {"b": 1024},
         "key tiles of 1024, 256 rows (scores in cache)": {"b": 256, "tiles": 1024},
         "key tiles of 512, 512 rows": {"tiles": 512},
         "scale folded into Q (one pass fewer)": {"fold": True},
         "row sums by np.sum, no ones column": {"sums": True}}


def ideas(n: int, dtype: str, rounds: int) -> None:
    times = timed({name: sketch(n, dtype, **change) for name, change in IDEAS.items()}, rounds)
    first = next(iter(times.values()))
    print(f"\nSketches, {n}², {dtype}, one thread (median of {rounds} rounds, CPU time):\n")
    print("| change | seconds | ratio to blocks.py's way |\n|---|---|---|")
    for name, seconds in times.items():
        print(f"| {name} | {seconds:.2f} | {seconds / first:.3f}× |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one round")
    parser.add_argument("--ideas", action="store_true", help="also time the sketches of the changes tried")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sizes = ((2048, "float64"), (4096, "float32")) if args.quick else ((16384, "float64"), (32768, "float32"))
    rounds = 1 if args.quick else args.rounds
    print(f"python {sys.version.split()[0]}; {machine()}; load average {os.getloadavg()[0]:.1f} at the start")
    for n, dtype in sizes:
        report(n, dtype, rounds)
        if args.ideas:
            ideas(n, dtype, rounds)
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")
