"""Fresh practice problems with numbers that are easy by hand.

Only Python's `random.Random(seed)` is used (not numpy's generators), so the same seed gives the
same problem on every machine, Python 3 version and numpy version. Seeds are whole numbers ≥ 0
(`random.Random(-7)` is `random.Random(7)`, so negative seeds would silently repeat problems).

Kinds:
- plain: Q, K and V given; queries and keys are different words (as in cross-attention).
- causal: self-attention over one sentence (the same words as queries and keys), causal mask.
- multihead: self-attention from X with projections W_Q, W_K, W_V (heads side by side) and W_O.
- cross: queries from X, keys and values from X_kv, with projections.
- posenc: self-attention from token embeddings E plus sinusoidal positional encodings PE
  (rounded to 2 decimals, as printed tables are), X = E + PE, then projections.
- window: `causal` with a sliding window [W − 1, 0] (Hugging Face sliding_window = W): each word
  sees itself and the W − 1 words before it, W − 1 = max(1, (keys − 1) // 2), so the window hides
  a key from at least one query (keys ≥ 3).
- decode: one KV-cache decoding step: the last word's query at position t = keys − 1 over the
  cached keys at positions 0 … t, causal (`q_positions: [t]`): bottom-right, it sees every key.
- rope: causal self-attention with Q, K and V given and rotary positions (`rope: true`: half
  pairing, base 10000, positions 1 … L: at 0 nothing would turn); d_k (--dim) must be even, 4 by
  default at the CLI.
- alibi: causal self-attention with ALiBi, −slope·|i − j| added to the scaled scores; slopes that
  are easy by hand (0.5, 0.25, … one per head), not the paper's (2^−8 for one head).
No two keys of a problem are identical (they would get identical weights): the keys are re-drawn.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

import numpy as np

from attncli.choices import EXERCISE_KINDS as KINDS
from attncli.errors import InputError
from attncli.posenc import positional_encoding

WORDS = ("the", "cat", "sat", "on", "mat", "dog", "ran", "home", "she", "read", "a", "book", "he",
         "saw", "it", "bird", "sang", "we", "ate", "soup", "red", "car", "went", "fast", "sun", "rose",
         "tea", "was", "hot", "rain", "fell", "they", "made", "bread", "old", "man", "sea", "blue",
         "door", "shut")
QK_VALUES = (-2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2)
V_VALUES = (-3, -2, -1, 0, 1, 2, 3)
X_VALUES = (-2, -1, 0, 1, 2, 3)  # six values: up to six different one-number keys
W_VALUES = (-1, 0, 0, 1)  # projections: mostly 0 and ±1, so x W is a few additions
W_O_VALUES = (0, 0.5, 1)
SELF = ("causal", "multihead", "posenc", "window", "rope", "alibi")  # self-attention kinds: one sentence, queries = keys
CAUSAL = ("causal", "window", "decode", "rope", "alibi")  # kinds with the causal rule
REDRAWS = 1000  # attempts at keys that are all different before giving up


@dataclass(frozen=True)
class Options:
    """Everything that decides a problem; `attn exercise` says it as the command that reproduces it."""

    seed: int
    kind: str = "plain"
    queries: int | None = None  # None: 1, or the sentence length (keys) for self-attention
    keys: int = 3
    dim: int = 2
    value_dim: int | None = None
    heads: int = 1
    mask: str | None = None  # "causal", "random" or None

    @property
    def self_attention(self) -> bool:
        return self.kind in SELF or (self.mask == "causal" and self.kind != "decode")

    @property
    def lq(self) -> int:
        return self.keys if self.self_attention else (self.queries or 1)


@dataclass(frozen=True)
class Exercise:
    """`doc` is `attn compute` input; `shown` the matrices a worksheet prints (for posenc, E and PE
    instead of their sum X); `options` what decided it; `command` the line that reproduces it (for
    the answer key only; the CLI fills it in from `options`)."""

    doc: dict
    shown: dict = field(default_factory=dict)
    options: Options | None = None
    command: str = ""


class ExerciseError(InputError):
    """Options that cannot make a problem (too many distinct keys asked of too few values)."""


def make_exercise(seed: int, queries: int | None = None, keys: int = 3, dim: int = 2,
                  value_dim: int | None = None, heads: int = 1, mask: str | None = None,
                  kind: str = "plain") -> dict:
    """The `attn compute` input document of one problem (see `build`)."""
    return build(Options(seed, kind, queries, keys, dim, value_dim, heads, mask)).doc


def build(options: Options) -> Exercise:
    o = options
    if o.kind not in KINDS:
        raise ExerciseError(f"kind is {o.kind!r}; expected one of {', '.join(KINDS)}", field="kind")
    if o.self_attention and o.queries not in (None, o.keys):
        raise ExerciseError(f"a {o.kind if o.kind in SELF else 'causal'} exercise is self-attention over one "
                            f"sentence, so queries ({o.queries}) must equal keys ({o.keys})", field="queries")
    if o.kind == "decode" and o.queries not in (None, 1):
        raise ExerciseError(f"a decode exercise is one KV-cache step of one query, so queries ({o.queries}) "
                            "must be 1", field="queries")
    if o.kind == "window" and o.keys < 3:
        raise ExerciseError(f"a window exercise needs 3 or more keys for its window to hide one "
                            f"(keys is {o.keys})", field="keys")
    if o.kind == "posenc" and o.dim * o.heads % 2:
        raise ExerciseError(f"a posenc exercise pairs sin and cos columns, so dim × heads "
                            f"({o.dim * o.heads}) must be even", field="dim")
    if o.kind == "rope" and o.dim % 2:
        raise ExerciseError(f"a rope exercise rotates pairs of dims, so dim ({o.dim}) must be even", field="dim")
    rng = random.Random(o.seed)
    value_dim = o.value_dim or o.dim
    lq, lk = o.lq, o.keys

    def matrix(rows: int, columns: int, values) -> list[list[float]]:
        return [[rng.choice(values) for _ in range(columns)] for _ in range(rows)]

    def projection(rows: int, columns: int, values=W_VALUES) -> list[list[float]]:
        """A weight matrix with no all-zero column (it would zero a feature for every token)."""
        drawn = [[rng.choice(values) for _ in range(rows)] for _ in range(columns)]
        drawn = [column if any(column) else [1] + column[1:] for column in drawn]
        return [list(row) for row in zip(*drawn)]

    def distinct(draw):
        """Call `draw() -> (matrices, keys)` until the keys' rows are all different."""
        for _ in range(REDRAWS):
            drawn, keys = draw()
            if len({tuple(row) for row in keys}) == len(keys):
                return drawn
        raise ExerciseError(f"could not draw {lk} different keys of width {o.dim * o.heads}; "
                            "ask for fewer keys or a wider dim", field="keys")

    one_sentence = o.self_attention or o.kind == "decode"
    words = rng.sample(WORDS, min(len(WORDS), lk if one_sentence else lq + lk))
    if o.kind == "decode":  # the newest word's query over the cached keys of the sentence so far
        key_labels = [_label(words, i) for i in range(lk)]
        query_labels = key_labels[-1:]
    else:
        query_labels = [_label(words, i) for i in range(lq)]
        key_labels = query_labels if o.self_attention else [_label(words, lq + i) for i in range(lk)]
    doc: dict = {"title": "Exercise",
                 "description": f"Compute the attention weights and output for "
                                f"{'each query' if lq > 1 else 'the query'}"}
    shown: dict = {}
    width = o.dim * o.heads
    if o.kind in ("plain",) + CAUSAL:
        Q = matrix(lq, width, QK_VALUES)
        K = distinct(lambda: (lambda k: (k, k))(matrix(lk, width, QK_VALUES)))
        doc |= {"Q": Q, "K": K, "V": matrix(lk, value_dim * o.heads, V_VALUES)}
    else:
        d_model = width
        if o.kind == "cross":
            doc["X"] = matrix(lq, d_model, X_VALUES)
            X_kv, W_K = distinct(lambda: _keys(matrix(lk, d_model, X_VALUES), projection(d_model, width)))
            doc |= {"X_kv": X_kv, "W_Q": projection(d_model, width), "W_K": W_K}
        else:
            pe = _positional(lk, d_model) if o.kind == "posenc" else None
            E, W_K = distinct(lambda: _keys(matrix(lk, d_model, X_VALUES), projection(d_model, width), pe))
            doc["X"] = E if pe is None else _add(E, pe)
            if pe is not None:
                shown |= {"E": E, "PE": pe}
                doc["description"] += ("; X = E + PE: token embeddings plus sinusoidal positional "
                                       "encodings (rounded to 2 decimals)")
            doc |= {"W_Q": projection(d_model, width), "W_K": W_K}
        doc["W_V"] = projection(d_model, value_dim * o.heads)
        if o.kind == "multihead":
            doc["W_O"] = projection(value_dim * o.heads, d_model, W_O_VALUES)
    doc |= {"query_labels": query_labels, "key_labels": key_labels}
    if o.heads > 1:
        doc["heads"] = o.heads
    if o.kind == "alibi":
        doc["alibi"] = [0.5 ** (h + 1) for h in range(o.heads)]  # 0.5, 0.25, …: exact in few decimals
        doc["description"] += "; ALiBi: add −slope·|i − j| to each scaled score (a penalty for distance)"
    if o.mask == "random":
        grid = [[rng.random() < 0.7 for _ in range(lk)] for _ in range(lq)]
        for row in grid:
            if not any(row):
                row[rng.randrange(lk)] = True  # every query keeps at least one key
        doc["mask"] = grid
        if o.kind in CAUSAL:
            doc["causal"] = True
    elif o.mask == "causal" or o.kind in CAUSAL:
        doc["mask"] = "causal"
    if o.kind == "rope":
        doc["rope"] = True
        # From 1: at position 0 nothing turns, and a row copied unrotated would be marked right.
        doc["q_positions"] = doc["k_positions"] = list(range(1, lk + 1))
        doc["description"] += (f"; rotate Q and K by their positions 1 … {lk} first (RoPE: dim i pairs with "
                               "i + d/2, θ_i = 10000^(−2i/d))")
    rules = _position_rules(o.kind, lk)
    doc |= rules
    if rules:
        left = rules.get("window", [0])[0]
        doc["description"] += _RULE_TEXT[o.kind].format(t=lk - 1, query=query_labels[0], W=left + 1,
                                                        before=f"{left} word{'s' * (left != 1)}", **rules)
    matrices = [k for k in ("Q", "K", "V", "X", "X_kv", "W_Q", "W_K", "W_V", "W_O") if k in doc]
    shown = shown | {k: doc[k] for k in matrices if not (shown and k == "X")}  # E and PE first
    return Exercise(doc=doc, shown=shown, options=o)


