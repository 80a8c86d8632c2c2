"""A document's echoes and results, read back: `attn compute out.json` checks them against the
recomputation, so the JSON it wrote reads back to the same result, and a key it wrote is never
accepted and ignored (attncli/document/schema.py names the kinds).

- An echo (`d_k`, `mask_rule`, `rope_rule`, `alibi_slopes`, `attncli`) must be what the other keys
  give; a difference is an error naming the echo and the keys it comes from.
- A result (the heads' stages and Q/K/V, `lse`, `concat`, `output`, `grads`, `warnings`, --tiles's
  `tile_size`, `tiles`, `tiled_*`) must equal the recomputation to the decimals it was written
  with (`0.7679` agrees with 0.76789…; a full-precision number agrees within float noise); a
  difference is an error naming the key, pointing at `attn check` for marking answers.
- `cost` (the kernels' counts) is recomputed for the `cost.sram` it names and must be equal
  exactly; a document whose only results are echoes and `cost` is checked without computing
  attention (`verify_counts`).
- One head's stages at the top level (an answers file's form) are head 0's, for a one-head problem.
- `explanation` must be a list of lines; it is words about a previous run (which rows, heads,
  precision and carry it used are not in the document), so it is not recomputed.
"""

from __future__ import annotations

import json

import numpy as np

from attncli.base.arrays import plain
from attncli.base.errors import InputError, did_you_mean, quote
from attncli.base.values import Typed, describe
from attncli.compute import cost
from attncli.compute.attention import attend, scale_of
from attncli.compute.tiles import attend_tiles, head_dicts, max_difference
from attncli.document import schema
from attncli.document.writing import problem_dict, to_dict
from attncli.problem.trace import Trace
from attncli.stages.grads import GRADS
from attncli.stages.grads import names as grad_names
from attncli.stages.table import names

TILED = {"tiles", "tiled_output", "tiled_lse"}
MISSING = object()  # a key the recomputed document does not have
MAX_PLACES = 17  # beyond, a float64's decimals are float noise (rtol covers them)
MAX_TILES = 100_000  # the most tiles attn compute writes in JSON
RTOL = {"float64": 1e-9, "float32": 1e-5,  # float noise between the full trace, blocks and tiles
        "bfloat16": 1e-9, "float16": 1e-9}  # the precision lab: one path, its stored values exact in float64
ANSWERS_HINT = "results in a problem document must be this problem's; to mark answers, use attn check"


def add_tiles(doc: dict, tiled, output, decimals: int | None = None) -> dict:
    """--tiles's keys (attncli.compute.tiles.Tiles): per head "tiles", "tiled_output" and "tiled_lse";
    top level "tile_size" [BQ, BK] and "tiled_max_difference" (the largest |tiled − plain| over
    every head's output)."""
    doc["tile_size"] = [tiled.bq, tiled.bk]
    doc["tiled_max_difference"] = max_difference(tiled, output)
    for h, head in enumerate(doc["heads"]):
        head["tiles"] = head_dicts(tiled, h, decimals)
        head["tiled_output"] = plain(tiled.output[h], decimals)
        head["tiled_lse"] = plain(tiled.lse[h], decimals)
    return doc


def has_results(doc: dict) -> bool:
    """Whether a (key-checked) document holds any echo or result to check."""
    results = schema.top_names(schema.ECHO, schema.RESULT) + schema.one_head()
    return isinstance(doc.get("heads"), list) or any(key in doc for key in results)


def verify(doc: dict, trace: Trace, say=None, options: tuple[str, ...] = ()) -> None:
    """Check `doc`'s echoes and results against `trace` (recomputed in full when `trace` is the
    output-only one and the document holds more). `say` renders the warnings' advice as the
    writer did; `options` are the options that changed the file's problem (named in errors)."""
    members = getattr(doc, "results", None) or {}  # an .npz's heads/… and grads/…, not yet read
    read_members = getattr(doc, "read_results", None)
    doc = {key: _listed(value) for key, value in schema.check_keys(doc).items()}  # .npz: arrays
    if not has_results(doc) and not members:
        return
    if trace.stage("weights") is None and (_needs_full(doc) or members):
        trace = attend(trace.problem)
    expected = _expected(trace, _tile_size(doc, trace.problem), say)
    if "cost" in doc:
        expected["cost"] = _cost(doc, trace.problem)
    _check(doc, expected, trace.problem, options, members, read_members)


HEAD_INPUTS = ("Q", "K", "V")  # each head's inputs, as `attn compute` writes them per head


