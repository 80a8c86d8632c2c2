"""CSV/TSV and inline text to nested lists, never guessing data into headers.

The rules (the README's "Input" section states them for users):
- A cell is a *value* (a number such as `2`, `-0.5`, `−0.5`, `.5`, `1e-3`; for a mask also true/false;
  for a bias also -inf, −∞ or null, as in JSON), *empty*, or a *word* (anything else).
- CSV row 1 is a header when its first cell is empty and it has more cells (pandas' `to_csv`
  corner: the column names after it may look like numbers, `,0,1`), or when it holds no value
  at all (`token,d0,d1`, `d0,d1`). Otherwise it is data, and every cell outside the label column
  must be a value: `0,4o` is an error naming "4o", never a header.
- The first column holds row labels when the header has the empty corner, or when the first data
  row starts with a word (`it,0,4`); then every data row has a label there.
- An empty cell is never a value (write −∞ as -inf); numbers joined by `;` or spaces inside one
  cell mean the file uses another separator, and that is an error saying so.
"""

from __future__ import annotations

import csv
import io
import math
import re
from decimal import Decimal

from attncli.base.errors import InputError, plural, quote
from attncli.base.values import Typed, excerpt
from attncli.document.json_text import parse_json

_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_NON_FINITE = re.compile(r"[+-]?(inf|infinity|nan)", re.IGNORECASE)  # numbers, refused later
_COMMA_DECIMAL = re.compile(r"[+-]?\d+,\d+")
_DECIMAL_PARTS = (re.compile(r"[+-]?\d+"), re.compile(r"\d+"))  # the two sides of a decimal comma: 0 | 5, -0 | 75
_PERCENT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)%")
WORDS = {"mask": ("true", "false"), "bias": ("-inf", "-∞", "−∞", "−inf", "null")}  # null: −∞, as JSON's
EXPECTED = {"number": "a number", "mask": "true/false or 1/0", "bias": "a number or -inf"}


def _ascii(cell: str) -> str:
    """The cell stripped, with U+2212 (the minus sign of textbooks, PDFs and attn's own −∞) as `-`."""
    return cell.strip().replace("\u2212", "-")


def is_number(cell: str) -> bool:
    cell = _ascii(cell)
    return bool(_NUMBER.fullmatch(cell) or _NON_FINITE.fullmatch(cell))


def comma_decimal(cell: str) -> str | None:
    """A cell that is a decimal written with a comma ("0,5"), with a point instead ("0.5"); else None."""
    text = _ascii(cell.strip())
    return text.replace(",", ".") if _COMMA_DECIMAL.fullmatch(text) else None


def comma_note(where: str, cell: str, point: str) -> str:
    """What a learner is told of a cell written with a decimal comma that is read as its decimal."""
    return f"read {where} {quote(cell)} as {point}, a decimal written with a comma; write decimals with a point"


def is_value(cell: str, kind: str) -> bool:
    return is_number(cell) or cell.strip().lower() in WORDS.get(kind, ())


def is_word(cell: str, kind: str) -> bool:
    return bool(cell.strip()) and not is_value(cell, kind)


def cell_value(text: str, where: str, source: str, kind: str):
    """One cell as a number (a `Typed` float that remembers its decimals, for `attn check`);
    a mask's true/false as a bool, a bias's −∞ as None (as JSON's null)."""
    cell = _ascii(text)
    low = cell.lower()
    if not cell:
        raise InputError(f"{where} is empty; expected {EXPECTED[kind]}"
                         + (" (write −∞ as -inf)" if kind == "bias" else ""), source)
    if kind == "mask" and low in WORDS["mask"]:
        return low == "true"
    if kind == "bias" and low in WORDS["bias"]:
        return None
    if not is_number(cell):
        hint = f" (write decimals with a point: {cell.replace(',', '.')})" \
            if _COMMA_DECIMAL.fullmatch(cell) else ""
        if _PERCENT.fullmatch(cell):
            hint = f" (write {cell} as {Decimal(cell[:-1]).scaleb(-2)})"
        raise InputError(f"{where}: {excerpt(cell, quoted=True)} is not {EXPECTED[kind]}{hint}", source)
    value = Typed.parse(cell)
    if not math.isfinite(value):
        if kind == "bias" and value == -math.inf:
            return None
        raise InputError(f"{where}: {excerpt(cell, quoted=True)} is not a finite number", source)
    return int(value) if kind == "mask" and value in (0, 1) else value


