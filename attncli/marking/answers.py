"""A learner's answers document to checked `Answer`s, shaped like the stages they answer.

Top-level `scores`, `scaled`, `masked`, `weights` answer a one-head problem; several heads are
answered as `"heads": [{...}, ...]` (heads left out or `{}` are not answered). Top-level `output`
is the final output (for one head without W_O that is the head's output). The JSON that
`attn compute` writes is a complete answer.

Learners write numbers as numbers or strings (`"0.0454"`); a masked cell as null, `"-inf"`,
`"−∞"` or a large negative (≤ -1e9, read as −∞ with a note). A matrix written transposed is kept
(turned back) and marked wrong with the diagnosis `transposed`. A CSV answers file holds blocks:
a line naming the stage (`weights`, `heads[1].weights`), then its rows.
"""

from __future__ import annotations

import csv
import io
import math
import re

import numpy as np

from attncli.base.errors import InputError, did_you_mean, quote
from attncli.base.values import Typed, as_array, decimals_of, describe
from attncli.compute.limits import widths
from attncli.document.reading import ALIASES, PROJECTIONS, QKV, input_keys, output_keys
from attncli.document.text_input import comma_decimal, comma_hint, comma_note, is_value, is_word, point_text
from attncli.marking.answer_keys import METADATA, alias_of
from attncli.marking.grading import Answer, marked_gradient
from attncli.marking.mistakes import present
from attncli.problem.trace import Trace
from attncli.stages import grads
from attncli.stages.table import blocked, get, names
from attncli.stages.table import present as present_stages

# Written per head by `attn compute`, not stages: lse; --tiles's tiles (marked by tile_marks.py).
IGNORED_IN_HEADS = ("Q", "K", "V", "lse", "tiles", "tiled_output", "tiled_lse")
NEGATIVE_INFINITY = ("-inf", "-infinity", "-∞", "−∞", "−inf")
LARGE_NEGATIVE = -1e9  # a masked cell at or below this stands for −∞ (as PyTorch code writes -1e9)
NO_ANSWERS = "no answers found"
ONE_ROW_NOTE = "read a column as the one query's row (each row of an answer is one query)"


EMPTY_FILE = "empty file"


class NoAnswers(InputError):
    """A document with no answer stage at all: never "all correct". `stages`: the problem's stages,
    to list (default: every stage the tool knows)."""

    def __init__(self, name: str | None = None, stages: tuple[str, ...] | None = None):
        where = f" in {name}" if name else ""
        super().__init__(f"{NO_ANSWERS}{where}: write at least one of {', '.join(stages or names())}")

    def named(self, name: str, stages: tuple[str, ...] | None = None) -> "NoAnswers":
        """The same, naming the file it is about (and the problem's stages, when known)."""
        return type(self)(name, stages)


def problem_stages(trace) -> tuple[str, ...]:
    """The stages a learner may answer for this problem (no Q_rope without RoPE)."""
    return tuple(name for name in names() if trace.stage(name) is not None)


class EmptyFile(NoAnswers):
    """A 0-byte (or blank) answers file: nothing answered, said plainly."""

    def __init__(self, name: str | None = None, stages: tuple[str, ...] | None = None):
        InputError.__init__(self, f"{EMPTY_FILE}: no answers; write at least one of {', '.join(stages or names())}",
                            name)


def _leaf(x, masked: bool, large: bool = True):
    """A learner's cell as a number: strings are read as they are written."""
    if isinstance(x, str):
        text = x.strip()
        if masked and text.lower() in NEGATIVE_INFINITY:
            return None
        text = comma_decimal(text) or text  # "1,0607": the decimal it means, said in a note (_comma_note)
        try:
            number = Typed.parse(text.replace("−", "-"))
        except ValueError:
            return x  # as_array names it
        return number if math.isfinite(number) else x
    if large and masked and isinstance(x, (int, float)) and not isinstance(x, bool) and x <= LARGE_NEGATIVE:
        return None
    return x


def read_written(value, masked: bool, large: bool = True):
    """A learner's nested lists with every cell as a number (strings read as written; with
    `masked`, −∞ spelled any way, or with `large` a large negative, as None)."""
    return [read_written(v, masked, large) for v in value] if isinstance(value, list) else _leaf(value, masked, large)


