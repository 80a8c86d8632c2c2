"""A document of several layers (`attn capture --layer all`): one model's layers, each an ordinary
layer document, in one file.

    {"title": "SmolLM2 layers 0–29 (LlamaForCausalLM)",
     "model": {"name": "SmolLM2", "class": "LlamaForCausalLM", "layers": [0, 1, …, 29]},
     "query_labels": […], "key_labels": […], "word_ids": […], "causal": true, "masked_rows": "uniform",
     "layers": [{"title": "SmolLM2 layer 0 (LlamaForCausalLM)", "X": …, "W_Q": …, …,
                 "reference": {…}, "model": {"layer": 0}}, …]}

Layer i's document is the top level's keys (but `layers`) with the i-th entry's over them, and the
two `model` objects merged (`layer_document`): the keys every layer shares (the tokens' labels and
word ids, the mask) are written once, at the top. Any problem key may stand at the top level as
every layer's default. A layer is named by its `model.layer` (its number in the model), else by
its place in the list.

As an .npz (binary: what `attn capture` writes past a size), a document's members are its keys
(`npz_members`, read back by `from_members`), as `attn compute -o FILE.npz` writes a problem's:

    X.npy, W_Q.npy, …               arrays (float32 when that holds every value exactly)
    scale.npy, causal.npy, …        numbers, booleans and strings as 0-d arrays
    query_labels.npy, …             lists of strings as 1-D string arrays
    word_ids.npy                    integers, -1 for null
    model.npy, rope.npy, q_norm.npy objects as JSON text (a 0-d string)
    reference/weights.npy, reference/output.npy, reference/dtype.npy
    layers/<i>/KEY.npy              the i-th entry's keys (i from 0), its reference as layers/<i>/reference/…
"""

from __future__ import annotations

import json
import re

import numpy as np

from attncli.base.errors import InputError
from attncli.base.values import describe

LAYERS = "layers"
FOLDERS = ("reference",)  # objects of arrays: a folder of members in an .npz
SHARED = ("query_labels", "key_labels", "word_ids", "causal", "key_mask", "q_positions", "k_positions",
          "masked_rows")  # what every captured layer of one run has alike: written once, at the top
OBJECTS = ("model", "rope", "q_norm", "k_norm")  # objects an .npz holds as JSON text
MOST_LAYERS = 100_000
MEMBER = re.compile(r"(?:layers/(0|[1-9][0-9]{0,5})/)?(?:(reference)/)?([A-Za-z_][A-Za-z0-9_]*)\.npy")


class SeveralLayers(Exception):
    """A document of several layers, several of which were chosen: the caller takes each in turn
    (`layer_document`). Not an error: `attn compute` catches it (commands/compute_layers.py)."""

    def __init__(self, doc: dict, places: list[int], source: str | None):
        super().__init__(f"{len(places)} layers")
        self.doc, self.places, self.source = doc, places, source


def is_layered(doc) -> bool:
    return isinstance(doc, dict) and LAYERS in doc


def chosen(doc: dict, layer: str | None, source: str | None = None, flag: str = "layer") -> dict:
    """`flag`: what errors name as where the layer numbers came from (the command's option). The document to compute: a layer document as it is (`layer`, when given, must be its own
    model.layer), or the one layer of a document of several that `layer` names (all when None);
    several chosen raise SeveralLayers."""
    if not is_layered(doc):
        if layer is not None:
            model = doc.get("model") if isinstance(doc.get("model"), dict) else {}
            if parse_layers(layer, None, flag) not in (None, [model.get("layer")]):
                raise InputError(f"is {layer!r}, but {source or 'the document'} holds one layer"
                                 + (f" (layer {model['layer']})" if type(model.get("layer")) is int else "")
                                 + f" and no layers list; drop {flag}", flag)
        return doc
    places = select(doc, None if layer is None else parse_layers(layer, None, flag, numbers(doc)), flag)
    if len(places) > 1:
        raise SeveralLayers(doc, places, source)
    found = layer_document(doc, places[0])
    if len(entries(doc)) == 1 and "title" not in found and isinstance(doc.get("title"), str):
        found["title"] = doc["title"]  # a document of one layer: its title is that layer's
    return found


