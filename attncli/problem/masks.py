"""Which keys each query may see, and what is added to its logits, for any block of queries and
keys. Masks are rules of positions (attncli/problem/rules.py, `Problem.rules`), evaluated where they are
needed: the full trace asks for everything at once and shows it; the output-only path asks block by
block (and for the span of keys a block can see at all), so a rule never exists as an (Lq × Lk)
matrix there. Every function here is a loop over the rules, ANDed (True = the query may attend the
key); rules joined by OR are one rule here (rules.AnyOf answers for its parts); none knows a rule by
name.
"""

from __future__ import annotations

import numpy as np

from attncli.base.errors import Advice, Notice
from attncli.problem import variants

EVERYTHING = slice(None)
MASK_WORDS = ("causal", "causal_lower_right")


def has_rules(problem) -> bool:
    """Whether some key may be hidden from some query."""
    return bool(problem.rules)


def has_logit_changes(problem) -> bool:
    """Whether the problem has a `masked` stage: some key may be hidden, or a bias or a variant
    that joins it (ALiBi) added. Positions alone change nothing."""
    return has_rules(problem) or problem.bias is not None or bool(variants.joining(problem, "masked"))


def visible(problem, rows: slice = EVERYTHING, cols: slice = EVERYTHING) -> np.ndarray | None:
    """(1 or H, b, c) bool for query rows `rows` and key columns `cols`, True = the query may
    attend the key; None when every key is visible. Nothing larger than the block is built."""
    if not has_rules(problem):
        return None
    b, c = problem.q_positions[rows].shape[0], problem.k_positions[cols].shape[0]
    parts = [rule.seen(problem, rows, cols) for rule in problem.rules]  # (b, c), (1, c) or (1 or H, b, c)
    flat = [part for part in parts if part.ndim == 2]
    ours = [part for part in flat if part.shape == (b, c) and part.flags.owndata and part.flags.writeable]
    seen = ours[0] if ours else np.ones((b, c), bool)  # (b, c), ours to write into
    for part in flat:
        if part is not seen:
            seen &= part
    seen = seen[None]  # (1, b, c)
    for part in parts:
        if part.ndim == 3:
            seen = seen & part  # (1 or H, b, c)
    return seen


def key_span(problem, rows: slice) -> tuple[int, int]:
    """(start, stop): key columns outside [start, stop) are hidden from every query in `rows` (and
    every head). One pass over the key positions per rule (they need not be sorted); for a given
    matrix, over its (H, b, Lk) block. start == stop when every key is hidden."""
    candidates = None  # (Lk,) bool, or None = every key
    for rule in problem.rules:
        seen = rule.keys_seen(problem, rows)
        if seen is not None:
            candidates = seen if candidates is None else candidates & seen
    if candidates is None:
        return 0, problem.lk
    found = np.flatnonzero(candidates)
    return (0, 0) if found.size == 0 else (int(found[0]), int(found[-1]) + 1)


def partly_hidden(problem, rows: slice, keys: slice) -> slice | None:
    """The columns of `keys` where some query in `rows` may not see some key, as one slice (None:
    every key of `keys` is visible to every row). The output-only path evaluates `visible` only
    there: for causal rules with sorted positions, a block's diagonal square."""
    if not has_rules(problem):
        return None
    maybe = np.zeros(problem.k_positions[keys].shape, bool)  # (c,)
    for rule in problem.rules:
        maybe |= rule.maybe_hidden(problem, rows, keys)
    found = np.flatnonzero(maybe)
    if found.size == 0:
        return None
    return slice(keys.start + int(found[0]), keys.start + int(found[-1]) + 1)


def bias(problem, rows: slice = EVERYTHING, cols: slice = EVERYTHING) -> np.ndarray | None:
    """(1 or H, b, c): what is added to the (scaled, capped) scores of those queries and keys, or
    None: the given bias, plus ALiBi's −slope_h · |q_pos − k_pos| (a rule of positions and head,
    built for this block only)."""
    given = None if problem.bias is None else problem.bias[:, rows, cols]  # (1 or H, b, c)
    if problem.alibi_slopes is None:
        return given
    # In the problem's dtype (float32 runs need no float64 copy); with a given bias, in float64 as it is.
    dtype = np.float64 if given is not None else np.dtype(problem.dtype)
    distance = distances(problem.q_positions[rows], problem.k_positions[cols], dtype)  # (b, c)
    slopes = -problem.alibi_slopes.astype(dtype)[:, None, None]  # (H, 1, 1)
    if slopes.shape[0] == 1:
        alibi = np.multiply(distance, slopes[0], out=distance)[None]  # (1, b, c)
    else:
        alibi = slopes * distance  # (H, b, c)
    return alibi if given is None else alibi + given


