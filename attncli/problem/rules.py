"""The mask rules, one class each: which keys a query may see (True = may attend), all ANDed in
`Problem.rules`; a rule that widens another is ORed with it (`AnyOf`). attncli/problem/masks.py and
attncli/problem/visibility.py loop over them; nothing else branches on a rule.

    Causal      k_pos ≤ q_pos                          mask: "causal" (or causal: true), "causal_lower_right"
    Window      rule_words.window_rule()                window: [left, right], null = unbounded
    KeyMask     keep[k]  (true = a real key)            key_mask: [true, …]
    Matrix      a given (1 or H, Lq, Lk) matrix         mask: [[true, …], …]
    Prefix      k_pos < P, OR causal (prefix-LM)        prefix: P
    AnyOf       some part sees the key                  (the rules it joins: causal OR prefix)

A rule knows, for a block of query rows `rows` and key columns `cols` of a problem (whose
q_positions and k_positions it reads):
    seen(problem, rows, cols)           bool (b, c), (1, c) or (1 or H, b, c): which keys each query sees
                                        (a new array or a view: masks.visible writes only into its own)
    keys_seen(problem, rows)            (Lk,) bool: the keys some query of `rows` may see (the
                                        output-only path multiplies only their span)
    maybe_hidden(problem, rows, cols)   (c,) bool: the keys some query of `rows` may not see (the
                                        output-only path evaluates `seen` only there)
    line(problem)                       its words for the table header and JSON's `mask_rule`
    condition(problem, row)             what a key must meet for query `row`, with its q_pos filled in
    why(problem, head, row)             per key: why the rule hides it, or None
    input_keys(problem)                 the JSON keys it is written as (read back, the same rule)
    place_queries(given, lq, lk)        the query positions under it (only causal_lower_right sets them)
    parts                               the rules it is made of (AnyOf's); () for the others
    read(doc, reading)                  its reader (a classmethod): the rule from a document, or None
and, as class attributes, `keys` (its input keys, each with what it holds: the schema's words) and
`widens` (the kind of rule it is ORed with, None: ANDed with the others; with no rule of that kind
in the document, `alone()` says what it is). Nothing larger than the block is built. Adding a rule
is a class here, in RULES, and its option.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, ClassVar, NamedTuple

import numpy as np

from attncli.base.errors import InputError, did_you_mean, plural, quote
from attncli.base.rule_words import WINDOW_ENDS, window_condition, window_name
from attncli.problem.mask_input import flag, key_mask, length, positions, window
from attncli.problem.masks import MASK_WORDS, default_positions, lower_right_positions


class Reading(NamedTuple):
    """What a reader needs besides the document: `grid(value, field, kind, heads, lq, lk)` reads a
    given matrix (problem.py's reader, shared with the bias)."""
    grid: Callable
    heads: int
    lq: int
    lk: int
    invert: bool


MASK = "a true/false matrix (true = may attend), or causal / causal_lower_right"
# The positions every rule reads (key_words), with what they hold.
POSITIONS = {"q_positions": "one whole number per query", "k_positions": "one whole number per key"}


class Rule:
    """A mask rule: see the module's docstring for what each method returns. A rule that leaves a
    method out fails loudly where a path needs it, never silently."""
    keys: ClassVar[dict[str, str]] = {}  # the input keys it is read from: key -> what it holds
    widens: ClassVar[type[Rule] | None] = None  # the kind of rule it is ORed with; None: ANDed
    parts: tuple[Rule, ...] = ()  # the rules it is made of (AnyOf)

    def seen(self, problem, rows: slice, cols: slice) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__}.seen")

    def keys_seen(self, problem, rows: slice) -> np.ndarray | None:
        return None  # no narrowing: every key may be seen

    def maybe_hidden(self, problem, rows: slice, cols: slice) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__}.maybe_hidden")

    def line(self, problem) -> str:
        raise NotImplementedError(f"{type(self).__name__}.line")

    def condition(self, problem, row: int) -> str:
        raise NotImplementedError(f"{type(self).__name__}.condition")

    def why(self, problem, head: int, row: int) -> list[str | None]:
        raise NotImplementedError(f"{type(self).__name__}.why")

    def input_keys(self, problem) -> dict:
        raise NotImplementedError(f"{type(self).__name__}.input_keys")

    def place_queries(self, given: np.ndarray | None, lq: int, lk: int) -> np.ndarray | None:
        """The query positions under this rule: the given ones (None: not given), unless the rule
        sets them (causal_lower_right), which it refuses beside given ones."""
        return given

    def alone(self) -> Rule:
        """The rule when the document has none of the kind it widens: an error by default."""
        kind = self.widens.__name__.lower()
        raise InputError(f"{', '.join(self.keys)} widens the {kind} rule, and there is no {kind} rule: "
                         f"give {' or '.join(self.widens.keys)} too", field=next(iter(self.keys)))

    @classmethod
    def read(cls, doc: dict, reading: Reading) -> Rule | None:
        raise NotImplementedError(f"{cls.__name__}.read")


