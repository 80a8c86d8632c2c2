"""Output-only time and peak memory of the logit variants (ALiBi, softcap, sinks) beside plain and
causal attention, each in its own process (peak RSS is per process), one BLAS thread.

    OPENBLAS_NUM_THREADS=1 python benchmarks/variants.py [L]      # default L = 16384, d = 64, float32
"""

import resource
import subprocess
import sys
import time

CASES = {"none": {}, "alibi": {"alibi": True}, "softcap": {"softcap": 30.0}, "sinks": {"sinks": 0.5},
         "causal": {"mask": "causal"}, "causal + alibi": {"mask": "causal", "alibi": True}}


def one(length: int, name: str) -> None:
    import numpy as np

    from attncli.compute.blocks import attend_output
    from attncli.document.reading import build_problem

    rng = np.random.default_rng(0)
    doc = {key: rng.normal(size=(length, 64)).astype(np.float32) for key in "QKV"}
    problem = build_problem({**doc, "dtype": "float32", **CASES[name]})
    start = time.perf_counter()
    attend_output(problem)
    seconds = time.perf_counter() - start
    print(f"{seconds:.2f} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f}")


def main() -> None:
    length = int(sys.argv[1]) if len(sys.argv) > 1 else 16384
    print(f"| output-only, L = {length}, d = 64, float32 | time | ÷ none | peak RSS |\n|---|---|---|---|")
    base = None
    for name in CASES:
        out = subprocess.run([sys.executable, __file__, "--one", str(length), name], capture_output=True,
                             text=True, check=True).stdout.split()
        seconds, rss = float(out[0]), out[1]
        base = base or seconds
        print(f"| {name} | {seconds:.2f} s | {seconds / base:.2f}× | {rss} MiB |")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        one(int(sys.argv[2]), sys.argv[3])
    else:
        main()
