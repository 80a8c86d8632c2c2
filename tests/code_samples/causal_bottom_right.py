"""Builds its own causal mask aligned bottom-right (the KV-cache convention), not top-left."""
import numpy as np


def attention(Q, K, V, is_causal):
    scores = Q @ K.T / np.sqrt(K.shape[-1])
    if is_causal:
        lq, lk = scores.shape
        keep = np.tril(np.ones((lq, lk), dtype=bool), k=lk - lq)
        scores = np.where(keep, scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = e / e.sum(axis=-1, keepdims=True)
    return weights @ V
