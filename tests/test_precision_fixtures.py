"""The precision lab's recipes against PyTorch's own numbers in bfloat16 and float16
(tests/fixtures/precision_reference.json, made by make_precision_fixtures.py with torch 2.13.0 on
CPU). What each recipe reproduces, and how closely (docs/explanations/precision.md says the same):

- accumulate float32, store stages: transformers' eager attention, every stage bit for bit;
- accumulate same, store stages: PyTorch's elementwise operations in the dtype, bit for bit;
- accumulate float32, store output: SDPA's math kernel bit for bit but for at most 1 ulp in a
  few cells (its q and k are each scaled by √scale), and SDPA's fused CPU kernel (online softmax in
  float32 tiles) within flash-attention's rule: the error against float64 at most twice the kernel's.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from attncli.compute.attention import attend
from attncli.compute.precision import _ulp
from attncli.document.reading import build_problem

DATA = json.loads(Path(__file__).with_name("fixtures").joinpath("precision_reference.json").read_text())
CASES = DATA["cases"]
RECIPES = {"eager": ("float32", "stages"), "same": ("same", "stages"),
           "sdpa_math": ("float32", "output"), "sdpa_flash": ("float32", "output")}
# (cells that may differ, by at most this many ulps of the dtype); None: the error rule only
CLOSE = {"eager": (0, 0), "same": (0, 0), "sdpa_math": (0.02, 1), "sdpa_flash": None}


def array(value) -> np.ndarray:
    text = json.dumps(value).replace('"nan"', "NaN").replace('"-inf"', "-Infinity").replace('"inf"', "Infinity")
    return np.array(json.loads(text), float)


def run(case, path):
    accumulate, store = RECIPES[path]
    return attend(build_problem(dict(case["inputs"], dtype=case["dtype"], accumulate=accumulate, store=store)))


def ulps(got: np.ndarray, want: np.ndarray, dtype: str) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        diff = np.abs(got - want)
    diff[(got == want) | (np.isnan(got) & np.isnan(want))] = 0
    return diff / _ulp(want, dtype)


PAIRS = [(case, path) for case in CASES for path in RECIPES if path in case["expected"]]


@pytest.mark.parametrize("case, path", PAIRS, ids=[f"{c['name']}-{p}" for c, p in PAIRS])
def test_each_recipe_gives_pytorchs_numbers(case, path):
    trace = run(case, path)
    dead = np.zeros(trace.stages["weights"].shape[:2], bool)
    for h, i in trace.fully_masked:
        dead[h, i] = True
    for name, want in case["expected"][path].items():
        got, want = trace.stages[name], array(want)
        if name in ("weights", "output"):  # PyTorch's fully masked rows are 0/0; attncli stores the policy's 0
            assert np.isnan(want[dead]).all()
            got, want = got[~dead], want[~dead]
        off = ulps(got, want, case["dtype"])
        if CLOSE[path] is None:
            continue
        share, most = CLOSE[path]
        assert (off > 0).mean() <= share and off.max() <= most, (name, off)


@pytest.mark.parametrize("case", [c for c in CASES if "sdpa_flash" in c["expected"]], ids=lambda c: c["name"])
def test_the_output_recipe_meets_flash_attentions_rule_against_the_fused_kernel(case):
    """flash-attention's tests: a low-precision kernel's error against a higher-precision reference is at
    most twice PyTorch's same-precision baseline's. Here the baseline is SDPA's fused CPU kernel."""
    reference = array(case["expected"]["float64"]["output"])
    mine = np.abs(run(case, "sdpa_flash").stages["output"] - reference).max()
    theirs = np.abs(array(case["expected"]["sdpa_flash"]["output"]) - reference).max()
    assert mine <= 2 * theirs + 1e-12


def test_the_fixtures_cover_both_dtypes_every_recipe_and_every_fill():
    assert {c["dtype"] for c in CASES} == {"bfloat16", "float16"}
    assert {path for c in CASES for path in c["expected"]} == set(RECIPES) | {"float64"}
    assert {c["inputs"].get("mask_fill", "-inf") for c in CASES} == {"-inf", "min", -1e4, -1e9}
