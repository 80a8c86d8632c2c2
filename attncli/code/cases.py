"""The battery of cases a learner's function is marked on (`attn check`'s code marking): each a problem attncli computes
itself, chosen to catch one kind of slip (BATTERY, a registry: one `Entry` per case, read by the
runner, the marks, the choice of cases and the docs' list).

A case is one or more problems (the batch: one problem per sequence), each with its heads. Which
cases a function is run on follows from its signature and layout (`not_run` says why a case is
left out); a teacher adds cases as problem files (a folder `my_problems/`: every .json there is one
case, named by its file).
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

from attncli.base.errors import AttnError, InputError, did_you_mean, plural, quote
from attncli.base.rule_words import MASKED_ROWS_LIKE, MASKED_ROWS_WORDS
from attncli.code.calling import Signature
from attncli.compute.attention import attend
from attncli.document.reading import build_problem
from attncli.marking.answer_files import load_answers, refuse_special
from attncli.marking.answer_keys import ASKED
from attncli.problem import groups
from attncli.problem.rules import Causal, Matrix, find
from attncli.problem.trace import Problem, Trace

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
MASKED = ("mask", "causal")  # the needs a mask rule gives: any mask (a matrix), or causal alone


@dataclass(frozen=True, eq=False)
class Case:
    """One case: its problems (one per sequence of the batch) and what calling on it needs."""

    name: str
    about: str
    problems: tuple[Problem, ...]
    needs: frozenset = frozenset()  # "mask", "causal", "projected"
    dtype: str = "float64"  # the arguments' dtype (the problems hold their values exactly)
    vector: bool = False  # Q passed as one 1-D query
    file: str | None = None  # a teacher's problem file

    @cached_property
    def traces(self) -> tuple[Trace, ...]:
        return tuple(attend(problem) for problem in self.problems)

    @property
    def heads(self) -> int:
        return self.problems[0].heads

    @property
    def kv_heads(self) -> int:
        return groups.count(self.problems[0])

    @property
    def causal(self) -> bool:
        return find(self.problems[0], Causal) is not None

    def shape_text(self) -> str:
        p = self.problems[0]
        batch = f"{plural(len(self.problems), 'sequence')} × " if len(self.problems) > 1 else ""
        heads = plural(p.heads, "head") + (f" ({self.kv_heads} kv)" if self.kv_heads != p.heads else "") + " × " \
            if p.heads > 1 else ""
        return f"{batch}{heads}{plural(p.lq, 'query')} × {plural(p.lk, 'key')}"


class Entry(NamedTuple):
    name: str
    about: str
    build: Callable[[bool, bool], Case | None]  # (projected, has a batch axis with heads) -> the case, or None


def _matrix(rng: random.Random, rows: int, cols: int, low: float = -2.0, high: float = 2.0) -> list:
    """Numbers with two decimals from Python's own generator (the same everywhere)."""
    return [[round(rng.uniform(low, high), 2) for _ in range(cols)] for _ in range(rows)]


def _heads(rng: random.Random, heads: int, rows: int, cols: int) -> list:
    return [_matrix(rng, rows, cols) for _ in range(heads)]


def _example(name: str) -> dict:
    with open(EXAMPLES / f"{name}.json", encoding="utf-8") as f:
        doc = json.load(f)
    return {k: v for k, v in doc.items() if k not in ("title", "description")}


def _case(name: str, about: str, docs, **more) -> Case:
    docs = docs if isinstance(docs, list) else [docs]
    return Case(name, about, tuple(build_problem(doc) for doc in docs), **more)


def _projected(seed: int, rows: int = 4, d_in: int = 6, d_k: int = 4, d_v: int = 3, **rules) -> dict:
    rng = random.Random(seed)
    return {"X": _matrix(rng, rows, d_in), "W_Q": _matrix(rng, d_in, d_k, -1, 1), "W_K": _matrix(rng, d_in, d_k, -1, 1),
            "W_V": _matrix(rng, d_in, d_v, -1, 1), **rules}


def _qkv(seed: int, lq: int, lk: int, d_k: int, d_v: int | None = None, **rules) -> dict:
    rng = random.Random(seed)
    return {"Q": _matrix(rng, lq, d_k), "K": _matrix(rng, lk, d_k), "V": _matrix(rng, lk, d_v or d_k), **rules}


def _scooter(projected, batched):
    return None if projected else _case("scooter", "the textbook's example: which word does \"it\" attend to?",
                                        _example("scooter"))


def _random(projected, batched):
    if projected:
        return _case("random", "4 tokens, d_in 6, d_k 4, d_v 3", _projected(20), needs=frozenset({"projected"}))
    return _case("random", "the 4×8 random case (torch.manual_seed(0); Q, K, V = three torch.randn(4, 8))",
                 _example("random_4x8"))


def _non_square(projected, batched):
    return None if projected else _case("non_square", "2 queries, 5 keys (Lq ≠ Lk)", _qkv(3, 2, 5, 3))


