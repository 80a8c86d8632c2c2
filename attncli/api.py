"""The Python API for autograders and notebooks: `from attncli import attend, check`.

    >>> from attncli import attend, check
    >>> trace = attend(Q=[[0, 4]], K=[[1, 0], [0, 1], [.5, .5]], V=[[2, 0], [0, 2], [1, -1]])
    >>> trace.weights[0].round(4).tolist()
    [[0.0454, 0.7679, 0.1867]]
    >>> marks = check({"weights": [[0.0454, 0.7679, 0.1867]]}, trace)
    >>> marks.all_correct, marks.score
    (True, (3, 3))

Keyword names are the input document's keys (`attn compute` JSON): Q, K, V, or X with W_Q, W_K,
W_V (and X_kv, biases b_Q…, W_O, b_O), mask (true = may attend, or "causal"), bias, heads, scale,
labels. Arrays or nested lists are both accepted. Errors are `attncli.errors.InputError` (or
another `AttnError`) naming the field (`error.field`, e.g. "K" or "heads[1].weights"); their advice,
and a trace's warnings, say settings as keyword arguments (`or use dtype='float64'`,
`masked_rows='zero'`), where the command line says options. Nothing here prints, exits or imports
the CLI. `view(trace)` and `view(marks)` show them as the terminal's tables in Jupyter and rich.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from attncli.attention import attend as _attend
from attncli.grading import StageMark
from attncli.marking import all_correct, mark_document
from attncli.problem import INPUT_KEYS, build_problem
from attncli.render.gradebook import marks_dict
from attncli.render.notebook import MarksView, TraceView
from attncli.trace import Trace
from attncli.values import Written


def attend(Q=None, K=None, V=None, *, invert_mask: bool = False, **inputs) -> Trace:
    """Every stage of softmax(Q Kᵀ · scale + bias) V as arrays: a `Trace` with `scores`, `scaled`,
    `masked` (None without mask or bias), `weights`, `output` (per head: head axis first) and
    `final` (the heads side by side, times W_O when given). `invert_mask=True` reads a boolean mask
    as True = blocked (nn.MultiheadAttention's convention). With `dO` (the final output's shape, or
    "ones"), `trace.gradients` holds the backward pass: `.heads["d_Q"]` … per head, `.grads["Q"]` …
    per input as given."""
    doc = {key: value for key, value in {"Q": Q, "K": K, "V": V, **inputs}.items() if value is not None}
    unknown = [key for key in doc if key not in INPUT_KEYS]
    if unknown:
        raise TypeError(f"attend() got an unexpected keyword argument {unknown[0]!r}; "
                        f"expected any of {', '.join(INPUT_KEYS)}")
    return _attend(build_problem({key: _plain(value) for key, value in doc.items()}, invert_mask=invert_mask))


def check(answers: dict, problem, *, decimals: int = 2, require: tuple[str, ...] = (),
          tol: float | None = None) -> Marks:
    """Mark `answers` (a dict like an answers file: `scores`, `scaled`, `masked`, `weights`,
    `output`, or `heads`: [{...}, ...]; arrays or lists) against `problem` (a `Trace` from `attend`,
    or an input document as a dict), with `attn check`'s rules: `decimals` (--decimals), `require`
    (--require: stages that must be answered, e.g. ("weights", "output")) and `tol` (--tol). What
    counts as written: see `_plain` (ints 0 decimals, typed floats their own, computed floats and
    arrays unknown, checked at 4)."""
    trace = problem if isinstance(problem, Trace) else _attend(build_problem(
        {key: _plain(value) for key, value in problem.items()}))
    doc = {key: _plain(value, typed=True) for key, value in answers.items()}
    return Marks(trace, mark_document(trace, doc, tol, decimals, tuple(require)))  # stages and --tiles' tiles


class Marks(Mapping):
    """The marks of one answers document: a read-only dict of `StageMark` keyed by stage path
    (`weights`, `heads[1].weights`, `output`), with the score and a rich rendering."""

    def __init__(self, trace: Trace, marks: dict[str, StageMark]):
        self.trace = trace
        self._marks = marks

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
        return marks_dict(self._marks, self.trace)

    def __repr__(self) -> str:
        right, total = self.score
        return f"<Marks {right}/{total} cells right: {', '.join(self._marks)}>"

    # In rich and Jupyter the marks show as `attn check`'s tables.
    def __rich_console__(self, console, options):
        return MarksView(self.trace, self._marks).__rich_console__(console, options)

    def _repr_html_(self) -> str:
        return MarksView(self.trace, self._marks)._repr_html_()


def view(obj: Trace | Marks, precision: int = 4) -> TraceView | MarksView:
    """What a notebook (or `rich.print`) shows as the terminal's tables: `view(trace)` is `attn
    compute`'s tables, `view(marks)` `attn check`'s. A trace is a plain record and does not render
    itself; its view does."""
    if isinstance(obj, Marks):
        return MarksView(obj.trace, dict(obj), precision)
    if isinstance(obj, Trace):
        return TraceView(obj, precision)
    raise TypeError(f"view() shows a Trace (from attend) or Marks (from check), not {type(obj).__name__}")


TYPED_DECIMALS = 6  # a float whose shortest form has at most this many decimals was typed, not computed


def _plain(value, typed: bool = False):
    """Arrays stay arrays (the loaders check them; their decimals are unknown). With `typed`, a
    float in a list whose shortest form is short (`0.05`, `0.0454`) counts as written with those
    decimals, as in an answers file; a computed one (`0.045397868702434395`) stays unknown."""
    if isinstance(value, (list, tuple)):
        return [_plain(v, typed) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v, typed) for k, v in value.items()}
    if isinstance(value, np.generic):
        value = value.item()
    if typed and type(value) is float and "e" not in repr(value) \
            and len(repr(value).partition(".")[2]) <= TYPED_DECIMALS:
        return Written.parse(repr(value))
    return value