def verify_echoes(doc: dict, trace: Trace, hint: str) -> None:
    """Only a document's echoes (`d_k`, `mask_rule`, `attncli`, …) and its heads' Q, K and V,
    against `trace`'s problem, as `verify` checks them; its results are left alone (`attn check`
    marks them). `hint` ends a result's error."""
    expected = to_dict(trace)
    rtol = RTOL[trace.problem.dtype]
    for name in schema.top_names(schema.ECHO):
        if name in doc:
            _echo(schema.key(name), _listed(doc[name]), expected.get(name, MISSING), rtol, "")
    heads = doc.get("heads")
    for h, head in enumerate(heads if isinstance(heads, list) else []):
        if not isinstance(head, dict) or h >= len(expected["heads"]):
            continue  # the answers' reader names a head too many or not an object
        for name in HEAD_INPUTS:
            if head.get(name) is not None:
                _same(_listed(head[name]), expected["heads"][h].get(name, MISSING), f"heads[{h}].{name}", rtol, hint)


def counts_only(doc: dict) -> bool:
    """Whether a (key-checked) document's echoes and results are only echoes and `cost`: those
    are checked without computing attention (`verify_counts`)."""
    doc = schema.check_keys(doc)
    kinds = {name: schema.key(name).kind if schema.key(name) else None for name in doc}
    heads = doc.get("heads") if isinstance(doc.get("heads"), list) else []
    return not any(heads) and all(
        kind != schema.RESULT or name == "cost" for name, kind in kinds.items()) and not (
        set(doc) & set(schema.one_head()))


def verify_counts(doc: dict, problem, options: tuple[str, ...] = ()) -> None:
    """Check a document's echoes and `cost` (no other result: see `counts_only`) against the
    problem's echo and the counts recomputed, without computing attention."""
    doc = {key: _listed(value) for key, value in schema.check_keys(doc).items()}
    shape = cost.shape_of(problem)
    expected = problem_dict(problem, scale_of(problem, shape.d_k), shape.d_k, shape.d_v)
    if "cost" in doc:
        expected["cost"] = _cost(doc, problem)
    _check(doc, expected, problem, options)


def _cost(doc: dict, problem) -> dict:
    """The counts for the on-chip memory the document's `cost.sram` names, recomputed exactly."""
    value = doc["cost"]
    sram = value.get("sram") if isinstance(value, dict) else None
    if isinstance(sram, bool) or not isinstance(sram, int) or not 1 <= sram <= cost.MAX_SRAM:
        raise InputError(f"cost.sram is {shown(sram)}; expected the bytes on chip the counts were made for, a "
                         "whole number from 1 to 2^40 (as attn compute writes it)", field="cost.sram")
    return cost.to_dict(cost.cost(problem, sram))


def _check(doc: dict, expected: dict, problem, options: tuple[str, ...], members=None, read_members=None) -> None:
    """Each echo and result of `doc` against `expected`, the document the writer would write;
    `members`: an .npz's heads/… and grads/… headers, read by `read_members` once checked."""
    changed = f"; {', '.join(options)} changed the problem these came from{_recompute(doc, members)}" \
        if options else ""
    hint = ANSWERS_HINT + changed
    rtol = RTOL[problem.dtype]
    if members:
        _npz_results(members, read_members, expected, rtol, hint)
    for name, value in doc.items():
        entry = schema.key(name)
        if name == "explanation":
            _lines(value)
        elif name == "heads" and isinstance(value, list):
            for h, head in enumerate(value):
                for stage, held in head.items():
                    _head_key(stage, h)
                    _same(held, expected["heads"][h].get(stage, MISSING), f"heads[{h}].{stage}", rtol, hint)
        elif entry is not None and entry.kind == schema.ECHO:
            _echo(entry, value, expected.get(name, MISSING), rtol, changed)
        elif entry is not None and entry.kind == schema.RESULT:  # counts are whole numbers: exactly
            _same(value, expected.get(name, MISSING), name, 0.0 if name == "cost" else rtol, hint)
        elif entry is None and name in schema.one_head():  # one head's stage (or tiles) at the top level
            if problem.heads != 1:
                raise InputError(f"{name} is given at the top level, but the problem has {problem.heads} "
                                 f"heads: results go in heads[i]; to mark answers, use attn check", field=name)
            _same(value, expected["heads"][0].get(name, MISSING), name, rtol, hint)


def _recompute(doc: dict, members: dict) -> str:
    """How to recompute a document with changed settings: without its results (which are the old
    problem's), e.g. jq 'del(.heads, .output)'."""
    if members:
        return " (to recompute it, give it without its heads/ and grads/ members and results)"
    results = schema.top_names(schema.ECHO, schema.RESULT) + schema.one_head()
    drop = [name for name in doc if name in results or (name == "heads" and isinstance(doc[name], list))]
    return f"; to recompute it with them, drop its results: jq 'del({', '.join('.' + n for n in drop)})' FILE"


