"""--explain for the precision lab (attncli/compute/precision.py): each rounding a low-precision run
did on one query row, in the order the recipe did them: the inputs as stored, each stored stage
(its value as computed → as stored), and, with recipe `same`, each e^(x − m) rounded as it is made.
A float32 or float64 run rounds nothing beyond its dtype: its lines say so once.

`ledger` gives the hand calculation (attncli/hand/carry.py's Writer) each number of the row as
exact arithmetic makes it from the numbers the run held, beside the number the run kept, so that
each line prints an equation that holds and then the rounding: `= 2055.0000 → 2056 in float16`.
"""

from __future__ import annotations

import numpy as np

from attncli.compute.precision import numpy_dtype, products, row_birth
from attncli.hand.handwriting import shown_keys
from attncli.problem import recipes
from attncli.problem.trace import Trace


def _exact(x: float) -> str:
    """A stored number as it is: the shortest decimal that reads back as it (every bfloat16 and
    float16 is a float64); inf and nan as the tables and the hand lines write them."""
    return repr(float(x)).replace("-", "−") if np.isfinite(x) else ("nan" if np.isnan(x) else
                                                                      ("inf" if x > 0 else "−inf"))


def _computed(x: float, acc: str) -> str:
    """A number as the accumulator held it: float32's shortest decimal for float32."""
    if not np.isfinite(x):
        return _exact(x)
    value = np.float32(x) if acc == "float32" else np.float64(x)
    return np.format_float_positional(value, unique=True, trim="-").replace("-", "−")


def finite_cells(trace: Trace, name: str, head: int, row: int) -> bool:
    """Whether stage `name` of query `row` of `head` holds only finite numbers (a masked −∞ aside)."""
    cells = trace.stages[name][head, row]
    return not (np.isnan(cells).any() or np.isposinf(cells).any() or (name != "masked" and np.isneginf(cells).any()))


def rounding_lines(trace: Trace, head: int, row: int, keys: list[str], errors: bool = False) -> list[str]:
    """The roundings of query `row` of `head` (`keys`: the key labels, escaped), and with `errors`
    (--error) each stage's error against float64."""
    lab = trace.precision
    if lab is None:
        return []
    return _roundings(trace, head, row, keys) + (_error_lines(trace, head, row, keys) if errors else [])


def _error_lines(trace: Trace, head: int, row: int, keys: list[str]) -> list[str]:
    """Each stage's error against float64 on the row: absolute, and in ulps of the run's dtype."""
    lab, dtype = trace.precision, trace.problem.dtype
    lines = [f"Error against float64 (absolute, and in ulps of {dtype}):"]
    for name, error in lab.errors.items():
        diff, ulps = error["abs"][head, row], error["ulps"][head, row]
        names = keys if name != "output" else [f"[{j}]" for j in range(len(diff))]
        lines.append(f"  {name}: " + "; ".join(f"{names[j]} {diff[j]:.3g} ({ulps[j]:.3g} ulps)"
                                               for j in shown_keys(len(diff)) if j is not None))
    return lines