def _as_blocked(values: np.ndarray, blocked_cells: np.ndarray | None) -> tuple[np.ndarray, tuple[str, ...]]:
    """A large negative (≤ -1e9, as PyTorch code writes for a blocked position) read as −∞, only
    where the problem's cell is −∞: a finite -1000000001 from a bias of -1e9 stays a number."""
    if blocked_cells is None:
        return values, ()
    if values.shape != blocked_cells.shape and values.shape == blocked_cells.shape[::-1]:
        blocked_cells = blocked_cells.T  # written transposed: turned back below
    if values.shape != blocked_cells.shape:
        return values, ()
    with np.errstate(invalid="ignore"):
        large = np.isfinite(values) & (values <= LARGE_NEGATIVE) & blocked_cells
    if not large.any():
        return values, ()
    first = values[large][0]
    return np.where(large, -np.inf, values), (f"read {first:g} as −∞ (a large negative stands for a blocked position)",)


def _comma_note(value, field: str) -> tuple[str, ...]:
    """The note for a cell written as a string with a decimal comma (`"1,0607"`), read as the decimal
    it means: said once per stage, naming its first such cell (a CSV's cell gets the same words)."""
    found = []

    def walk(v, where):
        if found:
            return
        if isinstance(v, list):
            for i, item in enumerate(v):
                walk(item, f"{where}[{i}]")
        elif isinstance(v, CommaCell):
            found.append(comma_note(where, v.written, str.__str__(v)))
        elif isinstance(v, str) and (point := comma_decimal(v)) is not None:
            found.append(comma_note(where, v.strip(), point))
    walk(value, field)
    return tuple(found)


def _fits(found: tuple[int, ...], shape: tuple[int, int]) -> bool:
    """An answer of shape `found` is read as a stage of `shape` (one query's column as its row)."""
    found = (1,) + found if len(found) == 1 else found
    return found == shape or (shape[0] == 1 and found == shape[::-1])


def _decimal_commas(value, field: str, shape: tuple[int, int]) -> None:
    """An inline answer read with decimal commas has the stage's shape, read otherwise it has not
    (`"0,2775 1,3491"`, `"0,0454,0,7679,0,1867"`): refused, saying what was meant. An answer that
    only the comma reading reads (`misread`) is otherwise refused with the reading's own error."""
    reading, misread = getattr(value, "decimal_commas", None), getattr(value, "misread", None)
    if reading is None:
        return
    if (misread is not None or not _fits(np.shape(list(value)), shape)) and _fits(np.shape(reading), shape):
        if shape[0] == 1 and isinstance(reading[0], list):  # one query's column: the row it means
            reading = [row[0] for row in reading]
        raise InputError(f"{field} reads as decimals written with commas: did you mean {point_text(reading)}? "
                         "Write decimals with a point, and separate numbers with commas or spaces", field=field)
    if misread is not None:
        raise misread


def _answer(value, field: str, shape: tuple[int, int], what: str, blocked_cells: np.ndarray | None = None) -> Answer:
    _decimal_commas(value, field, shape)
    masked = blocked(field)  # may hold −∞
    numbers = read_written(value, False)  # strings read as numbers first, so "-1e9" is a large negative too
    read = read_written(numbers, masked, large=False)
    values = as_array(read, field, kind="bias" if masked else "number", max_dims=2)
    if values.ndim == 1 and shape[0] == 1:
        values = values.reshape(1, -1)
    decimals = decimals_of(read, values.shape) if isinstance(read, list) else np.full(values.shape, -1)
    values, notes = _as_blocked(values, blocked_cells if masked else None)
    notes = _comma_note(value, field) + notes
    # An inline "0,7311": two numbers, or a decimal comma? Where the stage's row holds two numbers it
    # is read as two, and said so only when the part after the comma looks like decimals (three
    # digits or more): "3,1" or "0,2" for one query's output is a row, as the README writes rows.
    comma = comma_hint(value)
    if values.shape == shape:
        places = len((getattr(value, "comma", None) or "").partition(".")[2])
        if comma and places >= 3:  # "0,2775" for two numbers: the 0 is no precision shortfall, never "imprecise"
            return Answer(values=values, decimals=np.full(values.shape, places), notes=notes + (comma,))
        return Answer(values=values, decimals=decimals, notes=notes)
    if values.shape[::-1] == shape and shape[0] == 1:  # one query's row written as a column: the row it means
        return Answer(values=values.T, decimals=decimals.T, notes=notes + (ONE_ROW_NOTE,))
    if values.shape == shape[::-1]:
        return Answer(values=values.T, decimals=decimals.T, notes=notes + ((comma,) if comma else ()),
                      transposed=True)
    found = " × ".join(map(str, values.shape))
    # The weights table's last column is each row's sum (1): copied along with the row, it is one too many.
    stage = get(field.rsplit(".", 1)[-1])
    summed = stage is not None and stage.sum_column and values.shape == (shape[0], shape[1] + 1) and \
        np.allclose(values[:, -1], values[:, :-1].sum(axis=1), atol=0.05)
    hint = " (leave out the table's sum column)" if summed else f" ({comma})" if comma else ""
    raise InputError(f"{field} has shape ({found}); expected ({shape[0]} × {shape[1]}): {what}{hint}", field=field)


