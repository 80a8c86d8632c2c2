"""The agreement check: a document's `reference` (a model's own attention weights per head and its
attention output after o_proj, written by `attn capture`) against attncli's recomputation.

    agrees with MODEL layer N to 3e-07 (the model computes in float32)
    agrees with MODEL layer N to 3e-07 in the output (weights not computed here, so not compared; …)
    differs from MODEL layer N: weights, head 1, row 2, key 0: attncli 0.25, the model 0.31 (…); most likely
        the RoPE pairing: the model's is interleaved (…), the document's half (…)

A cell agrees when |attncli − model| ≤ tolerance · max(1, largest |model| of that stage); the
tolerance is the reference's precision's (TOLERANCE). "to 3e-07" is the largest |attncli − model|
over both stages. As `diff`: `attn compute` exits 1 when the document differs from its model. A
difference names its most likely reason: the first convention guess (attncli/document/guesses.py)
whose rewritten document agrees with the model, or says that none of them does.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from attncli.base.errors import InputError
from attncli.base.values import as_array, describe
from attncli.compute.attention import attend
from attncli.document import guesses
from attncli.document.reading import build_problem, input_keys

# The model's own precision decides how close is "the same": float32 rounding in the model's
# softmax, products and sums, relative to the stage's largest value.
TOLERANCE = {"float64": 1e-9, "float32": 1e-5, "bfloat16": 2e-2, "float16": 2e-3}
STAGES = ("weights", "output")  # the reference's keys: the trace's per-head weights, its final output
CAPTURED = ("model", "reference", "word_ids")  # attn capture's keys, written back beside the recomputation
WORDS = {"float64": "the model ran in float64", "float32": "the model computes in float32",
         "bfloat16": "the model computes in bfloat16", "float16": "the model computes in float16"}


class Agreement(NamedTuple):
    model: str
    layer: int | None
    dtype: str
    difference: float  # the largest |attncli − model| over every stage compared
    first: dict | None  # the first cell that differs: stage, head, row, column, attncli, model
    kept: dict = {}  # the document's own model and reference, written back beside the agreement
    uncompared: tuple[str, ...] = ()  # reference stages the recomputation left out (the output alone)
    reason: str | None = None  # when it differs: the convention guess that reproduces the model, in words

    @property
    def agrees(self) -> bool:
        return self.first is None

    def line(self) -> str:
        where = self.model if self.layer is None else f"{self.model} layer {self.layer}"
        words = WORDS[self.dtype]
        if self.agrees:
            if self.uncompared:  # the output alone was computed: say what the agreement is of
                left = " and ".join(self.uncompared)
                return (f"agrees with {where} to {self.difference:.0e} in the output ({left} not computed here, "
                        f"so not compared; {words})")
            return f"agrees with {where} to {self.difference:.0e} ({words})"
        cell = self.first
        at = ", ".join(f"{name} {cell[name]}" for name in ("head", "row", "column") if cell.get(name) is not None)
        mine, theirs = _apart(cell["attncli"], cell["model"])
        why = (f"most likely {self.reason}: recomputed with the model's, attncli agrees" if self.reason else
               f"no convention guess ({guesses.TRIED}) reproduces the model")
        return (f"differs from {where}: {cell['stage']}, {at}: attncli {mine}, the model {theirs} "
                f"(largest difference {self.difference:.0e}; {words}); {why}")

    def to_json(self) -> dict:
        compared = [name for name in self.kept.get("reference", {}) if name in STAGES and name not in self.uncompared]
        return {"agrees": self.agrees, "difference": self.difference, "first": self.first, "line": self.line(),
                "compared": compared, "reason": self.reason}

    @property
    def keys(self) -> dict:
        """The keys a JSON document of the recomputation holds: model, reference and agreement."""
        return self.kept | {"agreement": self.to_json()}


def read(doc: dict) -> tuple[dict[str, np.ndarray], str, str, int | None] | None:
    """(stages, dtype, model name, layer) from a document's `reference` and `model`, or None."""
    reference = doc.get("reference")
    if reference is None:
        return None
    if not isinstance(reference, dict) or not set(STAGES) & set(reference):
        raise InputError(f"reference is {describe(reference)}; expected {{\"weights\": [...], \"output\": [...], "
                         "\"dtype\": ...} as attn capture writes it", field="reference")
    unknown = sorted(set(reference) - set(STAGES) - {"dtype"})
    if unknown:
        raise InputError(f"reference has an unknown key {unknown[0]!r}; expected weights, output and dtype",
                         field="reference")
    dtype = reference.get("dtype", "float32")
    if dtype not in TOLERANCE:
        raise InputError(f"reference.dtype is {describe(dtype)}; expected one of {', '.join(TOLERANCE)}",
                         field="reference.dtype")
    stages = {name: as_array(reference[name], f"reference.{name}", max_dims=3) for name in STAGES if name in reference}
    _word_ids(doc.get("word_ids"))
    model = doc.get("model") if isinstance(doc.get("model"), dict) else {}
    layer = model.get("layer")
    name = str(model.get("name", "the model")) + {"decoder": " decoder", "cross": " decoder cross-attention"}.get(
        model.get("part"), "")  # an encoder-decoder's decoder (attn capture --decoder, --cross)
    return stages, dtype, name, layer if isinstance(layer, int) else None


