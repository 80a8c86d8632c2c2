"""The JSON view: strict RFC 8259 (−∞ as null, never NaN or Infinity tokens), one line."""

from __future__ import annotations

import json
import re

from attncli.document.readback import add_tiles
from attncli.document.schema import check_output
from attncli.document.writing import to_dict
from attncli.problem.trace import Trace


def dumps(doc) -> str:
    """Strict JSON, UTF-8 text kept as it is, except what must not reach a terminal raw (json.dumps
    escapes only C0): DEL, C1 controls, line separators, bidi controls and lone surrogates (a file
    name whose bytes are not UTF-8 reaches Python as one) are written as `\\uXXXX` escapes, which
    a reader decodes back to the same text."""
    text = json.dumps(doc, allow_nan=False, ensure_ascii=False)
    if not text.isascii() or "\x7f" in text:  # both fast scans; the regex (3 times a dumps) is rarely needed
        text = _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text


# The same characters as `attncli.base.errors.visible`, less C0 (json.dumps escapes it already).
_UNSAFE = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def document(trace: Trace, stages, decimals: int | None = None, explanation: list[str] | None = None,
             tiled=None, say=None, extra: dict | None = None) -> str:
    """The text `attn compute` writes: one line of strict JSON, every key in attncli/document/schema.py.
    `say` says the warnings' advice (`attncli.base.errors.Say`; default: as keywords). With `tiled`
    (attncli.compute.tiles.Tiles): --tiles's keys (`readback.add_tiles`)."""
    doc = to_dict(trace, stages, decimals)
    if say is not None:  # the CLI's words for the warnings' advice (`--masked-rows zero`), as on stderr
        doc["warnings"] = [w.render(say) if hasattr(w, "render") else w for w in trace.warnings]
    if tiled is not None:
        add_tiles(doc, tiled, trace.stage("output"), decimals)
    if explanation is not None:
        doc["explanation"] = explanation
    doc.update(extra or {})  # keys the command adds beside the trace's (attn capture's model, reference, agreement)
    return dumps(check_output(doc)) + "\n"