def read_stage(value, field: str, shape: tuple[int, int], what: str) -> Answer:
    """One matrix a learner wrote (Q, K or V of a projected problem), read as a stage is."""
    return _answer(value, field, shape, what)


def answer_shape(problem, name: str, head: bool = False) -> tuple[tuple[int, int], str] | None:
    """(shape, what its rows × columns are) of one head's answer to stage `name` (for `output`, the
    final output's unless `head`), from the problem alone, before anything is computed; None for
    a stage the problem lacks or that is not a forward stage (read_answers says why)."""
    hd_k, hd_v, d_out = widths(problem)
    single = problem.heads == 1 and "W_O" not in problem.inputs  # the final output is head 0's output
    if name == "output" and not head and not single:
        return (problem.lq, d_out), "queries × output columns"
    stage = get(name)
    if stage is None or not stage.applies(problem):
        return None
    sizes = {"queries": problem.lq, "keys": problem.lk, "dims": hd_k // problem.heads,
             "value columns": hd_v // problem.heads}
    return (sizes[stage.rows], sizes[stage.columns]), f"{stage.rows} × {stage.columns}"


def check_shapes(given: dict, problem) -> None:
    """Answers given inline (`attn check big.json --weights "0.5,0.5;0.5,0.5"`) checked against the
    problem's shapes before the problem is computed: a wrong shape is refused at once, with the
    message marking would give, not after computing every stage of a large problem. A stage
    answered for every head (heads × rows × columns) is checked head by head."""
    for name, value in given.items():
        found = answer_shape(problem, name)
        if found is None:
            continue
        shape, what = found
        stacked = problem.heads > 1 and isinstance(value, list) and len(value) == problem.heads and all(
            isinstance(m, list) and m and isinstance(m[0], list) for m in value)
        if stacked:
            for h, matrix in enumerate(value):
                _answer(matrix, f"heads[{h}].{name}", *answer_shape(problem, name, head=True))
        elif problem.heads == 1 or name == "output":
            _answer(value, name, shape, what)


def check_document_shapes(doc, problem) -> None:
    """An answers document's stages checked as `check_shapes` checks inline ones, before the
    problem is computed: those at the top level, and each head's in `heads`."""
    if not isinstance(doc, dict):
        return  # read_answers names what it is
    check_shapes({key: value for key, value in doc.items() if (key in names() or key == "output")
                  and value is not None}, problem)
    listed = doc.get("heads")
    if not isinstance(listed, list) or len(listed) > problem.heads:
        return
    for h, entry in enumerate(listed):
        for name, value in (entry.items() if isinstance(entry, dict) else ()):
            found = answer_shape(problem, name, head=True) if name in names() and value is not None else None
            if found is not None:
                _answer(value, f"heads[{h}].{name}", *found)


def _check_keys(doc: dict, allowed: tuple[str, ...], where: str) -> None:
    for key in doc:
        if key not in allowed and ALIASES.get(key) not in allowed:
            hint = did_you_mean(key, allowed) or f"; answers are {', '.join(names())}"
            raise InputError(f"unknown key {quote(key)}{where}{hint}")


def same_problem(doc: dict, trace: Trace) -> None:
    """Answers that carry their own problem (Q, K, V or X, W_Q, … beside them) must carry this
    one: answers to another exercise are not marked against it."""
    inputs = trace.problem.inputs
    for key, value in doc.items():
        name = ALIASES.get(key, key)
        if name not in QKV + PROJECTIONS or name not in inputs or value is None:
            continue
        mine = as_array(read_written(value, False), key, max_dims=3 if name in QKV else 2)
        given = inputs[name]
        if mine.size != given.size or not np.allclose(mine.reshape(given.shape), given, rtol=1e-12, atol=1e-12):
            raise InputError(f"{key} is not the problem's {name}: these answers hold their own problem; mark "
                             "them against it, on their own", field=key)


def read_answers(doc, trace: Trace) -> tuple[list[dict[str, Answer]], Answer | None]:
    """Per-head answers (one dict per head, empty when not answered), and the final output's
    answer (None when it is head 0's output or absent). Raises NoAnswers when nothing is answered."""
    p = trace.problem
    if not isinstance(doc, dict):
        raise InputError(f"the top level is {describe(doc)}; expected a JSON object of answers")
    _check_keys(doc, ("heads",) + input_keys() + output_keys(), "")
    same_problem(doc, trace)
    shapes = {stage.name: trace.stage(stage.name).shape[1:] for stage in present_stages(p)}  # (Lq, ·)
    what = {stage.name: f"{stage.rows} × {stage.columns}" for stage in present_stages(p)}
    stages = present(trace)
    if trace.gradients is not None:  # the backward pass's stages (D as a column, one per query)
        shapes |= {g.name: marked_gradient(trace, 0, g.name).shape for g in grads.GRADIENTS}
        what |= {g.name: f"{g.rows} × {g.columns or 'columns'}" for g in grads.GRADIENTS}
        stages += grads.names()
    single = p.heads == 1 and "W_O" not in p.inputs  # the final output is head 0's output

    heads = [dict() for _ in range(p.heads)]
    listed = doc.get("heads")
    if isinstance(listed, list):
        if len(listed) > p.heads:
            raise InputError(f"heads lists {len(listed)} heads but the problem has {p.heads}", field="heads")
        for h, entry in enumerate(listed):
            if entry is None:
                continue
            if not isinstance(entry, dict):
                raise InputError(f"heads[{h}] is {describe(entry)}; expected an object of stages",
                                 field=f"heads[{h}]")
            _check_keys(entry, names() + grads.names() + IGNORED_IN_HEADS, f" in heads[{h}]")
            heads[h] = {k: v for k, v in entry.items() if k in names() + grads.names() and v is not None}
    top = {k: doc[k] for k in names() + grads.names() if k != "output" and doc.get(k) is not None}
    if top and p.heads > 1:
        raise InputError(f"{next(iter(top))} is given at the top level, but the problem has {p.heads} heads: "
                         'answer each head in "heads": [{...}, ...]', field=next(iter(top)))
    final = doc.get("output")
    both = {**top, **({"output": final} if single and final is not None else {})}
    for name, value in both.items():  # one head's stage written twice: never pick one silently
        if name in heads[0] and heads[0][name] != value:
            raise InputError(f"{name} is given at the top level and in heads[0], with different values; "
                             "keep one", field=name)
    heads[0] = both | heads[0]
    if not any(heads) and final is None:
        raise NoAnswers()
    marked = []
    for h, entry in enumerate(heads):
        prefix = f"heads[{h}]." if isinstance(listed, list) else ""
        for name in entry:
            if name not in stages:
                absent = get(name).absent if get(name) else "the problem has no dO (the backward pass)"
                raise InputError(f"{prefix}{name} is given, but {absent}, so no {name} stage",
                                 field=prefix + name)
        marked.append({name: _answer(_column(entry[name]) if name == "D" else entry[name], prefix + name,
                                     shapes[name], what[name], _blocked_cells(trace, h, name)) for name in entry})
    final_answer = None
    if final is not None and not single:
        final_answer = _answer(final, "output", trace.final.shape, "queries × output columns")
    return marked, final_answer


def _blocked_cells(trace: Trace, head: int, name: str) -> np.ndarray | None:
    """Where a stage that may hold −∞ is −∞ in the problem (None for other stages)."""
    if not blocked(name) or name not in names():
        return None
    return np.isneginf(trace.stage(name)[head])


def _column(value):
    """D as the learner writes it, one number per query ([1.2, 0.5]), as the column it is marked as."""
    if isinstance(value, list) and value and not any(isinstance(x, list) for x in value):
        return [[x] for x in value]
    return value


# A bare −∞ as learners type it into JSON (`-inf`, Python's `-Infinity`, `−∞`), outside strings.
BARE_MINUS_INFINITY = re.compile(r'("(?:[^"\\]|\\.)*")|(?:-|−)(?:inf(?:inity)?\b|∞)', re.IGNORECASE)


def bare_infinity_as_null(text: str) -> str:
    """JSON text with every bare −∞ written as null (strict JSON has no infinity; strings are kept)."""
    return BARE_MINUS_INFINITY.sub(lambda m: m.group(1) or "null", text)


MAX_HEADS = 1024  # a stage line naming a head beyond this is a typo, not a head
STAGE_LINE = re.compile(r"^(?:heads\[(\d+)\]\.)?([A-Za-z_]+)$")  # Q_rope, K_rope, d_Q, D: capitals
# How a cell a learner means as a number starts (also -inf, −∞, null): a lone cell that starts
# otherwise is meant as a stage name ("Weights", "output:"), and is reported as one.
NUMBER_START = re.compile(r"^[-+−]?(?:\d|\.|inf|∞|nan|null|none)", re.IGNORECASE)


def parse_answers_csv(text: str, source: str) -> dict:
    """An answers document from CSV (or TSV): a line naming a stage (`weights`, `output`,
    `heads[1].weights`), then that matrix's rows; blank lines are skipped. Cells stay text, read
    as the learner wrote them (an empty masked cell is −∞)."""
    delimiter = "\t" if source.lower().endswith(".tsv") else ","
    try:
        rows = list(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter))
    except csv.Error as error:
        raise InputError(f"not valid CSV: {error}", source) from None
    doc: dict = {}
    current, blocks, seen = None, [], {}  # seen: each block's name → the row naming it
    for r, row in enumerate(rows, start=1):
        cells = [c.strip() for c in row]
        if not any(cells):
            continue
        alone = not any(cells[1:])
        if cells[0].lower() in METADATA and current != []:  # `name,Ada`: set aside as JSON's metadata is
            # (a block's first row may be a header whose corner is pandas' index name: `id,0,1,2`)
            doc[cells[0]] = ",".join(cells[1:]).strip(",")
            current = None
            continue
        named = STAGE_LINE.match(cells[0]) if alone else None
        if alone and not named and not NUMBER_START.match(cells[0]):
            hint = did_you_mean(cells[0].lower(), names()) or f"; stages are {', '.join(names())}"
            raise InputError(f"row {r}: unknown stage {quote(cells[0])}{hint}", source)
        if named:
            head, stage = named.groups()
            alias = alias_of(stage, "masked") if stage not in names() + grads.names() else stage
            if alias is None:  # an alias (`attention_weights`) is kept as written: sort_keys reads it, with a note
                hint = did_you_mean(stage, names()) or f"; stages are {', '.join(names())}"
                raise InputError(f"row {r}: unknown stage {quote(cells[0])}{hint}", source)
            name = stage if head is None else f"heads[{int(head)}].{stage}"
            if name in seen:
                raise InputError(f"row {r}: {name} is given twice, at rows {seen[name]} and {r}; keep one block",
                                 source)
            seen[name], current = r, []
            if head is None:
                doc[stage] = current
            elif int(head) >= MAX_HEADS:
                raise InputError(f"row {r}: {quote(cells[0])} names head {head}; heads are numbered from 0", source)
            else:
                heads = doc.setdefault("heads", [])
                heads.extend({} for _ in range(int(head) + 1 - len(heads)))
                heads[int(head)][stage] = current
            continue
        if current is None:
            raise InputError(f"row {r}: numbers before any stage name; expected a line naming the stage "
                             "(e.g. weights) above its rows", source)
        if not current:
            blocks.append((current, blocked(alias), name))
        current.append((r, cells))
    for block, masked, _ in blocks:
        _read_comma_decimals(block)
        block[:] = _unlabelled(block, source, masked)
    return doc


