"""attncli: scaled dot-product attention, step by step.

The core is importable on its own:

>>> from attncli.attention import attend
>>> from attncli.problem import build_problem
>>> trace = attend(build_problem({"Q": [0, 4], "K": [[1, 0], [0, 1], [.5, .5]],
...                               "V": [[2, 0], [0, 2], [1, -1]]}))
>>> [round(w, 4) for w in trace.weights[0, 0]]
[0.0454, 0.7679, 0.1867]
"""

__version__ = "0.1.0"
