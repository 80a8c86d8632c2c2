"""A learner's answers file read as `attn check` reads it, for the command and the Python API
alike: JSON keeping the decimals written (a bare −∞ is null), CSV/TSV blocks, .npz archives.
`load_answers(path)` gives the same document, so a file gets the same marks both ways."""

from __future__ import annotations

from pathlib import Path

from attncli.answers import EmptyFile, bare_infinity_as_null, parse_answers_csv
from attncli.limits import Cap
from attncli.loading import ONE_MATRIX_SUFFIXES, decode, parse_json, read_bytes, read_document


def load_answers(path, cap: Cap | None = None, csv: bool = True):
    """An answers (or problem) document within `cap`: CSV blocks (when `csv`), or JSON where a
    bare −∞ (`-inf`, `-Infinity`) is null; .npz archives and one-matrix files as `read_document`
    reads (or refuses) them."""
    name = str(path)
    suffix = Path(name).suffix.lower()
    if csv and suffix in (".csv", ".tsv"):
        data, source = read_bytes(name, cap)
        if not data.strip():
            raise EmptyFile(source)
        return parse_answers_csv(decode(data, source), source)
    if suffix == ".npz" or suffix in ONE_MATRIX_SUFFIXES:
        return read_document(name, keep_decimals=True, cap=cap)[0]
    data, source = read_bytes(name, cap)
    if not data.strip():
        raise EmptyFile(source)
    return parse_json(bare_infinity_as_null(decode(data, source)), source, keep_decimals=True)
