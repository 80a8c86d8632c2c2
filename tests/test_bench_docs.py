"""docs/performance.md's benchmark table is the one benchmarks/results.json records: written by
`python benchmarks/bench.py --write-docs`, never by hand."""

import importlib.util
import json

import pytest

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("output_only", ROOT / "benchmarks" / "output_only.py")
output_only = importlib.util.module_from_spec(spec)
spec.loader.exec_module(output_only)


def test_the_docs_table_is_the_recorded_one():
    results = json.loads(output_only.RESULTS.read_text(encoding="utf-8"))
    text = output_only.DOCS.read_text(encoding="utf-8")
    assert output_only.written(text, results) == text, \
        "docs/performance.md's table differs from benchmarks/results.json: run python benchmarks/bench.py --write-docs"
    assert text.count(output_only.MARKERS[0]) == text.count(output_only.MARKERS[1]) == 1


def run(warm, first=None, rss=0.2):
    return {"warm": warm, "first": first or warm, "first_cpu": 2 * (first or warm), "warm_cpu": 2 * warm,
            "rss_gib": rss}


def torch_installed(monkeypatch):
    """cases() as with the models extra installed: its torch rows are there (the README's test
    command installs only the test extra, and these tests need no torch to run)."""
    real = output_only.importlib.util.find_spec
    monkeypatch.setattr(output_only.importlib.util, "find_spec",
                        lambda name, *rest: object() if name == "torch" else real(name, *rest))


def test_each_ratio_is_taken_within_its_round_with_its_spread_and_floor(monkeypatch):
    torch_installed(monkeypatch)
    monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)  # no second float32 row with OpenBLAS's own kernels
    results = {"date": "today", "machine": "here", "rounds": 3, "threads": 2,
               "cases": output_only.cases(quick=True, threads=2), "runs": {}}
    warm = {"output only, 4096², float32": [1.0, 2.0, 1.2], "torch fused SDPA, 4096², float32": [2.0, 2.0, 1.0],
            "output only, 2048², float64": [1.0] * 3, "torch fused SDPA, 2048², float64": [1.0] * 3,
            "no mask, 2048², float32": [1.0, 2.0, 1.0], "causal, 2048², float32": [0.5, 1.0, 0.6],
            "window 511,0, 2048², float32": [0.05, 0.1, 0.2],
            "output only, causal, 4096², float32": [0.6, 0.6, 0.6], "torch fused SDPA, causal, 4096², float32": [1.0] * 3,
            "output only, window 511,0, 4096², float32": [0.1] * 3,
            "torch fused SDPA, window 511,0, 4096², float32": [2.0, 1.0, 0.5],
            "output only, causal, 2048², float64": [1.0] * 3, "torch fused SDPA, causal, 2048², float64": [1.0] * 3,
            "output only, window 511,0, 2048², float64": [1.0] * 3,
            "torch fused SDPA, window 511,0, 2048², float64": [1.0] * 3}
    # the command line: the 64² start-up, then each command (start-up included)
    warm |= {output_only.STARTUP: [0.2, 0.3, 0.2], "command line, 4096², float32": [1.3, 2.4, 1.4],
             "command line, 2048², float64": [1.2] * 3, "command line, no mask, 2048², float32": [1.2, 2.3, 1.2],
             "command line, causal, 2048², float32": [0.7, 1.3, 0.8],
             "command line, window 511,0, 2048², float32": [0.3, 0.4, 0.3]}
    assert set(warm) == set(results["cases"])
    for name, seconds in warm.items():
        results["runs"][name] = [run(s) for s in seconds]
        if results["cases"][name]["kind"] == "attn":
            results["runs"][name + " floor"] = [run(0.5)] * 3
    assert set(results["runs"]) >= set(results["cases"])  # every case has its runs
    rows = {row[0]: row for row in output_only.rows(results)}
    # less start-up: 1.1, 2.1, 1.2 against the kernel's first runs 1.0, 2.0, 1.2 and torch's 2.0, 2.0, 1.0
    assert rows["command line, 4096², float32"][1:] == [
        "1.20 s less start-up (CPU 2.80 s)", "1.40 s", "0.20 GiB", "0.50 s (2.40× of it)",
        "1.05× kernel (1.00–1.10), 1.05× kernel's CPU (1.00–1.10), 1.05× torch (0.55–1.20)",
        "≤ 1.1×: met, RSS < 1 GiB: met"]
    # causal: 0.5, 1.0, 0.6 against no mask's 1.0, 2.0, 1.0; the window 0.1 each
    assert rows["command line, causal, 2048², float32"][5:] == [
        "0.50× no mask (0.50–0.60)", "≤ 0.6×: met, RSS < 256 MiB: met"]
    assert rows["command line, window 511,0, 2048², float32"][5] == "0.10× no mask (0.05–0.10)"
    assert rows[output_only.STARTUP][1] == "0.20 s (CPU 0.40 s)"
    assert rows["output only, 4096², float32"][1:] == [  # ratios 0.5, 1.0, 1.2 in rounds 1-3
        "1.20 s (CPU 2.40 s)", "1.20 s", "0.20 GiB", "0.50 s (2.40× of it)", "1.00× torch (0.50–1.20)",
        "≤ 0.9×: not met, RSS < 1 GiB: met"]
    assert rows["causal, 2048², float32"][5:] == ["0.50× no mask (0.50–0.60)", "≤ 0.55×: met, RSS < 1 GiB: met"]
    assert rows["window 511,0, 2048², float32"][5] == "0.05× no mask (0.05–0.20)"
    assert rows["torch fused SDPA, 2048², float64"][4:] == ["", "", ""]
    # a masked row against PyTorch's fused kernel with the same mask (is_causal; a window's float mask)
    assert rows["output only, causal, 4096², float32"][5:] == ["0.60× torch (0.60–0.60)",
                                                              "≤ 0.9×: met, RSS < 1 GiB: met"]
    assert rows["output only, window 511,0, 4096², float32"][5] == "0.10× torch (0.05–0.20)"
    block = output_only.docs_block(results)
    assert output_only.written(f"before\n{output_only.MARKERS[0]}old\n{output_only.MARKERS[1]}after\n", results) == \
        f"before\n{block}after\n"
    with pytest.raises(ValueError, match="no <!-- bench: output only -->"):
        output_only.written("no markers", results)


def test_a_chosen_openblas_kernel_adds_the_row_with_openblas_own_choice(monkeypatch):
    torch_installed(monkeypatch)
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    cases = output_only.cases(quick=True, threads=2)
    own = [name for name, case in cases.items() if case.get("unset") == ("OPENBLAS_CORETYPE",)]
    assert own == ["output only, OpenBLAS's own kernels (without OPENBLAS_CORETYPE), 4096², float32",
                   "output only, OpenBLAS's own kernels (without OPENBLAS_CORETYPE), 2048², float64"]
    assert output_only.reference(own[0], cases[own[0]], list(cases)) == "torch fused SDPA, 4096², float32"
    assert output_only.reference(own[1], cases[own[1]], list(cases)) == "torch fused SDPA, 2048², float64"
