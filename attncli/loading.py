"""Read documents and matrices: JSON files or stdin, CSV/TSV, .npy, and inline text.

Everything returned is raw (dicts, nested lists, arrays); `problem.build_problem` checks it.
Errors are `InputError`s that name the file (or option) and what was expected.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

from attncli.errors import InputError, quote
from attncli.text_input import parse_csv, parse_inline  # noqa: F401  (re-exported)
from attncli.values import Written

MATRIX_SUFFIXES = (".json", ".csv", ".tsv", ".npy")
LABELS_FROM = {"Q": ("query_labels",), "K": ("key_labels",), "X": ("query_labels", "key_labels"),
               "X_kv": ("key_labels",)}
MAX_BYTES = 1 << 30  # refuse text inputs over 1 GiB rather than exhaust memory parsing them


def read_bytes(path: str) -> tuple[bytes, str]:
    """The bytes of a file, or of stdin for `-`; returns (data, name to use in errors)."""
    if path == "-":
        return sys.stdin.buffer.read(), "<stdin>"
    try:
        size = os.path.getsize(path)
        if size > MAX_BYTES:
            raise InputError(f"the file is {size / 2**30:.1f} GiB; text input is limited to 1 GiB "
                             "(use .npy for large matrices)", path)
        return Path(path).read_bytes(), path
    except FileNotFoundError:
        raise InputError("no such file", path) from None
    except IsADirectoryError:
        raise InputError("is a directory, expected a file", path) from None
    except OSError as error:
        raise InputError(f"cannot read: {error.strerror or error}", path) from None


def decode(data: bytes, source: str) -> str:
    """UTF-8 text (a BOM is allowed); binary data and other encodings are refused."""
    if not data.strip():
        raise InputError("empty input; expected a JSON object with Q, K and V", source)
    if b"\x00" in data:
        raise InputError("binary data (a NUL byte); expected UTF-8 text", source)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise InputError(f"not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start}); "
                         "save the file as UTF-8", source) from None


def _reject_constant(token: str):
    raise ValueError(f"{token} is not valid JSON; write −∞ as null (bias only) and use finite numbers")


def _finite_float(token: str, kind=float) -> float:
    value = kind(token)
    if not math.isfinite(value):
        raise ValueError(f"the number {token} overflows float64")
    return value


def _written_float(token: str) -> Written:
    return _finite_float(token, Written.parse)


def _unique_keys(pairs: list) -> dict:
    """An object whose keys are all different: JSON would otherwise keep the last silently."""
    obj = {}
    for key, value in pairs:
        if key in obj:
            raise ValueError(f"the key {quote(key)} appears twice in one object")
        obj[key] = value
    return obj


def _json_hint(text: str, position: int) -> str:
    """Advice for the slips people make writing JSON numbers by hand (`.5`, `1.`)."""
    point = position + (text[position:position + 2] == "-.")
    if text[point:point + 1] != ".":
        return ""
    if not text[point - 1:point].isdigit():
        return " (JSON numbers need a leading zero: 0.5)"
    if not text[point + 1:point + 2].isdigit():
        return " (JSON numbers need a digit after the point: 1.0)"
    return ""


def parse_json(text: str, source: str, keep_decimals: bool = False):
    """Strict RFC 8259 JSON: no NaN/Infinity tokens, no numbers that overflow float64, no key
    twice in one object (at any depth). With `keep_decimals`, floats are `Written`: they
    remember how many decimals they had."""
    try:
        return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique_keys,
                          parse_float=_written_float if keep_decimals else _finite_float)
    except json.JSONDecodeError as error:
        raise InputError(f"invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}"
                         + _json_hint(text, error.pos), source) from None
    except ValueError as error:  # raised by the hooks above
        raise InputError(f"invalid JSON: {error}", source) from None
    except RecursionError:
        raise InputError("invalid JSON: nested too deeply; matrices have at most 3 dimensions",
                         source) from None


def read_document(path: str, keep_decimals: bool = False):
    """A JSON document from a file or stdin (`-`), or the arrays of an .npz archive;
    returns (document, source name)."""
    if path.lower().endswith(".npz"):
        return load_npz(path), path
    data, source = read_bytes(path)
    return parse_json(decode(data, source), source, keep_decimals), source


def _npy_fits(path: str) -> None:
    """Read an .npy header and refuse, before allocating, a shape the file does not hold."""
    import numpy as np

    with open(path, "rb") as handle:
        version = np.lib.format.read_magic(handle)
        read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
        if version not in read:
            return  # np.load checks the rest
        shape, _, dtype = read[version](handle)
        declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
        held = os.path.getsize(path) - handle.tell()
    if dtype.itemsize and declared > held:
        raise InputError(f"cannot read .npy: it declares shape {shape} ({declared:,} bytes) but holds "
                         f"{held:,} bytes", path)


def _numpy_file(path: str, suffix: str):
    """np.load without pickles, its failures as InputErrors; an .npy must hold one array and an
    .npz an archive. Returns the array, or the archive's arrays (keys with a `/` are results
    that --output wrote, not problem keys)."""
    import numpy as np

    try:
        if suffix == ".npy":
            _npy_fits(path)
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.ndarray) != (suffix == ".npy"):
            found = "one array" if isinstance(loaded, np.ndarray) else "an archive of arrays"
            raise InputError(f"cannot read {suffix}: it holds {found}; save it as "
                             f"{'.npz' if suffix == '.npy' else '.npy'}", path)
        if suffix == ".npy":
            return loaded
        with loaded as archive:
            return {name: archive[name] for name in archive.files if "/" not in name}
    except FileNotFoundError:
        raise InputError("no such file", path) from None
    except ValueError as error:
        reason = "it holds Python objects (pickles are refused)" if "pickle" in str(error) else str(error)
        raise InputError(f"cannot read {suffix}: {reason}", path) from None
    except (OSError, MemoryError) as error:
        raise InputError(f"cannot read {suffix}: {error or 'too large for memory'}", path) from None


def load_npy(path: str):
    return _numpy_file(path, ".npy")


def load_npz(path: str) -> dict:
    """An .npz archive as a document: arrays by name; 0-d arrays become numbers or strings, and
    1-D string arrays lists (labels)."""
    doc = {}
    for name, array in _numpy_file(path, ".npz").items():
        if array.dtype.kind == "U":
            doc[name] = array.tolist()
        elif array.ndim == 0:
            doc[name] = array.item()
        else:
            doc[name] = array
    return doc


def load_matrix(value: str, option: str, kind: str = "number"):
    """A matrix option's value: a path (.json, .csv, .tsv, .npy) or inline text.
    Returns (matrix, row labels or None, source name)."""
    suffix = Path(value).suffix.lower()
    if suffix == ".npz":
        raise InputError("an .npz archive holds several arrays: give it as the problem FILE, "
                         "or this matrix as .npy", value)
    if suffix in MATRIX_SUFFIXES or (os.path.isfile(value) and not value.lstrip().startswith("[")):
        if suffix == ".npy":
            return load_npy(value), None, value
        data, source = read_bytes(value)
        text = decode(data, source)
        if suffix == ".json":
            return parse_json(text, source, keep_decimals=True), None, source
        matrix, labels = parse_csv(text, source, kind)
        return matrix, labels, source
    return parse_inline(value, option, kind), None, option


def gather(file: str | None, matrices: dict[str, str | None], settings: dict,
           stdin_is_terminal: bool) -> tuple[dict, dict[str, str], str | None]:
    """The problem document: the JSON file (or stdin), then command-line options over it.
    Returns (document, where each option-given key came from, the file's name)."""
    given = {key: value for key, value in matrices.items() if value is not None}
    if file is None and not given.keys() & {"Q", "K", "V", "X"}:
        if stdin_is_terminal:
            raise InputError("no input: name a JSON file (attn compute problem.json), pipe one "
                             "(attn example scooter | attn compute), or give --q, --k and --v")
        file = "-"
    doc, source = read_document(file) if file is not None else ({}, None)
    if not isinstance(doc, dict):
        return doc, {}, source  # build_problem reports the wrong top-level type
    origin = {}
    for key, value in given.items():
        option = "--" + key.lower().replace("_", "-").replace("w-", "w")
        word = value.strip()
        if key == "mask" and word.replace("_", "").isalpha() and word.lower() not in ("true", "false") \
                and not os.path.isfile(value):
            doc["mask"], origin["mask"] = word, option  # causal, causal_lower_right (or a typo)
            continue
        kind = key if key in ("mask", "bias") else "number"
        matrix, labels, origin[key] = load_matrix(value, option, kind)
        doc.pop(key.lower(), None)  # an alias (q, k, v) in the file is overridden too
        doc[key] = matrix
        # A CSV's label column: Q's (or X's) name the queries, K's (or X_kv's) the keys.
        for label_key in LABELS_FROM.get(key, ()):
            if labels and settings.get(label_key) is None and not (key == "X" and label_key == "key_labels"
                                                                    and "X_kv" in given | doc):
                doc[label_key], origin[label_key] = labels, origin[key]
    for key, value in settings.items():
        if value is not None:
            doc[key], origin[key] = value, f"--{key.replace('_', '-')}"
    return doc, origin, source
