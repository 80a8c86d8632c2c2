"""The JSON view: strict RFC 8259 (−∞ as null, never NaN or Infinity tokens), one line."""

from __future__ import annotations

import json

from attncli.trace import Trace, to_dict


def dumps(doc) -> str:
    return json.dumps(doc, allow_nan=False, ensure_ascii=False)


def document(trace: Trace, stages, decimals: int | None = None, explanation: list[str] | None = None) -> str:
    """The text `attn compute` writes: one line of strict JSON."""
    doc = to_dict(trace, stages, decimals)
    if explanation is not None:
        doc["explanation"] = explanation
    return dumps(doc) + "\n"