def _dk_dv(projected, batched):
    return None if projected else _case("dk_dv", "d_k = 3, d_v = 5: the value width differs from the key width",
                                        _qkv(4, 3, 3, 3, 5))


def _vector(projected, batched):
    return None if projected else _case("vector", "one query as a 1-D vector, as the textbook passes Q_it",
                                        _example("scooter"), vector=True)


def _large(projected, batched):
    about = "scores in the thousands: e^x overflows unless the row max is subtracted first"
    if projected:
        doc = {"X": [[0, 40], [30, 10], [20, 20]], "W_Q": [[1, 0], [0, 1]], "W_K": [[1, 0], [0, 1]],
               "W_V": [[0.5, -1], [1, 0.25]]}
        return _case("large_logits", about, doc, needs=frozenset({"projected"}))
    return _case("large_logits", about, {"Q": [[0, 2000], [1500, 500]], "K": [[1, 0], [0, 1], [0.5, 0.5]],
                                         "V": [[2, 0], [0, 2], [1, -1]]})


def _float32(projected, batched):
    about = "float32 inputs: right to float32's precision"
    doc = _projected(21) if projected else _example("random_4x8")
    rounded = {k: np.asarray(v, np.float32).astype(np.float64).tolist() if isinstance(v, list) else v
               for k, v in doc.items()}
    return _case("float32", about, rounded, dtype="float32", needs=frozenset({"projected"} if projected else ()))


def _causal(projected, batched):
    about = "causal self-attention: query i sees keys 0 … i"
    doc = _projected(22, causal=True) if projected else _qkv(6, 4, 4, 3, causal=True)
    return _case("causal", about, doc, needs=frozenset({"causal"} | ({"projected"} if projected else set())))


def _causal_non_square(projected, batched):
    if projected:
        return None
    return _case("causal_non_square", "causal, 2 queries over 4 keys: top-left as PyTorch's is_causal (query i sees "
                 "keys 0 … i), not bottom-right", _qkv(7, 2, 4, 3, 2, causal=True), needs=frozenset({"causal"}))


def _padding(projected, batched):
    about = "the last key is padding, masked for every query"
    doc = _projected(23, key_mask=[True, True, True, False]) if projected else \
        _qkv(8, 3, 4, 3, key_mask=[True, True, True, False])
    return _case("padding", about, doc, needs=frozenset({"mask"} | ({"projected"} if projected else set())))


def _masked_row(projected, batched):
    about = f"a query whose every key is masked: {MASKED_ROWS_WORDS['zero']} ({MASKED_ROWS_LIKE['zero']})"
    mask = [[True, True, False, True], [False, False, False, False], [True, False, True, True]]
    doc = _projected(24, rows=4, mask=mask + [[True] * 4]) if projected else _qkv(9, 3, 4, 2, mask=mask)
    return _case("masked_row", about, doc, needs=frozenset({"mask"} | ({"projected"} if projected else set())))


def _multi(projected, batched):
    if projected:
        return None
    rng = random.Random(10)
    return _case("heads", "2 heads", {"Q": _heads(rng, 2, 3, 2), "K": _heads(rng, 2, 4, 2), "V": _heads(rng, 2, 4, 2)})


def _gqa(projected, batched):
    if projected:
        return None
    rng = random.Random(11)
    return _case("gqa", "grouped-query: 4 query heads, 2 kv heads (query head h reads kv head h // 2)",
                 {"Q": _heads(rng, 4, 3, 2), "K": _heads(rng, 2, 4, 2), "V": _heads(rng, 2, 4, 2)})


def _batch(projected, batched):
    if projected:  # one set of projections for the batch, as a layer holds them
        first = _projected(25)
        second = dict(first, X=_matrix(random.Random(26), 4, 6))
        return _case("batch", "2 sequences in a batch", [first, second], needs=frozenset({"projected", "batch"}))
    rng = random.Random(12)
    heads = 2 if batched else 1

    def one():
        shaped = (lambda rows, cols: _heads(rng, heads, rows, cols)) if batched else \
            (lambda rows, cols: _matrix(rng, rows, cols))
        return {"Q": shaped(3, 2), "K": shaped(4, 2), "V": shaped(4, 2)}
    return _case("batch", f"2 sequences in a batch{', 2 heads each' if batched else ''}", [one(), one()],
                 needs=frozenset({"batch"}))


BATTERY: tuple[Entry, ...] = (
    Entry("scooter", "the textbook's example", _scooter),
    Entry("random", "the 4×8 random case", _random),
    Entry("non_square", "Lq ≠ Lk", _non_square),
    Entry("dk_dv", "d_k ≠ d_v", _dk_dv),
    Entry("vector", "a 1-D query", _vector),
    Entry("large_logits", "scores in the thousands", _large),
    Entry("float32", "float32 inputs", _float32),
    Entry("causal", "causal", _causal),
    Entry("causal_non_square", "causal with Lq ≠ Lk (top-left)", _causal_non_square),
    Entry("padding", "a padding key", _padding),
    Entry("masked_row", "a fully masked row", _masked_row),
    Entry("heads", "several heads", _multi),
    Entry("gqa", "grouped-query attention", _gqa),
    Entry("batch", "a batch of sequences", _batch),
)


