"""Mark a learner's function: run it on each case (runner.py), read what it returned
(calling.py, arguments.py), and mark every stage it returned against attncli's own, cell by cell,
with the diagnoses `attn check` finds (a stage recomputed with each known mistake, named only when
it gives the function's numbers; code_mistakes.py adds the slips of code).

A case's marks are `StageMark`s (attncli/marking/grading.py), one per stage returned, its rows
every slot's rows (`b0 h1 it`): so the class views, the gradebook and Gradescope read them as they
read `attn check`'s, keyed `case.stage`. A case that failed (an exception, a hang, a crash, a
forbidden import, a value that is not an answer) has its stages missing, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from attncli.base.errors import plural, visible
from attncli.code import code_mistakes as extra
from attncli.code.arguments import BLOCKS, Mismatch, arguments, expected, from_layout, slot_names
from attncli.code.calling import Signature, Unreadable, returned
from attncli.code.cases import Case, with_gradient, with_open_mask
from attncli.code.child import forbidden_names
from attncli.code.runner import Frame, Outcome, Runner
from attncli.compute.attention import attend
from attncli.compute.tiles import attend_tiles, start, step
from attncli.marking.grading import Answer, StageMark
from attncli.marking.marks import before_weights
from attncli.marking.mistakes import TRANSPOSED, TRANSPOSED_TEXT, chain, made_at, present, span
from attncli.marking.tile_marks import MISTAKES as TILE_MISTAKES
from attncli.stages import table as stages
from attncli.stages.table import names as stage_names

GRADIENTS = ("d_Q", "d_K", "d_V")


@dataclass(frozen=True)
class Tolerance:
    """A cell is right when |given − expected| ≤ atol + rtol·|expected| (−∞ and NaN only match themselves
    in a diagnosis)."""

    atol: float
    rtol: float

    def text(self) -> str:
        return f"right within {self.atol:g} + {self.rtol:g}·|expected|"


# float64: far below float32's error (1e-7), far above float64's (1e-16). float32: PyTorch's SDPA tests'.
TOLERANCES = {"float64": Tolerance(1e-10, 1e-10), "float32": Tolerance(1e-5, 1.3e-6)}


@dataclass(frozen=True)
class CaseMark:
    case: Case
    marks: dict  # stage -> StageMark, in the order computed
    failure: str | None = None  # why the case has no numbers (escaped text)
    kind: str | None = None  # code_mistakes.FAILED's key
    frame: Frame | None = None
    printed: str = ""  # the learner's printed output (escaped)
    notes: tuple[str, ...] = ()
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.failure is None and bool(self.marks) and all(m.right == m.cells.size for m in self.marks.values())


@dataclass(frozen=True)
class CodeMarks:
    """One function's marks over the cases run."""

    file: str  # the spec as given (FILE.py:NAME)
    cases: tuple[CaseMark, ...] = ()
    not_run: tuple[tuple[str, str], ...] = ()  # (case, why)
    failure: str | None = None  # it could not be loaded at all (escaped text)
    frame: Frame | None = None
    printed: str = ""
    forbidden: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def all_pass(self) -> bool:
        return self.failure is None and bool(self.cases) and all(c.passed for c in self.cases)

    @property
    def score(self) -> tuple[int, int]:
        """(cases passed, cases run)."""
        return sum(c.passed for c in self.cases), len(self.cases)

    def flat(self) -> dict[str, StageMark]:
        """Every case's stages as `case.stage`, as the class views and gradebooks read them."""
        return {f"{c.case.name}.{stage}": mark for c in self.cases for stage, mark in c.marks.items()}

    def note(self) -> str | None:
        """The line the gradebook's note and Gradescope's output carry."""
        parts = list(self.notes)
        failed = [c for c in self.cases if c.failure]
        parts += [f"{c.case.name}: {c.failure}" + (f" ({c.frame.text()})" if c.frame else "") for c in failed]
        return "; ".join(parts) or None


