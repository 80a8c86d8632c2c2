"""The floor without a CLI framework: plain Python + numpy doing the same arithmetic."""

import json
import sys

import numpy as np

with open(sys.argv[1], encoding="utf-8") as handle:
    doc = json.load(handle)
q, k, v = (np.atleast_2d(np.array(doc[name], dtype=np.float64)) for name in "QKV")
scale = 1 / np.sqrt(q.shape[-1])
scores = q @ k.T
scaled = scores * scale
exps = np.exp(scaled - scaled.max(axis=-1, keepdims=True))
weights = exps / exps.sum(axis=-1, keepdims=True)
output = weights @ v
print(json.dumps({"scale": scale, "heads": [{"scores": scores.tolist(), "scaled": scaled.tolist(),
                                              "weights": weights.tolist(), "output": output.tolist()}],
                  "output": output.tolist()}))