def _npz_results(members: dict, read, expected: dict, rtol: float, hint: str) -> None:
    """An .npz's results (heads/weights is (H, Lq, Lk), grads/Q Q's shape) checked as JSON's are:
    first each member's declared shape and dtype against the problem's, from its header alone (so
    no archive is decompressed beyond the problem's own size), then the numbers."""
    wanted = {}
    for path, (shape, dtype) in members.items():
        prefix, name = path.split("/")
        if prefix == "heads":
            per_head = [head.get(name, MISSING) for head in expected["heads"]]
            value = MISSING if MISSING in per_head else per_head
        else:
            value = expected.get(GRADS, {}).get(name, MISSING)
        if value is MISSING:
            raise InputError(f"{path} is given, but this problem has no {name}; {hint}", field=path)
        want = _shape(value)
        if tuple(shape) != want or dtype.kind not in "fiu":
            raise InputError(f"{path} is declared {dtype} {tuple(shape)}, but this problem's {name} is "
                             f"{want}; {hint}", field=path)
        wanted[path] = value
    for path, array in read().items():
        if path.startswith("heads/"):
            for h, (held, computed) in enumerate(zip(_listed(array), wanted[path])):
                _same(held, computed, f"{path}[{h}]", rtol, hint)
        else:
            _same(_listed(array), wanted[path], path, rtol, hint)


def _shape(value) -> tuple[int, ...]:
    """The shape of nested lists (as the expected document holds its results)."""
    shape = []
    while isinstance(value, list):
        shape.append(len(value))
        value = value[0] if value else None
    return tuple(shape)


def _expected(trace: Trace, tile_size: tuple[int, int] | None, say) -> dict:
    """The document the writer would write for `trace`, every stage unrounded; with `tile_size`,
    the tiles too; the warnings said with `say`; the precision lab's errors (--error), which a
    document may hold."""
    expected = to_dict(trace, ("inputs",) + names() + grad_names() + (GRADS, "errors"))  # all a document may hold
    expected["warnings"] = [w.render(say) if say is not None and hasattr(w, "render") else str(w)
                            for w in trace.warnings]
    if tile_size is not None:
        add_tiles(expected, attend_tiles(trace.problem, *tile_size), trace.stage("output"))
    return expected


def _listed(value):
    """An .npz's array as the nested lists JSON would hold (NaN, which stands for null, as None)."""
    if not isinstance(value, np.ndarray):
        return value
    if value.dtype.kind == "f" and np.isnan(value).any():
        return np.where(np.isnan(value), None, value).tolist()
    return value.tolist()


def _needs_full(doc: dict) -> bool:
    """Whether checking needs stages beyond the output (and lse) that the output-only path has."""
    light = ("output", "lse", "tiles", "tiled_output", "tiled_lse")
    heads = doc.get("heads") if isinstance(doc.get("heads"), list) else []
    return GRADS in doc or any(k in doc for k in schema.one_head() if k != "output") or any(
        k not in light for head in heads for k in head)