def names() -> tuple[str, ...]:
    return tuple(entry.name for entry in BATTERY)


def not_run(case: Case, signature: Signature, layout: str) -> str | None:
    """Why `case` cannot be called with this signature and layout; None when it can."""
    takes_mask, takes_causal = signature.takes("mask"), signature.takes("is_causal")
    if "projected" in case.needs and not signature.projected:
        return "its Q, K, V are projections: needs x, W_Q, W_K, W_V"
    if "projected" not in case.needs and signature.projected:
        return "its Q, K, V are given, not projections of one x"
    if "mask" in case.needs and not takes_mask:
        return "needs a mask parameter (signature \"Q, K, V, mask\")"
    if "causal" in case.needs and not (takes_mask or takes_causal):
        return "needs a mask or is_causal parameter"
    if case.heads > 1 and layout != "B,H,L,d":
        return "has several heads: needs the layout B,H,L,d"
    if len(case.problems) > 1 and not layout.startswith("B,"):
        return "is a batch: needs the layout B,L,d or B,H,L,d"
    if case.vector and (layout != "L,d" or signature.kernel or signature.backward):
        return "passes a 1-D query: only for a forward pass with the layout L,d"
    if case.file is not None and signature.projected != ("X" in case.problems[0].inputs):
        return "its problem and the signature differ (Q, K, V or x with projections)"
    return None


def battery(signature: Signature, layout: str, chosen: list[str] | None = None) -> tuple[list[Case], list[tuple[str, str]]]:
    """(cases to run, [(name, why not)]): the built-in cases (or the `chosen` ones: names and
    problem files or folders), those this signature and layout can call."""
    batched = layout == "B,H,L,d"
    cases: list[Case] = []
    for item in chosen or list(names()):
        if item in names():
            entry = next(e for e in BATTERY if e.name == item)
            built = entry.build(signature.projected, batched)
            if built is None:
                if chosen:
                    cases.append(Case(item, entry.about, (), needs=frozenset({"unavailable"})))
                continue
            cases.append(built)
        elif os.path.isdir(item):
            files = sorted(os.path.join(item, f) for f in os.listdir(item) if f.endswith(".json"))
            if not files:
                raise InputError(f"{quote(item)} holds no .json problem files", field="cases")
            for path in files:  # a named pipe among them would wait for a writer forever: refused unopened
                refuse_special(path, "each case of a folder is read from a regular file")
            cases += [from_file(path) for path in files]
        elif item.endswith(".json") or os.path.exists(item):
            cases.append(from_file(item))
        else:
            hint = did_you_mean(item, names()) or f"; cases are {', '.join(names())}, or problem files"
            raise InputError(f"unknown case {quote(item)}{hint}", field="cases")
    run, skipped = [], []
    for case in cases:
        why = "has no form for this signature" if "unavailable" in case.needs else not_run(case, signature, layout)
        (skipped.append((case.name, why)) if why else run.append(case))
    return run, skipped


def from_file(path: str) -> Case:
    """A teacher's problem file (attn compute's input) as a case named by its file."""
    doc = load_answers(path, csv=False)
    if not isinstance(doc, dict):
        raise InputError("a case is one problem, a JSON object", source=path, field="cases")
    try:
        problem = build_problem({k: v for k, v in doc.items() if k not in ASKED and k not in ("title",)},
                                source=path)
    except AttnError as error:
        raise error.at(path)
    needs = set()
    for rule in problem.rules:
        needs.add("causal" if isinstance(rule, Causal) and not rule.lower_right else "mask")
    if problem.bias is not None or problem.rope is not None or problem.alibi_slopes is not None \
            or problem.softcap is not None or problem.sinks is not None:
        raise InputError("a case file may hold Q, K, V (or X and projections), a mask and heads; bias, RoPE, ALiBi, "
                         "softcap and sinks are not arguments a function is called with", source=path, field="cases")
    if "X" in problem.inputs:
        needs.add("projected")
    name = os.path.basename(path).removesuffix(".json")
    about = doc.get("description") if isinstance(doc.get("description"), str) else f"from {os.path.basename(path)}"
    return Case(name, about, (problem,), needs=frozenset(needs), file=path)


def with_gradient(case: Case, seed: int = 30) -> Case:
    """The case with a dO (small numbers, the same everywhere) for a backward pass."""
    rng = random.Random(seed)
    problems = []
    for problem in case.problems:
        shape = attend(problem).final.shape
        problems.append(replace(problem, dO=np.asarray(_matrix(rng, *shape))))
    return replace(case, problems=tuple(problems))


def with_open_mask(case: Case) -> Case:
    """A case without a mask, as a function that takes one sees it: an all-true mask matrix (so
    that a mask read the wrong way round is diagnosed here too)."""
    if any(problem.rules for problem in case.problems):
        return case
    problems = tuple(replace(p, rules=(Matrix(mask=np.ones((1, p.lq, p.lk), bool)),)) for p in case.problems)
    return replace(case, problems=problems)
