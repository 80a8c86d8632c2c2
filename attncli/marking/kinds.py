"""The exercise kinds, one `ExerciseKind` record each in `KINDS`: how a kind draws its matrices and
its settings, what it asks, what its sheet shows, its defaults and the options it refuses. Every
path reads this registry: the problems (attncli/marking/exercise.py), the worksheet
(attncli/render/worksheet.py) and `attn exercise --kind` (its choices, its check and its help, in
attncli/commands/learn.py). Adding a kind is one record here and its functions.

The kinds:
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
- precision: one head in float16 (transformers' eager recipe, attncli/problem/recipes.py), scale 1,
  scores just past 2048 where float16 holds only even whole numbers: q = (64, a), k = (32, b), so
  q · k = 2048 + a·b, and an odd one is rounded to even; the weights differ from float64's (re-drawn,
  exercise.shows_rounding, until float64's weights at the decimals asked are marked wrong; 2 keys
  at least).

Plain Python only (`random.Random`, lists), no numpy: the command line reads the names and the help
at start-up. Every random choice comes from the problem's generator (`Draw.rng`), in a fixed order
(the labels, the matrices, the settings, a random mask), so that the same seed gives the same
problem on every machine: a change to what a kind draws, or when, changes its problems for every
seed, so a kind that learns to draw something more draws it last.

    draw      the matrices into the document (Q, K, V, or X and the projections); returns the
              matrices the sheet shows beside them (posenc's E and PE)
    settings  the keys it adds beyond the matrices (sinks, dO, …) and their words in the
              description, drawn after the matrices
    rules     its position and rule keys (a window, a KV-cache step's position, RoPE), set after
              the mask, drawing nothing
    asks      the answers it asks for, from the computed trace (None: every stage the problem has,
              and the backward pass's when it has dO)
    sheet     the matrices the sheet prints, from the document and what `draw` returned (None:
              every matrix of the document but the mask, which the sheet prints as 1s and 0s)
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

from attncli.base.errors import InputError, plural
from attncli.base.rule_words import sliding_window

WORDS = ("the", "cat", "sat", "on", "mat", "dog", "ran", "home", "she", "read", "a", "book", "he",
         "saw", "it", "bird", "sang", "we", "ate", "soup", "red", "car", "went", "fast", "sun", "rose",
         "tea", "was", "hot", "rain", "fell", "they", "made", "bread", "old", "man", "sea", "blue",
         "door", "shut")
QK_VALUES = (-2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2)
V_VALUES = (-3, -2, -1, 0, 1, 2, 3)
X_VALUES = (-2, -1, 0, 1, 2, 3)  # six values: up to six different one-number keys
X_SMALL = (-1, 0, 1)  # X two or more numbers wide: each row still differs, and X W stays small by hand
NONZERO = 2  # the most nonzero entries of a projection's column: an entry of X W adds two products at most
W_VALUES = (-1, 0, 0, 1)  # projections: mostly 0 and ±1, so x W is a few additions
W_O_VALUES = (0, 0.5, 1)
SINK_VALUES = (0, 0.5, 1)  # e^0 = 1: a sink as easy by hand as a score of 0
SOFTCAP = 2  # a cap that bends the larger scaled scores (|scaled| reaches 2 and more) and barely the small
DO_VALUES = (-1, 0, 1, 1, 2)
DEFAULT_TILES = (1, 2)
DECIMALS = 2  # the least decimals a value needs unless exact (as `attn check --decimals`' default)
PAD = "[PAD]"
REDRAWS = 1000  # attempts at keys that are all different before giving up


class ExerciseError(InputError):
    """Options that cannot make a problem (too many distinct keys asked of too few values)."""


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
        sentence = KINDS[self.kind].sentence if self.kind in KINDS else "two"
        return sentence == "one" or (self.mask == "causal" and sentence != "last")

    @property
    def lq(self) -> int:
        return self.keys if self.self_attention else (self.queries or 1)


@dataclass
class Draw:
    """What a kind's functions read and fill: the options, the generator, the document being drawn,
    and `positional(positions, dim)`, the sinusoidal encodings rounded to 2 decimals (given by
    exercise.py, which may load numpy)."""

    options: Options
    rng: random.Random
    doc: dict
    positional: Callable[[int, int], list]

    def matrix(self, rows: int, columns: int, values) -> list[list[float]]:
        return [[self.rng.choice(values) for _ in range(columns)] for _ in range(rows)]

    def projection(self, rows: int, columns: int, values=W_VALUES, nonzero: int | None = NONZERO) -> list[list[float]]:
        """A weight matrix with no all-zero column (it would zero a feature for every token) and at
        most `nonzero` nonzero entries in a column (which ones kept drawn too, so that a wide X's
        every feature counts), so that an entry of X W adds a few products: the scores stay small
        enough to work by hand."""
        drawn = [[self.rng.choice(values) for _ in range(rows)] for _ in range(columns)]
        drawn = [column if any(column) else [1] + column[1:] for column in drawn]
        if nonzero is not None:
            drawn = [self._thin(column, nonzero) for column in drawn]
        return [list(row) for row in zip(*drawn)]

    def _thin(self, column: list, nonzero: int) -> list:
        """`column` with `nonzero` of its nonzero entries kept, drawn (all when there are no more)."""
        found = [i for i, x in enumerate(column) if x]
        if len(found) <= nonzero:
            return column
        kept = set(self.rng.sample(found, nonzero))
        return [x if i in kept else 0 for i, x in enumerate(column)]

    def inputs(self, rows: int, width: int) -> list[list[float]]:
        """X (or X_kv, E): small values when a row is two numbers or more wide."""
        return self.matrix(rows, width, X_SMALL if width >= 2 else X_VALUES)

    def distinct(self, draw, width: int):
        """Call `draw() -> (matrices, keys)` until the keys' rows are all different."""
        for _ in range(REDRAWS):
            drawn, rows = draw()
            if len({tuple(row) for row in rows}) == len(rows):
                return drawn
        raise ExerciseError(f"could not draw {self.options.keys} different keys of width {width}; "
                            "ask for fewer keys or a wider dim", field="keys")

    def describe(self, text: str) -> None:
        self.doc["description"] += text


