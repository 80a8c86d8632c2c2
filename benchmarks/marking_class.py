"""What marking a class costs: the 30 hand-made files of tests/classes/causal/ marked through the
API (each read, marked, diagnosed and scored), against the reference of computing their problem's
trace 30 times (what `attn compute` does once per file), alternating, in one run. Prints the
medians and their ratio. With PYTHONPATH naming another checkout's attncli, it marks with that
one (the files are this checkout's), so two versions compare as ratios to the same reference.

    python benchmarks/marking_class.py [runs]
    PYTHONPATH=/path/to/other/checkout python benchmarks/marking_class.py [runs]
"""

import statistics
import sys
import time
from pathlib import Path

import attncli
from attncli import attend, check

CLASS = Path(__file__).resolve().parent.parent / "tests" / "classes" / "causal"
RUBRIC = "scores=3,scaled=3,masked=3,weights=6,output=5"


def mark_all(files: list[Path]) -> None:
    for path in files:
        try:
            check(path, CLASS / "problem.json", **({"points": RUBRIC, "lenient_json": True}
                                                    if "points" in check.__code__.co_varnames else {}))
        except attncli.InputError:
            pass  # the empty file (and, before lenient_json, the one with a trailing comma)


def main(runs: int) -> None:
    files = sorted(p for p in CLASS.iterdir() if p.name[:2].isdigit())
    problem = {k: v for k, v in __import__("json").loads((CLASS / "problem.json").read_text()).items()
               if k in ("Q", "K", "V", "mask")}
    mark_all(files)  # warm
    ours, reference = [], []
    for _ in range(runs):
        start = time.perf_counter()
        mark_all(files)
        ours.append(time.perf_counter() - start)
        start = time.perf_counter()
        for _ in files:
            attend(**problem)
        reference.append(time.perf_counter() - start)
    a, b = statistics.median(ours), statistics.median(reference)
    print(f"{attncli.__file__}: {len(files)} files marked {a:.3f} s, {len(files)} traces {b:.4f} s; ratio {a / b:.0f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
