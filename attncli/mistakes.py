"""Recompute a head's stages the way a learner might have: from their own earlier stage, with a
common mistake, or with an intermediate stage rounded. Pure numpy: no I/O.

`attncli.marking` uses these to tell carried, rounding-carried and diagnosed cells apart.
"""

from __future__ import annotations

import math

import numpy as np

from attncli import masks
from attncli.attention import mask_scores, softmax
from attncli.masks import visible
from attncli.trace import STAGES, Trace, head_slice, round_finite

# id: (the stage where it happens, what the learner did)
MISTAKES = {
    "no_scale": ("scaled", "forgot to divide the scores by √d_k"),
    "scale_by_dk": ("scaled", "divided the scores by d_k instead of √d_k"),
    "scale_multiplied": ("scaled", "multiplied the scores by √d_k instead of dividing"),
    "mask_ignored": ("masked", "did not apply the mask"),
    "mask_inverted": ("masked", "inverted the mask: kept the positions that should be blocked"),
    "mask_transposed": ("masked", "applied the mask transposed (for a causal mask: each query kept the later "
                                  "keys instead of the earlier ones)"),
    "mask_zero": ("masked", "wrote 0 where the mask blocks, instead of −∞ (e^−∞ = 0, but e^0 = 1)"),
    "no_exp": ("weights", "normalised the scores by their sum without taking e^x first"),
    "softmax_wrong_axis": ("weights", "normalised each column (over queries) instead of each row (over keys)"),
    "no_softmax": ("weights", "used the scaled scores as weights without a softmax"),
    "argmax": ("weights", "gave the largest score all the weight (argmax) instead of a softmax"),
    "percent": ("weights", "wrote the weights as percentages: a weight is a fraction (76.79% is 0.7679)"),
    "transposed_k": ("scores", "multiplied Q by K where Kᵀ was needed"),
    "values_transposed": ("output", "multiplied the weights by Vᵀ instead of V"),
}
# Mistakes in the final output of several heads or a W_O projection.
FINAL_MISTAKES = {
    "no_output_projection": "gave the heads side by side without multiplying by W_O",
    "no_output_bias": "multiplied by W_O but did not add b_O",
}
# Diagnoses that are not a recomputation with a mistake.
TRANSPOSED = "transposed"
TRANSPOSED_TEXT = "wrote the matrix transposed: each row should be one query"
ROUNDED_EARLY = "rounded_early"


def present(trace: Trace) -> tuple[str, ...]:
    """The stages this problem has (`masked` only with a mask or bias)."""
    return tuple(s for s in STAGES if s != "masked" or trace.masked is not None)


def span(trace: Trace, start: str | None, stop: str) -> tuple[str, ...]:
    """The stages recomputed after `start` (None: from Q and K) up to and including `stop`."""
    stages = present(trace)
    return stages[stages.index(start) + 1 if start else 0: stages.index(stop) + 1]


def step(trace: Trace, head: int, stage: str, previous: np.ndarray | None, mistake: str | None = None,
         scale: float | None = None):
    """Stage `stage` of one head from the stage before it, optionally with a mistake or with
    `scale` in place of the problem's (a learner's rounded 1/√d_k)."""
    p = trace.problem
    Q, K, V = trace.Q[head], trace.K[head], trace.V[head]  # (Lq, d_k), (Lk, d_k), (Lk, d_v)
    d_k = Q.shape[-1]
    with np.errstate(all="ignore"):
        if stage == "scores":
            if mistake == "transposed_k":
                return Q @ K if Q.shape[1] == K.shape[0] == K.shape[1] else None
            return Q @ K.T
        if stage == "scaled":
            factor = {"no_scale": 1.0, "scale_by_dk": 1.0 / d_k, "scale_multiplied": np.sqrt(d_k)}
            return previous * factor.get(mistake, trace.scale if scale is None else scale)
        if stage == "masked":
            mask = head_slice(visible(p), head)
            if mistake in ("mask_ignored", "mask_inverted", "mask_transposed") and mask is None:
                return None
            if mistake == "mask_transposed" and mask.shape[0] != mask.shape[1]:
                return None
            if mistake == "mask_transposed":
                mask = mask.T  # (Lq, Lk) square: a causal mask as triu instead of tril
            mask = None if mistake == "mask_ignored" else (~mask if mistake == "mask_inverted" else mask)
            masked = mask_scores(previous, mask, head_slice(masks.bias(p), head))
            return np.where(np.isneginf(masked), 0.0, masked) if mistake == "mask_zero" else masked
        if stage == "weights":
            if mistake == "no_softmax":
                return previous
            if mistake == "no_exp":
                plain = np.where(np.isneginf(previous), 0.0, previous)
                return plain / plain.sum(axis=-1, keepdims=True)
            if mistake == "argmax":  # a tie shares the weight
                top = previous == previous.max(axis=-1, keepdims=True)
                return top / top.sum(axis=-1, keepdims=True)
            if mistake == "percent":
                return softmax(previous, p.masked_rows)[0] * 100
            if mistake == "softmax_wrong_axis":
                return softmax(previous.T, p.masked_rows)[0].T
            return softmax(previous, p.masked_rows)[0]
        if stage == "output":
            if mistake == "values_transposed":
                return previous @ V.T if previous.shape[1] == V.shape[1] == V.shape[0] else None
            return previous @ V
    raise ValueError(stage)


def chain(trace: Trace, head: int, start: str | None, values: np.ndarray | None, stop: str,
          mistake: str | None = None, rounded: tuple[tuple[str, ...], int] | None = None,
          scale: float | None = None) -> np.ndarray | None:
    """Recompute from stage `start` (the learner's `values`; None: from Q and K) up to `stop`,
    making `mistake` at its stage. `rounded` = (stages, k) rounds those stages to k decimals on
    the way, as a learner who writes each stage down and carries the written numbers; `scale`
    replaces the problem's scale."""
    current = values
    for name in span(trace, start, stop):
        current = step(trace, head, name, current, mistake if MISTAKES.get(mistake, ("",))[0] == name else None,
                       scale)
        if current is None:
            return None
        if rounded and name in rounded[0] and name != stop:
            current = round_finite(current, rounded[1])
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


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"
