"""Fresh practice problems with numbers that are easy by hand.

Only Python's `random.Random(seed)` is used (not numpy's generators), so the same seed gives the
same problem on every machine, Python 3 version and numpy version. Seeds are whole numbers ≥ 0
(`random.Random(-7)` is `random.Random(7)`, so negative seeds would silently repeat problems).

No two keys of a problem are identical (they would get identical weights): the keys are re-drawn.
Nor does any query have only zeros, or the same weight for every key it sees, and every problem is
workable by hand (`workable`: no score beyond ±8 at d_k = 2, ±8·√(d_k/2) wider, no weight that
rounds to 1 at the decimals asked beside others): the whole problem is re-drawn from the same generator (a seed whose first draw is
sound keeps its problem).

Each kind is one record of attncli/marking/kinds.py (how it draws, what it asks, what its sheet
shows); this module draws a problem of any kind, re-draws a degenerate one and finishes it.

Every problem says what it asks (`ask`: the stage names to answer; `tiles` or `slip` for those
exercises) and the least decimals a value needs (`decimals`): `attn check` reads them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from attncli.base.errors import plural
from attncli.base.names import PROJECTED
from attncli.compute import attention
from attncli.compute.tiles import Tiles, attend_tiles
from attncli.document.reading import build_problem
from attncli.marking import grading, slip
from attncli.marking.kinds import KINDS, REDRAWS, WORDS, Draw, ExerciseError, Options, matrices
from attncli.problem.posenc import positional_encoding
from attncli.problem.trace import Trace
from attncli.stages import grads
from attncli.stages import table as stages


@dataclass(frozen=True)
class Exercise:
    """`doc` is `attn compute` input; `shown` the matrices a worksheet prints (the kind's `sheet`:
    for posenc, E and PE instead of their sum X); `options` what decided it; `command` the line
    that reproduces it (for the answer key only; the CLI fills it in from `options`)."""

    doc: dict
    shown: dict = field(default_factory=dict)
    options: Options | None = None
    command: str = ""
    worked: slip.Worked | None = None  # find-the-slip: the worked solution and its planted mistake
    trace: Trace | None = field(default=None, repr=False, compare=False)  # the problem computed
    tiled: Tiles | None = field(default=None, repr=False, compare=False)  # a tiles exercise's tiles


def build(options: Options) -> Exercise:
    """The problem `options` decide: drawn, then re-drawn (from the same generator, so a seed whose
    first draw is sound is unchanged) while it has identical keys, a zero query or uniform weights,
    or is not workable by hand."""
    o = options
    _validate(o)
    rng = random.Random(o.seed)
    for _ in range(REDRAWS):
        doc, shown = _draw(o, rng)
        trace = attention.attend(build_problem(doc))
        if not degenerate(trace) and workable(trace, o.decimals, KINDS[o.kind].large_scores) and \
                shows_rounding(trace, o.decimals):
            return _finish(o, doc, shown, trace)
    raise ExerciseError(f"could not draw a problem without a zero query or uniform weights, workable by hand, from "
                        f"these options (keys {o.keys}, dim {o.dim}); ask for a wider dim", field="dim")


def _validate(o: Options) -> None:
    if o.kind not in KINDS:
        raise ExerciseError(f"kind is {o.kind!r}; expected one of {', '.join(KINDS)}", field="kind")
    kind = KINDS[o.kind]
    if o.self_attention and o.queries not in (None, o.keys):
        raise ExerciseError(f"a {o.kind if kind.sentence == 'one' else 'causal'} exercise is self-attention over "
                            f"one sentence, so queries ({o.queries}) must equal keys ({o.keys})", field="queries")
    if kind.check is not None:
        kind.check(o)
    if o.slip and (not kind.slip or o.heads != 1):
        slips = ", ".join(name for name, k in KINDS.items() if k.slip)
        raise ExerciseError(f"find-the-slip works one head with Q, K and V given; kind {o.kind} with "
                            f"{plural(o.heads, 'head')} is not one (kinds: {slips})",
                            field="find_the_slip")


def _draw(o: Options, rng: random.Random) -> tuple[dict, dict]:
    """One draw of the problem: (the `attn compute` document, the matrices a worksheet shows). The
    kind draws its matrices, then its settings; the mask; then its rules."""
    kind = KINDS[o.kind]
    query_labels, key_labels = _labels(o, rng)
    doc: dict = {"title": "Exercise",
                 "description": f"Compute the attention weights and output for "
                                f"{'each query' if o.lq > 1 else 'the query'}"}
    d = Draw(o, rng, doc, _positional)
    drawn = kind.draw(d)
    doc |= {"query_labels": query_labels, "key_labels": key_labels}
    if o.heads > 1 and kind.heads_key:
        doc["heads"] = o.heads
    if kind.settings is not None:
        kind.settings(d)
    _mask(o, rng, doc)
    if kind.rules is not None:
        kind.rules(d)
    return doc, (kind.sheet or (lambda doc, drawn: drawn | matrices(doc)))(doc, drawn)


def _labels(o: Options, rng: random.Random) -> tuple[list[str], list[str]]:
    lq, lk = o.lq, o.keys
    last = KINDS[o.kind].sentence == "last"  # the newest word's query over the cached keys of the sentence so far
    words = rng.sample(WORDS, min(len(WORDS), lk if o.self_attention or last else lq + lk))
    if last:
        key_labels = [_label(words, i) for i in range(lk)]
        return key_labels[-1:], key_labels
    query_labels = [_label(words, i) for i in range(lq)]
    return query_labels, query_labels if o.self_attention else [_label(words, lq + i) for i in range(lk)]


def _mask(o: Options, rng: random.Random, doc: dict) -> None:
    """--mask random (every query keeps a key; with the kind's causal rule beside it) or causal, or
    the kind's causal rule."""
    causal = KINDS[o.kind].causal
    if o.mask == "random":
        grid = [[rng.random() < 0.7 for _ in range(o.keys)] for _ in range(o.lq)]
        for row in grid:
            if not any(row):
                row[rng.randrange(o.keys)] = True  # every query keeps at least one key
        doc["mask"] = grid
        if causal:
            doc["causal"] = True
    elif o.mask == "causal" or causal:
        doc["mask"] = "causal"


def degenerate(trace) -> bool:
    """A problem that teaches nothing: a query of zeros (every score 0), or a query whose weights
    are the same for every key it sees (two or more)."""
    if not np.any(trace.Q, axis=-1).all():  # (H, Lq)
        return True
    weights = trace.stage("weights")  # (H, Lq, Lk)
    seen = weights > 0
    top = np.where(seen, weights, -np.inf).max(axis=-1, keepdims=True)
    low = np.where(seen, weights, np.inf).min(axis=-1, keepdims=True)
    return bool(((seen.sum(axis=-1) >= 2) & (top - low <= 1e-9 * top)[..., 0]).any())


SCORE_BOUND = 8  # the largest |score| at d_k = 2 (plain's: |q|, |k| ≤ 2), × √(d_k / 2) beyond


def score_bound(d_k: int) -> float:
    """The largest |score| a problem of this d_k may have: 8 up to d_k = 2, then 8·√(d_k / 2), so
    that a score over √d_k stays within ±4√2 ≈ 5.66 and its e^x below 300 (a wider problem's
    scores are sums of more products: a fixed bound would refuse almost every draw)."""
    return SCORE_BOUND * max(1.0, d_k / 2) ** 0.5


def workable(trace, decimals: int, large_scores: bool = False) -> bool:
    """A problem a learner can work by hand at the decimals asked: no score beyond ±score_bound (e^x
    of the scaled scores stays a few hundred at most), and no query that sees two keys or more puts
    a weight that rounds to 1 at the decimals asked (at least 2) on one key, leaving the others 0.
    `large_scores`: a kind whose scores are large on purpose (precision: 2048 and more, worked as
    e^(x − max)) has the bound on x − max instead."""
    scores = trace.stage("scores")
    if large_scores:  # what the learner takes e^ of
        scores = scores - scores.max(axis=-1, keepdims=True)
    if np.abs(scores[np.isfinite(scores)]).max(initial=0) > score_bound(trace.d_k):
        return False
    weights = trace.stage("weights")  # (H, Lq, Lk)
    seen = (weights > 0).sum(axis=-1) >= 2
    return bool((weights.max(axis=-1)[seen] < 1 - 0.5 * 10.0 ** -max(decimals, 2)).all())


def shows_rounding(trace, decimals: int) -> bool:
    """A low-dtype problem (the precision kind) whose float64 weights, written to the decimals asked,
    `attn check` marks wrong against the dtype's: else the rounding it is about cannot be seen in the
    answer (±1 in the last place is correct, and an output that follows from correct weights is
    correct too). True for every other problem."""
    lab = trace.precision
    if lab is None or lab.recipe is None:
        return True
    wide = np.round(lab.reference["weights"], decimals)
    correct, _ = grading.grade(wide, np.full(wide.shape, decimals), trace.stage("weights"), grading.Rule(decimals))
    return not correct.all()


def rounding_note(trace, decimals: int) -> str | None:
    """A low-dtype exercise's answer: which scores the dtype changed (2055 → 2056) and the weights
    float64 would give beside the dtype's, at the decimals asked; None for other problems."""
    lab = trace.precision
    if lab is None or lab.recipe is None:
        return None
    p = trace.problem
    keys = p.key_labels or [str(j) for j in range(p.lk)]
    lines = []
    for i in range(p.lq):
        exact, stored = lab.unrounded["scores"][0, i], trace.stage("scores")[0, i]
        changed = [f"{keys[j]} {exact[j]:g} → {stored[j]:g}" for j in range(p.lk) if exact[j] != stored[j]]
        wide, low = lab.reference["weights"][0, i], trace.stage("weights")[0, i]
        who = f"query {(p.query_labels or [str(i)] * p.lq)[i]}: " if p.lq > 1 else ""
        lines.append(f"{who}{p.dtype} changed the score{'s' if len(changed) > 1 else ''} "
                     f"{', '.join(changed) or '(none)'}, so its weights are "
                     f"{', '.join(f'{x:.{decimals}f}' for x in low)} where float64's are "
                     f"{', '.join(f'{x:.{decimals}f}' for x in wide)}")
    return "; ".join(lines)


def asked(trace, kind: str) -> list[str]:
    """The answers the problem asks for, in order (what `attn check` requires): the kind's `asks`,
    else every stage the problem has (a projected problem's Q, K and V first, as its sheet has a
    grid for each; with several heads each head's output and the final output; and the backward
    pass's, with dO): every grid of its sheet."""
    if KINDS[kind].asks is not None:
        return KINDS[kind].asks(trace)
    p = trace.problem
    names = list(PROJECTED) if p.projected else []
    names += [stage.name for stage in stages.present(p)]
    if p.heads > 1 or "W_O" in p.inputs:  # "output" is the final output: each head's own has a grid too
        at = names.index("output")
        names[at:at + 1] = [f"heads[{h}].output" for h in range(p.heads)] + ["output"]
    return names + (asked_gradients(p) if trace.gradients is not None else [])


def asked_gradients(problem) -> list[str]:
    """The backward pass's stages a problem asks: every gradient, but d_output when it is a copy of
    the given dO (one head, no W_O)."""
    copy = problem.heads == 1 and "W_O" not in problem.inputs
    return [name for name in grads.names() if not (copy and name == "d_output")]


def _finish(o: Options, doc: dict, shown: dict, trace) -> Exercise:
    doc = doc | {"ask": asked(trace, o.kind), "decimals": o.decimals}
    worked = None
    if o.slip:
        worked = slip.plant(trace, random.Random(f"slip {o.seed}"))
        doc |= {"worked": worked.document(), "ask": ["slip"]}
        doc["description"] = (f"Find the slip: the worked solution below makes one mistake. Name the stage where "
                              f"it is made and the mistake ({doc['description']})")
    tiled = attend_tiles(trace.problem, *doc["tile_size"]) if "tile_size" in doc else None
    return Exercise(doc=doc, shown=shown, options=o, worked=worked, trace=trace, tiled=tiled)


def _positional(positions: int, dim: int) -> list[list[float]]:
    """Sinusoidal encodings rounded to 2 decimals (the numbers a printed table gives)."""
    return (np.round(positional_encoding(positions, dim), 2) + 0.0).tolist()  # + 0.0: no -0.0


def _label(words: tuple[str, ...] | list[str], i: int) -> str:
    return words[i] if i < len(words) else f"w{i}"