def _widest(q: np.ndarray, k: np.ndarray) -> int:
    """The largest |q_pos − k_pos| over every pair (0 for none), exactly, from the extremes."""
    if not q.size or not k.size:
        return 0
    return max(abs(int(q.max()) - int(k.min())), abs(int(k.max()) - int(q.min())))


def exact_below(dtype) -> int:
    """Every whole number of at most this magnitude is exact in `dtype`: 2^24 (float32), 2^53."""
    return 2 ** (np.finfo(dtype).nmant + 1)


def distances(q: np.ndarray, k: np.ndarray, dtype) -> np.ndarray:
    """(b, c) |q_pos − k_pos| in `dtype`, each the exact whole distance rounded once: positions are
    integers, so the difference is taken in int64 (≤ 2^54) whenever float64 or the dtype could not
    hold it; otherwise in float64 straight into the result (no int64 copy)."""
    out = np.empty((q.shape[0], k.shape[0]), dtype)
    if _widest(q, k) <= exact_below(dtype):
        np.subtract(q.astype(np.float64)[:, None], k.astype(np.float64)[None, :], out=out)  # exact
    else:
        out[...] = np.subtract(q[:, None], k[None, :])  # int64, exact; one rounding into dtype
    return np.abs(out, out=out)


def distance_notes(problem) -> list[Notice]:
    """A warning when ALiBi's distances are not all exact in the problem's dtype (float32 holds the
    whole numbers up to 2^24 only): far-apart keys may then get the same penalty."""
    if problem.alibi_slopes is None or problem.dtype not in ("float64", "float32"):
        return []  # bfloat16, float16: the precision lab says what each stage kept (its roundings, --error)
    widest, dtype = _widest(problem.q_positions, problem.k_positions), np.dtype(problem.dtype)
    if widest <= exact_below(dtype):
        return []
    bits = np.finfo(dtype).nmant + 1
    return [Notice(f"ALiBi distances |q_pos − k_pos| reach {widest:,}, past 2^{bits} = {exact_below(dtype):,}, beyond "
            f"which {dtype.name} does not hold every whole number: distances are rounded (to a multiple of up "
            f"to {2 ** max(0, widest.bit_length() - bits):,}), so keys at different distances may get the same "
            "ALiBi penalty",
            Advice("dtype", ("float64",), " (float64 holds them up to 2^53: use {})")
            if dtype == np.float32 and widest <= 2 ** 53 else None)]


def default_positions(length: int) -> np.ndarray:
    return np.arange(length, dtype=np.int64)


def lower_right_positions(lq: int, lk: int) -> np.ndarray:
    """Query positions Lk − Lq … Lk − 1: the queries are the last tokens of the keys' sequence."""
    return np.arange(lk - lq, lk, dtype=np.int64)


def rule_lines(problem) -> list[str]:
    """Each rule in words with its convention, for the table header and JSON's `mask_rule`."""
    lines = [rule.line(problem) for rule in problem.rules]
    if len(lines) > 1:
        lines.append("all of these rules apply together (AND)")
    return lines or ["none"]


def positions_line(problem) -> str | None:
    """The positions in words when they are not the default 0 … L − 1 (for the table header)."""
    parts = []
    for name, positions, length in (("q_positions", problem.q_positions, problem.lq),
                                    ("k_positions", problem.k_positions, problem.lk)):
        if not np.array_equal(positions, default_positions(length)):
            shown = ", ".join(str(int(p)) for p in positions[:8]) + (", …" if length > 8 else "")
            parts.append(f"{name} [{shown}]")
    return "positions: " + "; ".join(parts) if parts else None


def input_keys(problem) -> dict:
    """The rules as input keys, so that JSON output read back gives the same problem: each rule's
    own keys (a given matrix without the head axis it was broadcast to, true = may attend), and
    positions that are not the default (query positions a rule sets, as causal_lower_right does,
    are implied by it)."""
    keys: dict = {}
    implied = None  # the query positions the rules set by themselves
    for rule in problem.rules:
        keys.update(rule.input_keys(problem))
        implied = rule.place_queries(implied, problem.lq, problem.lk)
    if not np.array_equal(problem.q_positions, default_positions(problem.lq) if implied is None else implied):
        keys["q_positions"] = problem.q_positions.tolist()
    if not np.array_equal(problem.k_positions, default_positions(problem.lk)):
        keys["k_positions"] = problem.k_positions.tolist()
    return keys