def _roundings(trace: Trace, head: int, row: int, keys: list[str]) -> list[str]:
    """The row's roundings, stage by stage (up to the stage where an inf or a NaN appears)."""
    lab = trace.precision
    p = trace.problem
    if lab.recipe is None:
        settings = "; the precision lab's settings change the fill or the softmax, not the rounding" \
            if recipes.lab(p) else ""
        return [f"Roundings: none beyond {p.dtype} itself (every operation in {p.dtype}{settings})"]
    dtype, acc = p.dtype, "float32"  # both recipes compute each operation in float32 (PyTorch's opmath)
    lines = [f"Roundings to {dtype} (recipe: {lab.recipe.line(dtype)}):"]
    given = np.asarray(p.inputs["Q"], np.float64).reshape(trace.Q.shape[1], -1) if p.inputs["Q"].ndim == 2 \
        else np.asarray(p.inputs["Q"], np.float64)[head]
    q_given = given[row] if given.shape[-1] == trace.Q.shape[-1] else trace.Q[head, row]
    changed = [f"q[{a}] = {_computed(g, 'float64')} → {_exact(s)}" for a, (g, s) in
               enumerate(zip(q_given, trace.Q[head, row])) if g != s]
    lines.append("  inputs: " + ("; ".join(changed[:6]) + (" …" if len(changed) > 6 else "") if changed
                                 else "q is exact in " + dtype))
    chained = {cell[1] for cell in (ledger(trace, head, row) if lab.recipe.accumulate == "same" else ())
               if cell[0] == "chain"}
    for name, before in lab.unrounded.items():
        if name == "weights":
            lines += _exp_lines(trace, head, row, dtype)
            if np.isinf(lab.sums[head, row, 0]) and np.isfinite(lab.exps[head, row]).all():  # e^x/inf: weights 0
                total = lab.exps[head, row].sum()
                where = dtype if lab.recipe.accumulate == "same" else acc
                lines.append(f"  sum: Σe^x = {_computed(total, 'float64')} → {_exact(lab.sums[head, row, 0])} in {where} "
                             "(past its range: every weight of the row is e^x/inf = 0)")
        stored = trace.stages[name][head, row]
        was = before[head, row]
        columns = [j for j in shown_keys(len(stored)) if j is not None]
        names = keys if name != "output" else [str(j) for j in range(len(stored))]
        if not lab.recipe.stored(name):
            lines.append(f"  {name}: kept in {acc}, not stored in {dtype}")
            continue
        if name == "weights" and (head, row) in trace.fully_masked:  # the policy's number, not a rounding
            lines.append(f"  weights: every one is 0/0 = NaN (every key masked); the masked-rows policy "
                         f"{p.masked_rows} replaced each with " + (f"1/{len(stored)} → {_exact(stored[0])} in {dtype}"
                                                                   if p.masked_rows == "uniform" else "0"))
            continue
        done = [f"{name}[{names[j]}] = {_computed(was[j], acc)} → {_exact(stored[j])}" for j in columns
                if not (was[j] == stored[j] or (np.isnan(was[j]) and np.isnan(stored[j])))]
        born = row_birth(trace, head, row) if not finite_cells(trace, name, head, row) else None
        if born is not None and born.stage == name and not np.isfinite(was[born.key]):  # made so as computed
            done.append(f"{name}[{names[born.key] if name != 'output' else born.key}] = {_exact(born.value)}: "
                        f"{born.cause}")
        if not done and name in chained:  # the last rounding changed nothing, the additions before it did
            done = [f"stored exactly in {dtype}, but the additions before it rounded as they went (the lines above)"]
        lines.append(f"  {name}: " + ("; ".join(done) if done else f"every number is exact in {dtype}"))
        if not finite_cells(trace, name, head, row):  # the hand calculation stopped here too
            break
    return lines


def _exp_lines(trace: Trace, head: int, row: int, dtype: str) -> list[str]:
    """Recipe `same`: each e^(x − m) of the row, computed in float32 and rounded to the dtype."""
    lab = trace.precision
    if lab.recipe.accumulate != "same":
        return []
    shifted, stored = lab.shifted[head, row], lab.exps[head, row]
    with np.errstate(over="ignore"):
        exact = np.exp(shifted.astype(np.float32))
        wide = np.exp(shifted.astype(np.float64))  # e^89: past float32, a number all the same
    done = [f"e^{_exact(shifted[j])} = " + (f"{_computed(exact[j], 'float32')}" if np.isfinite(exact[j]) else
                                            f"{wide[j]:.5g} (past float32's range)") + f" → {_exact(stored[j])}"
            for j in shown_keys(len(shifted)) if j is not None and np.isfinite(wide[j]) and (exact[j] != stored[j] or not np.isfinite(exact[j]))]
    what = "e^(x − m)" if trace.problem.max_subtraction else "e^x"
    return [f"  {what}: " + ("; ".join(done) if done else f"every e^x is exact in {dtype}")]