def mark_function(target, signature: Signature, layout: str, convention: str, cases: list[Case], runner: Runner,
                  tol: float | None = None, label: str | None = None, skipped=()) -> CodeMarks:
    """Run `target` on every case and mark it. A function that cannot be loaded (a syntax error,
    no such function, an import that fails or hangs) is marked once, as could not be marked."""
    label = label or (target if isinstance(target, str) else getattr(target, "__qualname__", repr(target)))
    done: list[CaseMark] = []
    source_forbidden: list[str] = []
    scanned = False
    for case in cases:
        if signature.backward:
            case = with_gradient(case)
        if signature.takes("mask"):
            case = with_open_mask(case)
        outcome = runner.run(target, arguments(case, signature, layout, convention))
        if outcome.loading and outcome.failure and not outcome.forbidden:
            return CodeMarks(label, (), tuple(skipped), failure=visible(outcome.failure), frame=outcome.frame,
                             printed=visible(outcome.printed), notes=("could not be loaded",))
        if not scanned and outcome.file and runner.forbid:
            source_forbidden = forbidden_names(outcome.file, runner.forbid)
            scanned = True
        done.append(mark_case(case, outcome, signature, layout, tol, runner.forbid and source_forbidden))
    found = tuple(dict.fromkeys(source_forbidden + [n for c in done for n in _forbidden_of(c)]))
    notes = (f"imports {', '.join(found)}, which the teacher forbids",) if found else ()
    if found:
        done = [c if c.kind == "forbidden" else _forbid(c, found) for c in done]
    return CodeMarks(label, tuple(done), tuple(skipped), forbidden=found, notes=notes)


def _forbidden_of(mark: CaseMark) -> tuple[str, ...]:
    return mark.notes[0].split(": ", 1)[1].split(", ") if mark.kind == "forbidden" and mark.notes else ()


def _forbid(mark: CaseMark, found) -> CaseMark:
    text = f"imports {', '.join(found)}, which the teacher forbids"
    return _failed(mark.case, mark.marks.keys() or ("output",), text, "forbidden", mark.frame, mark.printed,
                   (f"forbidden: {', '.join(found)}",), mark.seconds)


def _failed(case: Case, names, failure: str, kind: str, frame, printed: str, notes=(), seconds: float = 0.0) -> CaseMark:
    marks = {}
    for name in names:
        values = expected(case, name)
        marks[name] = _stage_mark(case, name, [np.full(v.shape, np.nan) for v in values], values,
                                  [np.full(v.shape, "missing") for v in values], (kind,),
                                  (f"{kind}: {failure}",))
    return CaseMark(case, marks, failure, kind, frame, printed, tuple(notes), seconds)


def _answer_names(signature: Signature) -> tuple[str, ...]:
    return GRADIENTS if signature.backward else ("output",)


def mark_case(case: Case, outcome: Outcome, signature: Signature, layout: str, tol: float | None = None,
              forbidden=()) -> CaseMark:
    tolerance = TOLERANCES[case.dtype] if tol is None else Tolerance(tol, tol)
    printed = visible(outcome.printed)
    if outcome.forbidden:
        return _failed(case, _answer_names(signature), f"imports {', '.join(outcome.forbidden)}, which the teacher "
                       "forbids", "forbidden", outcome.frame, printed, (f"forbidden: {', '.join(outcome.forbidden)}",),
                       outcome.seconds)
    if outcome.failure:
        return _failed(case, _answer_names(signature), visible(outcome.failure), outcome.kind or "exception",
                       outcome.frame, printed, (), outcome.seconds)
    try:
        given, notes = returned(outcome.value, signature, before_weights(case.traces[0]))
    except Unreadable as error:
        return _failed(case, _answer_names(signature), visible(str(error)), "unreadable", None, printed, (),
                       outcome.seconds)
    kept = [n for n in stage_names() if n in given] + [n for n in ("lse",) + GRADIENTS if n in given]
    order = present(case.traces[0])
    notes = list(notes)
    for name in [n for n in kept if n in stage_names() and n not in order]:
        notes.append(f"{name}: this case has no {name} stage; not marked")
        kept.remove(name)
    if "tiles" in given:
        notes.append("tiles: mark a kernel's tiles with its output and lse (attn check marks tile tables from "
                     "answers files)")
    marks: dict[str, StageMark] = {}
    values_of: dict[str, list[np.ndarray]] = {}
    for name in kept:
        try:
            slots = from_layout(case, name, given[name], layout)
        except Mismatch as mismatch:
            marks[name] = _shape_mark(case, name, np.asarray(given[name]), mismatch, layout, tolerance)
            continue
        marks[name] = _mark_stage(case, name, slots, values_of, tolerance, signature)
        values_of[name] = slots
    wrong = [name for name, mark in marks.items() if mark.right < mark.cells.size]
    if len(marks) > 1 and wrong:
        notes.append(f"your numbers first leave the expected ones at {wrong[0]}")
    nans = sum(int(np.isnan(m.given.values).sum()) for m in marks.values())
    if nans:
        notes.append(f"{plural(nans, 'cell')} {'is' if nans == 1 else 'are'} NaN")
    return CaseMark(case, marks, None, None, None, printed, tuple(notes), outcome.seconds)


