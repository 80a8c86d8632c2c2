"""Read documents and matrices: JSON files or stdin, CSV/TSV, .npy, and inline text.

Everything returned is raw (dicts, nested lists, arrays); `problem.build_problem` checks it.
Errors are `InputError`s that name the file (or option) and what was expected.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
import stat
import sys
import zipfile
import zlib
from pathlib import Path

import numpy as np

from attncli.base.errors import AttnError, InputError, did_you_mean, plural, quote
from attncli.base.values import object_text
from attncli.compute.limits import Cap, check_fits, text_cap
from attncli.document import layers, schema
from attncli.document.json_text import parse_json  # noqa: F401  (re-exported)
from attncli.document.schema import check_keys
from attncli.document.text_input import parse_answer_inline, parse_csv, parse_inline  # noqa: F401  (re-exported)
from attncli.problem import rules, variants

MATRIX_SUFFIXES = (".json", ".csv", ".tsv", ".npy")
ONE_MATRIX_SUFFIXES = (".npy", ".csv", ".tsv")  # files that hold one matrix, never a whole problem
LABELS_FROM = {"Q": ("query_labels",), "K": ("key_labels",), "X": ("query_labels", "key_labels"),
               "X_kv": ("key_labels",)}
CHUNK = 1 << 20  # text is read this much at a time, so that the cap is checked as it grows
NPY_START = b"\x93NUMPY"
ZIP_STARTS = (b"PK\x03\x04", b"PK\x05\x06")  # a zip's first member, or an empty zip's directory
NOT_NUMPY = {".npy": "not an .npy array (numpy.save writes one)",
             ".npz": "not an npz archive (numpy.savez writes a zip of .npy arrays)"}


class OneMatrixError(InputError):
    """A file that holds one matrix (.npy, .csv, .tsv) given where a whole document belongs."""


def _read_capped(stream, cap: Cap, source: str) -> bytes:
    """Read to the end in chunks, refusing as soon as more than the cap has come. Stops early at a
    chunk holding a NUL byte: that is binary data, which `decode` refuses (/dev/zero has no end)."""
    chunks, total = [], 0
    while chunk := stream.read(min(CHUNK, cap.bytes + 1 - total)):
        chunks.append(chunk)
        total += len(chunk)
        if total > cap.bytes:
            raise cap.refuse(total, source, exact=False)
        if b"\0" in chunk:
            break
    return b"".join(chunks)


def _example_hint(path: str) -> str:
    """For a missing `scooter.json` or `samples/scooter.json` (the README's paths, typed elsewhere):
    where the bundled example of that name is."""
    name = Path(path).name.removesuffix(".json")
    bundled = Path(__file__).resolve().parent.parent / "examples" / f"{name}.json"
    return f" (a bundled example: attn example {name} prints it)" if name and bundled.is_file() else ""


_ONCE: contextvars.ContextVar[dict | None] = contextvars.ContextVar("read_once", default=None)


@contextlib.contextmanager
def read_once():
    """Within it, a pipe (`<(…)`, a FIFO) read twice gives the same bytes: the first reading's,
    kept (a pipe cannot be re-read; `attn check` reads a single answers file to tell it from the
    problem, then to mark it). Kept per (device, inode): another pipe at the same /dev/fd path is read."""
    token = _ONCE.set({})
    try:
        yield
    finally:
        _ONCE.reset(token)


def read_bytes(path: str, cap: Cap | None = None) -> tuple[bytes, str]:
    """The bytes of a file, or of stdin for `-`, within `cap` (default: the text cap): a file whose
    size is over it is refused unread; stdin, FIFOs and devices, which have no size, are refused
    as soon as the cap is passed. Returns (data, name to use in errors)."""
    cap = cap or text_cap()
    source = "<stdin>" if path == "-" else path
    try:
        if path == "-":
            return _read_capped(sys.stdin.buffer, cap, source), source
        kept = _ONCE.get()
        if kept is not None and (status := os.stat(path)) and stat.S_ISFIFO(status.st_mode):
            key = (path, status.st_dev, status.st_ino)
            if key not in kept:
                with open(path, "rb") as handle:
                    kept[key] = _read_capped(handle, text_cap(), source)
            if len(kept[key]) > cap.bytes:
                raise cap.refuse(len(kept[key]), source, exact=True)
            return kept[key], source
        with open(path, "rb") as handle:
            status = os.fstat(handle.fileno())
            if stat.S_ISREG(status.st_mode) and status.st_size > cap.bytes:
                raise cap.refuse(status.st_size, source, exact=True)
            return _read_capped(handle, cap, source), source
    except FileNotFoundError:  # an empty name ('') is named as one: the message needs its file
        raise InputError("no such file" + _example_hint(path), source or '""') from None
    except IsADirectoryError:
        raise InputError("is a directory, expected a file", source) from None
    except OSError as error:
        raise InputError(f"cannot read: {error.strerror or error}", source) from None


PROBLEM_EXPECTED = "a JSON object with Q, K and V"
MATRIX_EXPECTED = "a matrix: rows of numbers (CSV rows, a JSON list of rows, or an .npy)"


def decode(data: bytes, source: str, expected: str = PROBLEM_EXPECTED) -> str:
    """UTF-8 text (a BOM is allowed); binary data and other encodings are refused. Empty (or blank)
    data is "empty input" from stdin and "empty file" from a file, said with what was `expected`."""
    if not data.strip():
        raise InputError(f"{'empty input' if source == '<stdin>' else 'empty file'}; expected {expected}", source)
    if b"\x00" in data:
        raise InputError("binary data (a NUL byte); expected UTF-8 text", source)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise InputError(f"not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start}); "
                         "save the file as UTF-8", source) from None


def read_document(path: str, keep_decimals: bool = False, cap: Cap | None = None):
    """A JSON document from a file or stdin (`-`) within `cap`, or the arrays of an .npz archive;
    returns (document, source name)."""
    suffix = Path(path).suffix.lower()
    if suffix == ".npz":
        return load_npz(path), path
    if suffix in ONE_MATRIX_SUFFIXES:
        raise OneMatrixError(f"a {suffix} file holds one matrix; a whole problem (or answers) file is "
                             "a JSON object or an .npz archive", path)
    data, source = read_bytes(path, cap)
    return parse_json(decode(data, source), source, keep_decimals), source


def _npy_header(stream, suffix: str) -> tuple[tuple[int, ...], object, int]:
    """(shape, dtype, bytes of data declared) from an .npy stream, reading only its header.
    Python objects are refused here, before any data is read."""
    version = np.lib.format.read_magic(stream)
    read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    if version not in read:
        raise InputError(f"cannot read {suffix}: unsupported .npy format version {version[0]}.{version[1]}")
    shape, _, dtype = read[version](stream)
    if dtype.hasobject:
        raise InputError(f"cannot read {suffix}: it holds Python objects (pickles are refused)")
    return shape, dtype, math.prod(shape) * dtype.itemsize


def _held(suffix: str, shape, declared: int, held: int, name: str = "it") -> None:
    """Refuse, before allocating, a header that declares more data than there is."""
    if declared > held:
        raise InputError(f"cannot read {suffix}: {name} declares shape {shape} ({declared:,} bytes) but "
                         f"holds {held:,} bytes")


def _result_name(filename: str) -> str:
    """A results member's JSON path (heads/weights.npy -> heads/weights), refused unless it is one
    `attn compute -o FILE.npz` writes: heads/<a head's key> or grads/<an input>."""
    prefix, _, rest = filename.partition("/")
    known = {"heads": schema.head_names(), "grads": schema.top_names(schema.INPUT) + schema.PARAMETER_GRADS}
    name = rest.removesuffix(".npy")
    if prefix not in known or not rest.endswith(".npy") or name not in known[prefix]:
        choices = known.get(prefix)
        hint = (did_you_mean(name, choices) or f"; {prefix}/ holds {', '.join(choices)}") if choices else \
            "; results are under heads/ and grads/, as attn compute -o FILE.npz writes them"
        raise InputError(f"cannot read .npz: unknown member {quote(filename)}{hint}")
    return f"{prefix}/{name}"


def _npz_keys(handle) -> tuple[list[str], dict]:
    """The keys to read from an .npz, checked from its zip directory and each member's .npy header
    alone (a few hundred bytes decompressed per member): every member is an .npy array, every key
    is known (an unknown one is refused before anything is decompressed), no header declares more
    than its member holds, and the arrays fit in memory together. Members with a `/` in their name
    are results that --output wrote (heads/weights.npy): their names are checked here and their
    headers returned ({path: (shape, dtype)}), not their data: the reader checks those against the
    problem before decompressing them (NpzDocument.read_results)."""
    with zipfile.ZipFile(handle) as archive:
        members, results, seen = {}, {}, set()
        for info in archive.infolist():
            if info.filename in seen:  # a zip may hold a name twice; np.load would take the last silently
                raise InputError(f"cannot read .npz: it holds {quote(info.filename)} twice; a key given twice is "
                                 "an error, as in JSON: keep one")
            seen.add(info.filename)
            if "/" in info.filename and layers.member_key(info.filename) is None:
                results[_result_name(info.filename)] = info
                continue
            if not info.filename.endswith(".npy"):
                raise InputError(f"cannot read .npz: it holds {quote(info.filename)}, which is not an .npy "
                                 "array; an .npz archive holds arrays, as numpy.savez writes them")
            members[info.filename[:-4]] = info
        check_keys(dict.fromkeys(layers.document_keys(members)))  # the same unknown-key error as a JSON problem's
        declared, headers = 0, {}
        for key, info in (members | results).items():
            try:
                with archive.open(info) as member:
                    shape, dtype, size = _npy_header(member, ".npz")
                    _held(".npz", shape, size, info.file_size - member.tell(), key)
            except (RuntimeError, NotImplementedError) as error:  # encrypted; unknown compression
                raise InputError(f"cannot read .npz: {key}: {error}") from None
            if key in results:
                headers[key] = (shape, dtype)
            else:
                declared += size
    check_fits({"its arrays": declared})
    return list(members), headers


class NpzDocument(dict):
    """An .npz archive's arrays by key (a document), and the results `attn compute -o FILE.npz`
    wrote beside them (heads/weights, grads/Q, …) known by their headers alone: `results` maps each
    one's path to its declared (shape, dtype); `read_results()` decompresses them, once the reader
    has checked those against the problem (readback.py), so no archive makes it read more."""

    def __init__(self, arrays: dict, path: str, results: dict):
        super().__init__(arrays)
        self.path, self.results = path, results

    def read_results(self) -> dict:
        try:
            with np.load(self.path, allow_pickle=False) as archive:
                return {name: archive[name] for name in self.results}
        except (zipfile.BadZipFile, EOFError, zlib.error, ValueError, OSError) as error:
            raise InputError(f"cannot read .npz: the archive is truncated or damaged ({error})", self.path) \
                from None


def _numpy_file(path: str, suffix: str):
    """An .npy's array, or an .npz's arrays by key, after checking without reading any data that
    the file is what its suffix says, that no header declares more than the file holds, and that
    the arrays fit in memory; then np.load without pickles. Every failure is an InputError."""
    kinds = {".npy": "one array", ".npz": "an archive of arrays"}
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # before opening: a FIFO would block
            raise InputError(f"not a regular file; {suffix} input is read from a file")
        with open(path, "rb") as handle:
            start = handle.read(len(NPY_START))
            handle.seek(0)
            found = ".npy" if start == NPY_START else ".npz" if start[:4] in ZIP_STARTS else None
            if found != suffix:
                reason = (f"it holds {kinds[found]}; save it as {found}" if found
                          else "the file is empty" if not start else NOT_NUMPY[suffix])
                raise InputError(f"cannot read {suffix}: {reason}")
            if suffix == ".npy":
                shape, _, size = _npy_header(handle, suffix)
                _held(suffix, shape, size, os.fstat(handle.fileno()).st_size - handle.tell())
                check_fits({"its array": size})
                handle.seek(0)
                return np.load(handle, allow_pickle=False)
            keys, results = _npz_keys(handle)
            handle.seek(0)
            with np.load(handle, allow_pickle=False) as archive:
                return {key: archive[key] for key in keys}, results
    except AttnError as error:
        raise error.at(path)
    except FileNotFoundError:
        raise InputError("no such file" + _example_hint(path), path) from None
    except IsADirectoryError:
        raise InputError("is a directory, expected a file", path) from None
    except (zipfile.BadZipFile, EOFError, zlib.error) as error:
        raise InputError(f"cannot read .npz: the archive is truncated or damaged ({error})", path) from None
    except ValueError as error:
        reason = "it holds Python objects (pickles are refused)" if "pickle" in str(error) else str(error)
        raise InputError(f"cannot read {suffix}: {reason}", path) from None
    except OSError as error:
        raise InputError(f"cannot read {suffix}: {error.strerror or error}", path) from None
    except MemoryError:
        raise InputError(f"cannot read {suffix}: too large for memory", path) from None


def load_npy(path: str):
    return _numpy_file(path, ".npy")


def load_npz(path: str) -> dict:
    """An .npz archive as a document: arrays by name; 0-d arrays become numbers or strings, and
    1-D string arrays lists (labels)."""
    arrays, results = _numpy_file(path, ".npz")
    values = {}
    for name, array in arrays.items():
        if array.dtype.kind == "U":
            values[name] = array.tolist()
        elif array.ndim == 0:
            values[name] = array.item()
        else:
            values[name] = array
    if any("/" in name for name in values):  # a captured document's folders: reference/, layers/<i>/
        try:
            values = layers.from_members({layers.member_key(name + ".npy"): value for name, value in values.items()})
        except AttnError as error:
            raise error.at(path)
    return NpzDocument(values, path, results)


def load_matrix(value: str, option: str, kind: str = "number", cap: Cap | None = None, answer: bool = False):
    """A matrix option's value: a path (.json, .csv, .tsv, .npy; text within `cap`) or inline text.
    Returns (matrix, row labels or None, source name). `-` reads the matrix's text from stdin.
    `answer`: a learner's inline answer, which keeps its decimal-comma reading (parse_answer_inline).
    """
    if value.strip() == "-":
        data, source = read_bytes("-", cap)
        if not data.strip():
            raise InputError("is -, but stdin is empty; expected the matrix's rows", option)
        text = decode(data, source)
        if text.lstrip().startswith("["):
            return parse_json(text, "<stdin>", keep_decimals=True), None, "<stdin>"
        return (*parse_csv(text, "<stdin>", kind), "<stdin>")
    suffix = Path(value).suffix.lower()
    if suffix == ".npz":
        raise InputError("an .npz archive holds several arrays: give it as the problem FILE, "
                         "or this matrix as .npy", value)
    if suffix in MATRIX_SUFFIXES or (os.path.exists(value) and not value.lstrip().startswith("[")):
        # A path that exists is a file, with or without a suffix: <(printf …) is /dev/fd/63, a pipe.
        if suffix == ".npy":
            return load_npy(value), None, value
        data, source = read_bytes(value, cap)
        text = decode(data, source, MATRIX_EXPECTED if kind == "number" else f"a {kind} matrix")
        if suffix == ".json":
            return parse_json(text, source, keep_decimals=True), None, source
        matrix, labels = parse_csv(text, source, kind)
        return matrix, labels, source
    return (parse_answer_inline if answer else parse_inline)(value, option, kind), None, option


def read_piped(cap: Cap | None = None) -> tuple[dict, str | None]:
    """Piped stdin beside matrix options: its document, or nothing ({}, None) when it is empty
    (/dev/null, a closed pipe, a test runner's stdin): the options may give the whole problem."""
    data, source = read_bytes("-", cap)
    if not data.strip():
        return {}, None
    return parse_json(decode(data, source), source), source


def gather(file: str | None, matrices: dict[str, str | None],
           settings: dict, piped: bool = False, layer: str | None = None,
           layer_flag: str = "layer") -> tuple[dict, dict[str, str], str | None]:
    """The problem document: the JSON file (or stdin, when neither a file nor Q, K, V or X is
    given, or when no file is named and stdin is `piped`: empty, it gives nothing), then
    command-line options over it (`overlay`). Returns (document, where each option-given key came
    from, the file's name).

    A document of several layers (attncli/document/layers.py) gives the layer `layer` names (a
    layer number, or numbers and ranges: --layer's text; None: all) before the options go over it;
    when that is several layers, layers.SeveralLayers is raised, holding the document, for the
    caller to take each in turn (`overlay` each)."""
    from_options = {key: value for key, value in matrices.items() if value is not None}
    if file is None and not from_options.keys() & {"Q", "K", "V", "X"}:
        file = "-"
    doc, source = read_document(file) if file is not None else read_piped() if piped else ({}, None)
    if not isinstance(doc, dict):
        return doc, {}, source  # build_problem reports the wrong top-level type
    try:
        doc = layers.chosen(doc, layer, source, layer_flag)
    except AttnError as error:
        raise error.at(source) if source and not error.source else error
    return (*overlay(doc, matrices, settings, source), source)


def overlay(doc: dict, matrices: dict[str, str | None], settings: dict,
            source: str | None = None) -> tuple[dict, dict[str, str]]:
    """Command-line options over a document: (the document, where each option-given key came from);
    `source` names the file in an error of its own keys.

    An option replaces the file's key of the same name, and what that key stands with: `--mask`
    the file's `mask` and `causal` (its whole mask rule; `--window`, `--key-mask` and positions
    are their own keys); `--alibi`/`--alibi-slopes` its `alibi` and `alibi_slopes`. `--heads` over
    a file whose `heads` is the list of per-head results must give their count."""
    from_options = {key: value for key, value in matrices.items() if value is not None}
    origin = {}
    for key, value in from_options.items():
        origin[key] = "--" + key.lower().replace("_", "-").replace("w-", "w")
        doc.pop(key.lower(), None)  # an alias (q, k, v) in the file is overridden too
        for other in replaced(key):
            doc.pop(other, None)
        doc[key], labels = _matrix_option(key, value, origin)
        # A CSV's label column: Q's (or X's) name the queries, K's (or X_kv's) the keys.
        for label_key in LABELS_FROM.get(key, ()):
            if labels and settings.get(label_key) is None and not (key == "X" and label_key == "key_labels"
                                                                    and "X_kv" in from_options | doc):
                doc[label_key], origin[label_key] = labels, origin[key]
    for key, value in settings.items():
        if value is None:
            continue
        if key == "heads" and isinstance(doc.get("heads"), list):
            if value != len(doc["heads"]):
                raise InputError(f"{value} contradicts the file's heads, the per-head results of "
                                 f"{plural(len(doc['heads']), 'head')}; drop one", f"--{key}")
            continue  # the same count: the file's list, results and all, stays
        for other in replaced(key):
            doc.pop(other, None)
        if key == "rope":
            try:
                value = _rope_over(doc.get("rope"), value)
            except AttnError as error:  # the file's rope, as JSON text with a key twice
                raise error.at(source) if source else error
        doc[key], origin[key] = value, f"--{key.replace('_', '-')}"
    return doc, origin


def replaced(key: str) -> set[str]:
    """The file's keys an option setting `key` replaces besides `key`: the others of the mask rules
    that read it (--mask: `causal`, the whole mask rule) and of the variant it belongs to (--alibi
    and --alibi-slopes: `alibi_slopes`)."""
    found = {other for rule in rules.RULES if key in rule.keys for other in rule.keys}
    return (found | set(variants.replaced(key))) - {key}


def _rope_over(file_rope, from_options):
    """The rope object from the --rope options over the file's: each --rope-… option replaces only
    its own field; --rope alone keeps the file's fields (or turns RoPE on with the defaults). A
    file's object may be JSON text (as an .npz holds it); anything else it holds is left for
    rope.read to refuse unless an option replaces it."""
    file_rope = object_text(file_rope, "rope")
    if not isinstance(file_rope, dict):
        return from_options
    return {**file_rope, **from_options} if isinstance(from_options, dict) else file_rope


def _matrix_option(key: str, value: str, origin: dict):
    """A matrix option's value (a file or inline text) as (matrix, row labels or None); `mask` may
    be a word (causal, causal_lower_right, or a typo build_problem names), `dO` "ones". A file's
    name goes into `origin[key]`."""
    word = value.strip()
    if key == "mask" and word.replace("_", "").isalpha() and word.lower() not in ("true", "false") \
            and not os.path.exists(value):
        return word, None
    if key == "dO" and word.lower() == "ones" and not os.path.exists(value):
        return word, None  # all ones, in the final output's shape
    matrix, labels, origin[key] = load_matrix(value, origin[key], key if key in ("mask", "bias") else "number")
    return matrix, labels
