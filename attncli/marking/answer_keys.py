"""The keys of a learner's answers file, sorted before marking: stages, metadata, aliases, unknowns.

- Metadata (`name`, `student_id`, `comment`, … in `METADATA`, any case) is not an answer: it is
  set aside, never marked, and shown in the gradebook's note.
- Aliases are read as their stage with a note: the words courses and libraries use for the
  weights (`attention_weights`, `attn_weights`, `probs`, `softmax`, `attention`, …), a stage name
  in another case (`Weights`), and `logits`: what the softmax reads, the problem's last stage
  before the weights (`masked` when the problem masks, else `capped` or `scaled`).
- A truly unknown key is refused (`strict`, one file at the terminal: a typo is fixed at once)
  or set aside with a note (a class: the rest of the file is still marked). Did-you-mean ranks
  the forward stages a learner could mean over the backward pass's names.
Pure: no I/O.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from attncli.base.errors import InputError, did_you_mean, quote
from attncli.base.names import PROJECTED
from attncli.base.values import describe
from attncli.document.reading import ALIASES, input_keys, output_keys
from attncli.document.schema import asked, refuse_problem_set
from attncli.stages import grads
from attncli.stages.table import names

METADATA = ("name", "student", "student_name", "student_id", "sid", "id", "email", "comment", "comments",
            "note", "notes", "author", "date", "submitted", "course", "class", "section", "assignment", "group")
# The words a class really writes for each stage (lower case; spaces and hyphens read as "_").
STAGE_ALIASES = {
    "scores": ("raw_scores", "unscaled_scores", "dot_product", "qk", "qkt", "q_k", "qk_t", "similarity",
               "compatibility"),
    "scaled": ("scaled_scores", "scaled_attention_scores", "scaled_logits", "scaled_dot_product", "scores_scaled",
               "scaled_qk"),
    "capped": ("capped_scores", "softcapped", "softcapped_scores", "capped_logits"),
    "masked": ("masked_scores", "masked_logits", "masked_attention_scores", "scores_masked"),
    "weights": ("attention_weights", "attn_weights", "attention_probs", "attn_probs", "probs", "probabilities",
                "softmax", "attention", "softmax_weights", "softmax_scores", "attention_probabilities",
                "attention_matrix", "attn", "p_attn", "alpha", "a"),
    "output": ("context", "context_vector", "attention_output", "attn_output", "out", "result", "z", "y",
               "attention_result"),
}
WEIGHTS_ALIASES = STAGE_ALIASES["weights"]
# Words that mean different stages in different courses: read as the stage whose values they hold
# (Keras' return_attention_scores are the weights; Hugging Face's attention_scores the scaled scores).
AMBIGUOUS = {"attention_scores": ("scores", "scaled", "masked", "weights"),
             "attn_scores": ("scores", "scaled", "masked", "weights")}
PROJECTION_SPELLINGS = {f"{x}w_{name.lower()}": name for name in "QKV" for x in ("x", "x_kv")} \
    | {f"{x}w{name.lower()}": name for name in "QKV" for x in ("x", "x_kv")}  # X W_Q, XW_Q, X @ W_Q, …
ASKED = ("ask", "decimals")  # a problem's own marking settings (`attn exercise` writes them): not answers
HEAD_EXTRAS = ("Q", "K", "V", "lse", "tiles", "tiled_output", "tiled_lse")  # written per head by `attn compute`


@dataclass
class Sorted:
    """A document with aliases renamed and metadata and unknown keys set aside."""

    doc: dict
    aliases: dict[str, str] = field(default_factory=dict)  # stage path → the key the learner wrote
    metadata: dict = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)  # one note per key set aside

    def notes(self) -> list[str]:
        """The gradebook's note: the metadata, then each key set aside."""
        about = "; ".join(f"{key}: {value}" for key, value in self.metadata.items())
        return ([about] if about else []) + self.unknown


def _plain(key: str) -> str:
    """A key as the alias tables hold it: lower case, spaces and hyphens as "_"; a worksheet title
    copied as a key ("Q = X W_Q", "scaled = scores / √d_k") is its left side."""
    left = key.partition("=")[0] if "=" in key else key
    return re.sub(r"[\s\-]+", "_", left.strip().lower()).strip("_")


# A plural reads as its singular, for every word of the tables (`contexts`, `attentions`, `logits`):
# the ending and what it replaces, longest first.
PLURALS = (("ices", "ix"), ("ies", "y"), ("es", ""), ("s", ""))


def singulars(word: str) -> tuple[str, ...]:
    """`word` and the singulars it may be the plural of (`matrices` → `matrix`, `contexts` → `context`)."""
    return (word,) + tuple(word[:-len(end)] + stem for end, stem in PLURALS
                           if word.endswith(end) and len(word) >= len(end) + 3)