def _other_separator(cell: str, where: str, source: str, expected: str) -> None:
    """Refuse a cell holding numbers joined by `;` or by spaces: another separator was used."""
    cell = cell.strip()
    for separator, name, least in ((";", "semicolons", 1), (None, "spaces", 2)):
        parts = cell.split(separator)
        if len(parts) > 1 and sum(is_number(p) for p in parts) >= least:
            raise InputError(f"{where}: {excerpt(cell, quoted=True)} holds numbers separated by {name}; "
                             f"{expected}", source)


def _delimiter(text: str, source: str) -> tuple[str, str]:
    """(delimiter, what to say when cells are joined otherwise)."""
    if source.lower().endswith(".tsv") or ("\t" in text and "," not in text):
        return "\t", "cells in a .tsv are separated by tabs"
    return ",", "cells in a CSV are separated by commas (and decimals written with a point)"


def _records(text: str, source: str, delimiter: str) -> list[tuple[int, list[str]]]:
    """(row number, cells) of every non-blank record; row numbers count blank lines too."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    records, number = [], 0
    try:
        for number, cells in enumerate(reader, start=1):
            if any(cell.strip() for cell in cells):
                records.append((number, cells))
    except csv.Error as error:
        reason = 'a quote (") opens a cell and is never closed' if "end of data" in str(error) \
            else f"not valid CSV: {error}"
        raise InputError(f"row {number + 1}: {reason}", source) from None
    return records


def _cells(n: int) -> str:
    return plural(n, "cell")


def _is_header(cells: list[str], kind: str) -> bool:
    if len(cells) > 1 and not cells[0].strip():
        return True  # pandas' corner: an empty index name before the column names
    return not any(is_value(cell, kind) for cell in cells)


def parse_csv(text: str, source: str, kind: str = "number") -> tuple[list, list[str] | None]:
    """One matrix from CSV or TSV text, by the rules in this module's docstring; a `head` column
    before the empty corner (`head,,k0,k1`, as attn writes several heads) gives one matrix per head.
    Returns (rows, row labels or None)."""
    delimiter, separated = _delimiter(text, source)
    records = _records(text, source, delimiter)
    for number, cells in records:
        for column, cell in enumerate(cells, start=1):
            _other_separator(cell, f"row {number}, column {column}", source, separated)
    if records and _per_head(records[0][1]):
        return _heads(records, source, kind)
    return _matrix(records, source, kind, delimiter, '"' in text)


def _per_head(cells: list[str]) -> bool:
    """attn's header for several heads: `head`, the empty corner, the column labels."""
    return len(cells) > 2 and cells[0].strip().lower() == "head" and not cells[1].strip()


def _heads(records: list[tuple[int, list[str]]], source: str, kind: str) -> tuple[list, list[str] | None]:
    """The matrices of a CSV with a `head` column: each head's rows together, heads 0, 1, … in
    order, each with the same row labels (as attn writes them)."""
    (first, header), blocks = records[0], []
    for number, cells in records[1:]:
        head = cells[0].strip()
        if not (head.isascii() and head.isdigit()):
            raise InputError(f"row {number}, column 1: {excerpt(head, quoted=True)} is not a head number; the "
                             f"header (row {first}) starts with a head column, so each row starts with its head "
                             "(0, 1, …)", source)
        if int(head) == len(blocks):
            blocks.append([])
        elif int(head) != len(blocks) - 1:
            raise InputError(f"row {number}: head {int(head)} after head {len(blocks) - 1}; expected each head's rows "
                             "together, heads in order from 0", source)
        blocks[-1].append((number, cells[1:]))
    if not blocks:
        raise InputError("no rows of numbers; expected one matrix per head", source)
    matrices = [_matrix([(first, header[1:])] + block, source, kind, offset=1) for block in blocks]
    for h, (_, labels) in enumerate(matrices[1:], start=1):
        if labels != matrices[0][1]:
            number = blocks[h][0][0]
            raise InputError(f"row {number}: head {h} has {_rows(len(labels))} labelled {_labels(labels)}, head 0 "
                             f"{_labels(matrices[0][1])}; expected the same rows in every head", source)
    return [matrix for matrix, _ in matrices], matrices[0][1]


def _rows(n: int) -> str:
    return plural(n, "row")


def _labels(labels: list[str]) -> str:
    shown = ", ".join(excerpt(label, quoted=True) for label in labels[:4])
    return shown + (", …" if len(labels) > 4 else "")


