"""The output-only path against PyTorch's fused SDPA, with the floor beside each row, in process and
end to end through the command line.

    python benchmarks/bench.py                 # full sizes, 3 rounds: prints the table, records it
    python benchmarks/bench.py --quick         # small sizes, 1 round: a smoke run (not recorded)
    python benchmarks/bench.py --rounds 5      # more rounds
    python benchmarks/bench.py --write-docs    # docs/performance.md's table from the recorded results

Every case runs in a fresh process (peak RSS is per process), in rotating order, `rounds` times;
each row reports the median of the rounds and the spread of its ratio (lowest–highest over the
rounds: each round's ratio is taken between runs of the same round). "Warm" is a second run in
the same process, and its CPU time (every thread's) is beside it: steadier than wall time on a
busy machine, but PyTorch's OpenMP threads spin while they wait, which counts as CPU. The floor is the matrix products alone (Q Kᵀ and · V, over the keys each block
really multiplies), with the same BLAS, blocks and threads, in a process of its own: how close the
row runs to what the products cost on this machine.

The command-line rows time `attn compute --q q.npy --k k.npy --v v.npy --stages output -o o.npy`
as a user types it (reading the inputs and writing the output included), each in a fresh wrapper
process that reads the command's peak RSS and CPU time; the same command on a 64 × 64 problem in
the same round is its start-up, subtracted, so that the row compares with the kernel's first run
in process (fresh memory and a new pool, as a command has) and with PyTorch's; the same ratio in
CPU time (the command's less its start-up's, against the kernel's first run) is beside it, steadier
on a busy machine. A full run records benchmarks/results.json;
`--write-docs` writes its table into docs/performance.md between the markers, and
tests/test_bench_docs.py fails when the two differ.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results.json"
DOCS = ROOT / "docs" / "performance.md"
MARKERS = ("<!-- bench: output only -->\n", "<!-- end bench: output only -->\n")

CHILD = r'''
import json, resource, sys, time
spec = json.loads(sys.argv[1])
if spec["kind"] != "torch":
    from attncli.compute.threads import before_numpy
    before_numpy()  # as `attn compute --stages output` does: one BLAS thread per worker, its kernels
import numpy as np
n, d, dtype, threads = spec["n"], 64, spec["dtype"], spec["threads"]
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((1, n, d)).astype(dtype) for _ in range(3))
if spec["kind"] == "torch":
    import torch
    torch.set_num_threads(threads)
    tq, tk, tv = (torch.from_numpy(x)[None] for x in (q, k, v))
    causal, mask = spec["rules"].get("mask") == "causal", None
    if "window" in spec["rules"]:  # keys q − left … q + right: a float mask of n × n, as torch takes it
        left, right = spec["rules"]["window"]
        mask = np.full((n, n), -np.inf, dtype)
        rows = np.arange(n)
        for offset in range(-right, left + 1):  # each diagonal of the band, key = query − offset
            seen = rows[max(0, offset):n + min(0, offset)]
            mask[seen, seen - offset] = 0
        mask = torch.from_numpy(mask)
    if set(spec["rules"]) - {"mask", "window"} or spec["rules"].get("mask", "causal") != "causal":
        raise SystemExit(f"no torch reference for the rules {spec['rules']}")

    def run():
        with torch.no_grad():
            torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=mask, is_causal=causal)
else:
    from attncli.compute import blocks, pool
    from attncli.document.reading import build_problem
    from attncli.problem import masks
    problem = build_problem({"Q": q, "K": k, "V": v, "dtype": dtype} | spec["rules"])
    step = blocks.block_rows(1, n, n, np.dtype(dtype).itemsize)
    v1 = np.concatenate([v, np.ones((1, n, 1), dtype)], axis=-1)

    def products(start, scratch):  # the floor: Q Kᵀ and · V over the keys the block multiplies
        rows = slice(start, min(start + step, n))
        first, stop = masks.key_span(problem, rows)
        scores = scratch[:(rows.stop - start) * (stop - first)].reshape(1, rows.stop - start, stop - first)
        np.matmul(q[:, rows], k[:, first:stop].transpose(0, 2, 1), out=scores)
        return scores @ v1[:, first:stop]

    def run():
        if spec["kind"] == "floor":
            list(pool.run(products, range(0, n, step), threads, lambda: np.empty(step * n, dtype)))
        else:
            blocks.attend_output(problem, threads=threads)
times, cpu = [], []
for _ in range(2):
    start, start_cpu = time.perf_counter(), time.process_time()
    run()
    times.append(time.perf_counter() - start)
    cpu.append(time.process_time() - start_cpu)
print(json.dumps({"first": times[0], "warm": times[1], "first_cpu": cpu[0], "warm_cpu": cpu[1],
                  "rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}))
'''


# A command-line case: the command run from a fresh wrapper process, whose children's peak RSS and
# CPU time are then the command's own.
COMMAND = r'''
import json, resource, subprocess, sys, time
command = json.loads(sys.argv[1])
start = time.perf_counter()
subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
seconds = time.perf_counter() - start
used = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"first": seconds, "warm": seconds, "warm_cpu": used.ru_utime + used.ru_stime,
                  "rss_gib": used.ru_maxrss / 2**20}))
'''
ATTN = [str(Path(sys.executable).parent / "attn")] if (Path(sys.executable).parent / "attn").exists() \
    else [sys.executable, "-m", "attncli"]
RULE_OPTIONS = {"mask": "--mask", "window": "--window"}


def command(n: int, dtype: str, threads: int, rules: dict, folder: Path) -> list[str]:
    """`attn compute` of the n × 64 inputs in `folder` (inputs(n, dtype, folder)), the output alone to an .npy."""
    given = [f"{folder}/{name}{n}_{dtype}.npy" for name in "qkv"]
    options = [item for key, value in rules.items()
               for item in (RULE_OPTIONS[key], ",".join(map(str, value)) if isinstance(value, list) else value)]
    return ATTN + ["compute", "--q", given[0], "--k", given[1], "--v", given[2], "--dtype", dtype, *options,
                   "--stages", "output", "--threads", str(threads), "-o", f"{folder}/out.npy"]


def inputs(n: int, dtype: str, folder: Path) -> None:
    """Q, K and V (n × 64, `dtype`) as .npy files in `folder`, as the in-process cases draw them."""
    import numpy as np

    rng = np.random.default_rng(0)
    for name in "qkv":
        np.save(folder / f"{name}{n}_{dtype}.npy", rng.standard_normal((n, 64)).astype(dtype))


def child(kind: str, n: int, dtype: str, threads: int, rules: dict, unset: tuple = (), folder: Path = None) -> dict:
    """One case in a fresh process; `unset`: environment variables it runs without; `folder`: the
    command line's inputs."""
    spec = {"kind": kind, "n": n, "dtype": dtype, "threads": threads, "rules": rules}
    env = {key: value for key, value in os.environ.items() if key not in unset}
    script, given = (COMMAND, command(n, dtype, threads, rules, folder)) if kind == "cli" else (CHILD, spec)
    done = subprocess.run([sys.executable, "-c", script, json.dumps(given)], capture_output=True, text=True, cwd=ROOT,
                          env=env)
    if done.returncode:
        raise SystemExit(f"{kind} {n}² {dtype} failed: {done.stderr.strip()[-400:]}")
    return json.loads(done.stdout)


