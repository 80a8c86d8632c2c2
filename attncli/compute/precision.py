"""The precision lab's run: attention in bfloat16 or float16 by a recipe (attncli/problem/recipes.py),
or in any dtype with a finite mask fill or without subtracting each row's max; every stage as
stored, its error against a float64 reference, and where the first inf or NaN was born.

How a low dtype rounds, operation by operation (PyTorch's CPU kernels for Half and BFloat16 compute
each elementwise operation in float32, `opmath_type`, and round its result to the dtype; their
matrix products accumulate in float32 and round the sum once). Rounding is to nearest, ties to
even (ml_dtypes' and PyTorch's casts from float32). The inputs Q, K, V are rounded to the dtype
first, on every recipe.

- accumulate float32, store stages (transformers' eager attention):
    scores = rnd(Q Kᵀ in float32); scaled = rnd(scores · float32(scale));
    masked = rnd(scaled, the fill where masked) (the fill rounded: −1e9 is −∞ in float16);
    weights = rnd(softmax in float32: m = max, e^(x − m), Σ, quotient);
    output = rnd(weights V in float32).
- accumulate float32, store output (PyTorch's SDPA on CPU): the same in float32 with no rnd but
  the output's.
- accumulate same (no PyTorch path; a kernel with low-precision accumulators): every product,
  sum, difference, e^x and quotient rounded as it is made: a dot product is
  rnd(rnd(rnd(q₀k₀) + rnd(q₁k₁)) + …), left to right; the softmax's sum likewise.

float32 and float64 run the same steps in their own dtype (numpy's, nothing rounded beyond it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from attncli.base.arrays import merge_heads, split_heads
from attncli.base.errors import InputError
from attncli.compute.births import LAB_STAGES, Birth, first_nonfinite, masked_rows_warnings, notices
from attncli.problem import groups, masks, recipes, variants
from attncli.problem.trace import Problem, Trace

INPUTS = ("Q", "K", "V")


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of a dtype's name; bfloat16 is ml_dtypes' (imported here, only when a run
    asks for it: the float64 path's start-up never loads it)."""
    if name != "bfloat16":
        return np.dtype(name)
    try:
        # Imported here for start-up: only a bfloat16 run loads ml_dtypes (the float64 path never does).
        import ml_dtypes
    except ImportError:
        raise InputError("dtype is bfloat16, which needs the ml-dtypes package; install it with "
                         "pip install 'attncli[precision]' (or use float16, float32, float64)", field="dtype")
    return np.dtype(ml_dtypes.bfloat16)


@dataclass(frozen=True, eq=False)
class Lab:
    """What the precision lab adds to a trace: the recipe (None for float32/float64), the fill as
    used, each stage before it was stored (`unrounded`, in the accumulator's dtype, as float64), the
    softmax's x − m, e^(x − m) and their row sum Σ (as computed, (H, Lq, 1)), the float64 reference, each
    stage's error against it
    ({stage: {"abs", "rel", "ulps"}}, (H, Lq, ·) each) and the first non-finite value (or None)."""
    dtype: str
    recipe: object
    fill: float
    unrounded: dict
    shifted: np.ndarray
    exps: np.ndarray
    sums: np.ndarray
    reference: dict
    errors: dict
    nonfinite: Birth | None


def _rounder(dtype: str, recipe):
    """(compute dtype, rnd for a stored stage, op: rnd after each operation of recipe `same`)."""
    if recipe is None:  # float32, float64: the dtype's own arithmetic
        compute = np.dtype(dtype)
        return compute, (lambda x: x), (lambda x: x)
    low = numpy_dtype(dtype)
    compute = np.dtype(np.float32)

    def rnd(x):  # float32 → the dtype (nearest, ties to even) → back to float32, where it is exact
        return np.asarray(x, np.float32).astype(low).astype(np.float32)

    return compute, rnd, (rnd if recipe.accumulate == "same" else (lambda x: x))


