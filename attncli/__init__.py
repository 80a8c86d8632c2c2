"""attncli: scaled dot-product attention, step by step.

The Python API (see `attncli.api`):

>>> from attncli import attend, check
>>> trace = attend(Q=[0, 4], K=[[1, 0], [0, 1], [.5, .5]], V=[[2, 0], [0, 2], [1, -1]])
>>> trace.weights[0, 0].round(4).tolist()  # head 0, query 0: one weight per key
[0.0454, 0.7679, 0.1867]

`import attncli` stays cheap (`attn --version` imports it): the API and numpy load on first use.
"""

import importlib

__version__ = "0.1.0"
__all__ = ["attend", "check", "check_code", "load_answers", "view", "Marks", "AttnError", "InputError"]

_LAZY = {"attend": "attncli.api", "check": "attncli.api", "check_code": "attncli.api", "load_answers": "attncli.api",
         "view": "attncli.api",
         "Marks": "attncli.api",
         "AttnError": "attncli.base.errors", "InputError": "attncli.base.errors"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'attncli' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_LAZY))
