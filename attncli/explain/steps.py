"""One query row's hand calculation: the numbers a person writes down, as `--explain` prints them.

`written` runs the hand step (`Stage.hand`, attncli/hand/stage_steps.py) of each of the problem's stages
in order, from q, K and V as printed (projected from X when the problem gives X and W), under one
of the two carries of attncli/hand/carry.py; `written_final` adds the heads side by side and W_O. A
present stage without a hand step is refused (`unexplained`), never skipped: the next step would
read the wrong numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import numpy as np

from attncli.base.errors import AttnError
from attncli.explain.roundings import finite_cells, ledger
from attncli.hand.carry import Writer, exactly, given_pairs, pairs, printed
from attncli.hand.stage_steps import Row, values
from attncli.problem import groups
from attncli.problem.trace import Trace, head_slice
from attncli.stages.table import Stage, present


@dataclass(frozen=True)
class Projection:
    """x W (+ b) for one row and one head's columns: q, or a key's k and v."""

    x: list[Decimal]  # (d_in,) the input row as printed
    W: list[list[Decimal]]  # (d_in, d) the head's columns as printed
    b: list[Decimal] | None  # (d,)
    result: list[Decimal]  # (d,)


@dataclass(frozen=True)
class Written:
    """One row of one head as an explanation prints it; every number has `places` decimals
    (percentages carry.PERCENT_PLACES). `stages` holds each present stage's printed row by name (the
    record its hand step wrote); `unrounded` the exact-carry lines whose printed operands do not give
    their printed result (carry.Writer)."""

    head: int
    row: int
    places: int
    carry: str
    projection: Projection | None  # q = x W_Q (+ b_Q), for problems given as X and W
    keys: list[tuple[list[Decimal], list[Decimal]]] | None  # projected (k, v) per key
    q: list[Decimal]
    K: list[list[Decimal]]
    V: list[list[Decimal]]
    stages: dict[str, Any]
    allowed: list[bool]  # the keys the softmax reads (False: masked, −∞)
    unrounded: dict[tuple[str, int], tuple[float, ...]]
    # a low-precision run: cell → (exact arithmetic's result as printed, the number kept, its dtype)
    rounded: dict = field(default_factory=dict)
    ledger: dict = field(default_factory=dict)  # roundings.ledger: every cell's (exact, kept, dtype, always)
    stopped: str | None = None  # a precision lab row: the stage (or "inputs") where an inf or a NaN appears

    @property
    def result(self) -> list[Decimal]:
        """The row's last stage (its output) as printed."""
        return values(list(self.stages.values())[-1].pairs)


def unexplained(problem) -> list[Stage]:
    """The problem's stages that have no hand step."""
    return [stage for stage in present(problem) if stage.hand is None]


def refuse_unexplained(problem) -> None:
    missing = unexplained(problem)
    if missing:
        names = ", ".join(f'"{stage.name}"' for stage in missing)
        raise AttnError(f"the hand calculation has no step for stage {names}, so it cannot explain its "
                        "numbers: give its entry in the stage table a `hand` (attncli/hand/stage_steps.py)")


def _project(w: Writer, key: str, x, W, b, exact) -> Projection:
    """One row of x W (+ b) over the given columns of W, with `exact` the trace's values."""
    xs = given_pairs(x, w.places)  # given: x, W and b are written as given
    Ws = [given_pairs(column, w.places) for column in W.T]  # (d, d_in)
    bs = None if b is None else given_pairs(b, w.places)
    result = [w.dot((key, j), xs, Ws[j], None if bs is None else bs[j], exact[j]) for j in range(len(Ws))]
    return Projection(x=values(xs), W=[[c[i][1] for c in Ws] for i in range(len(xs))],
                      b=None if bs is None else values(bs), result=result)