def _dot(a: np.ndarray, b: np.ndarray, op, same: bool) -> np.ndarray:
    """a @ b over the last axis of a and the second-last of b: in the compute dtype (BLAS), or, for
    recipe `same`, each product and each partial sum rounded, left to right."""
    if not same:
        return a @ b
    total = a[..., :, 0:1] * b[..., 0:1, :]
    for i in range(1, a.shape[-1]):
        total = op(total) + op(a[..., :, i:i + 1] * b[..., i:i + 1, :])
    return total  # its last operation unrounded: the stage rounds it as it is stored


def _sum_rows(x: np.ndarray, op, same: bool) -> np.ndarray:
    if not same:
        return x.sum(axis=-1, keepdims=True)
    total = x[..., 0:1]
    for i in range(1, x.shape[-1]):
        total = op(total + x[..., i:i + 1])
    return total


def run(problem: Problem, Q, K, V, visible, dtype: str, recipe, fill: float, subtract: bool, policy):
    """(stored stages, unrounded stages, (x − m, e^(x − m), their row sums), the weights before `policy`) for inputs already
    in `dtype`: the steps of the module docstring. `policy(weights)` gives the rows whose every key is
    masked (0/0 = NaN with a −∞ fill) the masked-rows policy's weights before the output reads them."""
    compute, rnd, op = _rounder(dtype, recipe)
    same = recipe is not None and recipe.accumulate == "same"
    keep = (lambda name, x: rnd(x)) if recipe is None or recipe.store == "stages" else \
        (lambda name, x: rnd(x) if name == "output" else x)
    scale = compute.type(problem.scale if problem.scale is not None else 1.0 / np.sqrt(Q.shape[-1]))
    Q, K, V = (np.asarray(m, compute) for m in (Q, K, V))
    before, stored = {}, {}

    def stage(name, value):
        before[name] = value
        stored[name] = keep(name, value)
        return stored[name]

    x = stage("scores", _dot(Q, K.transpose(0, 2, 1), op, same))  # (H, Lq, Lk)
    x = stage("scaled", x * scale)  # a stage's last operation is rounded as it is stored
    if visible is not None:
        x = stage("masked", np.where(visible, x, rnd(np.asarray(fill, compute))))
    m = x.max(axis=-1, keepdims=True) if subtract else np.zeros_like(x[..., :1])  # (H, Lq, 1)
    shifted = op(x - m)
    exps = op(np.exp(shifted))
    sums = _sum_rows(exps, op, same)  # (H, Lq, 1)
    weights = stage("weights", exps / sums)
    raw = weights
    weights = stored["weights"] = keep("weights", policy(weights))  # the policy's 1/Lk is stored in the dtype too
    stage("output", _dot(weights, V, op, same))  # (H, Lq, d_v)
    return stored, before, (shifted, exps, sums), raw


def as_stored(lab: Lab, name: str, values: np.ndarray) -> np.ndarray:
    """`values` (float64) as a run by `lab`'s recipe stores stage `name`: rounded to the dtype (through
    float32, as the run rounds), or to float32 where the recipe keeps the stage there; float32 and
    float64 runs: in their own dtype. As float64 (marking's follow-through carries a learner's numbers
    through the stages the way the run would: 2055 is 2056 in float16)."""
    with np.errstate(over="ignore", invalid="ignore"):
        single = np.asarray(values, np.float64).astype(np.float32)
        if lab.recipe is None:
            return np.asarray(values, np.float64).astype(lab.dtype).astype(np.float64)
        if not lab.recipe.stored(name):
            return single.astype(np.float64)
        return single.astype(numpy_dtype(lab.dtype)).astype(np.float64)


def products(lab: Lab, weights: np.ndarray, V: np.ndarray) -> np.ndarray:
    """weight_j × v_j for one query row (weights (Lk,), V (Lk, d_v), as stored) as the weighted sum
    makes them: in float32 (exact for two bfloat16 or float16 numbers), each rounded to the dtype
    under recipe `same`; as float64 (Lk, d_v)."""
    compute, _, op = _rounder(lab.dtype, lab.recipe)
    with np.errstate(over="ignore"):
        made = op(np.asarray(weights, compute)[:, None] * np.asarray(V, compute))
    return made.astype(np.float64)


