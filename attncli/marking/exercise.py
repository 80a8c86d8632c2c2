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
- sinks, softcap, padding, backward: `plain` plus one thing: a sink logit per head (0, 0.5 or 1),
  softcap 2, the last key padding (`key_mask`), or a dO to run the backward pass from.
- gqa: grouped-query attention, query heads in pairs over one kv head each (3-D Q, K and V).
- tiles: `plain` with scale 1 and `tile_size` [BQ, BK]: the tiled online softmax (m, alpha, l, O).
No two keys of a problem are identical (they would get identical weights): the keys are re-drawn.
Nor does any query have only zeros, or the same weight for every key it sees: the whole problem is
re-drawn from the same generator (a seed whose first draw is sound keeps its problem).

Every problem says what it asks (`ask`: the stage names to answer; `tiles` or `slip` for those
exercises) and the least decimals a value needs (`decimals`): `attn check` reads them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np

from attncli.base.choices import EXERCISE_KINDS as KINDS
from attncli.base.errors import InputError, plural
from attncli.compute import attention
from attncli.compute.tiles import Tiles, attend_tiles
from attncli.document.reading import build_problem
from attncli.marking import slip
from attncli.problem.posenc import positional_encoding
from attncli.problem.trace import Trace
from attncli.stages import grads
from attncli.stages import table as stages

WORDS = ("the", "cat", "sat", "on", "mat", "dog", "ran", "home", "she", "read", "a", "book", "he",
         "saw", "it", "bird", "sang", "we", "ate", "soup", "red", "car", "went", "fast", "sun", "rose",
         "tea", "was", "hot", "rain", "fell", "they", "made", "bread", "old", "man", "sea", "blue",
         "door", "shut")
QK_VALUES = (-2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2)
V_VALUES = (-3, -2, -1, 0, 1, 2, 3)
X_VALUES = (-2, -1, 0, 1, 2, 3)  # six values: up to six different one-number keys
W_VALUES = (-1, 0, 0, 1)  # projections: mostly 0 and ±1, so x W is a few additions
W_O_VALUES = (0, 0.5, 1)
SINK_VALUES = (0, 0.5, 1)  # e^0 = 1: a sink as easy by hand as a score of 0
SOFTCAP = 2  # a cap that bends the larger scaled scores (|scaled| reaches 2 and more) and barely the small
DO_VALUES = (-1, 0, 1, 1, 2)
DEFAULT_TILES = (1, 2)
DECIMALS = 2  # the least decimals a value needs unless exact (as `attn check --decimals`' default)
PAD = "[PAD]"
PROJECTED = ("multihead", "cross", "posenc")  # kinds given X and projections, not Q, K, V
SLIP_KINDS = ("plain", "causal", "window", "decode", "rope", "alibi", "sinks", "softcap", "padding")
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
    tiles: tuple[int, int] | None = None  # (BQ, BK) of a tiles exercise; None: DEFAULT_TILES
    slip: bool = False  # find-the-slip: a worked solution with one planted mistake
    decimals: int = DECIMALS  # the least decimals the problem asks for

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
    worked: slip.Worked | None = None  # find-the-slip: the worked solution and its planted mistake
    trace: Trace | None = field(default=None, repr=False, compare=False)  # the problem computed
    tiled: Tiles | None = field(default=None, repr=False, compare=False)  # a tiles exercise's tiles


class ExerciseError(InputError):
    """Options that cannot make a problem (too many distinct keys asked of too few values)."""


def make_exercise(seed: int, queries: int | None = None, keys: int = 3, dim: int = 2,
                  value_dim: int | None = None, heads: int = 1, mask: str | None = None,
                  kind: str = "plain", **more) -> dict:
    """The `attn compute` input document of one problem (see `build`); `more`: tiles, slip, decimals."""
    return build(Options(seed, kind, queries, keys, dim, value_dim, heads, mask, **more)).doc


def build(options: Options) -> Exercise:
    """The problem `options` decide: drawn, then re-drawn (from the same generator, so a seed whose
    first draw is sound is unchanged) while it has identical keys, a zero query or uniform weights."""
    o = options
    _validate(o)
    rng = random.Random(o.seed)
    for _ in range(REDRAWS):
        doc, shown = _draw(o, rng)
        trace = attention.attend(build_problem(doc))
        if not degenerate(trace):
            return _finish(o, doc, shown, trace)
    raise ExerciseError(f"could not draw a problem without a zero query or uniform weights from these options "
                        f"(keys {o.keys}, dim {o.dim}); ask for a wider dim", field="dim")


