"""Which keys each query may see, and what is added to its logits, for any block of queries and
keys. Masks are rules of positions, evaluated where they are needed: the full trace asks for
everything at once and shows it; the output-only path asks block by block (and for the span of keys
a block can see at all), so a rule never exists as an (Lq × Lk) matrix there.

The rules, all ANDed (True = the query may attend the key):
    causal      k_pos ≤ q_pos
    window      q_pos − left ≤ k_pos ≤ q_pos + right   (either bound None = unbounded)
    key_mask    key_mask[k]          (true = a real key, Hugging Face attention_mask polarity)
    mask        a given (1 or H, Lq, Lk) matrix
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from attncli.trace import Problem

EVERYTHING = slice(None)
MASK_WORDS = ("causal", "causal_lower_right")


def has_rules(problem: Problem) -> bool:
    """Whether some key may be hidden from some query."""
    return (problem.mask is not None or problem.causal or problem.window is not None
            or problem.key_mask is not None)


def has_logit_changes(problem: Problem) -> bool:
    """Whether the problem has a `masked` stage: some key may be hidden or some bias added.
    Positions alone change nothing."""
    return has_rules(problem) or problem.bias is not None or problem.alibi_slopes is not None


def _bounds(problem: Problem, rows: slice) -> tuple[int | None, int | None]:
    """The lowest and highest key position any of these queries may see under causal and window
    (None = unbounded). Positions are at most 2^53 and bounds too, so nothing overflows int64."""
    q = problem.q_positions[rows]
    if q.size == 0:
        return None, None
    low = high = None
    if problem.window is not None:
        left, right = problem.window
        low = None if left is None else int(q.min()) - left
        high = None if right is None else int(q.max()) + right
    if problem.causal:
        high = int(q.max()) if high is None else min(high, int(q.max()))
    return low, high


def visible(problem: Problem, rows: slice = EVERYTHING, cols: slice = EVERYTHING) -> np.ndarray | None:
    """(1 or H, b, c) bool for query rows `rows` and key columns `cols`, True = the query may
    attend the key; None when every key is visible. Nothing larger than the block is built."""
    if not has_rules(problem):
        return None
    q = problem.q_positions[rows][:, None]  # (b, 1)
    k = problem.k_positions[cols][None, :]  # (1, c)
    rules = []  # (b, c) or (1, c) bool each
    if problem.causal:
        rules.append(k <= q)
    if problem.window is not None:
        left, right = problem.window
        if left is not None:
            rules.append(k >= q - left)
        if right is not None:
            rules.append(k <= q + right)
    if problem.key_mask is not None:
        rules.append(problem.key_mask[cols][None, :])
    seen = np.ones((q.shape[0], k.shape[1]), bool)  # (b, c)
    if rules and rules[0].shape == seen.shape:
        seen = rules.pop(0)
    for rule in rules:
        seen &= rule
    seen = seen[None]  # (1, b, c)
    if problem.mask is not None:
        seen = seen & problem.mask[:, rows, cols]  # (1 or H, b, c)
    return seen


def key_span(problem: Problem, rows: slice) -> tuple[int, int]:
    """(start, stop): key columns outside [start, stop) are hidden from every query in `rows` (and
    every head). For rules this is one pass over the key positions (they need not be sorted); for
    a given matrix, over its (H, b, Lk) block. start == stop when every key is hidden."""
    lk = problem.lk
    if not has_rules(problem):
        return 0, lk
    low, high = _bounds(problem, rows)
    candidates = None  # (Lk,) bool, or None = every key
    k = problem.k_positions
    if low is not None:
        candidates = k >= low
    if high is not None:
        candidates = (k <= high) if candidates is None else candidates & (k <= high)
    if problem.key_mask is not None:
        candidates = problem.key_mask if candidates is None else candidates & problem.key_mask
    if problem.mask is not None:
        given = problem.mask[:, rows].any(axis=(0, 1))  # (Lk,)
        candidates = given if candidates is None else candidates & given
    if candidates is None:
        return 0, lk
    found = np.flatnonzero(candidates)
    return (0, 0) if found.size == 0 else (int(found[0]), int(found[-1]) + 1)


def partly_hidden(problem: Problem, rows: slice, keys: slice) -> slice | None:
    """The columns of `keys` where some query in `rows` may not see some key, as one slice (None:
    every key of `keys` is visible to every row). The output-only path evaluates `visible` only
    there: for causal rules with sorted positions, a block's diagonal square."""
    if not has_rules(problem):
        return None
    q, k = problem.q_positions[rows], problem.k_positions[keys]
    maybe = np.zeros(k.shape, bool)  # (c,)
    if problem.causal:
        maybe |= k > q.min()
    if problem.window is not None:
        left, right = problem.window
        if left is not None:
            maybe |= k < int(q.max()) - left
        if right is not None:
            maybe |= k > int(q.min()) + right
    if problem.key_mask is not None:
        maybe |= ~problem.key_mask[keys]
    if problem.mask is not None:
        maybe |= ~problem.mask[:, rows, keys].all(axis=(0, 1))
    found = np.flatnonzero(maybe)
    if found.size == 0:
        return None
    return slice(keys.start + int(found[0]), keys.start + int(found[-1]) + 1)


