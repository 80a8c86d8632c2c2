"""Recompute a head's stages the way a learner might have: from their own earlier stage, with a
common mistake, or with an intermediate stage rounded. Pure numpy: no I/O.

`attncli.marking.marks` uses these to tell carried, rounding-carried and diagnosed cells apart.
"""

from __future__ import annotations

import math
from dataclasses import replace
from types import MappingProxyType
from typing import Callable, Mapping, NamedTuple

import numpy as np

from attncli.base.arrays import round_finite
from attncli.base.errors import plural
from attncli.base.rule_words import sliding_window, window_rule
from attncli.compute.attention import head_inputs
from attncli.compute.precision import as_stored
from attncli.problem import groups, masks
from attncli.problem.rope import STYLES
from attncli.problem.rules import Causal, Window, find, swap
from attncli.problem.trace import Trace
from attncli.stages import table as stages
from attncli.stages.table import mask_scores, softmax


class Mistake(NamedTuple):
    stage: str  # the stage whose compute function it replaces
    text: str  # what the learner did
    compute: Callable  # (Block of one head, the stage before it (1, Lq, ·)) -> (1, Lq, ·), or None
    also: Mapping[str, Callable] = MappingProxyType({})  # further stages it replaces: name -> compute


def made_at(mistake: str | None, name: str, table: Mapping[str, Mistake] | None = None) -> bool:
    """Whether `mistake` (of `table`, else MISTAKES) replaces stage `name`'s compute function."""
    found = (MISTAKES if table is None else table).get(mistake) if mistake else None
    return found is not None and (name == found.stage or name in found.also)


def _other_pairing(rotate_which: str) -> Callable:
    """Q_rope or K_rope with the other pairing: half where interleaved was due, or the reverse."""
    def compute(block, x):
        rope = block.problem.rope
        other = replace(rope, style=STYLES[1 - STYLES.index(rope.style)])
        wrong = replace(block, problem=replace(block.problem, rope=other))
        return stages.get(rotate_which).compute(wrong, x)
    return compute