def _word(key: str) -> str:
    """The word of the tables a key is: itself, or the singular of a plural the tables hold."""
    lower = _plain(key)
    known = {w for ws in STAGE_ALIASES.values() for w in ws} | set(AMBIGUOUS) | {"logits"} \
        | {name.lower() for name in names() + grads.names()}
    return next((word for word in singulars(lower) if word in known), lower)


def alias_of(key: str, before_weights: str, fit=None) -> str | None:
    """The stage an alias (or its plural) stands for, or None. `fit(candidates) -> stage` picks the
    stage an ambiguous word's values are (else the first)."""
    lower = _word(key)
    for stage, words in STAGE_ALIASES.items():
        if lower in words:  # masked logits are what the softmax reads: `scaled` in a problem without a mask
            return before_weights if stage == "masked" else stage
    if lower in AMBIGUOUS:
        return fit(AMBIGUOUS[lower]) if fit else AMBIGUOUS[lower][0]
    if lower == "logits":
        return before_weights
    projection = PROJECTION_SPELLINGS.get(re.sub(r"[\s@·*×]+", "", key.partition("=")[2] or key).lower())
    if projection is not None:
        return projection
    stages = {name.lower(): name for name in PROJECTED + names() + grads.names()}
    found = stages.get(lower)
    return found if found != key else None


def _hint(key: str, allowed: tuple[str, ...]) -> str:
    """Did-you-mean the stage a near word stands for: forward stages and their aliases first (a
    near alias suggests its stage: `scaled_score` → "scaled"), then every key allowed."""
    words = {name: name for name in names()} | {w: stage for stage, ws in STAGE_ALIASES.items() for w in ws} \
        | {w: ws[0] for w, ws in AMBIGUOUS.items()}
    near = difflib.get_close_matches(_word(key), list(words), n=1, cutoff=0.75)
    if near:
        return f" (did you mean {quote(words[near[0]])}?)"
    return did_you_mean(key, names()) or did_you_mean(key, allowed) or f"; answers are {', '.join(names())}"


def _sort(entry: dict, allowed: tuple[str, ...], where: str, prefix: str, before_weights: str, strict: bool,
          out: Sorted, fit=None) -> dict:
    kept = {}
    for key, value in entry.items():
        if not isinstance(key, str):
            raise InputError(f"a key{where} is {type(key).__name__} {key!r}; keys are stage names", field="answers")
        if key in allowed or ALIASES.get(key) in allowed:
            kept[key] = value
        elif key in ASKED and not prefix:
            continue  # read by check from the problem
        elif key.lower() in METADATA:
            out.metadata[key] = value
        elif (stage := alias_of(key, before_weights, fit and (lambda c, v=value: fit(
                tuple(x for x in c if x not in entry) or c, v, prefix)))) is not None and stage in allowed:
            if stage in entry or stage in kept:
                raise InputError(f"both {quote(stage)} and {quote(key)} (read as {stage}) are given{where}; keep one",
                                 field=prefix + key)
            kept[stage] = value
            out.aliases[prefix + stage] = key
        elif strict:
            raise InputError(f"unknown key {quote(key)}{where}{_hint(key, allowed)}", field=prefix + key)
        else:
            out.unknown.append(f"unknown key {quote(key)}{where} not marked{_hint(key, allowed)}")
    return kept


def sort_keys(doc, before_weights: str = "scaled", strict: bool = True, fit=None) -> Sorted:
    """`doc` with its keys sorted (see the module's docstring); a document that is not an object is
    returned as it is (the reader names its type). `fit(candidates, value, prefix) -> stage`: the
    stage an ambiguous word (`attention_scores`) holds, by its values."""
    out = Sorted(doc)
    if not isinstance(doc, dict):
        return out
    refuse_problem_set(doc, "attn check answers.json -p -")
    top = ("heads",) + input_keys() + output_keys()
    out.doc = _sort(doc, top, "", "", before_weights, strict, out, fit)
    heads = out.doc.get("heads")
    if isinstance(heads, list):
        inner = names() + grads.names() + HEAD_EXTRAS
        out.doc["heads"] = [_sort(entry, inner, f" in heads[{h}]", f"heads[{h}].", before_weights, strict, out, fit)
                            if isinstance(entry, dict) else entry for h, entry in enumerate(heads)]
    return out


def asked_of(doc) -> dict:
    """The problem's `"ask"` (answer keys every answer must have: check's require; stages, gradients,
    tiles, slip), `"decimals"`, and its `"tile_size"` (the tiles a required `tiles` counts)."""
    if not isinstance(doc, dict):
        return {}
    out = asked(doc)  # as `attn compute` checks them when it reads the problem
    size = doc.get("tile_size")
    if size is not None:
        if not (isinstance(size, list) and len(size) == 2
                and all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in size)):
            raise InputError(f"tile_size is {describe(size)}; expected [BQ, BK], two whole numbers of at least 1",
                             field="tile_size")
        out["tile_size"] = tuple(size)
    return out