def cases(quick: bool, threads: int) -> dict[str, dict]:
    """Each row: its kind, size, dtype, rules, and what its ratio is taken against."""
    big, mid = (4096, 2048) if quick else (32768, 16384)
    t = threads
    own = {}  # this environment chooses OpenBLAS's kernels: the same rows with OpenBLAS's own choice too
    if os.environ.get("OPENBLAS_CORETYPE"):
        own = {f"output only, OpenBLAS's own kernels (without OPENBLAS_CORETYPE), {n}², {dtype}": dict(
            kind="attn", n=n, dtype=dtype, threads=t, rules={}, against="torch", unset=("OPENBLAS_CORETYPE",))
            for n, dtype in ((big, "float32"), (mid, "float64"))}
    masked = {"causal": {"mask": "causal"}, "window 511,0": {"window": [511, 0]}}
    table = {}
    for n, dtype in ((big, "float32"), (mid, "float64")):  # each against PyTorch's fused kernel with the same mask
        for label, rules in {"": {}, **masked}.items():
            named = f"{label}, " if label else ""
            table[f"output only, {named}{n}², {dtype}"] = dict(kind="attn", n=n, dtype=dtype, threads=t, rules=rules,
                                                               against="torch", torch=f"torch fused SDPA, {named}{n}², {dtype}")
            table[f"torch fused SDPA, {named}{n}², {dtype}"] = dict(kind="torch", n=n, dtype=dtype, threads=t,
                                                                    rules=rules)
    table |= {
        **own,
        f"no mask, {mid}², float32": dict(kind="attn", n=mid, dtype="float32", threads=t, rules={}),
        f"causal, {mid}², float32": dict(kind="attn", n=mid, dtype="float32", threads=t, rules={"mask": "causal"},
                                         against="no mask"),
        f"window 511,0, {mid}², float32": dict(kind="attn", n=mid, dtype="float32", threads=t,
                                               rules={"window": [511, 0]}, against="no mask"),
    }
    # End to end: the command a user types, its start-up (a 64 × 64 run in the same round) subtracted.
    table |= {
        STARTUP: dict(kind="cli", n=64, dtype="float32", threads=t, rules={}),
        f"command line, {big}², float32": dict(kind="cli", n=big, dtype="float32", threads=t, rules={},
                                               against="kernel", kernel=f"output only, {big}², float32",
                                               torch=f"torch fused SDPA, {big}², float32"),
        f"command line, {mid}², float64": dict(kind="cli", n=mid, dtype="float64", threads=t, rules={},
                                               against="kernel", kernel=f"output only, {mid}², float64",
                                               torch=f"torch fused SDPA, {mid}², float64"),
        f"command line, no mask, {mid}², float32": dict(kind="cli", n=mid, dtype="float32", threads=t, rules={},
                                                        against="kernel", kernel=f"no mask, {mid}², float32",
                                                        rss_gib=0.25),
        f"command line, causal, {mid}², float32": dict(kind="cli", n=mid, dtype="float32", threads=t,
                                                       rules={"mask": "causal"}, against="no mask",
                                                       kernel=f"causal, {mid}², float32", rss_gib=0.25),
        f"command line, window 511,0, {mid}², float32": dict(kind="cli", n=mid, dtype="float32", threads=t,
                                                             rules={"window": [511, 0]}, against="no mask",
                                                             kernel=f"window 511,0, {mid}², float32", rss_gib=0.25),
    }
    if importlib.util.find_spec("torch") is None:  # no torch rows, and nothing to take their ratio against
        table = {name: {key: value for key, value in case.items()
                        if key != "torch" and (case.get("against") != "torch" or key != "against")}
                 for name, case in table.items() if case["kind"] != "torch"}
    return table


