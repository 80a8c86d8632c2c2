"""Fills masked scores with -1e9 (True = attend, as PyTorch's SDPA)."""
import numpy as np


def attention(Q, K, V, mask):
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(K.shape[-1])
    scores = np.where(mask, scores, -1e9)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = e / e.sum(axis=-1, keepdims=True)
    return weights @ V
