"""`attn capture`'s run, in the order that does no work before it can be refused: the model directory
checked (attncli/capture/directory.py: no code of its own, no pickles, a config that holds; or a
GGUF file, capture/source.py), --output checked (never an input of the run), --layer, the memory
guard on the model's size (capture/guard.py), the config and tokenizer, the tokens, the guard again
with them and the layers, then the model loaded and run once (capture/loading.py, capture/driver.py),
and the document written, one layer or several (attncli/document/layers.py), as JSON or .npz:
atomically, as `attn compute -o` writes (attncli/render/files.py)."""

import os
import re
import sys
from types import SimpleNamespace

import numpy as np

from attncli.base.errors import one_line, quote
from attncli.capture import gguf_file, guard
from attncli.capture.directory import ModelDir
from attncli.capture.driver import capture_layers, listed, pad_left
from attncli.capture.families import CaptureError
from attncli.capture.gguf_file import dequantized
from attncli.capture.loading import load_config, load_model, load_tokenizer, threads
from attncli.capture.reading import layer_count
from attncli.capture.source import open_source
from attncli.commands.edge import write_file
from attncli.compute.limits import MAX_INPUT_VARIABLE, ResourceError, max_input, size_text
from attncli.document import layers as layers_doc
from attncli.render import out
from attncli.render.json import dumps
from attncli.render.target import OutputError, check_target

FLAGS = {"layer": "--layer", "decode": "--decode", "MODEL": "MODEL", "decoder": "--decoder", "cross": "--cross"}
JSON_MOST = 32 << 20  # past this much JSON (or attn's text input cap, if lower), a document with no -o goes to an .npz
JSON_CHARS = 20  # a float64's text in a JSON list, as json.dumps writes a captured number (17 digits, ", ")
ID = re.compile(r"[0-9]{1,18}")  # ASCII digits only: str.isdigit takes ², and int() reads ٣ as 3


def ids_rows(text: str) -> list[list[int]]:
    """`3,1,4; 1,5`: one list of ids per sequence."""
    rows = []
    parts = text.split(";")
    expected = "expected whole numbers ≥ 0 (digits 0-9) separated by commas (sequences separated by ;)"
    for number, part in enumerate(parts, 1):
        words = [w.strip() for w in part.split(",")]
        of = f" of sequence {number}" if len(parts) > 1 else ""
        if not any(words) and len(parts) > 1:
            raise CaptureError(f"is {quote(text)}: sequence {number} is empty; {expected}", "--ids")
        empty = next((i for i, w in enumerate(words, 1) if not w), None)
        if empty is not None and any(words):  # 3,,1: an id left out (the list would silently shorten)
            raise CaptureError(f"is {quote(text)}: id {empty}{of} is empty; {expected}", "--ids")
        if not any(words) or not all(ID.fullmatch(w) for w in words):
            raise CaptureError(f"is {quote(text)}; {expected}", "--ids")
        rows.append([int(w) for w in words])
    return rows


def tokens(o: SimpleNamespace, tokenizer, vocab: int) -> tuple[list[list[int]], list[str] | None, list | None]:
    """(id rows, labels of the first row or None, its tokens' word ids or None) from --ids or --text."""
    if (o.ids is None) == (o.text is None):
        raise CaptureError("give the tokens: --ids 3,1,4,1,5 or --text \"…\" (one of the two)", "--ids")
    if o.text is not None:
        if not o.text.strip():
            raise CaptureError(f"is {quote(o.text)}; expected some text to tokenize", "--text")
        if tokenizer is None:
            raise CaptureError(f"needs a tokenizer saved in {o.model} (tokenizer.json); give --ids instead", "--text")
        encoded = tokenizer(o.text)
        rows = [list(encoded["input_ids"])]
        words = _word_ids(encoded, len(rows[0]))
        if not rows[0]:
            raise CaptureError(f"is {quote(o.text)}, which the tokenizer makes no tokens of; expected text with words",
                               "--text")
        labels = [str(t) for t in tokenizer.convert_ids_to_tokens(rows[0])]
    else:
        rows, labels, words = ids_rows(o.ids), None, None
    big = max(max(r) for r in rows)
    if big >= vocab:
        given = "--ids" if o.text is None else "--text"
        raise CaptureError(f"has id {big}, but the model's vocabulary has {vocab} ids (0 to {vocab - 1})", given)
    return rows, labels, words


def _word_ids(encoded, length: int) -> list | None:
    """The word of each token (a fast tokenizer's word_ids(): sub-tokens of one word share it; None for
    special tokens), or None when the tokenizer cannot say."""
    try:
        words = encoded.word_ids()
    except Exception:  # a slow (Python) tokenizer keeps no word boundaries
        return None
    if not isinstance(words, list) or len(words) != length:
        return None
    return [w if type(w) is int and w >= 0 else None for w in words]