def _q(problem, rows: slice) -> np.ndarray:
    return problem.q_positions[rows]


@dataclass(frozen=True)
class Causal(Rule):
    lower_right: bool = False  # written as "causal_lower_right": q_positions are Lk − Lq … Lk − 1
    keys: ClassVar = {"mask": MASK, "causal": "true: query i sees keys at positions ≤ its own"}

    def seen(self, problem, rows, cols):
        return problem.k_positions[cols][None, :] <= _q(problem, rows)[:, None]  # (b, c)

    def keys_seen(self, problem, rows):
        q = _q(problem, rows)
        return None if q.size == 0 else problem.k_positions <= int(q.max())

    def maybe_hidden(self, problem, rows, cols):
        q = _q(problem, rows)
        return problem.k_positions[cols] > (q.min() if q.size else np.inf)

    def line(self, problem):
        default = np.array_equal(problem.q_positions, default_positions(problem.lq)) and \
            np.array_equal(problem.k_positions, default_positions(problem.lk))
        aligned = ("causal_lower_right: q_positions Lk − Lq … Lk − 1, as PyTorch causal_lower_right"
                   if self.lower_right else "top-left with the default positions 0 … L − 1, as PyTorch is_causal=True"
                   if default else "by the positions given")
        return f"causal: query i may attend key j when k_pos[j] ≤ q_pos[i] ({aligned})"

    def condition(self, problem, row):
        return f"k_pos ≤ {int(problem.q_positions[row])} (causal)"

    def why(self, problem, head, row):
        q = int(problem.q_positions[row])
        return [f"causal: k_pos {k} > q_pos {q}" if k > q else None for k in map(int, problem.k_positions)]

    def input_keys(self, problem):
        if find(problem, Matrix) is not None:
            return {"causal": True}  # beside the matrix, which takes the `mask` key
        return {"mask": MASK_WORDS[self.lower_right]}

    def place_queries(self, given, lq, lk):
        if not self.lower_right:
            return given
        if given is not None:
            raise InputError("q_positions is given with mask causal_lower_right, which sets them to "
                             f"Lk − Lq … Lk − 1 ({lk - lq} … {lk - 1}); give mask causal with the "
                             "positions, or drop q_positions", field="q_positions")
        return lower_right_positions(lq, lk)

    @classmethod
    def read(cls, doc, reading):
        value, said = doc.get("mask"), doc.get("causal")
        said = None if said is None else flag(said, "causal")
        if isinstance(value, str):
            if value not in MASK_WORDS:
                hint = did_you_mean(value, MASK_WORDS, 0.4)
                raise InputError(f'mask is {quote(value)}{hint}; expected {" or ".join(MASK_WORDS)} '
                                 "or a true/false matrix", field="mask")
            if said is False:
                raise InputError(f'causal is false but mask is "{value}", which is causal; keep one of '
                                 "them (drop causal, or give mask as a matrix)", field="causal")
            return cls(lower_right=value == "causal_lower_right")
        return cls() if said else None


