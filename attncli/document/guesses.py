"""Why a captured layer differs from its model, most likely: the conventions people (and capture
families) get wrong, one record each, tried in turn on a document whose recomputation differs from
its `reference` (attncli/document/agreement.py). Each guess rewrites the document with the other
convention; the first whose recomputation agrees with the model is named, as `attn check` names a
learner's mistake by recomputing a stage with it (attncli/marking/mistakes.py).

    rope_style     RoPE pairing: half (rotate_half) ↔ interleaved (rotate_every_two)
    window         a sliding window one key wider or narrower (Hugging Face's W vs W + 1 keys)
    no_window      a window the model does not have
    window_missing a causal sliding window the document lacks (of the size the model's weights show)
    scale          the scale: 1 (T5, or Q scaled by the model beforehand) ↔ 1/√d_k
    alibi          ALiBi missing (the paper's slopes), or written where the model has none
    causal         the causal mask missing, or written for a bidirectional model

A guess is `Guess(name, tries)`: `tries(doc)` yields (the document with the other convention, the
reason in words). Adding one is one record in GUESSES.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from attncli.base.errors import AttnError

Tries = Callable[[dict], Iterator[tuple[dict, str]]]
STYLES = {"half": "half (rotate_half: dim i with i + dims/2)",
          "interleaved": "interleaved (rotate_every_two: dims 2i, 2i + 1)"}


@dataclass(frozen=True)
class Guess:
    name: str
    tries: Tries


def _rope_style(doc: dict):
    rope = doc.get("rope")
    if not isinstance(rope, dict) and rope is not True:
        return
    rope = {} if rope is True else rope
    given = rope.get("style", "half")
    other = "interleaved" if given == "half" else "half"
    yield (dict(doc, rope=dict(rope, style=other)),
           f"the RoPE pairing: the model's is {STYLES[other]}, the document's {STYLES.get(given, given)}")


def _window(doc: dict):
    window = doc.get("window")
    if not (isinstance(window, list) and len(window) == 2 and all(isinstance(w, int) for w in window)):
        return
    before, after = window
    for wider in (1, -1):
        if before + wider >= 0:
            changed = [before + wider, after + (wider if after else 0)]
            yield (dict(doc, window=changed),
                   f"the sliding window off by one: the model's window is {changed}, the document's {window} "
                   "(Hugging Face's sliding_window W is [W − 1, 0]: W keys, the query's own among them)")
    yield {k: v for k, v in doc.items() if k != "window"}, f"a window the model does not have (the document's {window})"


def _window_missing(doc: dict):
    """A causal window the document lacks, of the size the model's own weights show: the farthest
    key back (by position) that any query gives weight to, plus one."""
    reference = doc.get("reference") or {}
    if doc.get("window") is not None or not doc.get("causal") or reference.get("weights") is None:
        return
    weights = np.asarray(reference["weights"], dtype=np.float64)  # (H, Lq, Lk)
    lq, lk = weights.shape[-2:]
    q = np.asarray(doc.get("q_positions", range(lk - lq, lk) if "q_positions" not in doc and lq != lk else range(lq)))
    k = np.asarray(doc.get("k_positions", range(lk)))
    seen = (weights > 0).any(axis=0)  # (Lq, Lk)
    if not seen.any():
        return
    back = max(int(q[i] - k[seen[i]].min()) for i in range(lq) if seen[i].any())
    size = back + 1
    if size < lk:
        yield (dict(doc, window=[size - 1, 0]),
               f"a sliding window the document lacks: the model sees {size} keys, the query's own among them "
               f"(sliding_window {size}, attncli's window [{size - 1}, 0])")


def _scale(doc: dict):
    scale = doc.get("scale")
    if scale is not None and scale != 1:
        yield dict(doc, scale=1.0), f"the scale: the model multiplies Q Kᵀ by 1 (as T5), the document by {scale:.6g}"
    if scale is not None:
        yield ({k: v for k, v in doc.items() if k != "scale"},
               f"the scale: the model's is 1/√d_k, the document's {scale:.6g}")


def _alibi(doc: dict):
    if doc.get("alibi") in (None, False):
        yield dict(doc, alibi=True), "ALiBi missing: the model adds −slope · |i − j| (the paper's slopes)"
    else:
        yield ({k: v for k, v in doc.items() if k not in ("alibi", "alibi_slopes")},
               "ALiBi written where the model has none")


def _causal(doc: dict):
    if doc.get("causal"):
        yield {k: v for k, v in doc.items() if k != "causal"}, "the causal mask: the model is bidirectional"
    elif doc.get("mask") is None:
        yield dict(doc, causal=True), "the causal mask missing: the model is causal"


GUESSES: tuple[Guess, ...] = (
    Guess("rope_style", _rope_style),
    Guess("window", _window),
    Guess("window_missing", _window_missing),
    Guess("scale", _scale),
    Guess("alibi", _alibi),
    Guess("causal", _causal),
)


def likely(doc: dict, agrees: Callable[[dict], bool]) -> str | None:
    """The first guess whose rewritten document `agrees` with the model, in words; None when none does.
    `agrees` recomputes a document and compares it with its reference; a rewrite attncli refuses (an
    AttnError) is not the reason."""
    for guess in GUESSES:
        for changed, words in guess.tries(doc):
            try:
                if agrees(changed):
                    return words
            except AttnError:
                continue
    return None


TRIED = "RoPE pairing, sliding window, scale, ALiBi, causal mask"  # the guesses, for a line saying none fits