def assemble(docs: list[dict], title: str | None = None) -> dict:
    """Layer documents (as attn capture makes them) as one document: what they share at the top."""
    first = docs[0]
    top = {"title": title} if title else {}
    model = {k: v for k, v in first.get("model", {}).items() if k in ("name", "class")}
    top["model"] = model | {"layers": [d.get("model", {}).get("layer", i) for i, d in enumerate(docs)]}
    shared = [k for k in SHARED if k in first and all(k in d and _same(d[k], first[k]) for d in docs)]
    top |= {k: first[k] for k in shared}
    entries = []
    for doc in docs:
        entry = {k: v for k, v in doc.items() if k not in shared}
        if "model" in entry:
            entry["model"] = {k: v for k, v in entry["model"].items() if k not in model}
        entries.append(entry)
    return top | {LAYERS: entries}


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b))
    return a == b


def entries(doc: dict) -> list[dict]:
    """The `layers` list, checked: a non-empty list of objects."""
    found = doc[LAYERS]
    if not isinstance(found, list) or not found or not all(isinstance(e, dict) for e in found):
        raise InputError(f"layers is {describe(found)}; expected a list of layer documents (objects), as attn capture "
                         "writes several layers", field=LAYERS)
    if len(found) > MOST_LAYERS:
        raise InputError(f"layers has {len(found):,} entries; a model has at most {MOST_LAYERS:,}", field=LAYERS)
    return found


def numbers(doc: dict) -> list[int]:
    """Each entry's layer number: its model.layer, else its place in the list; all different."""
    found = []
    for i, entry in enumerate(entries(doc)):
        model = entry.get("model") if isinstance(entry.get("model"), dict) else {}
        layer = model.get("layer", i)
        found.append(layer if type(layer) is int else i)
    if len(set(found)) != len(found):
        twice = next(n for n in found if found.count(n) > 1)
        raise InputError(f"layers holds layer {twice} twice (model.layer); expected each layer once", field=LAYERS)
    return found


def layer_document(doc: dict, index: int) -> dict:
    """The i-th entry as an ordinary document: the top level's keys under its own, `model` merged."""
    entry = entries(doc)[index]
    top = {k: v for k, v in doc.items() if k != LAYERS}
    merged = top | entry
    models = [m for m in (top.get("model"), entry.get("model")) if isinstance(m, dict)]
    if models:
        model = {k: v for m in models for k, v in m.items() if k != LAYERS}
        merged["model"] = model
    if "title" not in entry:
        merged.pop("title", None)
    return merged


def select(doc: dict, wanted: list[int] | None, flag: str = "layer") -> list[int]:
    """The places in `layers` of the layer numbers `wanted` (None: all), in the order given."""
    have = numbers(doc)
    if wanted is None:
        return list(range(len(have)))
    missing = [n for n in wanted if n not in have]
    if missing:
        raise InputError(f"names layer {missing[0]}, which the document does not hold; it holds layers "
                         f"{spans(have)}", flag)
    return [have.index(n) for n in wanted]