def _matrix(records: list[tuple[int, list[str]]], source: str, kind: str, delimiter: str = ",",
            quoted: bool = False, offset: int = 0) -> tuple[list, list[str] | None]:
    """One matrix from its records (row number, cells); `offset`: columns before them (a head
    column), counted in what errors say."""
    header = bool(records) and _is_header(records[0][1], kind)
    data = records[1:] if header else records
    if not data:
        raise InputError("no rows of numbers; expected one matrix", source)
    first, width = data[0][0], len(data[0][1])
    corner = header and not records[0][1][0].strip()
    labelled = corner or is_word(data[0][1][0], kind)
    if header and len(records[0][1]) not in (width, width - labelled):
        raise InputError(f"row {records[0][0]} (the header) has {_cells(len(records[0][1]) + offset)} but row "
                         f"{first} has {width + offset}", source)
    matrix, labels = [], []
    for number, cells in data:
        if len(cells) != width:
            raise InputError(f"row {number} has {_cells(len(cells) + offset)}, row {first} has {width + offset}",
                             source)
        if labelled:
            if not cells[0].strip():
                raise InputError(f"row {number}, column {1 + offset} is empty; expected the row's label, "
                                 f"as in row {first}", source)
            labels.append(cells[0].strip())
        matrix.append([cell_value(cell, f"row {number}, column {column}", source, kind)
                       for column, cell in enumerate(cells[labelled:], start=1 + labelled + offset)])
    if labelled and width == 1:
        raise InputError("only labels, no numbers; expected one matrix", source)
    if header:  # after the cells: a cell that is no number says so first
        _refuse_comma_words(records[0][0], records[0][1], "read as a header", source, offset)
    for number, cells in data if labelled else ():
        _refuse_comma_words(number, cells[:1], "read as the row's label", source, offset)
    if not header and not labelled and kind != "mask":
        _refuse_decimal_commas(data, delimiter, quoted, source)
    return matrix, (labels if labelled else None)


def _refuse_comma_words(number: int, cells: list[str], read_as: str, source: str, offset: int = 0) -> None:
    """A header or label cell that is a decimal written with a comma (2,5 in a TSV, "0,5" quoted):
    refused, or its row or column would silently be lost."""
    for column, cell in enumerate(cells, start=1 + offset):
        if _COMMA_DECIMAL.fullmatch(_ascii(cell)):
            point = _ascii(cell).replace(",", ".")
            raise InputError(f"row {number}, column {column}: {excerpt(cell.strip(), quoted=True)}, {read_as}, is a "
                             f"decimal written with a comma; write decimals with a point ({point})", source)


def _refuse_decimal_commas(data: list[tuple[int, list[str]]], delimiter: str, quoted: bool, source: str) -> None:
    """A column of decimals written with commas (0,5 / 1,25 / -0,75) reads as two columns of whole
    numbers: when every row is exactly that (a whole number, then digits with no sign), refuse."""
    if delimiter != "," or quoted or any(len(cells) != 2 for _, cells in data):
        return  # quotes mark the cells: "0","5" is two columns
    if all(whole.fullmatch(_ascii(cell)) for _, cells in data for whole, cell in zip(_DECIMAL_PARTS, cells)):
        number, cells = data[0]
        raise InputError(f"row {number} is {excerpt(','.join(cells), quoted=True)}, and every row is two whole "
                         "numbers: one column of decimals written with commas, or two columns? Write decimals "
                         f"with a point ({_ascii(cells[0])}.{_ascii(cells[1])}); for two columns, add a header "
                         "row (d0,d1) or quote the cells (\"0\",\"5\")", source)


class Inline(list):
    """An inline row that may be one decimal written with a comma: `"0,7311"` reads as two
    numbers, 0 and 7311, and `comma` keeps the text with a point ("0.7311") so that a reader
    that expects another shape (or a learner's answer) can say "did you mean 0.7311?"."""

    comma: str | None = None
    decimal_commas: list | None = None  # the text read with decimal commas (parse_answer_inline)
    misread: InputError | None = None  # the ordinary reading's error, when only the comma reading reads


def comma_hint(value) -> str | None:
    """`did you mean 0.7311? …` for an inline value that looks like a decimal comma, else None."""
    point = getattr(value, "comma", None)
    if point is None:
        return None
    whole, digits = point.split(".")
    return (f'"{whole},{digits}" reads as two numbers, {whole} and {digits}: did you mean {point}? Write decimals '
            f'with a point, and use spaces (or \';\' between rows) between numbers')


