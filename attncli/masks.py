"""Which keys each query may see, and what is added to its logits, for any block of queries and
keys. The full trace asks for everything at once and shows it; the output-only path asks block by
block, so a rule never has to exist as an (Lq × Lk) matrix there.
"""

from __future__ import annotations

import numpy as np

from attncli.trace import Problem

EVERYTHING = slice(None)


def has_logit_changes(problem: Problem) -> bool:
    """Whether the problem has a `masked` stage: some key may be hidden or some bias added."""
    return problem.mask is not None or problem.bias is not None


def visible(problem: Problem, rows: slice = EVERYTHING, cols: slice = EVERYTHING) -> np.ndarray | None:
    """(1 or H, b, c) bool for query rows `rows` and key columns `cols`, True = the query may
    attend the key; None when every key is visible."""
    if problem.mask is None:
        return None
    return problem.mask[:, rows, cols]


def bias(problem: Problem, rows: slice = EVERYTHING, cols: slice = EVERYTHING) -> np.ndarray | None:
    """(1 or H, b, c): what is added to the scaled scores of those queries and keys, or None."""
    if problem.bias is None:
        return None
    return problem.bias[:, rows, cols]