def _kv_tiled(which: str) -> Callable:
    """`scores` (or `output`) of query head h from K (or V) of kv head h mod kv_heads, as tiling K and
    V (jnp.tile, Tensor.repeat) gives, where repeat_kv's is h // (heads / kv_heads). None where the
    two agree, and with RoPE (its K_rope stands between)."""
    def compute(block, x):
        problem, h = block.problem, block.head
        n = groups.count(problem)
        if h is None or stages.inputs(problem) or h % n == groups.kv_head(problem, h):
            return None
        _, K, V = head_inputs(problem)  # one per query head; query head (h mod n) · group reads kv head h mod n
        other = slice((h % n) * (problem.heads // n), (h % n) * (problem.heads // n) + 1)
        return stages.get(which).compute(replace(block, K=K[other], V=V[other]), x)
    return compute


def _T(x: np.ndarray) -> np.ndarray:
    return x.swapaxes(-1, -2)  # (1, a, b) -> (1, b, a)


def _scaled_by(factor) -> Callable:
    return lambda block, x: x * factor(block.Q.shape[-1])


def _scaled_by_d_model(block, x):
    """The scores divided by √d_model (the model's width, every head's columns) instead of √d_k
    (one head's): not a mistake one can make with one head."""
    problem = block.problem
    d_k = block.Q.shape[-1]
    d_model = problem.inputs["X"].shape[-1] if "X" in problem.inputs else problem.heads * d_k
    return None if d_model == d_k else x / np.sqrt(d_model)


def _masked_with(change, square: bool = False) -> Callable:
    """The masked stage with the mask changed by `change(mask (1, Lq, Lk)) -> mask or None (no
    mask)`; not a mistake one can make without a mask, or (`square`) with a mask that is not square."""
    def compute(block, x):
        mask = block.visible()
        if mask is None or (square and mask.shape[-1] != mask.shape[-2]):
            return None
        return mask_scores(x, change(mask), block.bias())
    return compute


def _rules_of(change) -> Callable:
    """The masked stage under the rules of `change(problem) -> problem` (the learner's rules: a
    window one off, positions aligned at the other corner); None (not a mistake one can make here)
    when `change` returns None. The bias stays the problem's."""
    def compute(block, x):
        theirs = change(block.problem)
        if theirs is None:
            return None
        return mask_scores(x, block.rule(masks.visible(theirs, block.rows, block.cols)), block.bias())
    return compute


def _window_moved(step: int) -> Callable:
    """The window with each bound of 1 or more moved by `step` (a bound of 0, a window that ends
    at the query, is not miscounted; an unbounded side stays unbounded)."""
    def change(problem):
        window = find(problem, Window)
        if window is None:
            return None
        moved = replace(window, **{side: b + step if b else b for side, b in (("left", window.left),
                                                                             ("right", window.right))})
        if moved == window:
            return None
        return replace(problem, rules=swap(problem.rules, window, moved))  # alone, or a part of an OR
    return change


def _window_dropped(problem):
    """The rules without the window's bounds of 1 or more (a bound of 0, "no keys after the query",
    reads as the causal mask and is kept); None without a window, or when nothing would be left
    (that is `mask_ignored`)."""
    window = find(problem, Window)
    if window is None:
        return None
    kept = replace(window, **{side: b if b == 0 else None for side, b in (("left", window.left),
                                                                         ("right", window.right))})
    rules = tuple(kept if rule is window else rule for rule in problem.rules
                  if rule is not window or kept.left is not None or kept.right is not None)
    if kept == window or not rules:
        return None
    return replace(problem, rules=rules)


def _realigned(problem):
    """The causal rules aligned at the other corner: top-left (the default positions 0 … L − 1, a
    query's row number taken as its position) when the positions are not the default; bottom-right
    (queries at Lk − Lq … Lk − 1) when they are and Lq ≠ Lk. Other rules read the same positions."""
    if find(problem, Causal) is None:
        return None
    lq, lk = problem.lq, problem.lk
    top_left = masks.default_positions(lq), masks.default_positions(lk)
    if not (np.array_equal(problem.q_positions, top_left[0]) and np.array_equal(problem.k_positions, top_left[1])):
        return replace(problem, q_positions=top_left[0], k_positions=top_left[1])
    if lq == lk:
        return None  # top-left and bottom-right are the same square
    return replace(problem, q_positions=masks.lower_right_positions(lq, lk))


def _mask_zero(block, x):
    masked = stages.compute_masked(block, x)
    return np.where(np.isneginf(masked), 0.0, masked)


def _no_exp(block, x):
    plain = np.where(np.isneginf(x), 0.0, x)
    return plain / plain.sum(axis=-1, keepdims=True)


def _not_normalised(block, x):
    """e^x of each visible score, never divided by the row's sum."""
    blocked = np.isneginf(x)
    return np.where(blocked, 0.0, np.exp(np.where(blocked, 0.0, x)))


def _unweighted_sum(block, x):
    """Each query's output as the plain sum of the values of the keys it sees (every weight 1)."""
    seen = block.visible()  # (1, Lq, Lk) or None
    ones = np.ones(x.shape) if seen is None else np.broadcast_to(seen, x.shape).astype(float)
    return ones @ block.V  # (1, Lq, d_v)


def _keys_as_values(block, x):
    """weights · K: the keys where the values were due; not a mistake one can see when K is V."""
    if block.K.shape != block.V.shape or np.array_equal(block.K, block.V):
        return None
    return x @ block.K


def _argmax(block, x):  # a tie shares the weight
    top = x == x.max(axis=-1, keepdims=True)
    return top / top.sum(axis=-1, keepdims=True)


def _alibi_sign(block, x):
    """ALiBi added as +slope·|q_pos − k_pos| (a reward for distance) instead of −slope·|…|."""
    problem = block.problem
    if problem.alibi_slopes is None:
        return None
    slopes = problem.alibi_slopes if block.head is None else problem.alibi_slopes[block.head:block.head + 1]
    distance = masks.distances(problem.q_positions[block.rows], problem.k_positions[block.cols], x.dtype)  # (b, c)
    return stages.compute_masked(block, x) + 2 * slopes[:, None, None] * distance  # (1, Lq, Lk); −∞ stays


def _sink_left_out(block, x):
    if block.problem.sinks is None:
        return None
    return softmax(x, block.problem.masked_rows)[0]


MISTAKES = {
    "no_scale": Mistake("scaled", "forgot to divide the scores by √d_k", _scaled_by(lambda d_k: 1.0)),
    "scale_by_dk": Mistake("scaled", "divided the scores by d_k instead of √d_k", _scaled_by(lambda d_k: 1.0 / d_k)),
    "scale_multiplied": Mistake("scaled", "multiplied the scores by √d_k instead of dividing",
                                _scaled_by(np.sqrt)),
    "scale_by_d_model": Mistake("scaled", "divided the scores by √d_model (every head's width) instead of √d_k "
                                          "(one head's)", _scaled_by_d_model),
    "mask_ignored": Mistake("masked", "did not apply the mask", _masked_with(lambda mask: None)),
    "mask_inverted": Mistake("masked", "inverted the mask: kept the positions that should be blocked",
                             _masked_with(lambda mask: ~mask)),
    "mask_transposed": Mistake("masked", "applied the mask transposed (for a causal mask: each query kept the "
                                         "later keys instead of the earlier ones)",
                               _masked_with(_T, square=True)),
    "alibi_sign": Mistake("masked", "added +slope·|i − j| where ALiBi subtracts it (far keys are penalised, "
                                    "not favoured)", _alibi_sign),
    "mask_zero": Mistake("masked", "wrote 0 where the mask blocks, instead of −∞ (e^−∞ = 0, but e^0 = 1)", _mask_zero),
    "sink_left_out": Mistake("weights", "left the sink out of the softmax: each row's sum also holds e^sink, "
                                        "so the weights sum to less than 1", _sink_left_out),
    "window_off_by_one": Mistake("masked", f"let one key too many into the window: {window_rule()} "
                                           f"({sliding_window()}, W keys counting the query itself, not [W, 0])",
                                 _rules_of(_window_moved(+1))),
    "window_ignored": Mistake("masked", "ignored the sliding window: each query saw every earlier key, not only "
                                        f"the keys inside the window ({window_rule()})", _rules_of(_window_dropped)),
    "window_one_short": Mistake("masked", "let one key too few into the window, as if its ends were excluded: "
                                          f"{window_rule()}", _rules_of(_window_moved(-1))),
    "causal_misaligned": Mistake("masked", "aligned the causal mask at the wrong corner: a query sees the keys at "
                                           "or before its position (k_pos ≤ q_pos), not its row number: a KV-cache "
                                           "step's query at position t sees keys 0 … t (bottom-right); queries at "
                                           "the default positions 0 … Lq − 1 see keys 0 … i (top-left)",
                                 _rules_of(_realigned)),
    "no_exp": Mistake("weights", "normalised the scores by their sum without taking e^x first", _no_exp),
    "softmax_wrong_axis": Mistake("weights", "normalised each column (over queries) instead of each row (over keys)",
                                  lambda block, x: _T(softmax(_T(x), block.problem.masked_rows,
                                                              sinks=stages.sinks(block, x.dtype))[0])),
    "not_normalised": Mistake("weights", "took e^x of each score but never divided by the row's sum: the weights "
                                         "of a row must add up to 1", _not_normalised),
    "no_softmax": Mistake("weights", "used the scaled scores as weights without a softmax", lambda block, x: x),
    "argmax": Mistake("weights", "gave the largest score all the weight (argmax) instead of a softmax", _argmax),
    "percent": Mistake("weights", "wrote the weights as percentages: a weight is a fraction (76.79% is 0.7679)",
                       lambda block, x: stages.compute_weights(block, x) * 100),
    "transposed_k": Mistake("scores", "multiplied Q by K where Kᵀ was needed",
                            lambda block, x: block.Q @ block.K
                            if block.Q.shape[-1] == block.K.shape[-2] == block.K.shape[-1] else None),
    "rope_wrong_pairing": Mistake("Q_rope", "paired the wrong dims for RoPE: half (i with i + d/2, Llama rotate_half) "
                                            "and interleaved (2i with 2i+1, GPT-J) swapped",
                                  _other_pairing("Q_rope"),
                                  also=MappingProxyType({"K_rope": _other_pairing("K_rope")})),
    "rope_skipped": Mistake("Q_rope", "did not rotate Q and K by their positions (RoPE left out)",
                            lambda block, x: block.Q, also=MappingProxyType({"K_rope": lambda block, x: block.K})),
    "kv_head_tiled": Mistake("scores", "paired query head h with kv head h mod kv_heads (K and V tiled) instead of "
                                       "kv head h // (heads / kv_heads): repeat_kv gives each kv head a run of "
                                       "neighbouring query heads", _kv_tiled("scores"),
                             also=MappingProxyType({"output": _kv_tiled("output")})),
    "unweighted_sum": Mistake("output", "added up the value rows without weighting them: the output is Σ_j "
                                        "weight_j · V_j, not Σ_j V_j", _unweighted_sum),
    "keys_as_values": Mistake("output", "multiplied the weights by K where V was due", _keys_as_values),
    "values_transposed": Mistake("output", "multiplied the weights by Vᵀ instead of V",
                                 lambda block, x: x @ _T(block.V)
                                 if x.shape[-1] == block.V.shape[-1] == block.V.shape[-2] else None),
}
# Mistakes in the final output of several heads or a W_O projection.
FINAL_MISTAKES = {
    "no_output_projection": "gave the heads side by side without multiplying by W_O",
    "no_output_bias": "multiplied by W_O but did not add b_O",
}
# Mistakes in a projected problem's Q = X W_Q, K = X W_K, V = X W_V (attncli/marking/projections.py).
PROJECTION_MISTAKES = {
    "projection_transposed": "multiplied X by the weight matrix transposed (x Wᵀ, as PyTorch's Linear stores its "
                             "weight (out, in)); here W is (in, out): Q = X W_Q",
    "projection_swapped": "multiplied X by another projection's weight matrix (W_K or W_V where W_Q was due, …)",
    "no_projection_bias": "multiplied X by the weight matrix but did not add the bias",
}
# Diagnoses that are not a recomputation with a mistake.
TRANSPOSED = "transposed"
TRANSPOSED_TEXT = "wrote the matrix transposed: each row should be one query"
ROUNDED_EARLY = "rounded_early"


def present(trace: Trace) -> tuple[str, ...]:
    """The names of the stages this problem has (`masked` only with a mask or bias)."""
    return tuple(stage.name for stage in stages.present(trace.problem))


def span(trace: Trace, start: str | None, stop: str) -> tuple[str, ...]:
    """The stages recomputed after `start` (None: from Q and K) up to and including `stop`."""
    names = present(trace)
    return names[names.index(start) + 1 if start else 0: names.index(stop) + 1]


def step(trace: Trace, head: int, stage: str, previous: np.ndarray | None, mistake: str | None = None,
         scale: float | None = None, own: dict[str, np.ndarray] | None = None,
         table: Mapping[str, Mistake] | None = None):
    """Stage `stage` of one head from the stage before it (the stage table's compute function, or
    the mistake's in its place), optionally with `scale` in place of the problem's (a learner's
    rounded 1/√d_k). A stage that stands in for Q or K (Q_rope, K_rope) before `stage` does so
    with its `own` value (the learner's), else the trace's. None when the mistake cannot apply
    to these shapes. `table`: where `mistake` is defined (MISTAKES unless given: marking code
    adds its own, attncli/code/code_mistakes.py)."""
    one = slice(head, head + 1)
    order = present(trace)
    own = own or {}
    # (1, Lq, d_k), (1, Lk, d_k), (1, Lk, d_v): the learner's own Q, K, V of a projected problem when given
    inputs = {name: trace.stage(name)[one] if own.get(name) is None else own[name][None] for name in "QKV"}
    for earlier in stages.inputs(trace.problem):
        if order.index(earlier.name) < order.index(stage):
            value = own.get(earlier.name)
            inputs[earlier.replaces] = trace.stage(earlier.name)[one] if value is None else value[None]
    block = stages.Block(trace.problem, inputs["Q"], inputs["K"], inputs["V"],
                         trace.scale if scale is None else scale, head=head)
    if mistake:
        found = (MISTAKES if table is None else table)[mistake]
        compute = found.compute if found.stage == stage else found.also[stage]
    else:
        compute = stages.get(stage).compute
    with np.errstate(all="ignore"):
        result = compute(block, None if previous is None else previous[None])  # (1, Lq, ·)
    return None if result is None else result[0]


def chain(trace: Trace, head: int, start: str | None, values: np.ndarray | None, stop: str,
          mistake: str | None = None, rounded: tuple[tuple[str, ...], int] | None = None,
          scale: float | None = None, own: dict[str, np.ndarray] | None = None,
          table: Mapping[str, Mistake] | None = None) -> np.ndarray | None:
    """Recompute from stage `start` (the learner's `values`; None: from Q and K) up to `stop`,
    making `mistake` at its stage. `rounded` = (stages, k) rounds those stages to k decimals on
    the way, as a learner who writes each stage down and carries the written numbers; `scale`
    replaces the problem's scale; `own` holds the learner's earlier stages that stand in for Q
    or K (their Q_rope carried into their scores); `table`: where `mistake` is defined (as `step`)."""
    current = values
    own = dict(own or {})  # the learner's Q, K, V, Q_rope and K_rope, then the ones recomputed here
    if start is not None and values is not None:
        own[start] = values
    for name in span(trace, start, stop):
        current = step(trace, head, name, current, mistake if made_at(mistake, name, table) else None, scale, own,
                       table)
        if current is None:
            return None
        if trace.precision is not None:  # a low-precision run's stage as its dtype stores it (2055 → 2056)
            current = as_stored(trace.precision, name, current)
        if rounded and name in rounded[0] and name != stop:
            current = round_finite(current, rounded[1])
        own[name] = current
    return current


def rounded_scales(trace: Trace) -> list[tuple[float, str]]:
    """The default scale as a learner may have rounded it before using it: √d_k to k decimals
    (dividing by 1.41) or 1/√d_k to k decimals (multiplying by 0.71), k = 3, 2, 1; as
    (the scale used, what the learner did). None for a scale the problem sets."""
    root = math.sqrt(trace.d_k)
    if trace.scale != 1 / root:
        return []
    found = []
    for k in (3, 2, 1):
        for used, text in ((round(root, k), "√d_k was rounded to {} ({:.{}f}) before dividing"),
                           (round(1 / root, k), "the scale 1/√d_k was rounded to {} ({:.{}f}) before multiplying")):
            scale = 1 / used if text.startswith("√") else used
            if used and scale != trace.scale:
                found.append((scale, text.format(plural(k, "decimal"), used, k)))
    return found


def roundings(steps: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Which intermediate stages a learner may have rounded: each one alone, then all of them."""
    middle = steps[:-1]
    return [(name,) for name in middle] + ([middle] if len(middle) > 1 else [])


def rounding_text(stages: tuple[str, ...]) -> str:
    return ", ".join(stages)

