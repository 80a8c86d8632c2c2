"""A softmax that does not subtract the row max: overflows on large scores."""
import numpy as np


def attention(Q, K, V):
    scores = Q @ K.T / np.sqrt(K.shape[-1])
    e = np.exp(scores)
    weights = e / e.sum(axis=-1, keepdims=True)
    return weights @ V
