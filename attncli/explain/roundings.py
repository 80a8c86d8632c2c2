"""--explain for the precision lab (attncli/compute/precision.py): each rounding a low-precision run
did on one query row, in the order the recipe did them: the inputs as stored, each stored stage
(its value as computed → as stored), and, with recipe `same`, each e^(x − m) rounded as it is made.
A float32 or float64 run rounds nothing beyond its dtype: its lines say so once.
"""

from __future__ import annotations

import numpy as np

from attncli.base.errors import InputError
from attncli.hand.handwriting import shown_keys
from attncli.problem.trace import Trace


def _exact(x: float) -> str:
    """A stored number as it is: the shortest decimal that reads back as it (every bfloat16 and
    float16 is a float64)."""
    return repr(float(x)).replace("-", "−") if np.isfinite(x) else ("NaN" if np.isnan(x) else
                                                                      ("∞" if x > 0 else "−∞"))


def _computed(x: float, acc: str) -> str:
    """A number as the accumulator held it: float32's shortest decimal for float32."""
    if not np.isfinite(x):
        return _exact(x)
    value = np.float32(x) if acc == "float32" else np.float64(x)
    return np.format_float_positional(value, unique=True, trim="-").replace("-", "−")


def finite_row(trace: Trace, row: int, heads=None) -> bool:
    """Whether query `row` holds only finite numbers in every stage of `heads` (None: all) but a
    masked cell's −∞: a hand calculation needs them (a precision lab run may hold inf and NaN)."""
    for name, value in trace.stages.items():
        cells = value[:, row] if heads is None else value[list(heads), row]
        if np.isnan(cells).any() or np.isposinf(cells).any() or (name != "masked" and np.isneginf(cells).any()):
            return False
    return True


def refuse_nonfinite(trace: Trace, rows: list[int], heads=None, field: str | None = None) -> None:
    """The hand calculation of a row that holds an inf or a NaN: refused, naming where the first was
    born (`field`: what the edge calls the rows, `--row`)."""
    if trace.precision is None:
        return
    for row in rows:
        if not finite_row(trace, row, heads):
            born = trace.precision.nonfinite
            raise InputError(f"query row {row} holds an inf or a NaN ({born.line() if born else 'see the warning'}); "
                             "the hand calculation needs finite numbers: explain another row", field)


def rounding_lines(trace: Trace, head: int, row: int, keys: list[str]) -> list[str]:
    """The roundings of query `row` of `head` (`keys`: the key labels, escaped)."""
    lab = trace.precision
    if lab is None:
        return []
    p = trace.problem
    if lab.recipe is None:
        return [f"Roundings: none beyond {p.dtype} itself (every operation in {p.dtype}; the precision lab's "
                "settings change the fill or the softmax, not the rounding)"]
    dtype, acc = p.dtype, "float32"  # both recipes compute each operation in float32 (PyTorch's opmath)
    lines = [f"Roundings to {dtype} (recipe: {lab.recipe.line(dtype)}):"]
    given = np.asarray(p.inputs["Q"], np.float64).reshape(trace.Q.shape[1], -1) if p.inputs["Q"].ndim == 2 \
        else np.asarray(p.inputs["Q"], np.float64)[head]
    q_given = given[row] if given.shape[-1] == trace.Q.shape[-1] else trace.Q[head, row]
    changed = [f"q[{a}] = {_computed(g, 'float64')} → {_exact(s)}" for a, (g, s) in
               enumerate(zip(q_given, trace.Q[head, row])) if g != s]
    lines.append("  inputs: " + ("; ".join(changed[:6]) + (" …" if len(changed) > 6 else "") if changed
                                 else "q is exact in " + dtype))
    for name, before in lab.unrounded.items():
        if name == "weights":
            lines += _exp_lines(trace, head, row, dtype)
        stored = trace.stages[name][head, row]
        was = before[head, row]
        columns = [j for j in shown_keys(len(stored)) if j is not None]
        names = keys if name != "output" else [str(j) for j in range(len(stored))]
        if not lab.recipe.stored(name):
            lines.append(f"  {name}: kept in {acc}, not stored in {dtype}")
            continue
        done = [f"{name}[{names[j]}] = {_computed(was[j], acc)} → {_exact(stored[j])}" for j in columns
                if not (was[j] == stored[j] or (np.isnan(was[j]) and np.isnan(stored[j])))]
        lines.append(f"  {name}: " + ("; ".join(done) if done else f"every number is exact in {dtype}"))
    return lines


def _exp_lines(trace: Trace, head: int, row: int, dtype: str) -> list[str]:
    """Recipe `same`: each e^(x − m) of the row, computed in float32 and rounded to the dtype."""
    lab = trace.precision
    if lab.recipe.accumulate != "same":
        return []
    shifted, stored = lab.shifted[head, row], lab.exps[head, row]
    with np.errstate(over="ignore"):
        exact = np.exp(shifted.astype(np.float32))
    done = [f"e^{_exact(shifted[j])} = {_computed(exact[j], 'float32')} → {_exact(stored[j])}"
            for j in shown_keys(len(shifted)) if j is not None and np.isfinite(exact[j]) and exact[j] != stored[j]]
    what = "e^(x − m)" if trace.problem.max_subtraction else "e^x"
    return [f"  {what}: " + ("; ".join(done) if done else f"every e^x is exact in {dtype}")]
