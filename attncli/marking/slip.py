"""Find-the-slip: a worked solution with one planted mistake, and the marking of the learner's
answer naming it.

`attn exercise --find-the-slip` plants one mistake of `attncli.marking.mistakes.MISTAKES` in a one-head
problem's worked solution (every stage after it follows from it). The key names it as
`"slip": {"stage": "scaled", "mistake": "no_scale"}`; the learner answers the same key, and
`attn check` marks it as one row of two cells, the stage and the mistake. A mistake that gives
the same worked solution at the same stage as the planted one (two names for one slip) is right.
Pure numpy: no I/O.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from attncli.base.arrays import round_finite
from attncli.base.errors import InputError
from attncli.base.values import describe
from attncli.marking.answers import NoAnswers
from attncli.marking.grading import Answer, StageMark, missing
from attncli.marking.marks import mark_document as mark_stages
from attncli.marking.mistakes import MISTAKES, made_at, span, step
from attncli.problem.trace import Trace

SLIP = "slip"  # the key, in a key and in a learner's answers
SHOWN_DECIMALS = 4  # the worked solution is printed, and compared, at 4 decimals
FIELDS = ("stage", "mistake")


@dataclass(frozen=True)
class Worked:
    """A worked solution of one head: each stage (Lq, ·) as the slip makes it, and the slip."""

    stage: str
    mistake: str
    stages: dict[str, np.ndarray]
    candidates: tuple[str, ...] = ()  # the mistakes it could have been (the learner names one)

    def document(self) -> dict:
        """The stages as JSON: 4 decimals, −∞ as null."""
        return {name: [[None if np.isneginf(x) else float(x) for x in row]
                       for row in round_finite(values, SHOWN_DECIMALS)] for name, values in self.stages.items()}

    def key(self) -> dict:
        return {"stage": self.stage, "mistake": self.mistake}


def worked(trace: Trace, mistake: str | None) -> dict[str, np.ndarray] | None:
    """Every stage of head 0 recomputed with `mistake` at its stage (None: cannot apply here)."""
    out: dict[str, np.ndarray] = {}
    current = None
    for name in span(trace, None, "output"):
        current = step(trace, 0, name, current, mistake if made_at(mistake, name) else None, None, out)
        if current is None:
            return None
        out[name] = current
    return out


def _shown(stages: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {name: round_finite(values, SHOWN_DECIMALS) for name, values in stages.items()}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def candidates(trace: Trace) -> list[str]:
    """The mistakes that can be made in this problem and show at 4 decimals, each giving a worked
    solution no other listed mistake gives (the first of two names for one slip is kept)."""
    right = _shown(worked(trace, None))
    found: list[tuple[str, dict]] = []
    for mistake in MISTAKES:
        if MISTAKES[mistake].stage not in right:
            continue
        stages = worked(trace, mistake)
        if stages is None or not all(np.isfinite(v[~np.isneginf(v)]).all() for v in stages.values()):
            continue
        shown = _shown(stages)
        if not _same(shown, right) and not any(_same(shown, other) for _, other in found):
            found.append((mistake, shown))
    return [mistake for mistake, _ in found]


def plant(trace: Trace, rng: random.Random) -> Worked:
    """One mistake drawn from `candidates`, and the worked solution it makes."""
    choices = candidates(trace)
    if not choices:
        raise InputError("no mistake shows in this problem's worked solution; try another seed", field="seed")
    mistake = rng.choice(choices)
    return Worked(MISTAKES[mistake].stage, mistake, worked(trace, mistake), tuple(choices))


def planted(doc) -> dict | None:
    """The key's slip ({"stage", "mistake"}), or None when the problem plants none."""
    return read(doc[SLIP]) if isinstance(doc, dict) and doc.get(SLIP) is not None else None


def read(value) -> dict:
    if not (isinstance(value, dict) and set(value) <= set(FIELDS) and all(isinstance(value.get(f), str)
                                                                           for f in FIELDS)):
        raise InputError(f'slip is {describe(value)}; expected {{"stage": "<stage>", "mistake": "<mistake id>"}}',
                         field=SLIP)
    return {f: value[f].strip() for f in FIELDS}


def mark_slip(trace: Trace, given: dict, key: dict) -> StageMark:
    """The learner's slip against the key's: the stage (either stage of a two-stage mistake) and
    the mistake (or one that makes the same worked solution at the same stage)."""
    mistake = MISTAKES[key["mistake"]]
    stage_ok = given["stage"] in (mistake.stage, *mistake.also)
    named = given["mistake"]
    mistake_ok = named == key["mistake"]
    if not mistake_ok and named in MISTAKES and MISTAKES[named].stage == mistake.stage:
        theirs, ours = worked(trace, named), worked(trace, key["mistake"])
        mistake_ok = theirs is not None and _same(_shown(theirs), _shown(ours))
    ok = np.array([[stage_ok, mistake_ok]])
    text = f"{key['mistake']}: {mistake.text}"
    notes = () if ok.all() else (f"slip: you named {given['stage']} / {named}; the slip is at {key['stage']}: "
                                 f"{text}",)
    return StageMark(given=Answer(values=ok.astype(float), decimals=np.zeros((1, 2), int)),
                     cells=np.where(ok, "correct", "wrong"), expected=np.ones((1, 2)), diagnosis=(),
                     notes=notes, rows=(SLIP,), columns=FIELDS)


def mark_document(trace: Trace, doc, key=None, **settings) -> dict[str, StageMark]:
    """`attncli.marking.marks.mark_document`, plus the slip when the answers name one: `key` is the
    problem's document (None: `doc` holds its own problem)."""
    expected = planted(doc if key is None else key)
    if not (isinstance(doc, dict) and doc.get(SLIP) is not None):
        if SLIP not in settings.get("require", ()):
            return mark_stages(trace, doc, **settings)
        if expected is None:
            raise InputError("slip is required, but the problem plants no slip", field=SLIP)
        try:
            marks = mark_stages(trace, doc, **settings)
        except NoAnswers:
            raise NoAnswers() from None  # a blank file: no answers at all
        return marks | {SLIP: missing(np.ones((1, 2)), (SLIP,), FIELDS)}
    answer = planted(doc)
    if expected is None:
        raise InputError("slip is given, but the problem plants no slip (it is not a find-the-slip exercise)",
                         field=SLIP)
    try:
        marks = mark_stages(trace, {k: v for k, v in doc.items() if k != SLIP}, **settings)
    except NoAnswers:
        marks = {}
    return marks | {SLIP: mark_slip(trace, answer, expected)}