STARTUP = "command line start-up, 64², float32"


TARGETS = {"torch": {"float32": 0.9, "float64": 0.9}, "causal": 0.55, "window 511,0": 0.1, "kernel": 1.1,
           "command line, causal": 0.6, "command line, window 511,0": 0.15}


def measure(quick: bool, rounds: int, threads: int) -> dict:
    """Every case (and its floor) `rounds` times, in rotating order; the results as recorded."""
    table = cases(quick, threads)
    names = list(table)
    runs = {name: [] for name in names} | {name + " floor": [] for name in names if table[name]["kind"] == "attn"}
    with tempfile.TemporaryDirectory() as folder:
        for n, dtype in {(case["n"], case["dtype"]) for case in table.values() if case["kind"] == "cli"}:
            inputs(n, dtype, Path(folder))
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                case = {key: value for key, value in table[name].items()
                        if key not in ("against", "kernel", "torch", "rss_gib")}
                runs[name].append(child(**case, folder=Path(folder)))
                if case["kind"] == "attn":
                    runs[name + " floor"].append(child(**(case | {"kind": "floor"})))
                print(f"  round {r + 1}: {name}: {runs[name][-1]['warm']:.2f} s", file=sys.stderr)
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rounds": rounds, "threads": threads,
            "machine": machine(), "cases": table, "runs": runs}


