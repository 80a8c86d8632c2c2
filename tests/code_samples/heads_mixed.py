"""(B, H, L, d): flattens the batch and heads of Q in one order and of K and V in the other."""
import numpy as np


def attention(Q, K, V):
    B, H, L, d = Q.shape
    q = Q.reshape(B * H, L, d)
    k = K.transpose(1, 0, 2, 3).reshape(B * H, K.shape[2], d)
    v = V.transpose(1, 0, 2, 3).reshape(B * H, V.shape[2], V.shape[3])
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(d)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = e / e.sum(axis=-1, keepdims=True)
    return (weights @ v).reshape(B, H, L, V.shape[3])
