"""Start-up before and after a change, in one run: `attn compute scooter.json --format json` and
`attn --version` from another checkout (BEFORE) and from this one, alternating with the floor app
(floor_app.py), with attncli's bytecode cached (as installed) and without it (compiled from source
on every run, as in a checkout where PYTHONDONTWRITEBYTECODE is set). Wall and CPU medians.

    git archive <commit> | tar -x -C /tmp/before       # the code before the change
    python benchmarks/startup_compare.py /tmp/before [runs]

Both checkouts run on this environment's Python and packages (PYTHONPATH picks the attncli).
It deletes the __pycache__ folders under both attncli/ folders for the "no bytecode" half.
"""

import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCOOTER = str(ROOT / "attncli" / "examples" / "scooter.json")
RUN = "import sys; sys.argv[0] = 'attn'; from attncli.cli import main; main()"
FLOOR = [sys.executable, str(ROOT / "benchmarks" / "floor_app.py")]


def main(before: Path, runs: int) -> None:
    cases = {
        "before": ([sys.executable, "-c", RUN, "compute", SCOOTER, "--format", "json"], before),
        "after": ([sys.executable, "-c", RUN, "compute", SCOOTER, "--format", "json"], ROOT),
        "floor": (FLOOR + ["compute", SCOOTER], None),
        "before --version": ([sys.executable, "-c", RUN, "--version"], before),
        "after --version": ([sys.executable, "-c", RUN, "--version"], ROOT),
        "floor --version": (FLOOR + ["--version"], None),
    }
    for label in ("bytecode cached", "no bytecode"):
        env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
        if label == "no bytecode":
            for tree in (before, ROOT):
                for cache in list((tree / "attncli").rglob("__pycache__")):
                    shutil.rmtree(cache)
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        wall = {name: [] for name in cases}
        cpu = {name: [] for name in cases}
        for i in range(runs + 1):  # the first round warms the caches and is not counted
            for name, (cmd, tree) in cases.items():
                extra = {"PYTHONPATH": str(tree)} if tree else {}
                start, used = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
                subprocess.run(cmd, env=env | extra, cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               check=True)
                done = resource.getrusage(resource.RUSAGE_CHILDREN)
                if i:
                    wall[name].append(time.perf_counter() - start)
                    cpu[name].append(done.ru_utime - used.ru_utime + done.ru_stime - used.ru_stime)
        w = {name: statistics.median(times) for name, times in wall.items()}
        c = {name: statistics.median(times) for name, times in cpu.items()}
        print(f"## {label}, median of {runs} alternating runs (cpu = user + sys)")
        for name in cases:
            print(f"  {name:17} wall {w[name] * 1000:6.0f} ms   cpu {c[name] * 1000:6.0f} ms")
        for side in ("before", "after"):
            print(f"  {side} ÷ floor: compute wall {w[side] / w['floor']:.3f}× cpu {c[side] / c['floor']:.3f}×; "
                  f"--version wall {w[side + ' --version'] / w['floor --version']:.3f}× "
                  f"cpu {c[side + ' --version'] / c['floor --version']:.3f}×")


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve(), int(sys.argv[2]) if len(sys.argv) > 2 else 20)