def matrices(doc: dict) -> dict:
    """The document's matrices (2-D, or 3-D per head) in its order, but the mask."""
    return {key: value for key, value in doc.items()
            if key != "mask" and isinstance(value, list) and value and isinstance(value[0], list)}


# --- the matrices ---------------------------------------------------------------------------------

def draw_qkv(d: Draw) -> dict:
    """Q, K (no two keys alike) and V, heads side by side."""
    o = d.options
    width, value_width = o.dim * o.heads, (o.value_dim or o.dim) * o.heads
    d.doc["Q"] = d.matrix(o.lq, width, QK_VALUES)
    d.doc["K"] = d.distinct(lambda: (lambda k: (k, k))(d.matrix(o.keys, width, QK_VALUES)), width)
    d.doc["V"] = d.matrix(o.keys, value_width, V_VALUES)
    return {}


def _keys(X: list, W: list, pe: list | None = None):
    """((X, W_K), the keys they give): keys are the rows of (X + PE) W_K."""
    x = X if pe is None else add(X, pe)
    return (X, W), [[sum(a * b for a, b in zip(row, column)) for column in zip(*W)] for row in x]


def add(a: list, b: list) -> list:
    return [[round(x + y, 2) for x, y in zip(r, s)] for r, s in zip(a, b)]


def _projected(d: Draw, pe: list | None = None) -> list:
    """Self-attention from X (with `pe`: X = E + PE) and its projections W_Q, W_K, W_V; returns E."""
    o = d.options
    width = o.dim * o.heads
    E, W_K = d.distinct(lambda: _keys(d.inputs(o.keys, width), d.projection(width, width), pe), width)
    d.doc["X"] = E if pe is None else add(E, pe)
    d.doc |= {"W_Q": d.projection(width, width), "W_K": W_K}
    d.doc["W_V"] = d.projection(width, (o.value_dim or o.dim) * o.heads)
    return E


def draw_multihead(d: Draw) -> dict:
    o = d.options
    _projected(d)
    value_width = (o.value_dim or o.dim) * o.heads
    d.doc["W_O"] = d.projection(value_width, o.dim * o.heads, W_O_VALUES, nonzero=None)
    return {}


def draw_cross(d: Draw) -> dict:
    """Queries from X, keys and values from X_kv, with projections."""
    o = d.options
    width = o.dim * o.heads
    d.doc["X"] = d.inputs(o.lq, width)
    X_kv, W_K = d.distinct(lambda: _keys(d.inputs(o.keys, width), d.projection(width, width)), width)
    d.doc |= {"X_kv": X_kv, "W_Q": d.projection(width, width), "W_K": W_K}
    d.doc["W_V"] = d.projection(width, (o.value_dim or o.dim) * o.heads)
    return {}


