"""Where the precision lab's first inf or NaN is born, and why (attncli/compute/precision.py's run):
the first non-finite cell in stage order (then head, query, key), its cause in words (a value past
the dtype's largest, e^x past the accumulator's, 0/0 in a fully masked row, every e^x underflowing
without the max subtracted), and the lab's warnings (that cell; what a finite mask fill lets through).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attncli.base.errors import Notice
from attncli.problem import recipes
from attncli.problem.trace import Problem

LAB_STAGES = ("scores", "scaled", "masked", "weights", "output")  # what the lab computes, in order


@dataclass(frozen=True)
class Birth:
    """The first inf or NaN of a run: where (stage, head, query, key or column) and why."""
    stage: str
    head: int
    query: int
    key: int
    value: float
    cause: str

    def to_json(self) -> dict:
        value = "nan" if np.isnan(self.value) else ("inf" if self.value > 0 else "-inf")
        return {"stage": self.stage, "head": self.head, "query": self.query, "key": self.key,
                "value": value, "cause": self.cause}

    def line(self) -> str:
        return f"the first non-finite value is {self.stage}[{self.head}, {self.query}, {self.key}]: {self.cause}"


def _number(x: float) -> str:
    return f"{x:.6g}".replace("-", "−")


def _cause(name: str, dtype: str, acc: str, unrounded: float, value: float, subtract: bool, exp_at: float | None,
           dead: bool, underflow: float | None = None) -> str:
    """Why a stage's cell is not finite, from its value before rounding and, for the weights, the e^x."""
    if name == "weights" and dead:
        return "0/0 in a fully masked row " + ("(every score is −∞, so x − max is −∞ − (−∞))" if subtract
                                               else "(every e^x is e^−∞ = 0)")
    if name == "weights" and exp_at is not None:
        how = "without subtracting the max" if not subtract else "even after subtracting the max"
        return (f"e^{_number(exp_at)} overflows {acc} (max {recipes.MAX[acc]:.5g}) {how}, "
                "so the row's sum is inf and inf/inf is NaN")
    if name == "weights" and underflow is not None:
        return (f"0/0: every e^x of the row underflows to 0 in {acc} without subtracting the max "
                f"(the largest is e^{_number(underflow)})")
    if np.isfinite(unrounded) and not np.isfinite(value):
        return f"{name} = {_number(unrounded)} overflows {dtype} (max {recipes.MAX[dtype]:.5g})"
    if np.isinf(unrounded):
        return f"{name} overflows {acc} (max {recipes.MAX[acc]:.5g}) as it is computed"
    return f"{name} is NaN: an inf met an inf or a 0 in {acc} (∞ − ∞, 0 · ∞)"


def first_nonfinite(stored, before, exps, inputs, visible, dtype, acc, subtract) -> Birth | None:
    """The first non-finite cell, in stage order, then head, query, key; a masked cell's −∞ (the
    fill) is no birth, nor is an input's (reading refuses those) unless the dtype made it."""
    for name, (given, low) in inputs.items():
        bad = ~np.isfinite(low)
        if bad.any():
            h, i, j = (int(v) for v in np.argwhere(bad)[0])
            return Birth(name, h, i, j, float(low[h, i, j]),
                         f"{name} = {_number(float(given[h, i, j]))} overflows {dtype} (max {recipes.MAX[dtype]:.5g})")
    for name in LAB_STAGES:
        if name not in stored:
            continue
        value = stored[name]
        bad = ~np.isfinite(value)
        if name == "masked" and visible is not None:
            bad &= np.broadcast_to(visible, bad.shape) | ~np.isneginf(value)
        if not bad.any():
            continue
        h, i, j = (int(v) for v in np.argwhere(bad)[0])
        exp_at = underflow = None
        dead = False
        if name == "weights":
            logits = stored["masked"] if "masked" in stored else stored["scaled"]
            row = logits[h, i].astype(np.float64)
            dead = bool(np.isneginf(row).all())
            overflow = np.isinf(exps[h, i]) & np.isfinite(row)
            if overflow.any():
                k = int(np.flatnonzero(overflow)[0])
                exp_at = float(row[k] - (row.max() if subtract else 0.0))
            elif not dead and not subtract and (exps[h, i] == 0).all():
                underflow = float(row.max())
        return Birth(name, h, i, j, float(value[h, i, j]),
                     _cause(name, dtype, acc, float(before[name][h, i, j]), float(value[h, i, j]), subtract,
                            exp_at, dead, underflow))
    return None


def notices(problem: Problem, birth: Birth | None, fill: float, visible, stored: dict,
            dead: np.ndarray) -> list[Notice]:
    """What the lab found, as warnings: the first non-finite value; a finite fill that lets a masked
    key through, makes a fully masked row uniform, or sits above a real score; a fill the dtype
    rounds to −∞."""
    found = []
    if birth is not None:
        found.append(Notice(birth.line()))
    if dead.any():
        rows = ", ".join(f"head {h} query {i}" for h, i in np.argwhere(dead)[:4])
        found.append(Notice(f"every key is masked for {rows}; the softmax is 0/0 there, and the masked-rows "
                            f"policy {problem.masked_rows} stores {'1/Lk' if problem.masked_rows == 'uniform' else '0'}"))
    if visible is None:
        return found
    word = recipes.fill_word(problem)
    if fill == -np.inf:
        if problem.mask_fill != -np.inf:
            found.append(Notice(f"the mask fill {word} is −∞ in {problem.dtype}: it is past the dtype's range "
                                f"(max {recipes.MAX[problem.dtype]:.5g}), so masked scores are −∞"))
        return found
    hidden = ~np.broadcast_to(visible, stored["weights"].shape)
    let = hidden & (stored["weights"] > 0)
    if let.any():
        h, i, j = (int(v) for v in np.argwhere(let)[0])
        found.append(Notice(f"the mask fill {word} is finite: masked key {j} of query {i} (head {h}) has weight "
                            f"{stored['weights'][h, i, j]:.6g}, not 0"))
    whole = hidden.all(axis=-1)
    if whole.any():
        h, i = (int(v) for v in np.argwhere(whole)[0])
        found.append(Notice(f"every key is masked for query {i} (head {h}); with the finite fill {word} its "
                            "weights are uniform (as transformers' eager attention gives), not a masked-rows policy"))
    real = np.where(hidden, np.inf, stored["scaled"]) < fill
    if real.any():
        h, i, j = (int(v) for v in np.argwhere(real)[0])
        found.append(Notice(f"a real score is below the mask fill {word}: scaled[{h}, {i}, {j}] = "
                            f"{stored['scaled'][h, i, j]:.6g}, so the masked keys of query {i} outrank key {j}"))
    return found
