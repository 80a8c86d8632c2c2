"""Where a query looks, read from computed weights: `attn heads` ranks every head of every layer by
the weight a query puts on some keys, with each head's largest keys, the first key's share (the
"attention sink" most trained models grow) and the row's entropy.

Pure numpy over weights already computed (a trace's `weights`, heads × Lq × Lk): nothing here
recomputes attention. Words (base/tokens.py's groups of positions) merge a word's sub-tokens by
summing their weights over keys; a query word of several tokens is the mean of its rows (each row
sums to 1, so the mean does too).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Focus(NamedTuple):
    """One head's row for one query: `weight` on the picked keys (None when none were picked),
    its `top` keys as (key index in `names`, weight), largest first, the first key's share, the
    sink's (1 − the row's sum, for a sinks variant; 0 without one, not the sum's rounding), the
    entropy in nats over the keys."""

    layer: int
    head: int
    query: str
    weight: float | None
    top: list[tuple[int, float]]
    first: float
    sink: float
    entropy: float


def merged(row: np.ndarray, groups: list[list[int]]) -> np.ndarray:
    """One query row's weights (…, Lk) summed within each group of keys (a word's sub-tokens)."""
    return np.stack([row[..., group].sum(axis=-1) for group in groups], axis=-1)


def entropy(row: np.ndarray) -> np.ndarray:
    """−Σ w ln w over the last axis (0 ln 0 = 0), in nats."""
    safe = np.where(row > 0, row, 1.0)
    return -(row * np.log(safe)).sum(axis=-1)


def focus(weights: np.ndarray, layer: int, query: tuple[str, list[int]], keys: list[int] | None,
          groups: list[list[int]], top: int, sinks: bool = False) -> list[Focus]:
    """Each head's Focus for one query (name, its rows) in one layer's weights (H, Lq, Lk): the
    weight on `keys` (positions; None: none picked), the `top` largest of `groups` (the keys, or
    the words, as lists of positions); `sinks`: the problem has a sink logit per head, which takes
    what the row's weights leave of 1."""
    name, rows = query
    row = weights[:, rows, :].mean(axis=1)  # (H, Lk)
    words = merged(row, groups)  # (H, words)
    found = []
    for h in range(row.shape[0]):
        order = np.argsort(-words[h], kind="stable")[:top]
        found.append(Focus(layer, h, name, None if keys is None else float(row[h, keys].sum()),
                           [(int(j), float(words[h, j])) for j in order], float(row[h, 0]),
                           float(max(0.0, 1.0 - row[h].sum())) if sinks else 0.0, float(entropy(row[h]))))
    return found


def ranked(found: list[Focus], queries: list[str]) -> list[Focus]:
    """Per query (in `queries`' order), best first by the weight on the picked keys (ties: layer,
    then head); in layer and head order when no key was picked."""
    place = {name: i for i, name in enumerate(queries)}
    return sorted(found, key=lambda f: (place[f.query], 0.0 if f.weight is None else -f.weight, f.layer, f.head))