def _guard(found: ModelDir, dtype: str | None, rows: int = 0, length: int = 0, captured: int = 1,
           binary: bool = False) -> None:
    try:
        guard.check(found.sizes, dtype or found.dtype, rows, length, captured, binary)
    except ResourceError as error:
        error.message += "; give fewer tokens" + (" or fewer layers" if captured > 1 else "") if rows else \
            "; attn capture cannot load this model here"
        raise error.at(found.path)


def run(o: SimpleNamespace) -> None:
    """Check, load, capture, write. GGUF files are read by transformers, without its repeated work
    (gguf_file.faster: its parse of the file made once, for the config, the tokenizer and the model)."""
    with gguf_file.faster():
        _run(o)


def _run(o: SimpleNamespace) -> None:
    if o.model is None:
        raise CaptureError("MODEL is missing: a save_pretrained directory, a GGUF file or a cached model id", "MODEL")
    suffix = None if o.output_file is None else os.path.splitext(o.output_file)[1].lower()
    if suffix not in (None, ".json", ".npz"):
        raise CaptureError(f"is {o.output_file!r}; attn capture writes JSON or .npz: name a .json or .npz file",
                           "--output")
    if o.decoder and o.cross:
        raise CaptureError("--decoder and --cross are both given; give one: the decoder's self-attention, or its "
                           "cross-attention", "--cross")
    found = open_source(o.model)
    if o.output_file is not None:
        _check_target(o.output_file, found)
    part = "cross" if o.cross else "decoder" if o.decoder else "self"
    # the decoder's layers are counted once the model is loaded (capture_run._capture): here only --layer's spelling
    count = found.sizes.num_hidden_layers if part == "self" else None
    wanted = layers_doc.parse_layers(o.layer, count, "--layer")
    if wanted is None and part == "self":
        wanted = list(range(count))
    _guard(found, o.dtype)
    config = load_config(found)
    tokenizer = load_tokenizer(found)
    rows, labels, words = tokens(o, tokenizer, found.sizes.vocab_size)
    if o.batch_index >= len(rows):
        raise CaptureError(f"is {o.batch_index}, but there {'is' if len(rows) == 1 else 'are'} {len(rows)} "
                           f"sequence{'s' * (len(rows) != 1)} (from 0)", "--batch-index")
    text = getattr(config, "text_config", None) or config
    pad = getattr(text, "pad_token_id", None) or 0
    ids, mask = pad_left(rows, pad if isinstance(pad, int) and 0 <= pad < found.sizes.vocab_size else 0)
    captured = found.sizes.num_hidden_layers if wanted is None else len(wanted)  # a decoder's: as many, most often
    json_size = captured * guard.layer_numbers(found.sizes, len(ids[0])) * JSON_CHARS
    _guard(found, o.dtype, len(ids), len(ids[0]), captured, suffix == ".npz" or (suffix is None and
                                                                               json_size > _json_most()))
    if suffix == ".json":
        _readable(json_size, o.output_file, estimated=True)  # before the model is loaded and run
    with threads(len(ids) * len(ids[0])):
        _capture(o, found, config, tokenizer, ids, mask, labels, words, wanted, suffix, part)


def _capture(o: SimpleNamespace, found: ModelDir, config, tokenizer, ids, mask, labels, words,
             wanted: list[int] | None, suffix: str | None, part: str) -> None:
    """Load the model, run it once (an encoder-decoder's: once a layer), write the layers' document."""
    model = load_model(found, config, o.dtype)
    if labels is None:  # the tokens when MODEL has a tokenizer, else the ids
        shown = tokenizer.convert_ids_to_tokens(ids[o.batch_index]) if tokenizer is not None else ids[o.batch_index]
        labels = [("pad" if not m else str(i) if w is None else str(w))
                  for i, w, m in zip(ids[o.batch_index], shown, mask[o.batch_index])]
    else:
        labels = ["pad"] * (len(ids[0]) - len(labels)) + labels
    if words is not None:
        words = [None] * (len(ids[0]) - len(words)) + words
    quantization = found.gguf.quantization if found.gguf is not None else None
    try:
        if part != "self":  # the decoder's layers, as the loaded model has them
            count = layer_count(model, part)
            wanted = layers_doc.parse_layers(o.layer, count, "--layer") or list(range(count))
        docs = capture_layers(model, ids, mask, wanted, o.batch_index, o.decode, labels, found.name, words,
                              quantization, part)
    except CaptureError as error:  # the core's field, named by its option
        raise error.at(FLAGS.get(error.field, o.model))
    doc = docs[0] if len(docs) == 1 else layers_doc.assemble(docs, _title(found, model, wanted, part))
    path, suffix = _where(o.output_file, suffix, doc, found, wanted)
    if path is None:
        text = dumps(listed(doc)) + "\n"
        _readable(len(text), "-", estimated=False)
        out.write_all(text)
        return
    _write(path, suffix, doc)
    first = docs[0]
    rows = len(first["X"]) if "X" in first else len(first["Q"][0])  # Q given directly (DeepSeek's latent): H × rows
    queries = f"{rows} quer{'y' if rows == 1 else 'ies'}"
    which = _which(wanted, part)
    # The file's and the model's names are text (an unpacked download's directory, say), not controls.
    sys.stderr.write(one_line(f"wrote {path}: {which} of {found.name}, {queries}; attn compute {path}") + "\n")