def ledger(trace: Trace, head: int, row: int) -> dict:
    """{cell: (exact, kept, dtype, always)} for query `row` of `head` of a low-dtype run: each number
    the hand calculation writes, as exact arithmetic makes it from the operands the run held (float64:
    every bfloat16 and float16 and their products are exact in it), and as the run kept it, rounded to
    `dtype` (the run's, or float32 where the recipe accumulates wider); `always`: the recipe rounds
    it to the run's dtype (else the arrow is written only when the printed digits differ). Cells:
    ("scores", j), ("scaled", j), ("exps", j), ("total", 0), ("weights", j), ("contributions", j, i),
    ("output", i). Empty for float32 and float64 runs, which round nothing beyond their dtype."""
    lab = trace.precision
    if lab is None:
        return {}
    recipe, dtype, p = lab.recipe, trace.problem.dtype, trace.problem
    same = recipe is None or recipe.accumulate == "same"  # float32, float64: each operation in the dtype
    word = lambda rounds: dtype if rounds else "float32"  # noqa: E731
    stored = lambda name: recipe is None or recipe.stored(name)  # noqa: E731
    found = {}

    def put(kind, exact, kept, rounds, *index):
        with np.errstate(over="ignore", invalid="ignore"):
            for j, (x, s) in enumerate(zip(np.ravel(exact), np.ravel(kept))):
                at = (j,) if not index else index + (j,)
                found[(kind,) + at] = (float(x), float(s), word(rounds), rounds)

    stages = trace.stages
    with np.errstate(over="ignore", invalid="ignore"):
        put("scores", trace.K[head] @ trace.Q[head, row], stages["scores"][head, row], stored("scores"))
        put("scaled", stages["scores"][head, row] * trace.scale, stages["scaled"][head, row], stored("scaled"))
        logits = stages["masked" if "masked" in stages else "scaled"][head, row]
        live = logits != -np.inf
        if live.any():
            m = logits[live].max() if p.max_subtraction else 0.0
            exps, total = lab.exps[head, row], float(lab.sums[head, row, 0])
            put("exps", np.where(live, np.exp(np.where(live, logits - m, 0.0)), 0.0), exps, same)
            put("total", [exps.sum()], [total], same)
            put("weights", exps / total, stages["weights"][head, row], stored("weights"))
        weights = stages["weights"][head, row]
        made = products(lab, weights, trace.V[head])  # (Lk, d_v)
        for j in range(len(weights)):
            put("contributions", weights[j] * trace.V[head, j], made[j], same, j)
        put("output", made.sum(axis=0), stages["output"][head, row], stored("output"))
        if recipe is not None and recipe.accumulate == "same":
            _chains(found, trace, head, row, dtype, live if live.any() else None)
    if recipe is None:  # float32, float64: only where the dtype's range made an inf of a finite result
        return {cell: entry for cell, entry in found.items() if np.isfinite(entry[0]) and not np.isfinite(entry[1])}
    return found


def stop_line(trace: Trace, head: int, row: int) -> str:
    """Where a precision lab run's row stops being finite, and why: the hand calculation stops there."""
    born = row_birth(trace, head, row)
    where = "its inputs" if born is None else f"{born.stage}[{born.head}, {born.query}, {born.key}]: {born.cause}"
    return (f"The hand calculation stops here: this row's first non-finite value is {where}; the stages after it "
            "hold inf or NaN (the tables show them)")


def _chains(found: dict, trace: Trace, head: int, row: int, dtype: str, live) -> None:
    """Recipe `same` adds left to right, rounding each partial sum to the dtype: where that gives
    another number than exact arithmetic's sum rounded once (1.0099 → 1.0078125, but the run kept 1),
    the line must show the additions the run made. ("chain", cell) → [(partial, term, exact sum,
    kept)] for a score's dot product and the softmax's sum."""
    low = numpy_dtype(dtype)
    recipe = trace.precision.recipe

    def rnd(x) -> float:  # once, from float64 (through float32 a sum just past a tie rounded twice)
        return float(np.asarray(x, np.float64).astype(low))

    def chain(terms, last_rounded: bool) -> list[tuple[float, float, float, float]]:
        total, steps = terms[0], []
        for n, term in enumerate(terms[1:], 2):
            made = float(np.float32(total) + np.float32(term))  # float32, as the run adds
            kept = rnd(made) if (last_rounded or n < len(terms)) else made
            steps.append((total, term, total + term, kept))
            total = kept
        return steps

    def put(cell, terms, last_rounded: bool, exact=()) -> None:
        entry = found.get(cell)
        if entry is None or not np.isfinite(entry[0]):
            return
        made = [(a, float(x), float(t)) for a, (x, t) in enumerate(zip(exact, terms)) if np.isfinite(x) and
                not np.isfinite(t)]  # products past the range: their inf is what the sum carries
        if np.isfinite(entry[1]) and (len(terms) < 3 or made):
            return
        steps = chain([float(t) for t in terms], last_rounded)
        same = steps[-1][3] == entry[1] or (np.isnan(steps[-1][3]) and np.isnan(entry[1]))
        if same and (made or rnd(entry[0]) != entry[1]):  # the run's additions, not one rounding
            found[("chain",) + cell] = (steps, dtype, made)

    with np.errstate(over="ignore", invalid="ignore"):
        q = trace.Q[head, row]
        for j, k in enumerate(trace.K[head]):
            exact = [float(a) * float(b) for a, b in zip(q, k)]
            put(("scores", j), [rnd(x) for x in exact], recipe.stored("scores"), exact)
        if live is not None:
            put(("total", 0), [float(x) for x in trace.precision.exps[head, row][live]], True)
        # A weight of 0 adds nothing; a row whose every key is masked adds the policy's weights (uniform).
        keys = np.flatnonzero(trace.stages["weights"][head, row])
        for i in range(trace.V.shape[-1]):
            put(("output", i), [found[("contributions", int(j), i)][1] for j in keys], recipe.stored("output"))
