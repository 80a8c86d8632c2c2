"""Divides by d_k instead of √d_k."""
import numpy as np


def attention(Q, K, V):
    scores = Q @ K.T / K.shape[-1]
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = e / e.sum(axis=-1, keepdims=True)
    return weights @ V, weights