def _which(wanted: list[int], part: str) -> str:
    """`layer 3`, `layers 0–5`; an encoder-decoder's decoder part named before them (`cross layers 0–1`)."""
    return ("" if part == "self" else f"{part} ") + \
        (f"layer {wanted[0]}" if len(wanted) == 1 else f"layers {layers_doc.spans(wanted)}")


def _title(found: ModelDir, model, wanted: list[int], part: str) -> str:
    which = _which(wanted, part)
    types = {} if found.gguf is None else {f"{key} of layer {n}": kind for n in wanted
                                           for key, kind in found.gguf.quantization(n).items()}
    source = f"; weights {dequantized(types, which=False)}" if types else ""
    return f"{found.name} {which} ({type(model).__name__}{source})"


def _check_target(path: str, found: ModelDir) -> None:
    try:
        check_target(path, list(found.files))
    except OutputError as error:
        raise error.at("--output")


def _where(given: str | None, suffix: str | None, doc: dict, found: ModelDir,
           wanted: list[int]) -> tuple[str | None, str | None]:
    """(the file to write, or None for stdout; its suffix): -o as given; without it JSON on stdout,
    unless that would pass JSON_MOST: then an .npz named after the model, in the current folder (never
    over a file that is there)."""
    if given is not None:
        return given, suffix
    size = _numbers(doc) * JSON_CHARS
    if size <= _json_most():
        return None, None
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", found.name).strip("-.") or "model"
    path = f"{name}-layers-{layers_doc.spans(wanted).replace(', ', '_')}.npz" if len(wanted) > 1 else \
        f"{name}-layer-{wanted[0]}.npz"
    if os.path.lexists(path):
        raise CaptureError(f"the document would be about {size / 2**20:,.0f} MiB of JSON, so attn capture writes an "
                           f".npz, and {path} is there already; name the file: -o FILE.npz (or -o FILE.json)",
                           "--output")
    _check_target(path, found)
    return path, ".npz"


def _json_most() -> int:
    return min(JSON_MOST, max_input())


def _readable(size: int, path: str, estimated: bool) -> None:
    """JSON that attn's own readers would refuse (past the text input cap) is not written: what
    capture writes, compute reads. `size` in bytes, or as estimated from the numbers to capture."""
    cap = max_input()
    if size <= cap:
        return
    where = "stdout" if path == "-" else path
    npz = "-o FILE.npz" if path == "-" else "-o " + (path[:-5] if path.lower().endswith(".json") else path) + ".npz"
    raise CaptureError(f"{where} would hold {'about ' if estimated else ''}{size_text(size)} of JSON, but attn reads "
                       f"at most {size_text(cap)} of text ({MAX_INPUT_VARIABLE} raises it, for both commands): "
                       f"write an .npz instead ({npz}), which reads back as is", "--output")


def _numbers(value) -> int:
    """The numbers a document holds (its arrays' elements), for the size of its JSON."""
    if isinstance(value, dict):
        return sum(_numbers(v) for v in value.values())
    if isinstance(value, list):
        return sum(_numbers(v) for v in value) if value and not isinstance(value[0], (int, float, str)) else len(value)
    return value.size if isinstance(value, np.ndarray) else 1


def _write(path: str, suffix: str, doc: dict) -> None:
    """--output FILE as `attn compute -o` writes it (commands/edge.write_file)."""
    if suffix == ".npz":
        write_file(path, ".npz", lambda handle: np.savez(handle, **layers_doc.npz_members(doc)))
    else:
        text = dumps(listed(doc)) + "\n"
        _readable(len(text.encode()), path, estimated=False)
        write_file(path, ".json", text)