def _comma_row(row: str) -> list[str] | None:
    """A row read with every comma as a decimal comma, as decimals with points: `0,2775 1,3491`
    (spaces between numbers) or `0,0454,0,7679` (whole part, decimals, whole part, …); else None."""
    tokens = row.split()
    if len(tokens) > 1:
        return [comma_decimal(t) or _ascii(t) for t in tokens] \
            if all(comma_decimal(t) or is_number(t) for t in tokens) and any(comma_decimal(t) for t in tokens) else None
    parts = [_ascii(x) for x in row.split(",")]
    if len(parts) < 2 or len(parts) % 2 or not all(whole.fullmatch(x) for whole, x in zip(_DECIMAL_PARTS * len(parts),
                                                                                              parts)):
        return None
    return [f"{w}.{d}" for w, d in zip(parts[::2], parts[1::2])]


def comma_reading(text: str) -> list | None:
    """Inline text read with its commas as decimal commas (rows by `;` or newlines), as numbers:
    a 1-D list for one row; None when it cannot be read so or holds no comma."""
    if "," not in text or text.lstrip().startswith(("[", "{")):
        return None
    rows = re.sub(r";[ \t\r]*\n", ";", text).replace("\n", ";").strip(" \t\r;").split(";")
    read = [_comma_row(row) for row in rows]
    if not read or any(r is None for r in read) or len({len(r) for r in read}) != 1:
        return None
    numbers = [[Typed.parse(x) for x in r] for r in read]
    return numbers[0] if len(numbers) == 1 else numbers


def point_text(reading: list) -> str:
    """A comma reading written back with points: `0.2775 1.3491`, rows joined by `; `."""
    rows = reading if isinstance(reading[0], list) else [reading]
    return "; ".join(" ".join(f"{x:.{x.decimals}f}" for x in row) for row in rows)


def parse_answer_inline(text: str, source: str, kind: str = "number"):
    """`parse_inline` for a learner's inline answer: an `Inline` also keeps `decimal_commas`, the
    text read with decimal commas (`comma_reading`), so that marking can say "did you mean
    0.2775 1.3491?" when that reading, not the other, has the stage's shape; when the ordinary
    reading fails, its error is kept as `misread` and raised unless the comma reading fits."""
    reading = comma_reading(text) if kind != "mask" else None
    try:
        value = parse_inline(text, source, kind)
    except InputError as error:
        if reading is None:
            raise
        value = Inline(reading)
        value.misread = error
    if reading is not None:
        value = value if isinstance(value, Inline) else Inline(value)
        value.decimal_commas = reading
    return value


def parse_inline(text: str, source: str, kind: str = "number"):
    """JSON (`"[[1,0],[0,1]]"`), or `"1,0; 0,1; .5,.5"`: rows split by `;`, newlines or both
    (leading and trailing ones ignored; an empty row between two is an error), entries by commas,
    or by spaces in a row without commas. An empty entry (`0,,4`, `1,2,`) is an error. One row
    gives a 1-D list; one comma between digits and nothing else (`"0,7311"`) an `Inline` that
    says it may be a decimal comma."""
    if text.lstrip().startswith(("[", "{")):
        return parse_json(text, source, keep_decimals=True)
    text = re.sub(r";[ \t\r]*\n", ";", text).replace("\n", ";").strip(" \t\r;")  # `;` ending a line
    if not text:
        raise InputError("empty matrix; expected rows like \"1,0; 0,1\"", source)
    matrix = []
    for r, row in enumerate(text.split(";"), start=1):
        if not row.strip():
            raise InputError(f"row {r} is empty (two row separators in a row); expected rows like "
                             "\"1,0; 0,1\"", source)
        cells = row.split(",") if "," in row else row.split()
        values = []
        for c, cell in enumerate(cells, start=1):
            where = f"row {r}, column {c}"
            _other_separator(cell, where, source, "separate the entries of a row with commas")
            values.append(cell_value(cell, where, source, kind))
        matrix.append(values)
    if len(matrix) == 1 and kind != "mask" and _COMMA_DECIMAL.fullmatch(_ascii(text)):
        row = Inline(matrix[0])
        row.comma = comma_decimal(text)
        return row
    return matrix[0] if len(matrix) == 1 else matrix