_RULE_TEXT = {
    "window": ", with causal attention in the sliding window {window}: each word sees itself and at most "
              "{before} before it (Hugging Face sliding_window = {W})",
    "decode": "; one KV-cache decoding step: the query of \"{query}\" is at position {t} and the cached keys at "
              "positions 0 … {t} (q_positions {q_positions}), causal: a key is visible when k_pos ≤ q_pos",
}


def _position_rules(kind: str, lk: int) -> dict:
    """The input keys of a window or decode exercise: the window [W − 1, 0], or the step's position."""
    if kind == "window":
        return {"window": [max(1, (lk - 1) // 2), 0]}
    if kind == "decode":
        return {"q_positions": [lk - 1]}
    return {}


def problem_set(options: Options, count: int) -> list[Exercise]:
    """`count` problems: problem k (from 0) is exactly `attn exercise --seed <seed + k>` with the
    same options, so each one's key can be made on its own."""
    return [build(replace(options, seed=options.seed + k)) for k in range(count)]


def _keys(X: list, W: list, pe: list | None = None):
    """((X, W_K), the keys they give): keys are the rows of (X + PE) W_K."""
    x = X if pe is None else _add(X, pe)
    return (X, W), [[sum(a * b for a, b in zip(row, column)) for column in zip(*W)] for row in x]


def _add(a: list, b: list) -> list:
    return [[round(x + y, 2) for x, y in zip(r, s)] for r, s in zip(a, b)]


def _positional(positions: int, dim: int) -> list[list[float]]:
    """Sinusoidal encodings rounded to 2 decimals (the numbers a printed table gives)."""
    return (np.round(positional_encoding(positions, dim), 2) + 0.0).tolist()  # + 0.0: no -0.0


def _label(words: tuple[str, ...] | list[str], i: int) -> str:
    return words[i] if i < len(words) else f"w{i}"