def _tile_size(doc: dict, problem) -> tuple[int, int] | None:
    """[BQ, BK] when the document holds tiled results (both or neither), checked."""
    value = doc.get("tile_size")
    heads = doc["heads"] if isinstance(doc.get("heads"), list) else []
    tiled = [h for h in heads if isinstance(h, dict) and h.keys() & TILED] + [doc[k] for k in ("tiles",) if k in doc]
    if value is None:
        if tiled or "tiled_max_difference" in doc:
            raise InputError("tiled results (heads[i].tiles, tiled_output, tiled_lse) are given without "
                             "tile_size, the [BQ, BK] they were computed with; give both or neither",
                             field="tile_size")
        return None
    if not (isinstance(value, list) and len(value) == 2 and all(
            isinstance(b, int) and not isinstance(b, bool) and b >= 1 for b in value)):
        raise InputError(f"tile_size is {shown(value)}; expected [BQ, BK], two whole numbers ≥ 1 "
                         "(as attn compute writes it)", field="tile_size")
    if not tiled and "tiled_max_difference" not in doc:
        raise InputError("tile_size is given without the tiles it sized (heads[i].tiles); give both or "
                         "neither", field="tile_size")
    count = -(-problem.lq // value[0]) * -(-problem.lk // value[1])
    if count > MAX_TILES:
        raise InputError(f"tile_size {shown(value)} makes {count:,} tiles of this problem; a document holds at "
                         f"most {MAX_TILES:,}", field="tile_size")
    return value[0], value[1]


def _head_key(stage: str, h: int) -> None:
    if stage not in schema.head_names():
        hint = did_you_mean(stage, schema.head_names()) or f"; a head holds {', '.join(schema.head_names())}"
        raise InputError(f"unknown key {quote(stage)} in heads[{h}]{hint}", field=f"heads[{h}].{stage}")


def _lines(value) -> None:
    if not isinstance(value, list) or not all(isinstance(line, str) for line in value):
        raise InputError(f"explanation is {shown(value)}; expected a list of lines (as attn compute "
                         "writes it)", field="explanation")


def _echo(entry, held, computed, rtol: float, changed: str) -> None:
    if computed is MISSING:
        gives = "give" if "," in entry.source or " and " in entry.source else "gives"
        raise InputError(f"{entry.name} is given, but {entry.source} {gives} none ({entry.about}); "
                         f"drop {entry.name}{changed}", field=entry.name)
    if not _agree(held, computed, rtol):
        held, computed = _differ(held, computed)
        raise InputError(f"{entry.name} is {held}, but from {entry.source} it is {computed}: "
                         f"{entry.name} is derived; drop it, or fix {entry.source}{changed}", field=entry.name)


def _same(held, computed, path: str, rtol: float, hint: str) -> None:
    """Raise naming the first place where a written result and the recomputed one differ."""
    if computed is MISSING:
        raise InputError(f"{path} is given, but this problem has no {path.rsplit('.', 1)[-1]}; {hint}",
                         field=path)
    if isinstance(held, dict) and isinstance(computed, dict):
        for key, value in held.items():
            _same(value, computed.get(key, MISSING), f"{path}.{key}", rtol, hint)
        return
    if isinstance(held, list) and isinstance(computed, list) and len(held) == len(computed):
        if _numbers(held) and _numbers(computed):  # a row: at once
            bad = _disagree(held, computed, rtol)
            if bad is None:
                return
            held, computed, path = held[bad], computed[bad], f"{path}[{bad}]"
        else:
            for i, (w, c) in enumerate(zip(held, computed)):
                _same(w, c, f"{path}[{i}]", rtol, hint)
            return
    if not _agree(held, computed, rtol):
        raise InputError(f"{path} is {shown(held)} but recomputing gives {shown(computed)}; {hint}",
                         field=path)


def _numbers(row: list) -> bool:
    return all(x is None or (type(x) in (int, float, Typed)) for x in row)


def _disagree(held: list, computed: list, rtol: float) -> int | None:
    """The first index where two rows of numbers (None = −∞) differ, or None. A written number
    agrees when it is the computed one within float noise, or that rounded to some d decimals (so
    to the decimals it was written with: 0.768 is 0.76791… to 3, and never 0.7679 to 3)."""
    w = np.array([-np.inf if x is None else x for x in held], dtype=np.float64)
    c = np.array([-np.inf if x is None else x for x in computed], dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        noise = rtol * np.maximum(1.0, np.abs(c))
        rest = np.flatnonzero(~((w == c) | (np.abs(w - c) <= noise)))
        for places in range(MAX_PLACES + 1):
            if rest.size == 0:
                return None
            rounded = np.round(c[rest], places)
            rest = rest[~(np.abs(w[rest] - rounded) <= noise[rest])]
    return int(rest[0]) if rest.size else None


def _agree(held, computed, rtol: float) -> bool:
    """Equal; for numbers, equal to the decimals `held` was written with (0.7679 agrees with
    0.76789…) within float noise."""
    numbers = (int, float)
    if isinstance(held, bool) or isinstance(computed, bool) or not (
            isinstance(held, numbers) and isinstance(computed, numbers)):
        return held == computed
    if isinstance(held, list) or isinstance(computed, list):
        return False
    return _disagree([held], [computed], rtol) is None


def _differ(held, computed, context: int = 30) -> tuple[str, str]:
    """Two values as a message shows them; two long strings from the first character where they
    differ, with some context before it ("…j ≤ i (top-left…" against "…j ≤ i; window…")."""
    if not (isinstance(held, str) and isinstance(computed, str)) or max(len(held), len(computed)) <= 200:
        return shown(held), shown(computed)
    start = next((i for i, (a, b) in enumerate(zip(held, computed)) if a != b), min(len(held), len(computed)))
    start = max(0, start - context)

    def part(text: str) -> str:
        cut = text[start:start + 2 * context + 40]
        return ("…" if start else "") + quote(cut)[1:-1] + ("…" if start + len(cut) < len(text) else "")
    return f'"{part(held)}"', f'"{part(computed)}"'


def shown(value) -> str:
    """A value in a message: short ones as JSON, long lists by their size."""
    if isinstance(value, list) and len(value) > 8 or isinstance(value, dict):
        return describe(value)
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 200 else describe(value)
