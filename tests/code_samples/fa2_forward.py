"""FlashAttention-2's forward pass, tile by tile, returning (output, lse) as CS336 asks."""
import numpy as np


def flash_forward(Q, K, V, block_q, block_k):
    lq, d = Q.shape
    scale = 1 / np.sqrt(d)
    O = np.zeros((lq, V.shape[1]))
    L = np.zeros(lq)
    for q0 in range(0, lq, block_q):
        q = Q[q0:q0 + block_q]
        m = np.full(len(q), -np.inf)
        l = np.zeros(len(q))
        o = np.zeros((len(q), V.shape[1]))
        for k0 in range(0, K.shape[0], block_k):
            S = q @ K[k0:k0 + block_k].T * scale
            m_new = np.maximum(m, S.max(axis=1))
            P = np.exp(S - m_new[:, None])
            alpha = np.exp(m - m_new)
            l = alpha * l + P.sum(axis=1)
            o = alpha[:, None] * o + P @ V[k0:k0 + block_k]
            m = m_new
        O[q0:q0 + block_q] = o / l[:, None]
        L[q0:q0 + block_q] = m + np.log(l)
    return O, L
