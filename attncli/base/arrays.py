"""Low-level array helpers that the core's modules share (attention, backward, stages, blocks,
tiles): the head split and merge, the overflow check, and the one rounding every view uses (with
`plain`, an array as JSON's nested lists). numpy and the error types only, so any module may
import it without a circle."""

from __future__ import annotations

import numpy as np

from attncli.base.errors import Advice, NumericError


def split_heads(x: np.ndarray, heads: int) -> np.ndarray:
    """(L, H·d) → (H, L, d): contiguous column chunks, as nn.MultiheadAttention splits them."""
    length, width = x.shape
    return x.reshape(length, heads, width // heads).transpose(1, 0, 2)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """(H, L, d) → (L, H·d): heads side by side in head order."""
    heads, length, width = x.shape
    return x.transpose(1, 0, 2).reshape(length, heads * width)


def cannot_overflow(Q: np.ndarray, K: np.ndarray, scale: float) -> np.ndarray:
    """(Lq,) whether no score of that query, nor any partial sum of one, times max(1, |scale|), can
    overflow Q's dtype, for Q (H, Lq, d) and K (H, Lk, d): |Σ q_a k_a| ≤ ‖q‖ ‖k‖ (Cauchy–Schwarz),
    with a margin of 4. O((Lq + Lk) · d) instead of a pass over the scores."""
    # In Q's dtype, with no temporary: a norm that overflows is inf, and its queries are checked.
    k_norm = np.sqrt(np.einsum("hkd,hkd->hk", K, K)).max(axis=-1)  # (H,)
    bound = np.sqrt(np.einsum("hqd,hqd->hq", Q, Q)) * k_norm[:, None]  # (H, Lq)
    return (bound * max(1.0, abs(scale)) < np.finfo(Q.dtype).max / 4).all(axis=0)


def check_finite(x: np.ndarray, what: str, axes: tuple[str, ...],
                 allow_neg_inf: np.ndarray | None = None, offset: tuple[int, ...] | None = None) -> None:
    """Raise NumericError naming the first element that overflowed (inputs are finite, so any
    inf or NaN here comes from arithmetic beyond the dtype's range). `offset` shifts the
    reported index, for a block of a larger array."""
    if allow_neg_inf is None and np.isfinite(x.sum()):
        return  # inf and NaN propagate into the sum: one pass, no boolean array as large as x
    bad = ~np.isfinite(x)
    if allow_neg_inf is not None:
        bad &= ~allow_neg_inf
    if bad.any():
        index = np.argwhere(bad)[0] + (offset if offset is not None else 0)
        where = ", ".join(f"{axis} {int(i)}" for axis, i in zip(axes, index))
        where = where.replace(", index", ",")
        raise NumericError(f"{what} overflows {x.dtype} at {where} (its largest finite value is "
                           f"{np.finfo(x.dtype).max:.3g}); scale the inputs down",
                           advice=Advice("dtype", ("float64",), " or use {}") if x.dtype == np.float32 else None)


EXACT_INTEGERS = 2.0**52  # from here on every float64 is a whole number: rounding changes nothing


def round_finite(array: np.ndarray, decimals: int) -> np.ndarray:
    """The one rounding every view uses (JSON's and CSV's --round, marking's carried values).
    Finite stays finite: numpy rounds x·10^d, which overflows for a huge x (1e306 with d = 3);
    values from 2^52 up have no decimals and are kept as they are. A float32 array is rounded in
    its own precision: widened first, so that 0.7679 is written 0.7679, not 0.7678999900817871
    (float32's nearest value to it); the result is float64."""
    array = np.asarray(array)
    if array.dtype == np.float32:
        array = array.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        result = np.round(array, decimals)
    return np.where(np.abs(array) < EXACT_INTEGERS, result, array)


NONFINITE = {"inf": np.inf, "nan": np.nan}  # how JSON writes +∞ and NaN (the precision lab's runs)


def plain(array: np.ndarray, decimals: int | None = None):
    """Nested lists for JSON: −∞ becomes None (strict JSON has no Infinity), optionally rounded;
    +∞ and NaN (only the precision lab's runs hold them, attncli/compute/precision.py) become the
    strings "inf" and "nan"."""
    if decimals is not None:
        array = round_finite(array, decimals)
    finite = np.isfinite(array)
    if finite.all():
        return array.tolist()
    out = np.asarray(array, dtype=np.float64).astype(object)  # Python floats
    out[np.isneginf(array)] = None
    out[np.isposinf(array)] = "inf"
    out[np.isnan(array)] = "nan"
    return out.tolist()
