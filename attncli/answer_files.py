"""A learner's answers file read as `attn check` reads it, for the command and the Python API
alike: JSON keeping the decimals written (a bare −∞ is null), CSV/TSV blocks, .npz archives.
`load_answers(path)` gives the same document, so a file gets the same marks both ways.

Lenient JSON (`attn check --lenient-json`) forgives what hand-written files get wrong most:
comments (`//`, `/* */`, `#`), a trailing comma, and a missing comma between two numbers on one
line. It is tried only when the strict reading fails, and says what it forgave."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

from attncli.answers import EmptyFile, bare_infinity_as_null, parse_answers_csv
from attncli.errors import InputError
from attncli.limits import Cap, size_text
from attncli.loading import ONE_MATRIX_SUFFIXES, decode, parse_json, read_bytes, read_document

STRING = r'("(?:[^"\\]|\\.)*")'
COMMENT = re.compile(STRING + r'|(//[^\n]*|#[^\n]*|/\*.*?\*/)', re.S)
TRAILING_COMMA = re.compile(STRING + r'|(,)(?=\s*[\]}])')
MISSING_COMMA = re.compile(STRING + r'|(?<=[\d.])([ \t]+)(?=[-+]?\.?\d)')
FORGIVEN = ("comments", "trailing commas", "missing commas between numbers")


def _forgive(text: str) -> tuple[str, list[str]]:
    """`text` without comments, trailing commas and with commas between numbers on a line, and
    which of these it had."""
    found = []
    for pattern, replace, what in ((COMMENT, "", FORGIVEN[0]), (TRAILING_COMMA, "", FORGIVEN[1]),
                                   (MISSING_COMMA, None, FORGIVEN[2])):
        def fix(m, replace=replace, what=what):
            if m.group(1):
                return m.group(1)
            found.append(what)
            return replace if replace is not None else "," + m.group(2)
        text = pattern.sub(fix, text)
    return text, list(dict.fromkeys(found))


def _npz_within(name: str, cap: Cap | None) -> None:
    """An .npz answers archive is held to the answers cap by its zip directory, before anything is
    decompressed (a small archive of zeros can unpack to gigabytes)."""
    if cap is None:
        return
    try:
        with zipfile.ZipFile(name) as archive:
            declared = sum(info.file_size for info in archive.infolist())
    except (OSError, zipfile.BadZipFile):
        return  # read_document names what is wrong with it
    if declared > cap.bytes:
        raise InputError(f"its arrays unpack to {size_text(declared)}; {cap.why}", name)


def read_answers_file(path, cap: Cap | None = None, csv: bool = True, lenient: bool = False):
    """(document, note): `load_answers`, and with `lenient` a note saying what was forgiven (None
    when nothing was)."""
    name = str(path)
    suffix = Path(name).suffix.lower()
    if suffix == ".npz":
        _npz_within(name, cap)
    if suffix == ".npz" or (suffix in ONE_MATRIX_SUFFIXES and not (csv and suffix in (".csv", ".tsv"))):
        return read_document(name, keep_decimals=True, cap=cap)[0], None
    data, source = read_bytes(name, cap)
    if not data.strip():
        raise EmptyFile(source)
    text = decode(data, source)
    if suffix in (".csv", ".tsv"):
        return parse_answers_csv(text, source), None
    try:
        return parse_json(bare_infinity_as_null(text), source, keep_decimals=True), None
    except InputError as strict:
        forgiven, found = _forgive(text) if lenient else (text, [])
        if not found:
            raise
        try:
            doc = parse_json(bare_infinity_as_null(forgiven), source, keep_decimals=True)
        except InputError:
            raise strict from None  # the strict error, with its line and column, is the one to show
        return doc, f"not valid JSON, read leniently: {', '.join(found)}"


def load_answers(path, cap: Cap | None = None, csv: bool = True):
    """An answers (or problem) document within `cap`: CSV blocks (when `csv`), or JSON where a
    bare −∞ (`-inf`, `-Infinity`) is null; .npz archives and one-matrix files as `read_document`
    reads (or refuses) them."""
    return read_answers_file(path, cap, csv)[0]