def agree(given: np.ndarray, target: np.ndarray, tolerance: Tolerance) -> np.ndarray:
    """Per cell: within the tolerance, or the same infinity, or (a diagnosis' prediction) both NaN."""
    with np.errstate(all="ignore"):
        close = np.isfinite(target) & (np.abs(given - target) <= tolerance.atol + tolerance.rtol * np.abs(target))
    same = (given == target) | (np.isnan(given) & np.isnan(target))
    return close | same


def _stage_mark(case: Case, name: str, given: list, wanted: list, cells: list, diagnosis=(), notes=()) -> StageMark:
    rows, columns = _labels(case, name, wanted[0].shape)
    return StageMark(given=Answer(values=np.vstack(given), decimals=np.full(np.vstack(given).shape, -1)),
                     cells=np.vstack(cells), expected=np.vstack(wanted), diagnosis=tuple(diagnosis),
                     notes=tuple(notes), rows=rows, columns=columns)


def _labels(case: Case, name: str, shape: tuple[int, int]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    p = case.problems[0]
    keyed = name in ("d_K", "d_V")
    names = p.key_labels if keyed else p.query_labels
    base = list(names) if names else [str(i) for i in range(shape[0])]
    rows = tuple(f"{slot} {row}".strip() for slot in slot_names(case, name) for row in base)
    if name == "lse":
        columns = ("lse",)
    else:
        stage = stages.get(name)
        by_key = stage is not None and stage.columns == "keys"
        columns = tuple(p.key_labels) if by_key and p.key_labels else tuple(str(j) for j in range(shape[1]))
    return rows, columns


def _shape_mark(case: Case, name: str, array: np.ndarray, mismatch: Mismatch, layout: str,
                tolerance: Tolerance) -> StageMark:
    """A returned array of the wrong shape: every cell wrong; `transposed` when it is the
    expected one transposed (last two axes)."""
    wanted = expected(case, name)
    diagnosis, notes = [], [f"{name}: returned shape {mismatch.found}, expected {mismatch.wanted} (layout {layout})"]
    if array.ndim >= 2 and array.shape[:-2] + array.shape[-2:][::-1] == mismatch.wanted:
        try:
            slots = from_layout(case, name, np.swapaxes(array, -1, -2), layout)
        except Mismatch:
            slots = None
        if slots is not None and all(agree(s, w, tolerance).all() for s, w in zip(slots, wanted)):
            diagnosis, notes = [TRANSPOSED], notes + [f"{TRANSPOSED}: {TRANSPOSED_TEXT}"]
    return _stage_mark(case, name, [np.full(w.shape, np.nan) for w in wanted], wanted,
                       [np.full(w.shape, "wrong") for w in wanted], diagnosis or [extra.SHAPE], notes)


def _slot_of(case: Case, index: int) -> tuple[int, int]:
    return divmod(index, case.heads)


def _mark_stage(case: Case, name: str, slots: list, earlier: dict, tolerance: Tolerance,
                signature: Signature) -> StageMark:
    wanted = expected(case, name)
    ok = [agree(g, w, tolerance) for g, w in zip(slots, wanted)]
    cells = [np.where(o, "correct", "wrong") for o in ok]
    forward = name in stage_names()
    basis = next((n for n in reversed(list(earlier)) if n in stage_names()), None) if forward else None
    if basis is not None and not all(o.all() for o in ok):
        for i, (g, o) in enumerate(zip(slots, ok)):
            b, h = _slot_of(case, i)
            carried = chain(case.traces[b], h, basis, earlier[basis][i], name)
            if carried is not None and carried.shape == g.shape:
                cells[i] = np.where(o, "correct", np.where(agree(g, carried, tolerance), "carried", "wrong"))
    diagnosis, notes = [], []
    if any((c == "wrong").any() for c in cells):
        diagnosis, notes = _diagnose(case, name, slots, wanted, basis, earlier, tolerance)
        if signature.kernel and name in ("output", "lse") and not diagnosis:
            diagnosis, notes = _diagnose_tiles(case, name, slots, tolerance)
    return _stage_mark(case, name, slots, wanted, cells, diagnosis, notes)


def _lenient(given: np.ndarray, prediction: np.ndarray, tolerance: Tolerance, dead: np.ndarray | None) -> bool:
    """The prediction gives the function's numbers; on rows the prediction leaves with every key
    masked, a NaN row is the function's own policy for such rows and agrees too."""
    ok = agree(given, prediction, tolerance)
    if dead is not None and dead.any():
        rows = dead[:, 0]
        ok[rows] |= np.isnan(given[rows]).all(axis=-1, keepdims=True)
    return bool(ok.all())


def _diagnose(case: Case, name: str, slots: list, wanted: list, basis: str | None, earlier: dict,
              tolerance: Tolerance) -> tuple[list[str], list[str]]:
    found: list[tuple[str, str]] = []
    if name in stage_names():
        steps = span(case.traces[0], basis, name)
        for mistake, record in extra.ALL.items():
            if not any(made_at(mistake, step, extra.ALL) for step in steps):
                continue
            if _reproduces(case, name, slots, wanted, basis, earlier, tolerance, mistake):
                found.append((mistake, record.text))
    if all(g.shape == w.shape[::-1] and g.shape[0] == g.shape[1] for g, w in zip(slots, wanted)) \
            and all(agree(g, w.T, tolerance).all() for g, w in zip(slots, wanted)):
        found.append((TRANSPOSED, TRANSPOSED_TEXT))
    if case.dtype == "float64" and (name in stage_names() or name == "lse"):
        singles = [attend(replace(problem, dtype="float32")) for problem in case.problems]
        low = TOLERANCES["float32"]
        per = [row[:, None] for t in singles for row in t.lse] if name == "lse" else \
            [s for t in singles for s in t.stage(name)]
        if all(agree(g, p, low).all() for g, p in zip(slots, per)):
            found.append((extra.FLOAT32, extra.FLOAT32_TEXT))
    if name in ("output", "weights") and len(slots) > 1 and not found:
        mixed = _mixed(case, name, slots, tolerance)
        if mixed:
            found.append((extra.MIXED, extra.MIXED_TEXT.format(pairs=mixed)))
    return [m for m, _ in found], [f"{m}: {text}" for m, text in found]


def _reproduces(case, name, slots, wanted, basis, earlier, tolerance, mistake) -> bool:
    """Whether making `mistake` (from the function's latest earlier stage) gives every slot's numbers;
    a slot where it cannot be made keeps the expected numbers."""
    made = False
    for i, given in enumerate(slots):
        b, h = _slot_of(case, i)
        trace = case.traces[b]
        values = earlier[basis][i] if basis else None
        prediction = chain(trace, h, basis, values, name, mistake, table=extra.ALL)
        if prediction is None:
            prediction = wanted[i]
        else:
            made = True
        dead = None  # rows the prediction leaves with no key (weights all 0)
        if name in ("weights", "output") and basis not in ("weights", "output") and "weights" in present(trace):
            weights = prediction if name == "weights" else chain(trace, h, basis, values, "weights", mistake,
                                                                 table=extra.ALL)
            if weights is not None:
                dead = (weights == 0).all(axis=-1, keepdims=True)
        if prediction.shape != given.shape or not _lenient(given, prediction, tolerance, dead):
            return False
    return made


def _mixed(case: Case, name: str, slots: list, tolerance: Tolerance) -> str | None:
    """`b0 h1 read the keys and values of b1 h0, …` when every slot's numbers are its own Q with some
    slot's K and V, and some slot's are not its own."""
    labels = slot_names(case, "output")
    found = []
    for i, given in enumerate(slots):
        b, h = _slot_of(case, i)
        trace = case.traces[b]
        match = None
        for j in range(len(slots)):
            b2, h2 = _slot_of(case, j)
            other = case.traces[b2]
            block = stages.Block(trace.problem, trace.Q[h:h + 1], other.K[h2:h2 + 1], other.V[h2:h2 + 1],
                                 trace.scale, head=h)
            with np.errstate(all="ignore"):
                value = stages.run(block, stop=name)[name][0]
            if value.shape == given.shape and agree(given, value, tolerance).all():
                match = j
                if j == i:
                    break
        if match is None:
            return None
        found.append((i, match))
    moved = [(labels[i], labels[j]) for i, j in found if i != j]
    if not moved:
        return None
    return ", ".join(f"{a} read the keys and values of {c}" for a, c in moved[:4]) + (" …" if len(moved) > 4 else "")


def tiled_with(problem, head: int, mistake: str) -> tuple[np.ndarray, np.ndarray]:
    """(output (Lq, d_v), lse (Lq, 1)) of one head, tiled by BLOCKS, making a tile mistake
    (attncli/marking/tile_marks.py: alpha left out of l, of O, or of both) on every tile."""
    _, alpha_of, uses = TILE_MISTAKES[mistake]
    tiled = attend_tiles(problem, *BLOCKS)
    V = tiled.V[head]
    output = np.empty((problem.lq, V.shape[1]))
    lse = np.empty((problem.lq, 1))
    running = {}
    with np.errstate(all="ignore"):
        for tile in tiled.tiles:
            rows, cols = slice(*tile.q_block), slice(*tile.k_block)
            if tile.q_block not in running:
                m, l, O = start(problem, 1, rows.stop - rows.start, V.shape[1], V.dtype, head=head)
                running[tile.q_block] = (m[0], l[0], O[0])
            m, l, O = running[tile.q_block]
            if not tile.skipped:
                S = tile.S[head]
                new_m, _, _, right_l, right_O = step(S, V[cols], m, l, O)
                _, _, _, wrong_l, wrong_O = step(S, V[cols], m, l, O, m=new_m, alpha=alpha_of(m, new_m))
                running[tile.q_block] = (new_m, wrong_l if "l" in uses else right_l, wrong_O if "O" in uses else right_O)
            m, l, O = running[tile.q_block]
            output[rows] = O / l[:, None]
            lse[rows, 0] = m + np.log(l)
    return output, lse


def _diagnose_tiles(case: Case, name: str, slots: list, tolerance: Tolerance) -> tuple[list[str], list[str]]:
    """A FlashAttention-2 forward's output or lse recomputed with each tile mistake."""
    found = []
    for mistake, (text, _, _) in TILE_MISTAKES.items():
        if mistake == "alpha_inverted":
            continue  # its alpha overflows where the others' do not: told apart only from the tiles themselves
        ok = True
        for i, given in enumerate(slots):
            b, h = _slot_of(case, i)
            predicted = tiled_with(case.traces[b].problem, h, mistake)[0 if name == "output" else 1]
            ok = ok and predicted.shape == given.shape and bool(agree(given, predicted, tolerance).all())
        if ok:
            found.append((mistake, text))
    return [m for m, _ in found], [f"{m}: {text}" for m, text in found]