def _ulp(x: np.ndarray, dtype: str) -> np.ndarray:
    """One unit in the last place of `dtype` at |x| (float64): 2^(e − mantissa bits), e = ⌊log₂|x|⌋,
    at least the smallest normal's exponent (subnormals and 0 share its ulp)."""
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(np.abs(x)))
    e = np.maximum(np.where(np.isfinite(e), e, recipes.MIN_EXPONENT[dtype]), recipes.MIN_EXPONENT[dtype])
    return np.exp2(e - recipes.MANTISSA[dtype])


def errors(stored: dict, reference: dict, dtype: str) -> dict:
    """{stage: {"abs", "rel", "ulps"}}: |stored − reference|, that over |reference| (NaN where the
    reference is 0 and the stored value is not), and in ulps of the dtype at the reference."""
    found = {}
    for name, value in stored.items():
        ref = reference[name]
        with np.errstate(invalid="ignore", divide="ignore"):
            diff = np.abs(value.astype(np.float64) - ref)
            diff = np.where(value.astype(np.float64) == ref, 0.0, diff)  # −∞ = −∞ (a masked cell)
            rel = np.where(diff == 0, 0.0, diff / np.abs(ref))
            rel = np.where(np.isinf(rel), np.nan, rel)
        found[name] = {"abs": diff, "rel": rel, "ulps": diff / _ulp(ref, dtype)}
    return found


def _policy(problem: Problem, dead: np.ndarray):
    """The masked-rows policy for the rows whose every key is masked (−∞ fill): 0 or 1/Lk (the
    error policy is refused before, by `attend`)."""
    def apply(weights: np.ndarray) -> np.ndarray:
        if not dead.any():
            return weights
        fill = 1.0 / weights.shape[-1] if problem.masked_rows == "uniform" else 0.0
        return np.where(dead[..., None], weights.dtype.type(fill), weights)
    return apply


def refuse(problem: Problem, present: tuple[str, ...], source: str | None = None) -> None:
    """The lab computes scores, scaled, masked (a mask's rules), weights and output from Q, K, V:
    anything else it refuses by name, never skips (`source`: what asked for the lab, when not the
    problem's own settings: `--error`)."""
    extra = [name for name in present if name not in LAB_STAGES]
    setting = "dtype" if problem.dtype in recipes.LOW_DTYPES else \
        "mask_fill" if problem.mask_fill != -np.inf else "max_subtraction"
    where = f"in {problem.dtype}" if setting == "dtype" else f"with {setting.replace('_', ' ')} set"
    if extra:
        raise InputError(f"the precision lab computes {', '.join(LAB_STAGES)}; this problem has the stage "
                         f"{extra[0]}, which it cannot compute {where}", source, field=setting)
    # A variant that joins a stage the lab computes (ALiBi and T5's bias join masked, sinks the softmax)
    # is refused too: the lab's masked and weights are the mask's and the plain softmax's alone.
    joined = [variant.name for variant in variants.VARIANTS if variant.present(problem)]
    if joined:
        raise InputError(f"the precision lab computes attention from Q, K and V with a mask; this problem has "
                         f"{joined[0]}, which it cannot compute {where}", source, field=setting)
    for name in ("X", "W_O", "bias"):
        if name in problem.inputs or (name == "bias" and problem.bias is not None):
            raise InputError(f"the precision lab computes attention from Q, K and V; this problem has {name}",
                             source, field=setting)
    if problem.dO is not None:
        raise InputError("the precision lab has no backward pass; drop dO", source, field=setting)


def _heads(problem: Problem, given: dict) -> dict:
    """Q (H, Lq, d_k), K and V (H, Lk, ·) split into heads (kv heads repeated, attncli/problem/groups.py)."""
    split = {name: a if a.ndim == 3 else split_heads(a, n) for (name, a), n in
             zip(given.items(), (problem.heads,) + (groups.count(problem),) * 2)}
    return {name: groups.repeat(a, split["Q"].shape[0]) if name != "Q" else a for name, a in split.items()}


