"""Reads the mask as True = blocked (nn.MultiheadAttention's), where True means attend (SDPA's)."""
import numpy as np


def attention(Q, K, V, mask):
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(K.shape[-1])
    scores = np.where(mask, -np.inf, scores)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = e / e.sum(axis=-1, keepdims=True)
    return weights @ V
