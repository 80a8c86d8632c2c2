"""attncli's performance, as ratios against references measured in the same run.

    python benchmarks/bench.py                # the output-only table against torch (benchmarks/output_only.py)
    python benchmarks/bench.py --quick        # the same at small sizes, one round: a smoke run
    python benchmarks/bench.py --write-docs   # docs/performance.md's table from benchmarks/results.json
    python benchmarks/bench.py startup        # another section: startup, trace, tables (or all)

Machines here are shared and noisy, so every figure is a ratio to a reference timed alternately
in the same run (median of N runs), never an absolute target. Peak RSS comes from running each
case in a fresh process and reading ru_maxrss.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
SCOOTER = str(ROOT / "attncli" / "examples" / "scooter.json")
# The console script, as a user runs it (python -m attncli also loads runpy).
ATTN = [str(Path(PY).parent / "attn")] if (Path(PY).parent / "attn").exists() else [PY, "-m", "attncli"]


def timed(cmd: list[str], env=None) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env)
    return time.perf_counter() - start


CPU: dict[str, list[float]] = {}  # user + sys seconds of each command's runs in `alternate`: steadier on a busy machine


def cpu_timed(name: str, cmd: list[str], env=None) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds = timed(cmd, env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.setdefault(name, []).append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return seconds


def alternate(commands: dict[str, list[str]], runs: int, env=None) -> dict[str, float]:
    """Median wall time of each command, run in turns so that machine noise hits all alike."""
    times = {name: [] for name in commands}
    for cmd in commands.values():  # warm the file cache (and write attncli's bytecode) once
        timed(cmd, env)
    CPU.clear()
    for _ in range(runs):
        for name, cmd in commands.items():
            times[name].append(cpu_timed(name, cmd, env))
    return {name: statistics.median(ts) for name, ts in times.items()}


def row(label: str, value: str, target: str = "", verdict: str = "") -> None:
    print(f"| {label} | {value} | {target} | {verdict} |")


FLOOR = [PY, str(ROOT / "benchmarks" / "floor_app.py")]


def same_options() -> dict[str, int]:
    """Parameters per command of attn and of the floor app, which must agree (the floor's SPECS)."""
    import typer.main

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import floor_app

    from attncli.cli import app

    counts = [{name: len(c.params) for name, c in typer.main.get_command(a).commands.items()}
              for a in (app, floor_app.app)]
    if counts[0] != counts[1]:
        raise SystemExit(f"floor_app.SPECS is out of date: attn has {counts[0]}, the floor {counts[1]}")
    return counts[0]


def without_bytecode() -> dict[str, str]:
    """An environment where attncli is compiled from source on every run (its __pycache__ removed,
    PYTHONDONTWRITEBYTECODE set), as in an editable checkout that may not write bytecode; the
    other packages keep the bytecode pip wrote when it installed them."""
    for cache in (ROOT / "attncli").rglob("__pycache__"):
        for pyc in cache.glob("*.pyc"):
            pyc.unlink()
    return dict(os.environ, PYTHONDONTWRITEBYTECODE="1")


def startup(runs: int = 20) -> None:
    counts = same_options()
    print(f"\n### Start-up (median of {runs} alternating runs; floor: a Typer app with attn's commands and "
          f"{sum(counts.values())} parameters, {counts['compute']} on compute)\n")
    print("| case | time / ratio | target | met |\n|---|---|---|---|")
    installed = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    for label, env in (("bytecode cached (as installed)", installed), ("no bytecode", None)):
        if env is None:
            env = without_bytecode()
        t = alternate({
            "attn": ATTN + ["compute", SCOOTER, "--format", "json"],
            "floor": FLOOR + ["compute", SCOOTER],
            "typer": [PY, str(ROOT / "benchmarks" / "minimal_app.py"), SCOOTER],
            "bare": [PY, str(ROOT / "benchmarks" / "bare_numpy.py"), SCOOTER],
            "attn --version": ATTN + ["--version"],
            "floor --version": FLOOR + ["--version"],
        }, runs, env)
        cpu = {name: statistics.median(seconds) for name, seconds in CPU.items()}
        for name, seconds in t.items():
            row(f"{name} ({label})", f"{seconds * 1000:.0f} ms (cpu {cpu[name] * 1000:.0f} ms)")
        r = t["attn"] / t["floor"]
        row(f"attn compute --format json ÷ floor app ({label})", f"{r:.3f}× (cpu {cpu['attn'] / cpu['floor']:.3f}×)",
            "≤ 1.15×", "yes" if r <= 1.15 else "no")
        r = t["attn --version"] / t["floor --version"]
        row(f"attn --version ÷ floor --version ({label})", f"{r:.3f}×", "≤ 1.2×", "yes" if r <= 1.2 else "no")
        row(f"attn compute ÷ minimal Typer app, 2 options ({label})", f"{t['attn'] / t['typer']:.3f}×", "report")
        row(f"attn compute ÷ bare python + numpy ({label})", f"{t['attn'] / t['bare']:.2f}×", "report")


CHILD = r'''
import json, os, resource, sys, time
spec = json.loads(sys.argv[1])
import numpy as np
kind, h, lq, lk, d, dtype = spec["kind"], spec["heads"], spec["lq"], spec["lk"], spec["d"], spec["dtype"]
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((h, n, d)).astype(dtype) for n in (lq, lk, lk))
if kind == "torch":
    import torch
    torch.set_num_threads(2)
    tq, tk, tv = (torch.from_numpy(x)[None] for x in (q, k, v))

    def run():
        with torch.no_grad():
            return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv)[0].numpy()
elif kind == "numpy":  # plain numpy, no stages kept: the floor for the full trace
    def run():
        s = q @ k.transpose(0, 2, 1) * np.dtype(dtype).type(1 / np.sqrt(d))
        e = np.exp(s - s.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True)) @ v
else:
    from attncli.compute.attention import attend
    from attncli.document.reading import build_problem
    problem = build_problem({"Q": q, "K": k, "V": v, "dtype": dtype} | spec.get("rules", {}))

    def run():
        return attend(problem).output
times = []
for _ in range(spec.get("repeat", 1)):  # the first run also pays for fresh memory; later ones reuse it
    start = time.perf_counter()
    result = run()
    times.append(time.perf_counter() - start)
print(json.dumps({"seconds": times[0], "warm": times[-1],
                  "rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                  "checksum": float(np.asarray(result, dtype=np.float64).sum())}))
'''


def child(kind: str, **spec) -> dict:
    spec = dict(spec, kind=kind)
    out = subprocess.run([PY, "-c", CHILD, json.dumps(spec)], capture_output=True, text=True)
    if out.returncode:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"}
    return json.loads(out.stdout)


def have_torch() -> bool:
    return subprocess.run([PY, "-c", "import torch"], capture_output=True).returncode == 0


def trace(runs: int = 7) -> None:
    print("\n### Full trace, 8 heads × 2048 × 64 (median of %d runs in rotating order, a fresh process each)\n" % runs)
    print("First run: what one `attn compute` pays, fresh memory included (on this VM a fresh 0.9 GiB")
    print("is sometimes slow to fault in). Warm: the same computation again in that process.\n")
    print("| case | first run (s) | warm (s) | peak RSS | warm ratio | target | met |\n|---|---|---|---|---|---|---|")
    kinds = ["attn", "numpy"] + (["torch"] if have_torch() else [])
    for dtype, target in (("float64", 1.0), ("float32", 1.2)):
        results = {kind: [] for kind in kinds}
        for i in range(runs):  # rotate the order: a process started right after another may run slower
            for kind in kinds[i % len(kinds):] + kinds[:i % len(kinds)]:
                results[kind].append(child(kind, heads=8, lq=2048, lk=2048, d=64, dtype=dtype, repeat=3))
        first = {kind: statistics.median(r["seconds"] for r in rs) for kind, rs in results.items()}
        warm = {kind: statistics.median(r["warm"] for r in rs) for kind, rs in results.items()}
        rss = {kind: max(r["rss_gib"] for r in rs) for kind, rs in results.items()}
        reference = "torch" if "torch" in warm else "numpy"
        for kind in kinds:
            ratio = warm[kind] / warm[reference]
            met = ("yes" if ratio <= target else "no") if kind == "attn" and reference == "torch" else ""
            goal = f"≤ {target:.1f}× torch" if kind == "attn" else ""
            print(f"| {kind} {dtype} | {first[kind]:.3f} | {warm[kind]:.3f} | {rss[kind]:.2f} GiB | "
                  f"{ratio:.2f}× {reference} | {goal} | {met} |")


def tables(runs: int = 3) -> None:
    print("\n### Rendering every stage of a 512 × 512 problem as tables (elided), vs computing it\n")
    print("| case | seconds | target | met |\n|---|---|---|---|")
    import numpy as np

    rng = np.random.default_rng(0)
    doc = {name: rng.standard_normal((512, 64)).round(3).tolist() for name in "QKV"}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.json"
        path.write_text(json.dumps(doc))
        t = alternate({"table": ATTN + ["compute", str(path), "--format", "table"],
                       "json": ATTN + ["compute", str(path), "--format", "json"],
                       "python": [PY, "-c", "pass"]}, runs)
    render = t["table"] - t["python"]
    row("attn compute 512×512 --format table", f"{t['table']:.2f}", "< 1 s", "yes" if t["table"] < 1 else "no")
    row("… of which start-up and rendering beyond python itself", f"{render:.2f}")
    row("attn compute 512×512 --format json (for scale)", f"{t['json']:.2f}")


SECTIONS = {"startup": startup, "trace": trace, "tables": tables}


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="attncli's benchmarks, as ratios measured in one run")
    parser.add_argument("sections", nargs="*", metavar="SECTION",
                        help=f"other sections instead of the output-only table: {', '.join(SECTIONS)} or all")
    parser.add_argument("--quick", action="store_true", help="small sizes, one round, nothing recorded")
    parser.add_argument("--rounds", type=int, help="rounds of the output-only table (default 3)")
    parser.add_argument("--threads", type=int, help="threads for attn and torch (default every core)")
    parser.add_argument("--write-docs", action="store_true",
                        help="write benchmarks/results.json's table into docs/performance.md, measuring nothing")
    args = parser.parse_args()
    unknown = set(args.sections) - set(SECTIONS) - {"all"}
    if unknown:
        parser.error(f"unknown section {sorted(unknown)[0]}; expected {', '.join(SECTIONS)} or all")
    return args


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import output_only

    args = arguments()
    if args.write_docs:
        output_only.write_docs()
        sys.exit(0)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores; torch: {'yes' if have_torch() else 'no'}")
    if not args.sections:
        output_only.main(args.quick, args.rounds, args.threads)
    for name in SECTIONS if "all" in args.sections else args.sections:
        SECTIONS[name]()