def draw_posenc(d: Draw) -> dict:
    """X = E + PE, then projections; the sheet shows E and PE."""
    o = d.options
    pe = d.positional(o.keys, o.dim * o.heads)
    E = _projected(d, pe)
    d.describe("; X = E + PE: token embeddings plus sinusoidal positional encodings (rounded to 2 decimals)")
    return {"E": E, "PE": pe}


def draw_gqa(d: Draw) -> dict:
    """Query heads side by side as a 3-D Q; K and V one matrix per kv head (heads in pairs)."""
    o = d.options
    d.doc["Q"] = [d.matrix(o.lq, o.dim, QK_VALUES) for _ in range(o.heads)]
    d.doc["K"] = [d.distinct(lambda: (lambda k: (k, k))(d.matrix(o.keys, o.dim, QK_VALUES)), o.dim * o.heads)
                  for _ in range(o.heads // 2)]
    d.doc["V"] = [d.matrix(o.keys, o.value_dim or o.dim, V_VALUES) for _ in range(o.heads // 2)]
    d.doc["kv_heads"] = o.heads // 2  # optional beside 3-D K and V; said, and checked against them
    return {}


# --- the settings and rules -------------------------------------------------------------------------

def alibi(d: Draw) -> None:
    d.doc["alibi"] = [0.5 ** (h + 1) for h in range(d.options.heads)]  # 0.5, 0.25, …: exact in few decimals
    d.describe("; ALiBi: add −slope·|i − j| to each scaled score (a penalty for distance)")


def sinks(d: Draw) -> None:
    d.doc["sinks"] = [d.rng.choice(SINK_VALUES) for _ in range(d.options.heads)]
    d.describe("; attention sinks: each head's softmax has one extra logit (its sink), which takes weight and "
               "is dropped, so the weights sum to less than 1")


def softcap(d: Draw) -> None:
    d.doc["softcap"] = SOFTCAP
    d.describe(f"; softcap {SOFTCAP}: capped = {SOFTCAP}·tanh(scaled / {SOFTCAP}) before the softmax")


def padding(d: Draw) -> None:
    d.doc["key_mask"] = [True] * (d.options.keys - 1) + [False]
    d.doc["key_labels"] = d.doc["key_labels"][:-1] + [PAD]
    d.describe(f"; the last key is padding ({PAD}): key_mask hides it from every query")


def gqa(d: Draw) -> None:
    heads = d.options.heads
    d.describe(f"; grouped-query attention: {heads} query heads, {plural(heads // 2, 'kv head')}, query head h reads "
               "kv head h // 2")


def tiles(d: Draw) -> None:
    bq, bk = d.options.tiles or DEFAULT_TILES
    d.doc["scale"] = 1
    d.doc["tile_size"] = [bq, bk]
    d.describe(f", tile by tile with the online softmax (tiles of {plural(bq, 'query')} × {plural(bk, 'key')}, scale 1): for each "
               "tile write the running max m, alpha = e^(m_old − m), the running sum l and the running output O")


PRECISION_QUERY = (1, 3)  # odd, so an odd key value gives an odd score, which float16 rounds
PRECISION_KEYS = (1, 2, 3, 4, 5, 6, 7)


def draw_precision(d: Draw) -> dict:
    """q = (64, a), k_j = (32, b_j) with the b_j all different and one odd: q · k_j = 2048 + a·b_j, in
    [2048, 4096), and an odd a·b_j is rounded to even in float16."""
    o = d.options
    d.doc["Q"] = [[64, d.rng.choice(PRECISION_QUERY)] for _ in range(o.lq)]
    for _ in range(REDRAWS):  # some b odd: its score is odd, and float16 rounds it
        values = d.rng.sample(PRECISION_KEYS, o.keys)
        if any(b % 2 for b in values):
            break
    d.doc["K"] = [[32, b] for b in values]
    d.doc["V"] = d.matrix(o.keys, o.value_dim or o.dim, V_VALUES)
    return {}


def precision(d: Draw) -> None:
    d.doc |= {"dtype": "float16", "scale": 1}
    d.describe(" in float16, as transformers' eager attention does (each stage computed in float32, then stored in "
               "float16), scale 1: float16 holds only the even whole numbers from 2048 to 4096 (ties to even); "
               "say which scores change, and why the weights differ from float64's")


def backward(d: Draw) -> None:
    o = d.options
    d.doc["dO"] = d.matrix(o.lq, (o.value_dim or o.dim) * o.heads, DO_VALUES)
    d.describe(", then the backward pass from the given dO (the gradient of a loss by the output)")


def rope(d: Draw) -> None:
    keys = d.options.keys
    d.doc["rope"] = True
    # From 1: at position 0 nothing turns, and a row copied unrotated would be marked right.
    d.doc["q_positions"] = d.doc["k_positions"] = list(range(1, keys + 1))
    d.describe(f"; rotate Q and K by their positions 1 … {keys} first (RoPE: dim i pairs with i + d/2, "
               "θ_i = 10000^(−2i/d))")


def window(d: Draw) -> None:
    """Causal in the window [W − 1, 0], W − 1 = max(1, (keys − 1) // 2): it hides a key from a query."""
    left = max(1, (d.options.keys - 1) // 2)
    d.doc["window"] = [left, 0]
    d.describe(f", with causal attention in the sliding window {d.doc['window']}: each word sees itself and at "
               f"most {plural(left, 'word')} before it (Hugging Face sliding_window = {left + 1})")


def decode(d: Draw) -> None:
    """The query of the last word at position t = keys − 1 over the cached keys 0 … t."""
    t = d.options.keys - 1
    d.doc["q_positions"] = [t]
    d.describe(f"; one KV-cache decoding step: the query of \"{d.doc['query_labels'][0]}\" is at position {t} and "
               f"the cached keys at positions 0 … {t} (q_positions {d.doc['q_positions']}), causal: a key is "
               "visible when k_pos ≤ q_pos")


# --- the options a kind refuses ---------------------------------------------------------------------

def at_least_keys(count: int, why: str, o: Options) -> None:
    if o.keys < count:
        raise ExerciseError(f"a {o.kind} exercise needs {count} or more keys {why} (keys is {o.keys})", field="keys")


def one_query(o: Options) -> None:
    if o.queries not in (None, 1):
        raise ExerciseError(f"a decode exercise is one KV-cache step of one query, so queries ({o.queries}) "
                            "must be 1", field="queries")


def even_width(o: Options) -> None:
    if o.dim * o.heads % 2:
        raise ExerciseError(f"a posenc exercise pairs sin and cos columns, so dim × heads "
                            f"({o.dim * o.heads}) must be even", field="dim")


def even_dim(o: Options) -> None:
    if o.dim % 2:
        raise ExerciseError(f"a rope exercise rotates pairs of dims, so dim ({o.dim}) must be even", field="dim")


def head_pairs(o: Options) -> None:
    if o.heads < 2 or o.heads % 2:
        raise ExerciseError(f"a gqa exercise groups query heads in pairs over one kv head each, so heads "
                            f"({o.heads}) must be even", field="heads")


def precision_shape(o: Options) -> None:
    if (o.queries or 1) > 1:  # q = (64, a) with a odd from 2 values: more queries would repeat the rows
        raise ExerciseError(f"a precision exercise has one query, q = (64, a) (queries {o.queries})", field="queries")
    if o.keys < 2:  # one key's weight is 1 in any dtype: the rounding could not show in the answer
        raise ExerciseError(f"a precision exercise needs at least 2 keys for float16's rounding to change the "
                            f"weights (keys {o.keys})", field="keys")
    if (o.heads, o.dim) != (1, 2) or o.keys > len(PRECISION_KEYS):
        raise ExerciseError(f"a precision exercise is one head with d_k 2 and at most {len(PRECISION_KEYS)} keys, "
                            f"q = (64, a) and k = (32, b) (heads {o.heads}, dim {o.dim}, keys {o.keys})",
                            field="keys" if o.keys > len(PRECISION_KEYS) else "dim" if o.dim != 2 else "heads")


def posenc_sheet(doc: dict, drawn: dict) -> dict:
    """E and PE in place of their sum X (the learner adds them)."""
    return drawn | {key: value for key, value in matrices(doc).items() if key != "X"}


@dataclass(frozen=True)
class ExerciseKind:
    name: str
    help: str  # its sentence in `attn exercise --kind`'s help (which adds the option a kind takes)
    draw: Callable[[Draw], dict] = draw_qkv
    settings: Callable[[Draw], None] | None = None
    rules: Callable[[Draw], None] | None = None
    asks: Callable[[Any], list[str]] | None = None
    sheet: Callable[[dict, dict], dict] | None = None
    sentence: str = "two"  # "two": queries and keys are different words; "one": self-attention over one
    #                        sentence; "last": the last word's query over the sentence so far (a KV-cache step)
    causal: bool = False  # the causal rule
    title: str = ""  # its title in a set ("Problem 2: causal self-attention"); "" for its name
    heads: int = 1  # the default number of heads
    dim: int = 2  # the default d_k
    keys: int = 3  # the default number of keys
    heads_key: bool = True  # writes "heads" when there are several (gqa's 3-D Q says it)
    tiles: bool = False  # takes --tiles: the tiled online softmax
    slip: bool = True  # can be a find-the-slip exercise (one head, Q, K and V given)
    check: Callable[[Options], None] | None = None  # raises ExerciseError for options that cannot make one
    large_scores: bool = False  # its scores are large on purpose (precision), worked as e^(x − max)


KINDS: dict[str, ExerciseKind] = {kind.name: kind for kind in (
    ExerciseKind("plain", "Q, K, V given.", title="attention"),
    ExerciseKind("causal", "self-attention over one sentence, causal mask.", sentence="one", causal=True,
                 title="causal self-attention"),
    ExerciseKind("multihead", "X with projections and W_O.", draw_multihead, sentence="one", heads=2,
                 slip=False, title="multi-head self-attention"),
    ExerciseKind("cross", "X and X_kv with projections.", draw_cross, slip=False, title="cross-attention"),
    ExerciseKind("posenc", "X = E + PE (sinusoidal) with projections.", draw_posenc, sheet=posenc_sheet,
                 sentence="one", slip=False, check=even_width, title="positional encodings"),
    ExerciseKind("window", f"causal in a sliding window ({sliding_window()}), 4 keys.", rules=window,
                 sentence="one", causal=True, keys=4, check=partial(at_least_keys, 3, "for its window to hide one"),
                 title="a sliding window"),
    ExerciseKind("decode", "one KV-cache step, the last word's query at position t over keys 0 … t.",
                 rules=decode, sentence="last", causal=True, check=one_query, title="one decoding step"),
    ExerciseKind("rope", "causal self-attention with rotary positions (Q_rope, K_rope), d_k 4.", rules=rope,
                 sentence="one", causal=True, dim=4, check=even_dim, title="rotary positions (RoPE)"),
    ExerciseKind("alibi", "causal with ALiBi, slopes 0.5, 0.25 and so on per head.", settings=alibi,
                 sentence="one", causal=True, title="ALiBi"),
    ExerciseKind("sinks", "a sink logit per head.", settings=sinks, title="attention sinks"),
    ExerciseKind("softcap", "softcap 2.", settings=softcap, title="a softcap"),
    ExerciseKind("gqa", "grouped-query, query heads in pairs over one kv head each.", draw_gqa, settings=gqa,
                 heads=2, heads_key=False, slip=False, check=head_pairs, title="grouped-query attention"),
    ExerciseKind("padding", "the last key is padding (key_mask).", settings=padding,
                 check=partial(at_least_keys, 2, "to pad one and keep one"), title="a padded key"),
    ExerciseKind("tiles", "the tiled online softmax, m, alpha, l, O per tile.", settings=tiles,
                 asks=lambda trace: ["tiles"], tiles=True, slip=False, title="the tiled online softmax"),
    ExerciseKind("backward", "the backward pass from a given dO.", settings=backward, slip=False,
                 title="the backward pass"),
    ExerciseKind("precision", "float16, scores just past 2048: where does rounding change the answer, and why?",
                 draw_precision, settings=precision, slip=False, check=precision_shape, title="float16's rounding",
                 large_scores=True),
)}


def names() -> tuple[str, ...]:
    return tuple(KINDS)


def defaults(what: str, usual: int) -> str:
    """The kinds whose default `what` ("heads", "dim") is not `usual`, for the help: "2 for multihead
    and gqa"."""
    by_value: dict[int, list[str]] = {}
    for kind in KINDS.values():
        if getattr(kind, what) != usual:
            by_value.setdefault(getattr(kind, what), []).append(kind.name)
    return "; ".join(f"{value} for {' and '.join(names)}" for value, names in by_value.items())
