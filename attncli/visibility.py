"""Why a query may see a key, in words: the mask rules of `attncli.masks` spelled out for one
query row with its numbers, for `--explain`. Pure: no numpy work beyond reading positions.

For the query at q_pos q (all rules ANDed, as in `masks.visible`):
    causal      k_pos ≤ q                    hidden: "causal: k_pos 4 > q_pos 3"
    window      q − left ≤ k_pos ≤ q + right hidden: "window [1, 0]: k_pos 0 < 3 − 1"
    key_mask    key_mask[j] true             hidden: "key_mask false: padding"
    mask        the given matrix             hidden: "the mask matrix is false"
    bias −∞     (not a rule, but it hides)   hidden: "bias −∞"
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attncli.trace import Problem


def _bound(value: int | None) -> str:
    return "∞" if value is None else str(value)


def row_rule(problem: Problem, row: int) -> str:
    """The condition a key must meet to be seen by query `row`, with its q_pos filled in:
    `k_pos ≤ 3 (causal) and 3 − 1 ≤ k_pos ≤ 3 + 0 (window [1, 0])`."""
    q = int(problem.q_positions[row])
    parts = []
    if problem.causal:
        parts.append(f"k_pos ≤ {q} (causal)")
    if problem.window is not None:
        left, right = problem.window
        low = "" if left is None else f"{q} − {left} ≤ "
        high = "" if right is None else f" ≤ {q} + {right}"
        parts.append(f"{low}k_pos{high} (window [{_bound(left)}, {_bound(right)}])")
    if problem.key_mask is not None:
        parts.append("key_mask is true (not padding)")
    if problem.mask is not None:
        parts.append("the mask matrix is true")
    return " and ".join(parts)


def hidden_because(problem: Problem, head: int, row: int) -> list[str | None]:
    """Per key of query `row` in head `head`: why the key is hidden ("; " between several
    reasons), or None when it is visible."""
    q = int(problem.q_positions[row])
    bias = None if problem.bias is None else problem.bias[min(head, problem.bias.shape[0] - 1), row]
    mask = None if problem.mask is None else problem.mask[min(head, problem.mask.shape[0] - 1), row]
    found = []
    for j, k in enumerate(int(k) for k in problem.k_positions):
        why = []
        if problem.causal and k > q:
            why.append(f"causal: k_pos {k} > q_pos {q}")
        if problem.window is not None:
            left, right = problem.window
            shown = f"window [{_bound(left)}, {_bound(right)}]"
            if left is not None and k < q - left:
                why.append(f"{shown}: k_pos {k} < {q} − {left}")
            if right is not None and k > q + right:
                why.append(f"{shown}: k_pos {k} > {q} + {right}")
        if problem.key_mask is not None and not problem.key_mask[j]:
            why.append("key_mask false: padding")
        if mask is not None and not mask[j]:
            why.append("the mask matrix is false")
        if bias is not None and bias[j] == float("-inf"):
            why.append("bias −∞")
        found.append("; ".join(why) or None)
    return found


def positions_shown(problem: Problem) -> bool:
    """Whether an explanation names each key's position: when they are not 0 … Lk − 1."""
    return any(int(k) != j for j, k in enumerate(problem.k_positions))