@dataclass(frozen=True)
class Window(Rule):
    left: int | None  # keys before the query; None = unbounded
    right: int | None  # keys after it
    keys: ClassVar = {"window": "[left, right]: keys this far before and after the query, null = unbounded"}

    def seen(self, problem, rows, cols):
        q, k = _q(problem, rows)[:, None], problem.k_positions[cols][None, :]  # (b, 1), (1, c)
        if self.left is None and self.right is None:
            return np.ones((q.shape[0], k.shape[1]), bool)
        if self.left is None:
            return k <= q + self.right
        found = k >= q - self.left  # (b, c)
        if self.right is not None:
            found &= k <= q + self.right
        return found

    def keys_seen(self, problem, rows):
        q, k = _q(problem, rows), problem.k_positions
        if q.size == 0 or (self.left is None and self.right is None):
            return None
        low = None if self.left is None else k >= int(q.min()) - self.left
        high = None if self.right is None else k <= int(q.max()) + self.right
        return high if low is None else low if high is None else low & high

    def maybe_hidden(self, problem, rows, cols):
        q, k = _q(problem, rows), problem.k_positions[cols]
        maybe = np.zeros(k.shape, bool)  # (c,)
        if q.size and self.left is not None:
            maybe |= k < int(q.max()) - self.left
        if q.size and self.right is not None:
            maybe |= k > int(q.min()) + self.right
        return maybe

    def line(self, problem):
        condition = window_condition(self.left, self.right, "q_pos[i]", "k_pos[j]")
        return f"{window_name(self.left, self.right)}: query i may attend key j when {condition} ({WINDOW_ENDS})"

    def condition(self, problem, row):
        return f"{window_condition(self.left, self.right, int(problem.q_positions[row]))} " \
               f"({window_name(self.left, self.right)})"

    def why(self, problem, head, row):
        q, shown = int(problem.q_positions[row]), window_name(self.left, self.right)
        found = []
        for k in map(int, problem.k_positions):
            why = []
            if self.left is not None and k < q - self.left:
                why.append(f"{shown}: k_pos {k} < {q} − {self.left}")
            if self.right is not None and k > q + self.right:
                why.append(f"{shown}: k_pos {k} > {q} + {self.right}")
            found.append("; ".join(why) or None)
        return found

    def input_keys(self, problem):
        return {"window": [self.left, self.right]}

    @classmethod
    def read(cls, doc, reading):
        return None if doc.get("window") is None else cls(*window(doc["window"]))


@dataclass(frozen=True, eq=False)
class KeyMask(Rule):
    keep: np.ndarray  # (Lk,) bool, read-only: true = a real key, false = padding
    keys: ClassVar = {"key_mask": "one true/false per key, true = a real key"}

    def seen(self, problem, rows, cols):
        return self.keep[cols][None, :]  # (1, c)

    def keys_seen(self, problem, rows):
        return self.keep

    def maybe_hidden(self, problem, rows, cols):
        return ~self.keep[cols]

    def line(self, problem):
        return (f"key_mask: true = a real key, false = padding (Hugging Face attention_mask; "
                f"nn.MultiheadAttention key_padding_mask is its inverse); {int((~self.keep).sum())} of "
                f"{plural(problem.lk, 'key')} {'is' if (~self.keep).sum() == 1 else 'are'} padding")

    def condition(self, problem, row):
        return "key_mask is true (not padding)"

    def why(self, problem, head, row):
        return [None if kept else "key_mask false: padding" for kept in self.keep]

    def input_keys(self, problem):
        return {"key_mask": self.keep.tolist()}

    @classmethod
    def read(cls, doc, reading):
        return None if doc.get("key_mask") is None else cls(key_mask(doc["key_mask"], "key_mask", reading.lk))


