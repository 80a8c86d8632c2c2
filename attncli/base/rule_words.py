"""Conventions in words, each written once: the sliding-window rule and the masked-rows policies.
The header, `--explain`, marking notes, `--help` texts and the README (checked by
tests/test_rules.py) all say them through these. No numpy: the commands read them at start-up.
"""

from __future__ import annotations

WINDOW_ENDS = "bounds inclusive"
# What each masked-rows policy does (`masked_rows`: a row whose every key is masked), and the
# library it matches where one does (README "Conventions"). Not "as JAX" outright: JAX gives NaN
# for a row blocked by a −∞ bias alone.
MASKED_ROWS_WORDS = {
    "zero": "weights and output 0",
    "uniform": "uniform weights 1/Lk, output = mean of V",
    "error": "an error",
}
MASKED_ROWS_LIKE = {"zero": "as PyTorch SDPA", "uniform": "as JAX when a boolean mask blocks the row"}
JAX_CAVEAT = ("but JAX gives NaN for a row blocked by a −∞ bias alone, and averages only the mask-blocked "
              "keys when a mask and a bias block the row together")


def bound(value) -> str:
    """A window bound as written: the number, or ∞ for an unbounded side (None)."""
    return "∞" if value is None else str(value)


def window_name(left="left", right="right") -> str:
    """`window [1, 0]`, `window [∞, 0]`."""
    return f"window [{bound(left)}, {bound(right)}]"


def window_condition(left="left", right="right", q="q_pos", k="k_pos") -> str:
    """The window rule for a query at `q`: `q_pos − left ≤ k_pos ≤ q_pos + right`; an unbounded
    side (None) is left out (`k_pos ≤ 3 + 0`)."""
    low = "" if left is None else f"{q} − {left} ≤ "
    high = "" if right is None else f" ≤ {q} + {right}"
    return f"{low}{k}{high}" if low or high else f"any {k}"


def window_rule(left="left", right="right") -> str:
    """`window [left, right]: q_pos − left ≤ k_pos ≤ q_pos + right (bounds inclusive)`."""
    return f"{window_name(left, right)}: {window_condition(left, right)} ({WINDOW_ENDS})"


def sliding_window(w="W") -> str:
    """Hugging Face's sliding window as a window rule (README "Masks are rules of positions")."""
    return f"Hugging Face sliding_window = {w} with causal is window [{w} − 1, 0]"


def masked_rows_words(policy: str, option: str | None = None) -> str:
    """`weights and output 0 (as PyTorch SDPA)`; with `option` (how the policy is set, e.g.
    `--masked-rows zero`): `weights and output 0 (--masked-rows zero, as PyTorch SDPA)`."""
    said = [part for part in (option, MASKED_ROWS_LIKE.get(policy)) if part]
    return MASKED_ROWS_WORDS[policy] + (f" ({', '.join(said)})" if said else "")


def masked_rows_help() -> str:
    """The `--masked-rows` option's choices in words."""
    zero, uniform = MASKED_ROWS_WORDS["zero"], MASKED_ROWS_WORDS["uniform"]
    return (f"zero ({zero}, {MASKED_ROWS_LIKE['zero']}; default), uniform ({uniform}; "
            f"{MASKED_ROWS_LIKE['uniform']}, {JAX_CAVEAT}), or error")