class CommaCell(str):
    """A CSV cell written with a decimal comma ("0,7311", quoted or in a TSV), as the decimal it
    means ("0.7311"): a number to the header and label rules (never taken for a label, which would
    shift every cell after it); `written` keeps the text for the note (`_comma_note`)."""

    written: str = ""


def _read_comma_decimals(block: list) -> None:
    """Each cell of a block written with a decimal comma is read as the decimal it means, as a JSON
    string's is: the stage is marked, with a note naming the cell."""
    for _, cells in block:
        for c, cell in enumerate(cells):
            point = comma_decimal(cell)
            if point is not None:
                cells[c] = CommaCell(point)
                cells[c].written = cell.strip()


def _unlabelled(block: list, source: str, masked: bool) -> list:
    """A block's rows, (row number, cells), without the labels copied from a worksheet: a first
    row holding no number (or pandas' empty corner before the names) is a header, and the first
    column holds labels when the header has that corner or the first row starts with a word (the
    rules of `attncli.document.text_input`). Cells stay text; an empty one is None (−∞ when masked)."""
    header = block[0][1]
    # pandas' corner; in `masked` an empty first cell may be a blocked position, so there the
    # names after it must be words
    corner = len(header) > 1 and not header[0] and not (masked and any(is_value(c, "bias") for c in header[1:]))
    if corner or not any(is_value(c, "bias") or not c for c in header):
        block = block[1:] or block  # a header alone is read as data, and refused as such
    labelled = corner or is_word(block[0][1][0], "bias")
    rows = []
    for r, cells in block:
        if labelled and (len(cells) != len(block[0][1]) or not cells[0] or not (corner or is_word(cells[0], "bias"))):
            raise InputError(f"row {r}: expected the row's label in column 1, as in row {block[0][0]}", source)
        rows.append([c if c else None for c in cells[labelled:]])
    return rows
