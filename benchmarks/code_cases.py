"""What a case of `attn check --code` costs: marking the textbook's function on every case it can
be called on (each case a fork of the case server, attncli/code/zygote.py), against the reference of
the same number of fresh interpreters that only import numpy (what a child would cost without the
server), alternating, in one run. Prints the medians and their ratio.

    python benchmarks/code_cases.py [runs]
"""

import statistics
import subprocess
import sys
import time
from pathlib import Path

from attncli import check_code

ROOT = Path(__file__).resolve().parent.parent
TEXTBOOK = f"{ROOT / 'tests' / 'code_samples' / 'textbook.py'}:scaled_dot_product_attention"


def main(runs: int) -> None:
    ours, fresh = [], []
    cases = len(check_code(TEXTBOOK).cases)  # warm: the examples' files are read once
    for _ in range(runs):
        start = time.perf_counter()
        check_code(TEXTBOOK)
        ours.append(time.perf_counter() - start)
        start = time.perf_counter()
        for _ in range(cases):
            subprocess.run([sys.executable, "-c", "import numpy"], check=True)
        fresh.append(time.perf_counter() - start)
    a, b = statistics.median(ours), statistics.median(fresh)
    print(f"{cases} cases: check_code {a:.3f} s (server start included), {cases} fresh pythons importing numpy "
          f"{b:.3f} s; ratio {a / b:.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
