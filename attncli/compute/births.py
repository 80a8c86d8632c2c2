"""Where the precision lab's first inf or NaN is born, and why (attncli/compute/precision.py's run):
the first non-finite cell in stage order (then head, query, key), its cause in words (a value past
the dtype's largest, e^x past the accumulator's, 0/0 in a fully masked row, every e^x underflowing
without the max subtracted), and the lab's warnings (that cell; what a finite mask fill lets through).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attncli.base.errors import Advice, InputError, Notice, quote
from attncli.base.rule_words import MASKED_ROWS_LIKE, MASKED_ROWS_WORDS
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
    stored: float | None = None  # what the masked-rows policy stored in place of a fully masked row's NaN
    sum: bool = False  # the row's softmax sum overflowed (its weights, e^x/inf, are finite: 0): `value` is the weight

    def to_json(self) -> dict:
        """`value` is what the run stores there: the masked-rows policy's number in place of a fully
        masked row's NaN, whose `computed` value is then "nan"."""
        where = {"stage": self.stage, "head": self.head, "query": self.query, "key": self.key}
        if self.sum:  # the inf is the row's sum; the weight stored is the finite e^x/inf
            return where | {"value": self.value, "sum": "inf", "cause": self.cause}
        value = "nan" if np.isnan(self.value) else ("inf" if self.value > 0 else "-inf")
        found = where | {"value": value}
        if self.stored is not None:
            found |= {"value": self.stored, "computed": value}
        return found | {"cause": self.cause}

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


def _sum_overflow(exps, sums, acc: str):
    """(head, query, key) of the first row whose softmax sum is inf though every e^x is finite (its
    weights e^x/inf are all 0, finite: no cell shows it), with the key whose e^x took the running sum
    past the accumulator's range, and the sum as float64; None when there is none."""
    if sums is None:
        return None
    rows = np.isinf(sums[..., 0]) & np.isfinite(exps).all(axis=-1)
    if not rows.any():
        return None
    h, i = (int(v) for v in np.argwhere(rows)[0])
    row = exps[h, i].astype(np.float64)
    top = recipes.MAX[acc] + 2.0 ** (np.floor(np.log2(recipes.MAX[acc])) - recipes.MANTISSA[acc] - 1)
    running = np.cumsum(row)
    past = np.flatnonzero(running >= top)
    return h, i, int(past[0]) if past.size else row.size - 1, float(running[-1])


def _overflows(x: float, dtype: str) -> bool:
    """Whether x rounds past `dtype`'s largest number (to ±inf), nearest-even."""
    top = recipes.MAX[dtype] + 2.0 ** (np.floor(np.log2(recipes.MAX[dtype])) - recipes.MANTISSA[dtype] - 1)
    return abs(x) >= top


def _product_overflow(q, k, acc: str, value: float) -> str | None:
    """A score's cause when one of its products q_a·k_a overflows the accumulator (an inf the sum then
    carries, or meets an inf of the other sign: NaN); None when none does."""
    products = np.asarray(q, np.float64) * np.asarray(k, np.float64)
    over = [a for a, x in enumerate(products) if _overflows(float(x), acc)]
    if not over:
        return None
    made = ", ".join(f"q[{a}]·k[{a}] = {_number(float(products[a]))} → {'' if products[a] > 0 else '−'}inf"
                     for a in over[:3])
    end = ("; inf + (−inf) is NaN" if np.isnan(value) else "")
    return f"a product overflows {acc} (max {recipes.MAX[acc]:.5g}): {made}{end}"