def compare(doc: dict, trace, why: bool = True) -> Agreement | None:
    """The agreement of `trace` (attncli's recomputation) with the document's reference, or None; when
    it differs (and `why`), with its most likely reason (attncli/document/guesses.py)."""
    found = _compare(doc, trace)
    if found is None or found.agrees or not why:
        return found
    inputs = {key: value for key, value in doc.items() if key in input_keys() and key != "agreement"}
    return found._replace(reason=guesses.likely(inputs, _agrees))


def _agrees(doc: dict) -> bool:
    """Whether a rewritten document's recomputation agrees with its reference."""
    return _compare(doc, attend(build_problem(doc))).agrees


def _compare(doc: dict, trace) -> Agreement | None:
    found = read(doc)
    if found is None:
        return None
    stages, dtype, model, layer = found
    ours = {"weights": trace.stage("weights"), "output": trace.final}
    largest, first, uncompared = 0.0, None, []
    for name, theirs in stages.items():
        mine = ours[name]
        if mine is None:  # the output-only path computes no weights: compare the output, and say so in JSON
            uncompared.append(name)
            continue
        if mine.shape != theirs.shape:
            raise InputError(f"reference.{name} has shape {theirs.shape}, but attncli's {name} has {mine.shape}: "
                             "the document's problem is not the model's", field=f"reference.{name}")
        diff = np.abs(mine.astype(np.float64) - theirs)
        largest = max(largest, float(diff.max(initial=0.0)))
        bad = np.argwhere(diff > TOLERANCE[dtype] * max(1.0, float(np.abs(theirs).max(initial=0.0))))
        if first is None and len(bad):
            first = _cell(name, tuple(int(i) for i in bad[0]), mine, theirs)
    words = doc.get("word_ids")
    if words is not None and len(words) != trace.problem.lk:
        raise InputError(f"word_ids has {len(words)} entries, but there are {trace.problem.lk} keys; expected one per "
                         "key (as key_labels)", field="word_ids")
    return Agreement(model, layer, dtype, largest, first, captured(doc), tuple(uncompared))


def captured(doc: dict) -> dict:
    """attn capture's keys of `doc` (model, reference, word_ids), an .npz's arrays as JSON's lists."""
    return {key: _json_values(doc[key]) for key in CAPTURED if key in doc}


def _json_values(value):
    if isinstance(value, dict):
        return {k: _json_values(v) for k, v in value.items()}
    return value.tolist() if isinstance(value, np.ndarray) else value


def _word_ids(value) -> None:
    """word_ids: a list of whole numbers ≥ 0 (the word of each key's token) or null."""
    if value is None:
        return
    if not isinstance(value, list) or not all(v is None or (type(v) is int and v >= 0) for v in value):
        raise InputError(f"word_ids is {describe(value)}; expected one whole number ≥ 0 (or null) per key, as "
                         "attn capture writes it", field="word_ids")


def _apart(mine: float, theirs: float) -> tuple[str, str]:
    """Two differing numbers with the fewest significant digits (6 at least) that tell them apart."""
    for digits in (6, 9, 12, 17):
        shown = f"{mine:.{digits}g}", f"{theirs:.{digits}g}"
        if shown[0] != shown[1]:
            break
    return shown


def _cell(stage: str, index: tuple[int, ...], mine: np.ndarray, theirs: np.ndarray) -> dict:
    """The first differing cell: (head, row, key) of the weights, (row, column) of the output."""
    names = ("head", "row", "column") if len(index) == 3 else ("row", "column")
    return {"stage": stage, **dict(zip(names, index)), "attncli": float(mine[index]), "model": float(theirs[index])}


def check_claim(claimed, agreement: Agreement | None) -> None:
    """A document's `agreement` (as attn compute writes it) read back: it must say what the
    recomputation says."""
    if agreement is None:
        raise InputError("agreement is given, but there is no reference to agree with", field="agreement")
    if not isinstance(claimed, dict) or claimed.get("agrees") is not agreement.agrees:
        raise InputError(f"agreement is {describe(claimed)}, but the recomputation says: {agreement.line()}",
                         field="agreement")