def _inputs(trace: Trace, w: Writer, h: int, i: int):
    """q, K and V of the row as (true, printed) pairs: projected from X when the problem gives X
    and W (computed values: rounded carry carries the projections as printed, exact carry rounds
    the exact ones), else as given (carry.given); and the projection."""
    p, places = trace.problem, w.places
    q_true, K_true, V_true = trace.Q[h, i], trace.K[h], trace.V[h]
    projection = keys = None
    if p.projected:
        inputs = p.inputs
        x_kv = inputs.get("X_kv", inputs["X"])
        g = groups.kv_head(p, h)  # K and V: the columns of its kv head (grouped-query attention)
        cq, ck = slice(h * trace.d_k, (h + 1) * trace.d_k), slice(g * trace.d_k, (g + 1) * trace.d_k)
        cv = slice(g * trace.d_v, (g + 1) * trace.d_v)
        bias_of = lambda name, cols: inputs[name][cols] if name in inputs else None  # noqa: E731
        projection = _project(w, "q", inputs["X"][i], inputs["W_Q"][:, cq], bias_of("b_Q", cq), q_true)
        keys = [(_project(w, "k", x_kv[j], inputs["W_K"][:, ck], bias_of("b_K", ck), K_true[j]).result,
                 _project(w, "v", x_kv[j], inputs["W_V"][:, cv], bias_of("b_V", cv), V_true[j]).result)
                for j in range(p.lk)]
    if projection is not None and w.carry == "rounded":
        q = list(zip(q_true.tolist(), projection.result))
        K = [list(zip(K_true[j].tolist(), keys[j][0])) for j in range(p.lk)]
        V = [list(zip(V_true[j].tolist(), keys[j][1])) for j in range(p.lk)]
    else:
        write = pairs if projection is not None else given_pairs
        q, K, V = write(q_true, places), [write(k, places) for k in K_true], [write(v, places) for v in V_true]
    return projection, keys, q, K, V


@exactly
def written(trace: Trace, head: int, row: int, places: int, carry: str = "exact") -> Written:
    """The numbers the explanation of query `row` of `head` prints, under `carry` ("exact" or
    "rounded"): each present stage's hand step, in order, reading the numbers printed before it."""
    refuse_unexplained(trace.problem)
    w = Writer(places, carry, ledger(trace, head, row))
    projection, keys, q, K, V = _inputs(trace, w, head, row)
    state = Row(trace, head, row, w, {"Q": q, "K": K, "V": V}, allowed=[True] * trace.problem.lk,
                plane=lambda array: head_slice(array, head)[row])
    done: dict[str, Any] = {}
    # A precision lab row holding an inf or a NaN: written up to the stage where it appears, then stopped
    stopped = None if all(np.isfinite(a).all() for a in (trace.Q[head, row], trace.K[head], trace.V[head])) \
        else "inputs"
    for stage in present(trace.problem) if stopped is None else ():
        done[stage.name] = record = stage.hand.write(state, stage.name)
        if stage.replaces is not None:  # the stages after it read Q_rope and K_rope in place of Q and K
            state.inputs[stage.replaces] = record.pairs
        else:
            state.x, state.last = record.pairs, stage.name
        if trace.precision is not None and not finite_cells(trace, stage.name, head, row):
            stopped = stage.name
            break
    return Written(head=head, row=row, places=places, carry=carry, projection=projection, keys=keys,
                   q=values(q), K=[values(k) for k in K], V=[values(v) for v in V], stages=done,
                   allowed=list(state.allowed), unrounded=w.unrounded, rounded=w.rounded,
                   ledger=w.ledger, stopped=stopped)


@dataclass(frozen=True)
class WrittenFinal:
    """One query row's heads side by side and, with W_O, that times W_O (+ b_O), as printed."""

    row: int
    concat: list[Decimal]  # (H·d_v,) the heads' printed outputs
    projection: Projection | None  # concat W_O (+ b_O)
    exact_final: list[Decimal]
    unrounded: dict[tuple[str, int], tuple[float, ...]]


@exactly
def written_final(trace: Trace, rows: list[Written]) -> WrittenFinal:
    """The output projection of one query row from its heads' written rows (every head, in order)."""
    first = rows[0]
    w = Writer(first.places, first.carry)
    i = first.row
    concat = [d for r in rows for d in r.result]
    inputs = trace.problem.inputs
    projection = None
    if "W_O" in inputs:
        if first.carry == "rounded":
            xs = list(zip(trace.concat[i].tolist(), concat))
        else:
            xs = pairs(trace.concat[i], first.places)
        Ws = [given_pairs(column, first.places) for column in inputs["W_O"].T]
        bs = given_pairs(inputs["b_O"], first.places) if "b_O" in inputs else None
        result = [w.dot(("final", j), xs, Ws[j], None if bs is None else bs[j], trace.final[i, j])
                  for j in range(len(Ws))]
        projection = Projection(x=concat, W=[[c[k][1] for c in Ws] for k in range(len(concat))],
                                b=None if bs is None else values(bs), result=result)
    return WrittenFinal(row=i, concat=concat, projection=projection,
                        exact_final=[printed(x, first.places) for x in trace.final[i]], unrounded=w.unrounded)