def first_nonfinite(stored, before, exps, inputs, visible, dtype, acc, subtract, sums=None) -> Birth | None:
    """The first non-finite cell, in stage order, then head, query, key; a masked cell's −∞ (the
    fill) is no birth, nor is an input's (reading refuses those) unless the dtype made it. A softmax
    sum past the accumulator's range (`sums`, (H, Lq, 1)) is born at the weights, at the key whose
    e^x took it past: its weights are e^x/inf = 0, finite, and would otherwise pass unseen."""
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
        summed = _sum_overflow(exps, sums, acc) if name == "weights" else None
        first = tuple(int(v) for v in np.argwhere(bad)[0]) if bad.any() else None
        if summed is not None and (first is None or summed[:3] < first):
            h, i, j, total = summed
            how = "without subtracting the max" if not subtract else "even after subtracting the max"
            return Birth(name, h, i, j, float(value[h, i, j]),
                         f"the softmax's sum Σe^x = {_number(total)} overflows {acc} (max {recipes.MAX[acc]:.5g}) "
                         f"{how} (at key {j}), so every weight of the row is e^x/inf = 0", sum=True)
        if first is None:
            continue
        h, i, j = first
        if name == "scores" and "Q" in inputs and "K" in inputs:
            made = _product_overflow(inputs["Q"][1][h, i], inputs["K"][1][h, j], acc, float(value[h, i, j]))
            if made is not None:
                return Birth(name, h, i, j, float(value[h, i, j]), made)
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


def _label(labels: list[str] | None, i: int) -> str:
    return quote(labels[i]) if labels else str(i)


# What each masked-rows policy does, and the library it matches (attncli/base/rule_words.py).
MASKED_ROWS_POLICY = {policy: (MASKED_ROWS_WORDS[policy], like) for policy, like in MASKED_ROWS_LIKE.items()}


def masked_rows_warnings(problem: Problem, dead: np.ndarray, born: str = "") -> list[Notice]:
    """One warning per head that has rows with every key masked, naming the rows (by label); the policy is
    advice (`masked_rows`) that the edge says as an option or a keyword; `born`: what the refusal of
    masked_rows "error" adds (the precision lab's first non-finite value)."""
    warnings = []
    for head in np.flatnonzero(dead.any(axis=1)):
        rows = np.flatnonzero(dead[head])
        shown = ", ".join(_label(problem.query_labels, int(i)) for i in rows[:8])
        more = f" and {len(rows) - 8} more" if len(rows) > 8 else ""
        if problem.sinks is not None:  # well defined, not a policy: a note, never an error
            warnings.append(Notice(f"head {head}: every key is masked for query {shown}{more}; the sink takes "
                                   "the whole row, so its weights and output are 0 (with sinks no masked-rows "
                                   "policy applies)"))
            continue
        if problem.masked_rows == "error":
            raise InputError(f"head {head}: every key is masked for query {shown}{more}{born}", field="masked_rows",
                             advice=Advice("masked_rows", ("zero", "uniform"), "; use {} to allow it"))
        done, like = MASKED_ROWS_POLICY[problem.masked_rows]
        warnings.append(Notice(f"head {head}: every key is masked for query {shown}{more}; {done}",
                               Advice("masked_rows", (problem.masked_rows,), f" ({{}}, {like})")))
    return warnings


def notices(problem: Problem, birth: Birth | None, fill: float, visible, stored: dict,
            dead: np.ndarray) -> list[Notice]:
    """What the lab found, as warnings: the first non-finite value; a finite fill that lets a masked
    key through, makes a fully masked row uniform, or sits above a real score; a fill the dtype
    rounds to −∞."""
    found = []
    if birth is not None:
        found.append(Notice(birth.line()))
    found += masked_rows_warnings(problem, dead)  # worded as every run words them: by head and query label
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
        found.append(Notice(f"the mask fill {word} is finite: masked key {_label(problem.key_labels, j)} of query "
                            f"{_label(problem.query_labels, i)} (head {h}) has weight {stored['weights'][h, i, j]:.6g}, "
                            "not 0"))
    whole = hidden.all(axis=-1)
    if whole.any():
        h, i = (int(v) for v in np.argwhere(whole)[0])
        found.append(Notice(f"head {h}: every key is masked for query {_label(problem.query_labels, i)}; with the "
                            f"finite fill {word} its weights are uniform (as transformers' eager attention gives), "
                            "not a masked-rows policy"))
    real = np.where(hidden, np.inf, stored["scaled"]) < fill
    if real.any():
        h, i, j = (int(v) for v in np.argwhere(real)[0])
        found.append(Notice(f"a real score is below the mask fill {word}: scaled[{h}, {i}, {j}] = "
                            f"{stored['scaled'][h, i, j]:.6g}, so the masked keys of query "
                            f"{_label(problem.query_labels, i)} outrank key {_label(problem.key_labels, j)}"))
    return found