@dataclass(frozen=True, eq=False)
class Matrix(Rule):
    mask: np.ndarray  # (1 or H, Lq, Lk) bool, read-only, True = may attend
    keys: ClassVar = {"mask": MASK}

    def seen(self, problem, rows, cols):
        return self.mask[:, rows, cols]  # (1 or H, b, c)

    def keys_seen(self, problem, rows):
        return self.mask[:, rows].any(axis=(0, 1))  # (Lk,)

    def maybe_hidden(self, problem, rows, cols):
        return ~self.mask[:, rows, cols].all(axis=(0, 1))

    def line(self, problem):
        return "matrix: true = the query may attend the key (PyTorch SDPA, JAX, Keras)"

    def condition(self, problem, row):
        return "the mask matrix is true"

    def why(self, problem, head, row):
        return [None if seen else "the mask matrix is false"
                for seen in self.mask[min(head, self.mask.shape[0] - 1), row]]

    def input_keys(self, problem):
        return {"mask": self.mask[0] if self.mask.shape[0] == 1 else self.mask}

    @classmethod
    def read(cls, doc, reading):
        value = doc.get("mask")
        if value is None or isinstance(value, str):
            return None
        mask = reading.grid(value, "mask", "mask", reading.heads, reading.lq, reading.lk)
        mask = ~mask if reading.invert else mask.copy()
        mask.flags.writeable = False
        return cls(mask)


@dataclass(frozen=True)
class Prefix(Rule):
    """Prefix-LM (T5, PaLM, UniLM): every query sees the prefix, the keys at k_pos < P (with the
    default positions, the first P keys), in both directions; it widens the causal rule, so the
    other keys are seen as causal says: causal OR prefix. Without a causal key, the default causal."""
    length: int  # P
    keys: ClassVar = {"prefix": "P ≥ 0: prefix-LM, the keys at k_pos < P seen by every query, the others causal"}
    widens: ClassVar = Causal

    def seen(self, problem, rows, cols):
        return (problem.k_positions[cols] < self.length)[None, :]  # (1, c)

    def keys_seen(self, problem, rows):
        return problem.k_positions < self.length

    def maybe_hidden(self, problem, rows, cols):
        return problem.k_positions[cols] >= self.length

    def line(self, problem):
        return (f"prefix {self.length}: query i may attend key j when k_pos[j] < {self.length} (prefix-LM, as T5 "
                "and PaLM: every query sees the prefix in both directions)")

    def condition(self, problem, row):
        return f"k_pos < {self.length} (prefix)"

    def why(self, problem, head, row):
        return [f"prefix {self.length}: k_pos {k} ≥ {self.length}" if k >= self.length else None
                for k in map(int, problem.k_positions)]

    def input_keys(self, problem):
        return {"prefix": self.length}

    def alone(self):
        return any_of(Causal(), self)

    @classmethod
    def read(cls, doc, reading):
        if doc.get("prefix") is None:
            return None
        if doc.get("causal") is False:
            raise InputError("prefix is given but causal is false: prefix-LM is causal after its prefix; drop "
                             "causal (or prefix)", field="prefix", also=("causal",))
        return cls(length(doc["prefix"], "prefix"))


@dataclass(frozen=True)
class AnyOf(Rule):
    """Rules joined by OR: a key is visible when some part lets the query see it. Read from no key
    of its own: `read` joins a rule that widens another to it this way (causal OR prefix)."""
    parts: tuple[Rule, ...]

    def seen(self, problem, rows, cols):
        found = self.parts[0].seen(problem, rows, cols)
        for part in self.parts[1:]:
            found = np.logical_or(found, part.seen(problem, rows, cols))  # broadcast: (b, c), (1, c), (1 or H, b, c)
        return found

    def keys_seen(self, problem, rows):
        found = [part.keys_seen(problem, rows) for part in self.parts]
        return None if any(seen is None for seen in found) else np.logical_or.reduce(found)

    def maybe_hidden(self, problem, rows, cols):
        # A key hidden from some query is hidden by every part from it: only where every part may hide one.
        return np.logical_and.reduce([part.maybe_hidden(problem, rows, cols) for part in self.parts])

    def line(self, problem):
        return "either " + ", or ".join(part.line(problem) for part in self.parts)

    def condition(self, problem, row):
        return "(" + " or ".join(part.condition(problem, row) for part in self.parts) + ")"  # before any " and "

    def why(self, problem, head, row):
        reasons = zip(*(part.why(problem, head, row) for part in self.parts))
        return [" and ".join(why) if all(why) else None for why in reasons]

    def input_keys(self, problem):
        keys: dict = {}
        for part in self.parts:
            keys.update(part.input_keys(problem))
        return keys

    def place_queries(self, given, lq, lk):
        for part in self.parts:
            given = part.place_queries(given, lq, lk)
        return given


