"""T5's relative position bias: the `relative_bias` key, a learned number per head for each bucket of
the distance k_pos − q_pos, added to the (scaled) scores by the `biased` stage. As transformers'
T5Attention computes it (`_relative_position_bucket`, `compute_bias`):

    "relative_bias": {"buckets": 32, "max_distance": 128, "bidirectional": true,
                      "embedding": [[…one number per head…], …one row per bucket…]}

    r = k_pos − q_pos
    bidirectional (T5's encoder): half the buckets for r > 0, half for r ≤ 0, by |r|: n = buckets / 2
    causal (T5's decoder):        every r > 0 in bucket 0, the others by −r:         n = buckets
    then, with e = n / 2 (exact buckets):
        |r| < e   bucket |r|                                  (one bucket per distance)
        |r| ≥ e   bucket e + ⌊ln(|r| / e) / ln(max_distance / e) · (n − e)⌋, at most n − 1
                  (log-spaced: every distance from max_distance on shares the last bucket)
    bias[h, i, j] = embedding[bucket(r_ij)][h]

The logarithm is taken in float32, as T5 takes it (`relative_position.float()`), so that a distance
on a bucket's edge lands where the model puts it. T5 multiplies Q Kᵀ by 1 (no 1/√d_k): its layers
say `"scale": 1`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from attncli.base.errors import InputError, did_you_mean, quote
from attncli.base.values import HugeInt, as_array, describe, object_text

FIELDS = ("buckets", "max_distance", "bidirectional", "embedding")
EXPECTED = ('{"buckets": 32, "max_distance": 128, "bidirectional": true, "embedding": [one row of one number per '
            'head for each bucket]}')


@dataclass(frozen=True, eq=False)
class RelativeBias:
    buckets: int
    max_distance: int
    bidirectional: bool
    embedding: np.ndarray  # (buckets, H): T5's relative_attention_bias.weight

    def __post_init__(self):
        view = self.embedding.view()
        view.flags.writeable = False
        object.__setattr__(self, "embedding", view)

    def __eq__(self, other) -> bool:  # the same settings and embedding (its echo reads back to an equal record)
        return isinstance(other, RelativeBias) and self.to_json() == other.to_json()

    __hash__ = None

    @property
    def exact(self) -> int:
        """The buckets of one distance each: e = n / 2, n the buckets of one side."""
        return self.side // 2

    @property
    def side(self) -> int:
        return self.buckets // 2 if self.bidirectional else self.buckets

    def to_json(self) -> dict:
        return {"buckets": self.buckets, "max_distance": self.max_distance, "bidirectional": self.bidirectional,
                "embedding": self.embedding.tolist()}

    def bucket(self, relative: np.ndarray) -> np.ndarray:
        """The bucket of each relative position k_pos − q_pos (int64 array of the same shape)."""
        relative = np.asarray(relative, np.int64)
        found = np.zeros(relative.shape, np.int64)
        if self.bidirectional:
            found += (relative > 0) * self.side
            distance = np.abs(relative)
        else:
            distance = -np.minimum(relative, 0)
        exact, side = self.exact, self.side
        small = distance < exact
        with np.errstate(divide="ignore"):  # ln 0 = −∞ only where the distance is small (not used)
            ratio = np.log(distance.astype(np.float32) / np.float32(exact))  # float32, as T5
            steps = ratio / np.float32(math.log(self.max_distance / exact)) * np.float32(side - exact)
        large = exact + np.where(small, 0, steps).astype(np.int64)  # truncated toward 0, as .to(long)
        return found + np.where(small, distance, np.minimum(large, side - 1))

    def bias(self, q_positions: np.ndarray, k_positions: np.ndarray, dtype) -> np.ndarray:
        """(H, b, c): embedding[bucket(k_pos − q_pos)] for these queries and keys, in `dtype`."""
        buckets = self.bucket(k_positions[None, :] - q_positions[:, None])  # (b, c)
        return np.moveaxis(self.embedding.astype(dtype)[buckets], -1, 0)  # (H, b, c)

    def line(self) -> str:
        """The convention in words, for the table header."""
        side = "bidirectional (k after q and k before q in separate buckets)" if self.bidirectional else \
            "causal (every k after q in bucket 0)"
        return (f"relative position bias (T5): + embedding[bucket(k_pos − q_pos)][head], {self.buckets} buckets, "
                f"{side}; one bucket per distance below {self.exact}, then log-spaced up to max_distance "
                f"{self.max_distance}")


def _whole(value, field: str, low: int) -> int:
    if isinstance(value, (bool, HugeInt)) or not isinstance(value, (int, float)) or value != int(value) or value < low:
        raise InputError(f"{field} is {describe(value)}; expected a whole number ≥ {low}", field=field)
    return int(value)


def read(value, heads: int, field: str = "relative_bias") -> RelativeBias | None:
    """`relative_bias` for `heads` query heads; in an .npz its JSON text."""
    if value is None:
        return None
    value = object_text(value, field)
    if not isinstance(value, dict):
        raise InputError(f"{field} is {describe(value)}; expected {EXPECTED}", field=field)
    for key in value:
        if key not in FIELDS:
            hint = did_you_mean(str(key), FIELDS, 0.4)
            raise InputError(f"{field} has an unknown key {quote(str(key))}{hint}; expected {', '.join(FIELDS)}",
                             field=field)
    missing = [key for key in FIELDS if key not in value]
    if missing:
        raise InputError(f"{field} has no {missing[0]}; expected {EXPECTED}", field=f"{field}.{missing[0]}")
    bidirectional = value["bidirectional"]
    if not isinstance(bidirectional, bool):
        raise InputError(f"{field}.bidirectional is {describe(bidirectional)}; expected true (T5's encoder) or "
                         "false (its decoder)", field=f"{field}.bidirectional")
    buckets = _whole(value["buckets"], f"{field}.buckets", 4 if bidirectional else 2)
    exact = (buckets // 2 if bidirectional else buckets) // 2
    max_distance = _whole(value["max_distance"], f"{field}.max_distance", exact + 1)
    embedding = as_array(value["embedding"], f"{field}.embedding", max_dims=2)
    if embedding.shape != (buckets, heads):
        shape = " × ".join(map(str, embedding.shape))
        raise InputError(f"{field}.embedding has shape ({shape}); expected ({buckets} × {heads}): one row per bucket, "
                         "one number per query head (T5's relative_attention_bias.weight)", field=f"{field}.embedding")
    return RelativeBias(buckets, max_distance, bidirectional, embedding.astype(np.float64))
