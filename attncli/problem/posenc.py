"""Sinusoidal positional encodings of the original Transformer (Vaswani et al., 2017)."""

from __future__ import annotations

import numpy as np


def positional_encoding(positions: int, dim: int, base: float = 10000.0) -> np.ndarray:
    """(positions × dim): PE(pos, 2i) = sin(pos / base^(2i/dim)), PE(pos, 2i+1) = cos(same)."""
    pos = np.arange(positions, dtype=np.float64)[:, None]  # (P, 1)
    two_i = np.arange(0, dim, 2, dtype=np.float64)[None, :]  # (1, D/2)
    angle = pos / base ** (two_i / dim)  # (P, D/2)
    pe = np.empty((positions, dim))
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle)
    return pe
