"""One query row's backward pass as a hand calculation prints it (see attncli/explain/steps.py for the
forward half): a reverse loop over the problem's present stages, each stage's backward hand step
(`HandStep.backward`, attncli/hand/hand_backward.py) in turn, mirroring attncli/compute/backward.py's loop over
the vjps.

The carry is the forward half's (attncli/hand/carry.py): under "exact" every printed number is the exact
gradient rounded (backward.py's, the tables' numbers), with a note where the printed operands do
not give the printed result; under "rounded" every number is computed from the numbers printed
before it (the forward half's printed weights, values, output, q and keys, and dO as given),
then rounded, so every printed equation holds. Either way the exact d_q is printed beside the
narrated one at the end.

For query row i of head h, with P the weights row, O the output row and dO the row of d_output:

    output    d_weights_j = dO · v_j;  this row's share of d_v_j = P_j dO
    weights   D = dO · O (Σ_j P_j d_weights_j);  d_scores_j = P_j (d_weights_j − D), 0 for a masked key
    masked    the gradient goes on, 0 where the key is masked
    capped    × (1 − tanh²(scaled / c)), per key
    scaled    the scale, left for the scores to apply to their sums (÷ √d_k by default)
    scores    d_q = scale · Σ_j d_scores_j k_j;  this row's share of d_k_j = scale · d_scores_j q
    Q_rope    d_q_rope rotated back pair by pair: (a, b) → (a cos + b sin, b cos − a sin)
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np

from attncli.base.errors import AttnError
from attncli.compute.backward import back
from attncli.explain.steps import Written
from attncli.hand.carry import Writer, exactly, given_pairs, pairs, printed
from attncli.hand.hand_backward import Back, Share, values
from attncli.problem.trace import Trace
from attncli.stages.grads import GRADIENTS
from attncli.stages.table import present


@dataclass(frozen=True)
class WrittenBackward:
    """The numbers one row's backward narration prints, each with `places` decimals: each present
    stage's record by name (what its backward step wrote), then what reached the inputs."""

    forward: Written  # the row's forward half, as printed
    places: int
    carry: str
    dO: list[Decimal]  # (d_v,) this head's columns of dO for the row, as printed
    seed: str  # the name of dO's per-head gradient (d_output)
    preamble: list[str]  # lines after dO (a fully masked row)
    stages: dict[str, Any]  # each stage's backward record
    query: str  # the query input, lower case: "q"
    d_q: list[Decimal]  # (d_k,) the row's gradient of q
    exact_d_q: list[Decimal]  # the exact d_q (backward.py's) as printed
    shares: list[Share]  # this row's share of each key-side input's gradient (d_v, d_k)
    unrounded: dict[tuple[str, int], tuple[float, ...]]


def refuse_unnarrated(problem) -> None:
    """A stage whose hand step has no backward half is refused, not skipped: the steps before it
    would read the wrong gradient."""
    missing = [stage.name for stage in present(problem) if stage.hand is None or stage.hand.backward is None]
    if missing:
        raise AttnError("the backward hand calculation has no step for stage "
                        + ", ".join(f'"{name}"' for name in missing)
                        + ": give its hand step a backward half (attncli/hand/hand_backward.py)")


def _exact(trace: Trace, head: int, last: str) -> dict[str, np.ndarray]:
    """Every gradient of the head's loop (1, …) by stage, block input and reported number; those the
    tables show are the tables' own arrays."""
    heads = trace.gradients.heads
    seed = next(g.name for g in GRADIENTS if g.of == last)
    with np.errstate(over="ignore", invalid="ignore"):
        found = back(trace, np.asarray(heads[seed][head:head + 1]), last, head=head)
    found.update({g.of: heads[g.name][head:head + 1] for g in GRADIENTS})
    return found


def _names(stages) -> dict[str, str]:
    """Each stage's gradient's name: the tables' (d_scores for `scaled`), the name of the one before
    for a stage whose gradient passes through (the mask's), else d_ and the stage's name, or
    d_raw_ and its name where the tables give that name to another stage (the raw scores')."""
    shown = {g.of: g.name for g in GRADIENTS}
    names: dict[str, str] = {}
    for i, stage in enumerate(stages):
        if stage.name in shown:
            names[stage.name] = shown[stage.name]
        elif stage.hand.backward.passes and i:
            names[stage.name] = names[stages[i - 1].name]
        else:
            taken = f"d_{stage.name}" in shown.values()
            names[stage.name] = f"d_raw_{stage.name}" if taken else f"d_{stage.name}"
    return names


def _holders(stages) -> list[dict[str, str]]:
    """For each stage, what stands in for each block input where it is computed (backward._forward_blocks)."""
    holder, found = {}, []
    for stage in stages:
        found.append(dict(holder))
        if stage.replaces is not None:
            holder[stage.replaces] = stage.name
    return found


@exactly
def written_backward(trace: Trace, w: Written) -> WrittenBackward:
    """The backward narration of the row `w` (the forward half, as printed) explains."""
    problem = trace.problem
    refuse_unnarrated(problem)
    stages = present(problem)
    last = stages[-1].name
    names = _names(stages)
    writer = Writer(w.places, w.carry)
    state = Back(trace, w, writer, _exact(trace, w.head, last), [s.name for s in stages], names)
    # dO split into heads is given (written as given, carry.given); through W_O it is computed
    write = pairs if "W_O" in problem.inputs else given_pairs
    state.d = seed = write(state.exact(last), w.places)
    state.d_name = names[last]
    holders, records = _holders(stages), {}
    for i in range(len(stages) - 1, -1, -1):
        state.holders = holders[i]
        state.offered, state.offers = state.offers, {}
        state.takes = stages[i - 1].hand.backward.takes if i else ()
        records[stages[i].name] = stages[i].hand.backward.write(state, stages[i].name)
    query = "Q"  # the one input whose gradient the row has whole; the key-side ones are shares
    d_Q = next(g.name for g in GRADIENTS if g.of == query)
    return WrittenBackward(forward=w, places=w.places, carry=w.carry, dO=values(seed), seed=names[last],
                           preamble=state.preamble, stages=records, query=query.lower(),
                           d_q=values(state.found[query]),
                           exact_d_q=[printed(x, w.places) for x in trace.gradients.heads[d_Q][w.head, w.row]],
                           shares=[x for x in state.found.values() if isinstance(x, Share)],
                           unrounded=writer.unrounded)
