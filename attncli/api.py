"""The Python API for autograders and notebooks: `from attncli import attend, check`.

    >>> from attncli import attend, check
    >>> trace = attend(Q=[[0, 4]], K=[[1, 0], [0, 1], [.5, .5]], V=[[2, 0], [0, 2], [1, -1]])
    >>> trace.weights[0].round(4).tolist()
    [[0.0454, 0.7679, 0.1867]]
    >>> marks = check({"weights": [[0.0454, 0.7679, 0.1867]]}, trace)
    >>> marks.all_correct, marks.score
    (True, (3, 3))

`check_code(function, signature=…, cases=…)` marks a learner's function instead of their numbers
(`attn check --code`), for pytest, nbgrader and otter-grader autograders.

Keyword names are the input document's keys (`attn compute` JSON): Q, K, V, or X with W_Q, W_K,
W_V (and X_kv, biases b_Q…, W_O, b_O), mask (true = may attend, or "causal"), bias, heads, scale,
labels. Arrays or nested lists are both accepted. Errors are `attncli.base.errors.InputError` (or
another `AttnError`) naming the field (`error.field`, e.g. "K" or "heads[1].weights"); their advice,
and a trace's warnings, say settings as keyword arguments (`or use dtype='float64'`,
`masked_rows='zero'`), where the command line says options. Nothing here prints, exits or imports
the CLI. `view(trace)` and `view(marks)` show them as the terminal's tables in Jupyter and rich.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from os import PathLike

import numpy as np

from attncli.base.choices import CODE_ARRAYS, DTYPES
from attncli.base.errors import AttnError, InputError, did_you_mean, plural, quote
from attncli.base.names import ASKABLE, stage_of
from attncli.base.points import read_max_score, read_points
from attncli.base.values import Typed, describe
from attncli.code.calling import check_convention, check_layout, parse_signature
from attncli.code.cases import battery
from attncli.code.code_marks import CodeMarks, mark_function
from attncli.code.runner import Runner
from attncli.compute.attention import attend as _attend
from attncli.compute.limits import answers_cap
from attncli.document.reading import build_problem, input_keys
from attncli.marking.answer_files import read_answers_file
from attncli.marking.answer_keys import ASKED, asked_of, sort_keys
from attncli.marking.grading import DECIMALS, TYPED_DECIMALS, StageMark
from attncli.marking.marks import all_correct, before_weights
from attncli.marking.scoring import score
from attncli.marking.slip import mark_document  # the stages, and a find-the-slip answer against the key's slip
from attncli.problem.trace import Trace
from attncli.render.gradebook import Grading, gradescope, marks_dict
from attncli.render.notebook import MarksView, TraceView


def attend(Q=None, K=None, V=None, *, invert_mask: bool = False, **inputs) -> Trace:
    """Every stage of softmax(Q Kᵀ · scale + bias) V as arrays: a `Trace` with `scores`, `scaled`,
    `masked` (None without mask or bias), `weights`, `output` (per head: head axis first) and
    `final` (the heads side by side, times W_O when given). `invert_mask=True` reads a boolean mask
    as True = blocked (nn.MultiheadAttention's convention). With `dO` (the final output's shape, or
    "ones"), `trace.gradients` holds the backward pass: `.heads["d_Q"]` … per head, `.grads["Q"]` …
    per input as given."""
    doc = {key: value for key, value in {"Q": Q, "K": K, "V": V, **inputs}.items() if value is not None}
    known = input_keys()
    unknown = [key for key in doc if key not in known]
    if unknown:
        raise TypeError(f"attend() got an unexpected keyword argument {unknown[0]!r}; "
                        f"expected any of {', '.join(known)}")
    return _attend(build_problem(_document(doc), invert_mask=invert_mask))


def check(answers, problem, *, decimals: int | None = None, require=None, tol: float | None = None,
          points=None, lenient_json: bool = False, strict: bool = False) -> Marks:
    """Mark `answers` (a dict like an answers file: `scores`, `scaled`, `masked`, `weights`,
    `output`, or `heads`: [{...}, ...]; arrays or lists; or the path of an answers file, read as
    `attn check` reads it: `load_answers`) against `problem` (a `Trace` from `attend`, an input
    document as a dict, or the path of a problem file), with `attn check`'s rules and options:
    `decimals` (--decimals, 0 to 17), `require` (--require: stages that must be answered, as
    ("weights", "output") or "weights,output"), `tol` (--tol, a finite number ≥ 0), `points`
    (--points: "weights=2,imprecise=0.5" or a dict; `marks.points` and `marks.gradescope()` score
    with them) and `lenient_json` (--lenient-json); `decimals` and `require` left out are the
    problem document's `"decimals"` and `"ask"` (else 2 and none). As in a class on the command
    line, a key that is no answer is set aside with a note (`marks.note`), unless `strict`. What
    counts as written in a dict: see `_plain` (ints 0 decimals, typed floats their own, strings as
    written, computed floats and arrays at the problem's decimals). A find-the-slip answer
    (`"slip": {"stage", "mistake"}`) is marked against the slip `problem` plants, as `attn check`
    marks it (a Trace plants none). A wrong argument is an `InputError` naming it."""
    trace, asked, key = _trace(problem)
    decimals = asked.get("decimals", DECIMALS) if decimals is None else decimals
    require = asked.get("require", ()) if require is None else require
    decimals, require, tol = _settings(decimals, require, tol)
    points = read_points(points)
    read = None
    if isinstance(answers, (str, PathLike)):
        doc, read = read_answers_file(answers, answers_cap(trace.problem), lenient=bool(lenient_json))
    elif isinstance(answers, Mapping):
        doc = _document(answers, typed=True)
    else:
        raise InputError(f"answers is {describe(answers)}; expected a dict of stages or the path of an answers file",
                         field="answers")
    marks = mark_document(trace, doc, key=key, tol=tol, decimals=decimals, require=require, strict=bool(strict),
                          tile_size=asked.get("tile_size"))  # stages, --tiles' tiles, the slip
    notes = ([f"{read} (lenient_json=True)"] if read else []) + sort_keys(doc, before_weights(trace), False).notes()
    return Marks(trace, marks, points=points, required=require, note="; ".join(notes) or None)


def load_answers(path, *, lenient_json: bool = False):
    """An answers file as `attn check` reads it: JSON keeping the decimals written (`0.20` is 2
    decimals), CSV blocks, .npz archives; with `lenient_json` as --lenient-json reads it."""
    return read_answers_file(path, lenient=bool(lenient_json))[0]


MAX_DECIMALS = 17  # as --decimals: a double has no more


def _settings(decimals, require, tol) -> tuple[int, tuple[str, ...], float | None]:
    """check()'s settings, validated as the command line validates its options."""
    if isinstance(decimals, bool) or not isinstance(decimals, (int, np.integer)) or not 0 <= decimals <= MAX_DECIMALS:
        raise InputError(f"decimals is {describe(decimals)}; expected a whole number from 0 to {MAX_DECIMALS}",
                         field="decimals")
    if tol is not None and (isinstance(tol, bool) or not isinstance(tol, (int, float, np.number))
                            or not math.isfinite(tol) or tol < 0):
        raise InputError(f"tol is {describe(tol)}; expected a finite number of at least 0 (or None)", field="tol")
    stages = tuple(s.strip() for s in require.split(",") if s.strip()) if isinstance(require, str) else require
    if not isinstance(stages, (tuple, list)) or not all(isinstance(s, str) for s in stages):
        raise InputError(f"require is {describe(require)}; expected stage names, as (\"weights\", \"output\") "
                         "or \"weights,output\"", field="require")
    for stage in stages:
        if stage_of(stage) not in ASKABLE:
            hint = did_you_mean(stage_of(stage), ASKABLE) or f"; answers are {', '.join(ASKABLE)}"
            raise InputError(f"require names an unknown stage {quote(stage)}{hint}", field="require")
    return int(decimals), tuple(stages), None if tol is None else float(tol)


def _inputs(doc):
    """A problem document without its marking settings and metadata, for build_problem."""
    return sort_keys({k: v for k, v in doc.items() if k not in ASKED} if isinstance(doc, dict) else doc).doc


def _trace(problem) -> tuple[Trace, dict, dict]:
    """A Trace, an input document (dict) or a problem file's path, as a trace; the document's
    own marking settings (`ask`, `decimals`); and the document, whose `slip` is a find-the-slip
    exercise's key ({} for a Trace)."""
    if isinstance(problem, Trace):
        return problem, {}, {}
    if isinstance(problem, (str, PathLike)):
        doc, source = read_answers_file(problem, csv=False)[0], str(problem)
        try:
            return _attend(build_problem(_inputs(doc), source=source)), asked_of(doc), doc
        except AttnError as error:
            raise error.at(source)
    if isinstance(problem, Mapping):
        return _attend(build_problem(_inputs(_document(problem)))), \
            asked_of(problem), dict(problem)
    raise InputError(f"problem is {describe(problem)}; expected a Trace (from attend), an input dict or the path "
                     "of a problem file", field="problem")


class Marks(Mapping):
    """The marks of one answers document: a read-only dict of `StageMark` keyed by stage path
    (`weights`, `heads[1].weights`, `output`), with the score, in cells and in points, what the
    file's keys that are no answers said (`note`), and a rich rendering."""

    def __init__(self, trace: Trace, marks: dict[str, StageMark], points: dict | None = None,
                 required: tuple[str, ...] = (), note: str | None = None):
        self.trace = trace
        self._marks = marks
        self._points = points
        self._required = tuple(required)
        self.note = note

    @property
    def points(self) -> tuple[float, float]:
        """(points earned, points marked), as the gradebook scores this file: `points` per stage,
        what a slip costs (too few decimals once per stage, percentages and a transposed stage a
        fraction of it), only the required stages when some are."""
        s = score(self._marks, 0, self._points, self._required)
        return s.right, s.max

    def gradescope(self, max_score: float | None = None, visibility: str = "visible") -> dict:
        """Gradescope's results.json for this file, as `attn check --format gradescope` writes it."""
        grading = Grading(self._points, read_max_score(max_score), visibility, self._required)
        return gradescope(self._marks, self.note, grading=grading)

    def __getitem__(self, stage: str) -> StageMark:
        return self._marks[stage]

    def __iter__(self):
        return iter(self._marks)

    def __len__(self) -> int:
        return len(self._marks)

    @property
    def score(self) -> tuple[int, int]:
        """(cells right, cells marked): right = correct or carried."""
        return sum(m.right for m in self.values()), sum(int(m.cells.size) for m in self.values())

    @property
    def all_correct(self) -> bool:
        """Every cell marked earns the mark (nothing wrong, imprecise or missing)."""
        return all_correct(self._marks)

    def to_dict(self) -> dict:
        """The JSON that `attn check --format json` writes."""
        return marks_dict(self._marks, self.trace, self._points)

    def __repr__(self) -> str:
        right, total = self.score
        return f"<Marks {right}/{total} cells right: {', '.join(self._marks)}>"

    # In rich and Jupyter the marks show as `attn check`'s tables.
    def __rich_console__(self, console, options):
        return MarksView(self.trace, self._marks).__rich_console__(console, options)

    def _repr_html_(self) -> str:
        return MarksView(self.trace, self._marks)._repr_html_()


def check_code(function, signature: str = "Q, K, V", cases=None, *, mask_convention: str = "keep",
               layout: str = "L,d", array: str = "numpy", timeout: float = 5.0, memory: int | None = 2048,
               forbid=(), tol: float | None = None) -> CodeMarks:
    """Run `function` (a function object, or "FILE.py:NAME" / "module:NAME") on the battery of
    cases `attn check --code` runs, each in a child process (`timeout` seconds, `memory` MiB, no
    stdin), and mark what it returns: a `CodeMarks` with `.all_pass`, `.cases` (per case `.passed`,
    `.marks`: a StageMark per stage returned, `.failure`, `.frame`), `.flat()` (`case.stage` →
    StageMark) and `score`. `signature`, `mask_convention`, `layout`, `array`, `forbid` and `tol`
    are the options of the same names; `cases`: names of the battery and problem files (a list, or
    "scooter,causal"). It runs the code with your permissions: it is not a sandbox.

        marks = check_code(my_attention, "Q, K, V")
        assert marks.all_pass, marks.note()
    """
    parsed = parse_signature(signature)
    check_layout(layout)
    check_convention(mask_convention)
    if array not in CODE_ARRAYS:
        raise InputError(f"array is {describe(array)}; expected one of {', '.join(CODE_ARRAYS)}", field="array")
    chosen = [c.strip() for c in cases.split(",") if c.strip()] if isinstance(cases, str) else \
        (list(cases) if cases is not None else None)
    run, skipped = battery(parsed, layout, chosen)
    if not run:
        raise InputError("no case can call this function: " + "; ".join(f"{n}: {w}" for n, w in skipped),
                         field="cases")
    with Runner(array, timeout, memory, tuple(forbid)) as runner:
        return mark_function(function, parsed, layout, mask_convention, run, runner, tol, skipped=skipped)


def view(obj: Trace | Marks, precision: int = 4) -> TraceView | MarksView:
    """What a notebook (or `rich.print`) shows as the terminal's tables: `view(trace)` is `attn
    compute`'s tables, `view(marks)` `attn check`'s. A trace is a plain record and does not render
    itself; its view does."""
    if isinstance(obj, Marks):
        return MarksView(obj.trace, dict(obj), precision)
    if isinstance(obj, Trace):
        return TraceView(obj, precision)
    raise TypeError(f"view() shows a Trace (from attend) or Marks (from check), not {type(obj).__name__}")




def _document(doc: Mapping, typed: bool = False) -> dict:
    """A dict of keyword arguments (or answers) as the document the loaders read: each value
    `_plain`, and `dtype` as its name when given as numpy's type (np.float32, np.dtype("float32"))."""
    return {key: _dtype(value) if key == "dtype" else _plain(value, typed, key) for key, value in doc.items()}


def _dtype(value):
    """`dtype=np.float32`, `np.dtype("float32")` or `float` (numpy's float64) as its name; other
    types refused by name (a string is left for the reader, which names the choices)."""
    if not isinstance(value, np.dtype) and not (isinstance(value, type) and issubclass(value, (np.generic, float))):
        return value
    name = np.dtype(value).name
    if name not in DTYPES:
        raise InputError(f"dtype is numpy's {name}; expected {' or '.join(DTYPES)} (as np.float64, np.float32 or "
                         "their names)", field="dtype")
    return name


def _plain(value, typed: bool = False, field: str = "value"):
    """Arrays stay arrays (the loaders check them; their decimals are unknown). With `typed`, a
    float in a list whose shortest form is short (`0.05`, `0.0454`) counts as written with those
    decimals, as in an answers file; a computed one (`0.045397868702434395`) stays unknown.
    A masked array (numpy.ma) with masked cells is refused: attncli has no missing cells, and
    reading it as an array would use the values under the mask (`field` names it)."""
    if isinstance(value, np.ma.MaskedArray):
        masked = int(np.ma.count_masked(value))
        if masked:
            raise InputError(f"{field} is a masked array (numpy.ma) with {plural(masked, 'masked cell')}; attncli "
                             "reads every cell, so the mask would be dropped and the values under it used: fill "
                             "them (array.filled(value)), or give the cells you mean", field=field)
        value = np.ma.getdata(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v, typed, f"{field}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: _plain(v, typed, f"{field}.{k}" if field != "value" else str(k)) for k, v in value.items()}
    if isinstance(value, np.ndarray) and type(value) is not np.ndarray:
        return np.asarray(value)  # np.matrix and other subclasses: a plain array
    if isinstance(value, np.generic):
        value = value.item()
    if typed and type(value) is float and "e" not in repr(value) \
            and len(repr(value).partition(".")[2]) <= TYPED_DECIMALS:
        return Typed.parse(repr(value))
    return value
