"""The JSON view: strict RFC 8259 (−∞ as null, never NaN or Infinity tokens), one line."""

from __future__ import annotations

import json
import re

from attncli.trace import Trace, to_dict


def dumps(doc) -> str:
    """Strict JSON, UTF-8 text kept as it is. A lone surrogate (a file name whose bytes are not
    UTF-8 reaches Python as one) cannot be encoded as UTF-8, so it is written as its `\\udcff`
    escape: valid JSON that a reader decodes back to the same name."""
    text = json.dumps(doc, allow_nan=False, ensure_ascii=False)
    try:
        text.encode("utf-8")  # a few percent of the dumps itself; a regex search costs 3 times more
    except UnicodeEncodeError:
        text = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text


_SURROGATE = re.compile("[\ud800-\udfff]")


def document(trace: Trace, stages, decimals: int | None = None, explanation: list[str] | None = None) -> str:
    """The text `attn compute` writes: one line of strict JSON."""
    doc = to_dict(trace, stages, decimals)
    if explanation is not None:
        doc["explanation"] = explanation
    return dumps(doc) + "\n"
