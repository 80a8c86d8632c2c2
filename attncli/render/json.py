"""The JSON view: strict RFC 8259 (−∞ as null, never NaN or Infinity tokens), one line."""

from __future__ import annotations

from attncli.document.schema import check_output
from attncli.document.writing import to_dict
from attncli.problem.trace import Trace
from attncli.render.escapes import dumps


def document(trace: Trace, stages, decimals: int | None = None, explanation: list[str] | None = None,
             tiled=None, say=None, extra: dict | None = None) -> str:
    """The text `attn compute` writes: one line of strict JSON, every key in attncli/document/schema.py.
    `say` says the warnings' advice (`attncli.base.errors.Say`; default: as keywords). With `tiled`
    (attncli.compute.tiles.Tiles): --tiles's keys (`readback.add_tiles`)."""
    doc = to_dict(trace, stages, decimals)
    if say is not None:  # the CLI's words for the warnings' advice (`--masked-rows zero`), as on stderr
        doc["warnings"] = [w.render(say) if hasattr(w, "render") else w for w in trace.warnings]
    if tiled is not None:
        # Imported here, for start-up: only --tiles needs the read-back's tile keys (it loads the counts).
        from attncli.document.readback import add_tiles

        add_tiles(doc, tiled, trace.stage("output"), decimals)
    if explanation is not None:
        doc["explanation"] = explanation
    doc.update(extra or {})  # keys the command adds beside the trace's (attn capture's model, reference, agreement)
    return dumps(check_output(doc)) + "\n"