def machine() -> str:
    import numpy as np

    try:
        import torch
        torch_version = torch.__version__
    except ImportError:
        torch_version = "not installed"
    kernels = os.environ.get("OPENBLAS_CORETYPE")
    return (f"{cpu_name()}, {os.cpu_count()} cores, {simd()}; python "
            f"{platform.python_version()}, numpy {np.__version__}, torch {torch_version}; "
            + (f"OPENBLAS_CORETYPE={kernels}" if kernels else f"OpenBLAS's own kernels ({openblas_kernels()})"))


def cpu_name() -> str:
    """The CPU's model name (Linux), else the machine's architecture."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            return next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def simd() -> str:
    """The widest vectors numpy dispatches to here: with AVX-512 its float64 e^x is vectorised, with
    AVX2 alone it is not (numpy 2.4: about 5 ns per element on one core, against 0.5 ns)."""
    from numpy._core._multiarray_umath import __cpu_features__ as features

    return "AVX-512" if features.get("AVX512F") else "AVX2, no AVX-512" if features.get("AVX2") else "no AVX2"


def openblas_kernels() -> str:
    """The kernels numpy's OpenBLAS chose ("Haswell", "SkylakeX", …), read from the loaded library."""
    import ctypes

    import numpy as np

    np.ones((2, 2)) @ np.ones((2, 2))  # OpenBLAS is loaded with numpy; this makes sure it ran
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        paths = sorted({line.split()[-1] for line in maps if "openblas" in line.lower() and "/" in line})
    for path in paths:
        library = ctypes.CDLL(path)
        for name in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename", "openblas_get_corename"):
            if hasattr(library, name):
                getattr(library, name).restype = ctypes.c_char_p
                return getattr(library, name)().decode()
    return "not OpenBLAS"


def reference(name: str, case: dict, names: list[str]) -> str | None:
    """The row a case's ratio is taken against: torch's row of the same size, dtype and mask (the
    case names it), or no mask's (the command line's no mask for a command-line row), or the
    kernel's row in process."""
    against = case.get("against")
    if against is None:
        return None
    if against == "kernel":
        return case["kernel"]
    if against == "torch" and "torch" in case:
        return case["torch"]
    prefix = "torch fused SDPA" if against == "torch" else "command line, no mask" if case["kind"] == "cli" \
        else "no mask"
    return next(other for other in names if _label(other) == prefix and _size(other) == _size(name))


def _label(name: str) -> str:
    return name.rsplit(", ", 2)[0]  # "window 511,0, 2048², float32" -> "window 511,0"


def _size(name: str) -> list[str]:
    return name.rsplit(", ", 2)[1:]


def rows(results: dict) -> list[list[str]]:
    """The table's rows from recorded results: case, warm and first run, peak RSS, floor, ratio and its spread, target."""
    table, runs, out = results["cases"], results["runs"], []
    for name, case in table.items():
        if case["kind"] == "cli":
            out.append(_command_row(name, case, table, runs))
            continue
        mine = runs[name]
        warm = statistics.median(r["warm"] for r in mine)
        first = statistics.median(r["first"] for r in mine)
        rss = max(r["rss_gib"] for r in mine)
        floor = ""
        if name + " floor" in runs:
            seconds = statistics.median(r["warm"] for r in runs[name + " floor"])
            floor = f"{seconds:.2f} s ({warm / seconds:.2f}× of it)"
        ratio, target = "", ""
        other = reference(name, case, list(table))
        if other is not None:
            each = [a["warm"] / b["warm"] for a, b in zip(mine, runs[other])]
            word = "torch" if case["against"] == "torch" else "no mask"
            ratio = f"{statistics.median(each):.2f}× {word} ({min(each):.2f}–{max(each):.2f})"
            goal = TARGETS["torch"][case["dtype"]] if case["against"] == "torch" else TARGETS[_label(name)]
            target = f"≤ {goal}×: {'met' if statistics.median(each) <= goal else 'not met'}"
        if case["kind"] == "attn":
            target = (target + ", " if target else "") + f"RSS < 1 GiB: {'met' if rss < 1 else 'not met'}"
        cpu = statistics.median(r.get("warm_cpu", float("nan")) for r in mine)
        out.append([name, f"{warm:.2f} s (CPU {cpu:.2f} s)", f"{first:.2f} s", f"{rss:.2f} GiB", floor, ratio, target])
    return out


def _net(name: str, runs: dict) -> list[float]:
    """A command's seconds in each round less that round's start-up (the 64 × 64 command)."""
    return [r["warm"] - s["warm"] for r, s in zip(runs[name], runs[STARTUP])]


