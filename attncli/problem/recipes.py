"""The precision recipes, one record each: how a run in a low dtype (bfloat16, float16) computes.

A low dtype stores each number in 16 bits; what a run keeps in those bits and where it accumulates
products and sums decides its numbers. A recipe says both: `accumulate` (float32: the products, sums
and the softmax in float32, as PyTorch's CPU kernels and flash kernels do; same: every operation
rounded to the dtype) and `store` (stages: every stage is rounded to the dtype as it is stored, as
a framework's eager code stores each tensor; output: only the output is, every stage before it
stays in the accumulator, as a fused kernel keeps it in registers). The inputs are always stored in
the dtype. attncli/compute/precision.py runs the stages by the recipe; the header says its `words`
and docs/explanations/precision.md says which PyTorch path each reproduces, and how closely
(measured by tests/test_precision_fixtures.py).

Also here, beside the recipe: the mask fill (what a masked score becomes: −∞, the dtype's most
negative finite number, or a number) and the softmax with or without subtracting the row max, the
two settings of the precision lab that apply in any dtype. No numpy: the commands read this at
start-up.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

from attncli.base.choices import LOW_DTYPES

# The largest finite number of each dtype, and its mantissa bits (an ulp at 1 is 2^-bits).
MAX = {"float64": 1.7976931348623157e308, "float32": 3.4028234663852886e38,
       "bfloat16": 3.3895313892515355e38, "float16": 65504.0}
MANTISSA = {"float64": 52, "float32": 23, "bfloat16": 7, "float16": 10}
MIN_EXPONENT = {"float64": -1022, "float32": -126, "bfloat16": -126, "float16": -14}  # of the smallest normal


@dataclass(frozen=True)
class Recipe:
    accumulate: str  # "float32" or "same" (choices.ACCUMULATE)
    store: str  # "stages" or "output" (choices.STORE)
    words: str  # the header's line; $dtype is the run's dtype
    like: str  # the PyTorch path it reproduces

    def stored(self, name: str) -> bool:
        """Whether stage `name` is rounded to the run's dtype as it is stored."""
        return self.store == "stages" or name == "output"

    def line(self, dtype: str) -> str:
        return self.words.replace("$dtype", dtype)


RECIPES: tuple[Recipe, ...] = (
    Recipe("float32", "stages", "each stage computed in float32 (products, sums, the softmax), then stored in $dtype",
           "transformers' eager attention (softmax(..., dtype=torch.float32), each stage a $dtype tensor)"),
    Recipe("float32", "output", "every stage in float32; only the output is stored in $dtype",
           "PyTorch's SDPA on CPU, math and fused kernels (float32 inside, the output rounded)"),
    Recipe("same", "stages", "every product, sum, e^x and quotient rounded to $dtype (no wider accumulator)",
           "no PyTorch CPU path: a kernel whose accumulators are $dtype"),
)


def find(accumulate: str, store: str) -> Recipe | None:
    return next((r for r in RECIPES if (r.accumulate, r.store) == (accumulate, store)), None)


def recipe(problem) -> Recipe | None:
    """The problem's recipe; None for float64 and float32 (each operation in that dtype)."""
    if problem.dtype not in LOW_DTYPES:
        return None
    return find(problem.accumulate or "float32", problem.store)


def fill_value(problem) -> float:
    """The number a masked score becomes (−∞ unless `mask_fill` says otherwise); `min` is the
    dtype's most negative finite number (transformers' torch.finfo(dtype).min)."""
    fill = problem.mask_fill
    return -MAX[problem.dtype] if fill == "min" else float(fill)


def fill_word(problem) -> str:
    """The fill as the header writes it: `min (−3.39e+38, bfloat16's most negative)`, `−1e+04`."""
    fill = problem.mask_fill
    if fill == "min":
        return f"min ({-MAX[problem.dtype]:.3g}, {problem.dtype}'s most negative finite number)".replace("-", "−")
    return "−∞" if fill == -math.inf else f"{fill:g}".replace("-", "−")


def _rounded(x: float, dtype: str) -> float:
    """x as `dtype` stores it (through float32, as the lab rounds: nearest, ties to even; ±inf past
    the range). struct, no numpy: the header reads this at start-up."""
    if math.isinf(x) or dtype == "float64":
        return x
    try:
        bits = struct.unpack("<I", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)
    if dtype == "bfloat16":  # the top 16 bits of float32, rounded to nearest even
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    single = struct.unpack("<f", struct.pack("<I", bits))[0]
    if dtype != "float16":
        return single
    try:
        return struct.unpack("<e", struct.pack("<e", single))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def fill_stored(problem) -> float:
    """The fill as the run's dtype stores it: −65519 is −65504 in float16, −1e4 is −9984 in
    bfloat16, −1e9 is −∞ in float16."""
    return _rounded(fill_value(problem), problem.dtype)


def fill_used(problem) -> str:
    """The fill as the run's dtype holds it, as a title writes it: `−9984` (−1e4 in bfloat16), or `−∞`
    for −∞ and for a fill past the dtype's range (−1e9 in float16, which rounds to −∞)."""
    value = fill_stored(problem)
    if math.isinf(value):
        return "−∞"
    return fill_word(problem) if value == fill_value(problem) else f"{value:.10g}".replace("-", "−")


def fill_tex(problem) -> str:
    """`fill_used` for LaTeX."""
    used = fill_used(problem)
    return r"-\infty" if used == "−∞" else r"\text{" + f"{fill_stored(problem):.10g}" + "}"


def lab(problem) -> bool:
    """Whether the problem is the precision lab's: a low dtype, a finite mask fill or the softmax
    without subtracting the max. Its non-finite values are named where they are born, not refused."""
    return problem.dtype in LOW_DTYPES or problem.mask_fill != -math.inf or not problem.max_subtraction
