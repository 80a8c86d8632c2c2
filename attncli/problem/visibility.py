"""Why a query may see a key, in words: the mask rules (attncli/problem/rules.py) spelled out for one
query row with its numbers, for `--explain`. Each rule says its own condition and reasons (rules
joined by OR say theirs together: a key they hide is hidden by every part); this module joins them
(all ANDed, as in `masks.visible`) and adds a −∞ bias, which is not a rule but hides a key too.
Pure: no numpy work beyond reading positions.

    condition   "k_pos ≤ 3 (causal) and 3 − 1 ≤ k_pos ≤ 3 + 0 (window [1, 0])",
                "(k_pos ≤ 1 (causal) or k_pos < 2 (prefix))"
    hidden      "causal: k_pos 4 > q_pos 3; window [1, 0]: k_pos 0 < 3 − 1", "bias −∞",
                "causal: k_pos 3 > q_pos 1 and prefix 2: k_pos 3 ≥ 2"
"""

from __future__ import annotations


def row_rule(problem, row: int) -> str:
    """The condition a key must meet to be seen by query `row`, with its q_pos filled in:
    `k_pos ≤ 3 (causal) and 3 − 1 ≤ k_pos ≤ 3 + 0 (window [1, 0])`."""
    return " and ".join(rule.condition(problem, row) for rule in problem.rules)


def hidden_because(problem, head: int, row: int) -> list[str | None]:
    """Per key of query `row` in head `head`: why the key is hidden ("; " between several
    reasons), or None when it is visible."""
    reasons = [rule.why(problem, head, row) for rule in problem.rules]  # per rule, per key
    if problem.bias is not None:
        bias = problem.bias[min(head, problem.bias.shape[0] - 1), row]
        reasons.append(["bias −∞" if value == float("-inf") else None for value in bias])
    return ["; ".join(why for why in per_key if why) or None for per_key in zip(*reasons)] if reasons \
        else [None] * problem.lk


def positions_shown(problem) -> bool:
    """Whether an explanation names each key's position: when they are not 0 … Lk − 1."""
    return any(int(k) != j for j, k in enumerate(problem.k_positions))