def _validate(o: Options) -> None:
    if o.kind not in KINDS:
        raise ExerciseError(f"kind is {o.kind!r}; expected one of {', '.join(KINDS)}", field="kind")
    if o.self_attention and o.queries not in (None, o.keys):
        raise ExerciseError(f"a {o.kind if o.kind in SELF else 'causal'} exercise is self-attention over one "
                            f"sentence, so queries ({o.queries}) must equal keys ({o.keys})", field="queries")
    if o.kind == "decode" and o.queries not in (None, 1):
        raise ExerciseError(f"a decode exercise is one KV-cache step of one query, so queries ({o.queries}) "
                            "must be 1", field="queries")
    needs = {"window": (3, "for its window to hide one"), "padding": (2, "to pad one and keep one")}
    if o.kind in needs and o.keys < needs[o.kind][0]:
        raise ExerciseError(f"a {o.kind} exercise needs {needs[o.kind][0]} or more keys {needs[o.kind][1]} "
                            f"(keys is {o.keys})", field="keys")
    if o.kind == "posenc" and o.dim * o.heads % 2:
        raise ExerciseError(f"a posenc exercise pairs sin and cos columns, so dim × heads "
                            f"({o.dim * o.heads}) must be even", field="dim")
    if o.kind == "rope" and o.dim % 2:
        raise ExerciseError(f"a rope exercise rotates pairs of dims, so dim ({o.dim}) must be even", field="dim")
    if o.kind == "gqa" and (o.heads < 2 or o.heads % 2):
        raise ExerciseError(f"a gqa exercise groups query heads in pairs over one kv head each, so heads "
                            f"({o.heads}) must be even", field="heads")
    if o.slip and (o.kind not in SLIP_KINDS or o.heads != 1):
        raise ExerciseError(f"find-the-slip works one head with Q, K and V given; kind {o.kind} with "
                            f"{plural(o.heads, 'head')} is not one (kinds: {', '.join(SLIP_KINDS)})",
                            field="find_the_slip")


def _draw(o: Options, rng: random.Random) -> tuple[dict, dict]:
    """One draw of the problem: (the `attn compute` document, the matrices a worksheet shows)."""
    query_labels, key_labels = _labels(o, rng)
    doc: dict = {"title": "Exercise",
                 "description": f"Compute the attention weights and output for "
                                f"{'each query' if o.lq > 1 else 'the query'}"}
    shown = _matrices(o, rng, doc)
    doc |= {"query_labels": query_labels, "key_labels": key_labels}
    if o.heads > 1 and o.kind != "gqa":
        doc["heads"] = o.heads
    _variants(o, rng, doc)
    _mask(o, rng, doc)
    rules = _position_rules(o.kind, o.keys)
    doc |= rules
    if rules:
        left = rules.get("window", [0])[0]
        doc["description"] += _RULE_TEXT[o.kind].format(t=o.keys - 1, query=query_labels[0], W=left + 1,
                                                        before=plural(left, "word"), **rules)
    if o.kind == "padding":
        doc["key_labels"] = key_labels[:-1] + [PAD]
    matrices = [k for k in ("Q", "K", "V", "X", "X_kv", "W_Q", "W_K", "W_V", "W_O", "dO") if k in doc]
    return doc, shown | {k: doc[k] for k in matrices if not (shown and k == "X")}  # E and PE first


def _labels(o: Options, rng: random.Random) -> tuple[list[str], list[str]]:
    lq, lk = o.lq, o.keys
    one_sentence = o.self_attention or o.kind == "decode"
    words = rng.sample(WORDS, min(len(WORDS), lk if one_sentence else lq + lk))
    if o.kind == "decode":  # the newest word's query over the cached keys of the sentence so far
        key_labels = [_label(words, i) for i in range(lk)]
        return key_labels[-1:], key_labels
    query_labels = [_label(words, i) for i in range(lq)]
    return query_labels, query_labels if o.self_attention else [_label(words, lq + i) for i in range(lk)]