def bias(problem: Problem, rows: slice = EVERYTHING, cols: slice = EVERYTHING) -> np.ndarray | None:
    """(1 or H, b, c): what is added to the (scaled, capped) scores of those queries and keys, or
    None: the given bias, plus ALiBi's −slope_h · |q_pos − k_pos| (a rule of positions and head,
    built for this block only)."""
    given = None if problem.bias is None else problem.bias[:, rows, cols]  # (1 or H, b, c)
    if problem.alibi_slopes is None:
        return given
    # In the problem's dtype (float32 runs need no float64 copy); with a given bias, in float64 as it is.
    dtype = np.float64 if given is not None else np.dtype(problem.dtype)
    q = problem.q_positions[rows].astype(np.float64)[:, None]  # (b, 1): positions ≤ 2^53 are exact
    k = problem.k_positions[cols].astype(np.float64)[None, :]  # (1, c)
    distance = np.subtract(q, k, out=np.empty((q.shape[0], k.shape[1]), dtype))  # (b, c), in float64, then stored
    np.abs(distance, out=distance)
    slopes = -problem.alibi_slopes.astype(dtype)[:, None, None]  # (H, 1, 1)
    if slopes.shape[0] == 1:
        alibi = np.multiply(distance, slopes[0], out=distance)[None]  # (1, b, c)
    else:
        alibi = slopes * distance  # (H, b, c)
    return alibi if given is None else alibi + given


def default_positions(length: int) -> np.ndarray:
    return np.arange(length, dtype=np.int64)


def lower_right_positions(lq: int, lk: int) -> np.ndarray:
    """Query positions Lk − Lq … Lk − 1: the queries are the last tokens of the keys' sequence."""
    return np.arange(lk - lq, lk, dtype=np.int64)


def _bound(value: int | None) -> str:
    return "∞" if value is None else str(value)


def rule_lines(problem: Problem) -> list[str]:
    """Each rule in words with its convention, for the table header and JSON's `mask_rule`."""
    lines = []
    if problem.causal:
        lower_right = problem.mask_rule == "causal_lower_right"
        lines.append("causal: query i may attend key j when k_pos[j] ≤ q_pos[i]" + (
            " (causal_lower_right: q_positions Lk − Lq … Lk − 1, as PyTorch causal_lower_right)" if lower_right
            else " (top-left with the default positions 0 … L − 1, as PyTorch is_causal=True)"))
    if problem.window is not None:
        left, right = problem.window
        lines.append(f"window [{_bound(left)}, {_bound(right)}]: query i may attend key j when "
                     f"q_pos[i] − {_bound(left)} ≤ k_pos[j] ≤ q_pos[i] + {_bound(right)} (bounds inclusive)")
    if problem.key_mask is not None:
        hidden = int((~problem.key_mask).sum())
        lines.append(f"key_mask: true = a real key, false = padding (Hugging Face attention_mask; "
                     f"nn.MultiheadAttention key_padding_mask is its inverse); {hidden} of {problem.lk} "
                     "keys are padding")
    if problem.mask is not None:
        lines.append("matrix: true = the query may attend the key (PyTorch SDPA, JAX, Keras)")
    if len(lines) > 1:
        lines.append("all of these rules apply together (AND)")
    return lines or ["none"]


def positions_line(problem: Problem) -> str | None:
    """The positions in words when they are not the default 0 … L − 1 (for the table header)."""
    parts = []
    for name, positions, length in (("q_positions", problem.q_positions, problem.lq),
                                    ("k_positions", problem.k_positions, problem.lk)):
        if not np.array_equal(positions, default_positions(length)):
            shown = ", ".join(str(int(p)) for p in positions[:8]) + (", …" if length > 8 else "")
            parts.append(f"{name} [{shown}]")
    return "positions: " + "; ".join(parts) if parts else None


def input_keys(problem: Problem) -> dict:
    """The rules as input keys, so that JSON output read back gives the same problem: a mask word,
    or the given matrix without the head axis it was broadcast to (true = may attend) and
    `causal: true` beside it, window,
    key_mask, and positions that are not the default (lower-right ones are implied by the word)."""
    keys: dict = {}
    if problem.mask is not None:
        keys["mask"] = (problem.mask[0] if problem.mask.shape[0] == 1 else problem.mask).tolist()
        if problem.causal:
            keys["causal"] = True
    elif problem.causal:
        keys["mask"] = problem.mask_rule if problem.mask_rule in MASK_WORDS else "causal"
    if problem.window is not None:
        keys["window"] = list(problem.window)
    if problem.key_mask is not None:
        keys["key_mask"] = problem.key_mask.tolist()
    if problem.mask_rule != "causal_lower_right" and not np.array_equal(
            problem.q_positions, default_positions(problem.lq)):
        keys["q_positions"] = problem.q_positions.tolist()
    if not np.array_equal(problem.k_positions, default_positions(problem.lk)):
        keys["k_positions"] = problem.k_positions.tolist()
    return keys