def any_of(*rules: Rule) -> AnyOf:
    """The rules joined by OR, an AnyOf among them taken apart (one level)."""
    return AnyOf(tuple(part for rule in rules for part in (rule.parts or (rule,))))


# The registry: every rule a document can hold, in the order the header says them.
RULES: tuple[type[Rule], ...] = (Causal, Window, KeyMask, Matrix, Prefix)


def key_words(kinds: tuple[type[Rule], ...] | None = None) -> dict[str, str]:
    """Every rule's input keys (of `kinds`; None: the registry's) and the positions, each with what
    it holds (the first rule's words for a key several rules read, as `mask`)."""
    found: dict[str, str] = {}
    for rule in RULES if kinds is None else kinds:
        for key, about in rule.keys.items():
            found.setdefault(key, about)
    return found | POSITIONS


def read(doc: dict, reading: Reading) -> dict:
    """The `Problem` fields of the mask rules: `rules` and the positions."""
    rules = _joined([rule for kind in RULES if (rule := kind.read(doc, reading)) is not None])
    lq, lk = reading.lq, reading.lk
    q = None if doc.get("q_positions") is None else positions(doc["q_positions"], "q_positions", lq, "query")
    for rule in rules:
        q = rule.place_queries(q, lq, lk)
    k = None if doc.get("k_positions") is None else positions(doc["k_positions"], "k_positions", lk, "key")
    q = default_positions(lq) if q is None else q
    k = default_positions(lk) if k is None else k
    _refuse_keys_after_queries(rules, q, k)
    for array in (q, k):
        array.flags.writeable = False
    return {"rules": rules, "q_positions": q, "k_positions": k}


def _joined(found: list[Rule]) -> tuple[Rule, ...]:
    """The rules read, each one that widens another ORed with the rule of that kind (or, when there
    is none, as its `alone()` says), in the registry's order of the rule widened: the same rules
    whether the widened rule's key was given or implied (so the JSON reads back the same)."""
    rules = [rule for rule in found if rule.widens is None]
    for rule in found:
        if rule.widens is None:
            continue
        at = next((i for i, other in enumerate(rules) if _kinds(other) & {rule.widens}), None)
        if at is None:
            rules.append(rule.alone())
        else:
            rules[at] = any_of(rules[at], rule)
    order = {kind: i for i, kind in enumerate(RULES)}
    return tuple(sorted(rules, key=lambda rule: order.get(type((rule.parts or (rule,))[0]), len(RULES))))


def _kinds(rule: Rule) -> set[type]:
    return {type(part) for part in rule.parts} if rule.parts else {type(rule)}


def _refuse_keys_after_queries(rules, q: np.ndarray, k: np.ndarray) -> None:
    """causal_lower_right places the queries at Lk − Lq … Lk − 1; given k_positions all after
    those, every query would see no key: refused (a warning would let an all-zero result through).
    A rule ORed with it (a prefix) may let them see keys: not refused then."""
    if any(isinstance(rule, Causal) and rule.lower_right for rule in rules) and q.size and k.size \
            and int(k.min()) > int(q.max()):
        raise InputError(f"k_positions start at {int(k.min())}, after every query position that mask "
                         f"causal_lower_right sets (Lk − Lq … Lk − 1 = {int(q.min())} … {int(q.max())}), so "
                         "every query would see no key; give mask causal with the queries' q_positions, "
                         "or drop k_positions", field="k_positions")


def walk(rules) -> list[Rule]:
    """The rules and the parts of those joined by OR, depth first."""
    return [found for rule in rules for found in (rule, *walk(rule.parts))]


def find(problem, kind: type[Rule]) -> Rule | None:
    """The problem's rule of this kind (alone or a part of one joined by OR), or None."""
    return next((rule for rule in walk(problem.rules) if isinstance(rule, kind)), None)


def swap(rules: tuple[Rule, ...], old: Rule, new: Rule) -> tuple[Rule, ...]:
    """`rules` with `old` (alone or a part of one joined by OR) replaced by `new`."""
    return tuple(new if rule is old else replace(rule, parts=swap(rule.parts, old, new)) if rule.parts else rule
                 for rule in rules)