def _spread(each: list[float], word: str) -> str:
    return f"{statistics.median(each):.2f}× {word} ({min(each):.2f}–{max(each):.2f})"


def _command_row(name: str, case: dict, table: dict, runs: dict) -> list[str]:
    """A command-line row: its seconds less start-up (the whole command beside them), against the
    kernel's first run in process (or the command line's no mask), PyTorch's, and the kernel's floor."""
    mine = runs[name]
    wall = statistics.median(r["warm"] for r in mine)
    cpu = statistics.median(r["warm_cpu"] for r in mine)
    rss = max(r["rss_gib"] for r in mine)
    if name == STARTUP:
        return [name, f"{wall:.2f} s (CPU {cpu:.2f} s)", "", f"{rss:.2f} GiB", "", "", ""]
    net = _net(name, runs)
    floor = ""
    if case["kernel"] + " floor" in runs:
        seconds = statistics.median(r["warm"] for r in runs[case["kernel"] + " floor"])
        floor = f"{seconds:.2f} s ({statistics.median(net) / seconds:.2f}× of it)"
    other = reference(name, case, list(table))
    if case["against"] == "kernel":
        each = [a / b["first"] for a, b in zip(net, runs[other])]
        ratios, goal = [_spread(each, "kernel")], TARGETS["kernel"]
        if all("first_cpu" in r for r in runs[other]):  # steadier on a busy machine: CPU, start-up's subtracted
            spent = [r["warm_cpu"] - s["warm_cpu"] for r, s in zip(runs[name], runs[STARTUP])]
            ratios.append(_spread([a / b["first_cpu"] for a, b in zip(spent, runs[other])], "kernel's CPU"))
    else:
        each = [a / b for a, b in zip(net, _net(other, runs))]
        ratios, goal = [_spread(each, "no mask")], TARGETS[_label(name)]
    if case.get("torch") in runs:
        ratios.append(_spread([a / b["first"] for a, b in zip(net, runs[case["torch"]])], "torch"))
    most = case.get("rss_gib", 1)
    target = (f"≤ {goal}×: {'met' if statistics.median(each) <= goal else 'not met'}, RSS < "
              f"{f'{most * 1024:.0f} MiB' if most < 1 else '1 GiB'}: {'met' if rss < most else 'not met'}")
    return [name, f"{statistics.median(net):.2f} s less start-up (CPU {cpu:.2f} s)", f"{wall:.2f} s",
            f"{rss:.2f} GiB", floor, ", ".join(ratios), target]


def markdown(results: dict) -> str:
    head = ["case", "warm", "first run", "peak RSS", "floor: the products alone", "ratio (spread)", "target"]
    lines = [f"Measured {results['date']} ({results['machine']}; {results['threads']} threads, median of "
             f"{results['rounds']} rounds, a fresh process per case):", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows(results)]
    return "\n".join(lines) + "\n"


def docs_block(results: dict) -> str:
    return MARKERS[0] + markdown(results) + MARKERS[1]


def written(text: str, results: dict) -> str:
    """`text` (docs/performance.md) with the table between the markers rewritten from `results`."""
    start, end = MARKERS
    if start not in text or end not in text:
        raise ValueError(f"{DOCS.name} has no {start.strip()} … {end.strip()} block")
    before, rest = text.split(start, 1)
    return before + docs_block(results) + rest.split(end, 1)[1]


def write_docs() -> None:
    results = json.loads(RESULTS.read_text(encoding="utf-8"))
    text = DOCS.read_text(encoding="utf-8")
    new = written(text, results)
    if new != text:
        DOCS.write_text(new, encoding="utf-8")
        print(f"rewrote the table in {DOCS.relative_to(ROOT)}")


def main(quick: bool, rounds: int | None, threads: int | None) -> None:
    from attncli.compute.threads import cores

    results = measure(quick, rounds or (1 if quick else 3), threads or cores())
    print(markdown(results))
    if not quick:
        RESULTS.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
        print(f"recorded in {RESULTS.relative_to(ROOT)}; python benchmarks/bench.py --write-docs puts it in "
              f"{DOCS.relative_to(ROOT)}")