def _matrices(o: Options, rng: random.Random, doc: dict) -> dict:
    """Q, K, V (or X and the projections) into `doc`; returns E and PE for a posenc worksheet."""
    lq, lk, width = o.lq, o.keys, o.dim * o.heads
    value_width = (o.value_dim or o.dim) * o.heads
    matrix = partial(_matrix, rng)
    projection = partial(_projection, rng)
    distinct = partial(_distinct, width=width, keys=lk)
    if o.kind == "gqa":  # query heads side by side; K and V one matrix per kv head
        groups = o.heads // 2
        doc["Q"] = [matrix(lq, o.dim, QK_VALUES) for _ in range(o.heads)]
        doc["K"] = [distinct(lambda: (lambda k: (k, k))(matrix(lk, o.dim, QK_VALUES))) for _ in range(groups)]
        doc["V"] = [matrix(lk, o.value_dim or o.dim, V_VALUES) for _ in range(groups)]
        doc["kv_heads"] = groups  # optional beside 3-D K and V; said, and checked against them
        return {}
    if o.kind not in PROJECTED:
        doc["Q"] = matrix(lq, width, QK_VALUES)
        doc["K"] = distinct(lambda: (lambda k: (k, k))(matrix(lk, width, QK_VALUES)))
        doc["V"] = matrix(lk, value_width, V_VALUES)
        return {}
    shown = {}
    if o.kind == "cross":
        doc["X"] = matrix(lq, width, X_VALUES)
        X_kv, W_K = distinct(lambda: _keys(matrix(lk, width, X_VALUES), projection(width, width)))
        doc |= {"X_kv": X_kv, "W_Q": projection(width, width), "W_K": W_K}
    else:
        pe = _positional(lk, width) if o.kind == "posenc" else None
        E, W_K = distinct(lambda: _keys(matrix(lk, width, X_VALUES), projection(width, width), pe))
        doc["X"] = E if pe is None else _add(E, pe)
        if pe is not None:
            shown = {"E": E, "PE": pe}
            doc["description"] += ("; X = E + PE: token embeddings plus sinusoidal positional "
                                   "encodings (rounded to 2 decimals)")
        doc |= {"W_Q": projection(width, width), "W_K": W_K}
    doc["W_V"] = projection(width, value_width)
    if o.kind == "multihead":
        doc["W_O"] = projection(value_width, width, W_O_VALUES)
    return shown


def _variants(o: Options, rng: random.Random, doc: dict) -> None:
    """The keys of the kinds that add one thing to plain attention (drawn after the matrices, so
    that the older kinds' draws are unchanged)."""
    if o.kind == "alibi":
        doc["alibi"] = [0.5 ** (h + 1) for h in range(o.heads)]  # 0.5, 0.25, …: exact in few decimals
        doc["description"] += "; ALiBi: add −slope·|i − j| to each scaled score (a penalty for distance)"
    elif o.kind == "sinks":
        doc["sinks"] = [rng.choice(SINK_VALUES) for _ in range(o.heads)]
        doc["description"] += ("; attention sinks: each head's softmax has one extra logit (its sink), which "
                               "takes weight and is dropped, so the weights sum to less than 1")
    elif o.kind == "softcap":
        doc["softcap"] = SOFTCAP
        doc["description"] += f"; softcap {SOFTCAP}: capped = {SOFTCAP}·tanh(scaled / {SOFTCAP}) before the softmax"
    elif o.kind == "padding":
        doc["key_mask"] = [True] * (o.keys - 1) + [False]
        doc["description"] += f"; the last key is padding ({PAD}): key_mask hides it from every query"
    elif o.kind == "gqa":
        doc["description"] += (f"; grouped-query attention: {o.heads} query heads, {plural(o.heads // 2, 'kv head')}, "
                               "query head h reads kv head h // 2")
    elif o.kind == "tiles":
        bq, bk = o.tiles or DEFAULT_TILES
        doc["scale"] = 1
        doc["tile_size"] = [bq, bk]
        doc["description"] += (f", tile by tile with the online softmax (tiles of {plural(bq, 'query')} × {plural(bk, 'key')}, "
                               "scale 1): for each tile write the running max m, alpha = e^(m_old − m), "
                               "the running sum l and the running output O")
    elif o.kind == "backward":
        doc["dO"] = _matrix(rng, o.lq, (o.value_dim or o.dim) * o.heads, DO_VALUES)
        doc["description"] += ", then the backward pass from the given dO (the gradient of a loss by the output)"