def attend(problem: Problem, present: tuple[str, ...], source: str | None = None) -> Trace:
    """The lab's trace: the stored stages (as float64, exactly), the float64 reference's errors, the
    first non-finite value, and a warning for each thing the lab found (`source`: what asked for the
    lab when the problem's settings did not, as `refuse`)."""
    refuse(problem, present, source)
    dtype = problem.dtype
    recipe = recipes.recipe(problem)
    compute, rnd, _ = _rounder(dtype, recipe)
    acc = "float32" if recipe is not None and recipe.accumulate == "float32" else dtype
    with np.errstate(over="ignore"):  # as the dtype holds it: −1e9 is −∞ in float16 (a warning says so)
        fill = float(rnd(np.asarray(recipes.fill_value(problem), compute)))
    given = _heads(problem, {name: np.asarray(problem.inputs[name], np.float64) for name in INPUTS})
    with np.errstate(over="ignore"):  # an input past the dtype's range is ±∞, named where it is born
        low = {name: rnd(array.astype(compute)) for name, array in given.items()}
    Q, K, V = low["Q"], low["K"], low["V"]
    visible = masks.visible(problem)
    dead = np.zeros(Q.shape[:2], bool)  # (H, Lq): every key masked, under a −∞ fill
    if visible is not None and fill == -np.inf:
        dead = ~np.broadcast_to(visible, Q.shape[:2] + (K.shape[1],)).any(axis=-1)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        stored, before, (shifted, exps, sums), raw = run(problem, Q, K, V, visible, dtype, recipe, fill, problem.max_subtraction,
                                        _policy(problem, dead))
        reference = run(problem, *(m.astype(np.float64) for m in (Q, K, V)), visible, "float64", None, fill, True,
                        _policy(problem, dead))[0]
    birth = first_nonfinite({**stored, "weights": raw}, before, exps,
                            {name: (given[name], low[name]) for name in INPUTS}, visible, dtype, acc,
                            problem.max_subtraction, sums)
    if dead.any() and problem.masked_rows == "error":
        masked_rows_warnings(problem, dead, f", so its softmax is 0/0 ({birth.line()})")  # raises
    stored64 = {name: value.astype(np.float64) for name, value in stored.items()}
    if birth is not None and birth.stage == "weights" and dead[birth.head, birth.query]:  # the policy's number
        birth = replace(birth, stored=float(stored64["weights"][birth.head, birth.query, birth.key]))
    lab = Lab(dtype, recipe, fill, {n: v.astype(np.float64) for n, v in before.items()}, shifted.astype(np.float64),
              exps.astype(np.float64), sums.astype(np.float64),
              reference, errors(stored64, reference, dtype), birth)
    concat = merge_heads(stored64["output"])
    scale = problem.scale if problem.scale is not None else 1 / np.sqrt(Q.shape[-1])
    return Trace(problem=problem, scale=float(scale), Q=Q.astype(np.float64), K=K.astype(np.float64),
                 V=V.astype(np.float64), stages=stored64, concat=concat, final=concat,
                 fully_masked=tuple((int(h), int(i)) for h, i in np.argwhere(dead)),
                 warnings=tuple(notices(problem, birth, fill, visible, stored64, dead)), precision=lab)


def row_birth(trace: Trace, head: int, row: int) -> Birth | None:
    """The first non-finite value of query `row` of `head` of a lab run (births.first_nonfinite on the
    row: its q, the head's K and V, then its stages), with the trace's indices; None when it has none."""
    lab, p = trace.precision, trace.problem
    given = _heads(p, {name: np.asarray(p.inputs[name], np.float64) for name in INPUTS})
    part = lambda a: a[head:head + 1, row:row + 1]  # noqa: E731
    inputs = {"Q": (part(given["Q"]), part(trace.Q))} | {name: (given[name][head:head + 1], getattr(trace, name)[head:head + 1])
                                                        for name in ("K", "V")}
    visible = masks.visible(p)
    if visible is not None:
        visible = part(np.broadcast_to(visible, trace.stages["scores"].shape))
    acc = "float32" if lab.recipe is not None and lab.recipe.accumulate == "float32" else p.dtype
    born = first_nonfinite({n: part(v) for n, v in trace.stages.items()}, {n: part(v) for n, v in lab.unrounded.items()},
                           part(lab.exps), inputs, visible, p.dtype, acc, p.max_subtraction, part(lab.sums))
    if born is None:
        return None
    return replace(born, head=head, query=row if born.stage not in ("K", "V") else born.query)
