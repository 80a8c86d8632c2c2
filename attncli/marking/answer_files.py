"""A learner's answers file read as `attn check` reads it, for the command and the Python API
alike: JSON keeping the decimals written (a bare −∞ is null), CSV/TSV blocks, .npz archives.
`load_answers(path)` gives the same document, so a file gets the same marks both ways.

Lenient JSON (`attn check --lenient-json`) forgives what hand-written files get wrong most:
comments (`//`, `/* */`, `#`), a trailing comma, and a missing comma between two numbers on one
line. It is tried only when the strict reading fails, and says what it forgave."""

from __future__ import annotations

import json
import math
import os
import re
import stat
import zipfile
from pathlib import Path

import numpy as np

from attncli.base.errors import Advice, InputError, plural, quote
from attncli.compute.limits import Cap, size_text
from attncli.document.json_text import repeated_key_at
from attncli.document.loading import ONE_MATRIX_SUFFIXES, decode, parse_json, read_bytes, read_document
from attncli.marking.answers import EmptyFile, bare_infinity_as_null, parse_answers_csv
from attncli.stages.table import names

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
        if not stat.S_ISREG(os.stat(name).st_mode):  # a FIFO would block; read_document refuses it
            return
        with zipfile.ZipFile(name) as archive:
            declared = sum(info.file_size for info in archive.infolist())
    except (OSError, zipfile.BadZipFile):
        return  # read_document names what is wrong with it
    if declared > cap.bytes:
        raise InputError(f"its arrays unpack to {size_text(declared)}; {cap.why}", name)


def npz_heads(doc, trace):
    """An .npz answers archive's `heads/<key>` members (as `attn compute -o FILE.npz` writes them,
    heads first) as the document's per-head answers, `heads[h][key]`, so an .npz marks as its JSON
    does; other documents are returned as they are. Each member's header (read by
    `attncli.document.loading`, which has checked the member names) is checked against the problem before
    anything is decompressed: a head per problem head, no more numbers than its largest array."""
    members = getattr(doc, "results", None)
    wanted = {path: header for path, header in (members or {}).items() if path.startswith("heads/")}
    if not wanted:
        return doc
    heads = trace.problem.heads
    largest = max([trace.stage(name).size for name in names() if trace.stage(name) is not None]
                  + [array.size for array in trace.problem.inputs.values()])
    for path, (shape, dtype) in wanted.items():
        if len(shape) < 2 or shape[0] != heads or dtype.kind not in "fiu" or math.prod(shape) > largest:
            raise InputError(f"{path} is declared {dtype} {tuple(shape)}, but this problem has "
                             f"{plural(heads, 'head')} and at most {largest:,} numbers per stage: "
                             "heads/ members hold every head's answer, heads first (as attn compute -o FILE.npz "
                             "writes them)", field=path)
    arrays = {path: array for path, array in doc.read_results().items() if path in wanted}
    # as nested lists, as JSON's (NaN stays a number, marked wrong): a head's stage and the top-level
    # output, compared when both are given, are then compared as values
    out = {key: value.tolist() if isinstance(value, np.ndarray) and key in names() else value
           for key, value in doc.items()}
    out["heads"] = [{path.split("/", 1)[1]: array[h].tolist() for path, array in arrays.items()}
                    for h in range(heads)]
    return out


SPECIAL = ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"),
           (stat.S_ISBLK, "a device"))


def special(name: str) -> str | None:
    """What a file that is no regular file is ("a named pipe", "a socket", "a device"), or None
    (a regular file, a folder, or nothing there: reading it says what is wrong)."""
    try:
        mode = os.stat(name).st_mode
    except OSError:
        return None
    return next((what for test, what in SPECIAL if test(mode)), None)


def refuse_special(name: str, why: str = "each file of a class is read from a regular file") -> None:
    """One file of a class (answers/*) must be a regular file, checked before it is opened:
    opening a named pipe waits for a writer, which held up the whole class forever. (A single
    input may be a pipe: `attn check <(…) problem.json` reads it, as `cat` would.)"""
    what = special(name)
    if what:
        raise InputError(f"is {what}, not a regular file; {why}", name)


def read_answers_file(path, cap: Cap | None = None, csv: bool = True, lenient: bool = False,
                      regular: bool = False):
    """(document, note): `load_answers`, and with `lenient` a note saying what was forgiven (None
    when nothing was). `regular`: the file must be a regular file (one of a class)."""
    name = str(path)
    if regular and name != "-":
        refuse_special(name)
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
        forgiven, found = _forgive(text)
        if not found:
            raise
        try:
            doc = parse_json(bare_infinity_as_null(forgiven), source, keep_decimals=True)
        except InputError:
            repeated = _repeated(text, found, lenient)
            if repeated is not None:  # a key given twice: no reading forgives it, so it is named
                advice = None if lenient else Advice("lenient_json", (True,),
                                                     f"; {{}} reads {', '.join(found)}, not a key given twice")
                raise InputError(repeated, source, advice=advice) from None
            raise strict from None  # the strict error, with its line and column, is the one to show
        if not lenient:  # the strict error, saying the lenient reading would read it
            strict.advice = Advice("lenient_json", (True,), f"; it reads with {{}} ({', '.join(found)})")
            raise strict from None
        return doc, f"not valid JSON, read leniently: {', '.join(found)}"


def _repeated(text: str, found: list[str], lenient: bool) -> str | None:
    """The error of a hand-written file with a key given twice beside the slips lenient reading
    forgives (`found`): the key, where it is; without `lenient`, also the first slip, the two in
    the order they come in the file. (The strict reading meets the slip first whatever the order:
    it sees the repeated key only once the object is read, and a trailing comma after it was named
    in its place.) None when no key is given twice."""
    read = bare_infinity_as_null(text)  # as the strict reading read it
    at = repeated_key_at(COMMENT.sub(lambda m: m.group(1) or re.sub(r"[^\n]", " ", m.group(2)), read))
    if at is None:
        return None
    line, column, key = at
    repeated = (line, column, f"at line {line}, column {column}: the key {quote(key)} appears twice in one object")
    if lenient:
        return f"invalid JSON {repeated[2]}"
    try:
        json.loads(read)
        return f"invalid JSON {repeated[2]}"
    except json.JSONDecodeError as error:
        slip = (error.lineno, error.colno, f"at line {error.lineno}, column {error.colno}: {error.msg}")
    first, second = sorted([repeated, slip])
    return f"invalid JSON {first[2]}; and {second[2]}"


def load_answers(path, cap: Cap | None = None, csv: bool = True):
    """An answers (or problem) document within `cap`: CSV blocks (when `csv`), or JSON where a
    bare −∞ (`-inf`, `-Infinity`) is null; .npz archives and one-matrix files as `read_document`
    reads (or refuses) them."""
    return read_answers_file(path, cap, csv)[0]