def _mask(o: Options, rng: random.Random, doc: dict) -> None:
    if o.mask == "random":
        grid = [[rng.random() < 0.7 for _ in range(o.keys)] for _ in range(o.lq)]
        for row in grid:
            if not any(row):
                row[rng.randrange(o.keys)] = True  # every query keeps at least one key
        doc["mask"] = grid
        if o.kind in CAUSAL:
            doc["causal"] = True
    elif o.mask == "causal" or o.kind in CAUSAL:
        doc["mask"] = "causal"
    if o.kind == "rope":
        doc["rope"] = True
        # From 1: at position 0 nothing turns, and a row copied unrotated would be marked right.
        doc["q_positions"] = doc["k_positions"] = list(range(1, o.keys + 1))
        doc["description"] += (f"; rotate Q and K by their positions 1 … {o.keys} first (RoPE: dim i pairs with "
                               "i + d/2, θ_i = 10000^(−2i/d))")


def degenerate(trace) -> bool:
    """A problem that teaches nothing: a query of zeros (every score 0), or a query whose weights
    are the same for every key it sees (two or more)."""
    if not np.any(trace.Q, axis=-1).all():  # (H, Lq)
        return True
    weights = trace.stage("weights")  # (H, Lq, Lk)
    seen = weights > 0
    top = np.where(seen, weights, -np.inf).max(axis=-1, keepdims=True)
    low = np.where(seen, weights, np.inf).min(axis=-1, keepdims=True)
    return bool(((seen.sum(axis=-1) >= 2) & (top - low <= 1e-9 * top)[..., 0]).any())


def asked(trace, kind: str) -> list[str]:
    """The stages the problem asks for, in order (the answers `attn check` requires)."""
    if kind == "tiles":
        return ["tiles"]
    names = [stage.name for stage in stages.present(trace.problem)]
    return names + (list(grads.names()) if trace.gradients is not None else [])


def _finish(o: Options, doc: dict, shown: dict, trace) -> Exercise:
    doc = doc | {"ask": asked(trace, o.kind), "decimals": o.decimals}
    worked = None
    if o.slip:
        worked = slip.plant(trace, random.Random(f"slip {o.seed}"))
        doc |= {"worked": worked.document(), "ask": ["slip"]}
        doc["description"] = (f"Find the slip: the worked solution below makes one mistake. Name the stage where "
                              f"it is made and the mistake ({doc['description']})")
    tiled = attend_tiles(trace.problem, *doc["tile_size"]) if o.kind == "tiles" else None
    return Exercise(doc=doc, shown=shown, options=o, worked=worked, trace=trace, tiled=tiled)


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


def problem_set(options: Options, count: int, kinds: tuple[str, ...] = ()) -> list[Exercise]:
    """`count` problems: problem k (from 0) is exactly `attn exercise --seed <seed + k>` with the
    same options, so each one's key can be made on its own. With `kinds` (a mixed set), problem k
    is of kind kinds[k % len(kinds)]."""
    kinds = kinds or (options.kind,)
    return [build(replace(options, seed=options.seed + k, kind=kinds[k % len(kinds)])) for k in range(count)]


def _matrix(rng: random.Random, rows: int, columns: int, values) -> list[list[float]]:
    return [[rng.choice(values) for _ in range(columns)] for _ in range(rows)]


def _projection(rng: random.Random, rows: int, columns: int, values=W_VALUES) -> list[list[float]]:
    """A weight matrix with no all-zero column (it would zero a feature for every token)."""
    drawn = [[rng.choice(values) for _ in range(rows)] for _ in range(columns)]
    drawn = [column if any(column) else [1] + column[1:] for column in drawn]
    return [list(row) for row in zip(*drawn)]


def _distinct(draw, width: int, keys: int):
    """Call `draw() -> (matrices, keys)` until the keys' rows are all different."""
    for _ in range(REDRAWS):
        drawn, rows = draw()
        if len({tuple(row) for row in rows}) == len(rows):
            return drawn
    raise ExerciseError(f"could not draw {keys} different keys of width {width}; "
                        "ask for fewer keys or a wider dim", field="keys")


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
