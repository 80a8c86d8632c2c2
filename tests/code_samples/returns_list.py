"""Returns a nested Python list, not an array."""
import numpy as np


def attention(Q, K, V):
    scores = Q @ K.T / np.sqrt(K.shape[-1])
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return ((e / e.sum(axis=-1, keepdims=True)) @ V).tolist()
