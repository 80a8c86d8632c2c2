"""Fresh practice problems with numbers that are easy by hand.

Only Python's `random.Random(seed)` is used (not numpy's generators), so the same seed gives the
same problem on every machine, Python 3 version and numpy version.
"""

from __future__ import annotations

import random

WORDS = ("the", "cat", "sat", "on", "mat", "dog", "ran", "home", "she", "read", "a", "book", "he",
         "saw", "it", "bird", "sang", "we", "ate", "soup", "red", "car", "went", "fast", "sun", "rose",
         "tea", "was", "hot", "rain", "fell", "they", "made", "bread", "old", "man", "sea", "blue",
         "door", "shut")
QK_VALUES = (-2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2)
V_VALUES = (-3, -2, -1, 0, 1, 2, 3)


def make_exercise(seed: int, queries: int = 1, keys: int = 3, dim: int = 2, value_dim: int | None = None,
                  heads: int = 1, mask: str | None = None) -> dict:
    """A `compute` input document: Q (queries × dim·heads), K, V, labels, and a mask if asked."""
    rng = random.Random(seed)
    value_dim = value_dim or dim

    def matrix(rows: int, columns: int, values) -> list[list[float]]:
        return [[rng.choice(values) for _ in range(columns)] for _ in range(rows)]

    words = rng.sample(WORDS, min(len(WORDS), queries + keys))
    doc = {
        "title": f"Exercise {seed}",
        "description": f"Compute the attention weights and output for {'each query' if queries > 1 else 'the query'}"
                       f"; reproduce with: attn exercise --seed {seed}",
        "Q": matrix(queries, dim * heads, QK_VALUES),
        "K": matrix(keys, dim * heads, QK_VALUES),
        "V": matrix(keys, value_dim * heads, V_VALUES),
        "query_labels": [_label(words, i) for i in range(queries)],
        "key_labels": [_label(words, queries + i) for i in range(keys)],
    }
    if heads > 1:
        doc["heads"] = heads
    if mask == "causal":
        doc["mask"] = "causal"
    elif mask == "random":
        grid = [[rng.random() < 0.7 for _ in range(keys)] for _ in range(queries)]
        for row in grid:
            if not any(row):
                row[rng.randrange(keys)] = True  # every query keeps at least one key
        doc["mask"] = grid
    return doc


def _label(words: tuple[str, ...] | list[str], i: int) -> str:
    return words[i] if i < len(words) else f"w{i}"