def spans(numbers: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] as "0-2, 5, 7-8" (the --layer spelling)."""
    out, start = [], None
    for i, n in enumerate(numbers):
        if start is None:
            start = n
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            out.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ", ".join(out)


def parse_layers(text: str, count: int | None, flag: str = "layer", held: list[int] | None = None) -> list[int] | None:
    """`all` (None: every layer), `3`, or `3,7-9` as layer numbers below `count`, in order, each once.
    A number past `count` (or past the largest `held`, a document's layer numbers; past MOST_LAYERS
    when neither is known) is refused as out of range, however many digits it has."""
    word = text.strip().lower()
    if word == "all":
        return None
    found = []
    for part in word.split(","):
        match = re.fullmatch(r"\s*([0-9]+)\s*(?:-\s*([0-9]+)\s*)?", part)
        if match is None:
            raise InputError(f"is {text!r}; expected all, a layer number (3) or numbers and ranges (3,7-9)", flag)
        low, high = int(match[1]), int(match[2] if match[2] is not None else match[1])
        if high < low:
            raise InputError(f"is {text!r}: the range {low}-{high} runs backwards; write {high}-{low}", flag)
        if count is not None and high >= count:
            raise InputError(f"is {text!r}, but there {'is' if count == 1 else 'are'} {count} layer{'s' * (count != 1)} "
                             f"(0 to {count - 1})", flag)
        if held and high > max(held):
            raise InputError(f"is {text!r}: layer {high} is out of range, the document holds layers {spans(held)}",
                             flag)
        if high >= MOST_LAYERS:
            raise InputError(f"is {text!r}: layer {high} is out of range, a model has at most {MOST_LAYERS:,} layers",
                             flag)
        found += [n for n in range(low, high + 1) if n not in found]
    return found


# --- .npz ---------------------------------------------------------------------------------------

def npz_members(doc: dict) -> dict[str, np.ndarray]:
    """The document's keys as .npz members (the module docstring's names)."""
    members = {}
    for key, value in doc.items():
        if key == LAYERS:
            for i, entry in enumerate(value):
                members |= {f"{LAYERS}/{i}/{name}": array for name, array in npz_members(entry).items()}
        elif key in FOLDERS and isinstance(value, dict):
            members |= {f"{key}/{name}": _leaf(v) for name, v in value.items()}
        elif value is not None:
            members[key] = _leaf(value)
    return members


def _leaf(value) -> np.ndarray:
    if isinstance(value, dict):
        return np.array(json.dumps(_plain(value), allow_nan=False))
    if isinstance(value, list) and any(v is None for v in value):  # word_ids: null as -1
        return np.array([-1 if v is None else v for v in value])
    array = np.asarray(value)
    if array.dtype == np.float64 and array.ndim:
        single = array.astype(np.float32)
        if np.array_equal(single, array):  # a float32 model's numbers: half the bytes, every value exact
            return single
    return array


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value.tolist() if isinstance(value, np.ndarray) else value


def member_key(name: str) -> tuple[str, ...] | None:
    """A member's path as keys (`layers/3/reference/weights.npy` → ("layers", "3", "reference",
    "weights")), or None when it is not a document member this module writes."""
    match = MEMBER.fullmatch(name)
    if match is None or ("/" in name and not (match[1] or match[2])):
        return None
    return tuple(part for part in ((LAYERS, match[1]) if match[1] else ()) + ((match[2],) if match[2] else ())
                 + (match[3],))


def document_keys(names) -> list[str]:
    """The document keys members name (their names without .npy): X.npy and layers/3/X.npy name X,
    reference/weights.npy names reference; `layers` itself is the folder, not a problem's key."""
    found = []
    for name in names:
        path = member_key(name + ".npy") if "/" in name else (name,)
        if path[0] == LAYERS and len(path) > 2:
            path = path[2:]
        found.append(path[0])
    return list(dict.fromkeys(found))


def from_members(flat: dict) -> dict:
    """An .npz's members (by `member_key` path, values already as load_npz reads them) as the document."""
    doc: dict = {}
    layers: dict[int, dict] = {}
    for path, value in flat.items():
        where = doc
        if path[0] == LAYERS and len(path) > 2:
            where = layers.setdefault(int(path[1]), {})
            path = path[2:]
        if len(path) == 2:
            where = where.setdefault(path[0], {})
        where[path[-1]] = _read_leaf(path[-1], value)
    if layers:
        if sorted(layers) != list(range(len(layers))):
            gap = next(i for i in range(len(layers) + 1) if i not in layers)
            raise InputError(f"cannot read .npz: it has members of layers/{max(layers)}/ but none of layers/{gap}/; "
                             "expected layers/0/ … in order, as attn capture writes them")
        doc[LAYERS] = [_objects(layers[i]) for i in range(len(layers))]
    return _objects(doc)


def _read_leaf(key: str, value):
    if key == "word_ids" and isinstance(value, np.ndarray) and value.dtype.kind in "iu":
        return [None if v < 0 else int(v) for v in value.tolist()]
    return value


def _objects(doc: dict) -> dict:
    """`model` as JSON text back to its object (rope and the norms' readers take the text as it is)."""
    text = doc.get("model")
    if isinstance(text, str) and text.startswith("{"):
        try:
            doc["model"] = json.loads(text)
        except ValueError:
            pass  # left as text: the reader names it
    return doc
