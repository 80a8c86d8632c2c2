"""The document's keys, defined once: every key `attn compute` writes or reads, and what it is.

The reader (`problem.build_problem`, through `check_keys`) and the JSON writer (`render/json.py`,
through `check_output`) both read this table, and tests/test_schema.py checks that every key
of every variant's JSON output is in it and reads back. The rule: a key the tool writes is read
back with the same meaning, or refused with a hint; never accepted and ignored.

Kinds:
    input    a matrix, a rule or a variant of the problem
    setting  how it is computed (scale, masked_rows, dtype)
    label    words that change no number (labels, title, description)
    echo     derived from other keys (`d_k` from Q's columns, `mask_rule` from the mask keys);
             read back, it is checked against what those keys give: a difference is an error
             naming both (`alibi_slopes` alone is the exception: it means "use these slopes")
    result   computed (heads' stages, output, lse, grads, warnings, --tiles's tiles); read back,
             it is checked against the recomputation to the decimals it was written with
             (readback.py); `explanation` is words of a previous run, kept out of the problem

Per-head keys (in `"heads": [{...}, ...]`) are every stage of attncli/stages/table.py and of the
backward pass (attncli/stages/grads.py), plus HEAD_KEYS.
"""

from __future__ import annotations

import functools
from collections import namedtuple

from attncli.base.errors import InputError, did_you_mean, quote
from attncli.base.names import ASKABLE, stage_of
from attncli.base.values import describe
from attncli.problem import rules, variants
from attncli.stages import grads
from attncli.stages import table as stages

INPUT, SETTING, LABEL, ECHO, RESULT = "input", "setting", "label", "echo", "result"
# name, kind, what it is; for an echo, `source` names the keys it is derived from
Key = namedtuple("Key", "name kind about source", defaults=("",))

# The keys before the mask rules' and the variants' (which their registries give: `keys()`), and after.
PROBLEM: tuple[Key, ...] = (
    Key("attncli", ECHO, "the document format's version: 1", "this version of attn"),
    Key("title", LABEL, "a title for the header"),
    Key("description", LABEL, "a description for the header"),
    # An exercise's own words (attncli/marking/exercise.py): what it asks; changes no number.
    Key("ask", LABEL, "the stages an exercise asks for (attn check requires them)"),
    Key("decimals", LABEL, "the least decimals an exercise asks a value to have"),
    Key("reproduce", LABEL, "an exercise's answer key: the attn exercise command that makes its problem (the "
        "teacher's: no view shows it)"),
    Key("rounding", LABEL, "a precision exercise's answer key: the scores its dtype changed, and its weights "
        "beside float64's"),
    Key("worked", LABEL, "find-the-slip: a worked solution with one planted mistake, shown, never computed"),
    Key("slip", LABEL, "find-the-slip: the stage and mistake of the planted slip (the key's answer)"),
    Key("dtype", SETTING, "float64, float32, bfloat16 or float16: the precision every stage is stored in"),
    Key("accumulate", SETTING, "bfloat16, float16: float32 or same, where products and sums accumulate"),
    Key("store", SETTING, "bfloat16, float16: stages (each stage stored in the dtype) or output (the output alone)"),
    Key("mask_fill", SETTING, "what a masked score becomes: \"-inf\" (default), \"min\" (the dtype's most negative) "
        "or a number"),
    Key("max_subtraction", SETTING, "false: the softmax takes e^x without subtracting each row's max"),
    Key("scale", SETTING, "the factor on Q Kᵀ; written as used (1/√d_k when not given)"),
    Key("d_k", ECHO, "each head's query/key width", "Q (or W_Q) and heads"),
    Key("d_v", ECHO, "each head's value width", "V (or W_V) and heads"),
    *(Key(name, INPUT, "a matrix of the problem") for name in (
        "Q", "K", "V", "X", "X_kv", "W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V", "W_O", "b_O")),
    # Here: the mask rules' keys (attncli/problem/rules.py), the bias, the variants' (attncli/problem/variants.py).
)
AFTER: tuple[Key, ...] = (
    Key("masked_rows", SETTING, "zero, uniform or error: rows whose every key is masked"),
    Key("rope", INPUT, "rotary positions on Q and K: true or {style, base, dims, scaling}"),
    Key("rope_rule", ECHO, "the RoPE convention in words", "rope"),
    Key("q_norm", INPUT, "QK-norm of Q before RoPE: {type, weight, bias, eps, over, weight_offset}"),
    Key("k_norm", INPUT, "QK-norm of K before RoPE: {type, weight, bias, eps, over, weight_offset}"),
    Key("dO", INPUT, "the gradient of a loss by the final output, or \"ones\""),
    Key("heads", INPUT, "the number of query heads; written as the list of per-head results"),
    Key("kv_heads", INPUT, "the number of key/value heads (grouped-query attention): query head h reads kv head "
        "h // (heads / kv_heads); written when fewer than heads"),
    Key("concat", RESULT, "the heads' outputs side by side (with W_O)"),
    Key("output", RESULT, "the final output"),
    Key(grads.GRADS, RESULT, "one gradient per input, in the shape it was given"),
    Key("query_labels", LABEL, "one label per query"),
    Key("key_labels", LABEL, "one label per key"),
    Key("word_ids", LABEL, "one per key: the word its token belongs to (sub-tokens of a word share it), null for "
        "special tokens and padding (attn capture from text: the tokenizer's word_ids())"),
    Key("warnings", RESULT, "what the computation warned about"),
    Key("nonfinite", RESULT, "the first inf or NaN a run produced: {stage, head, query, key, value (as stored), "
                             "computed (\"nan\", when a masked-rows policy stored a number in its place), sum (\"inf\", when "
                             "the row's softmax sum overflowed and value is its weight e^x/inf = 0), cause}"),
    Key("recipe", ECHO, "the precision recipe in words", "dtype, accumulate and store"),
    Key("tile_size", RESULT, "[BQ, BK]: the tile sizes of the tiled online softmax"),
    Key("tiled_max_difference", RESULT, "the largest |tiled − plain| over every head's output"),
    Key("explanation", RESULT, "the hand calculation's lines"),
    Key("cost", RESULT, "the kernels' FLOPs and bytes per stage, naive and tiled, for cost.sram bytes on chip"),
    # attn capture's keys (attncli/capture/driver.py): where the layer came from, and the model's own results,
    # which attncli/document/agreement.py compares with the recomputation (never required equal: see "agreement").
    Key("model", LABEL, "the model a captured layer came from: {name, class, layer, part (decoder or cross, for an "
        "encoder-decoder's decoder)}"),
    Key("reference", LABEL, "the model's own results: {weights (per head), output (after o_proj), dtype}"),
    Key("agreement", RESULT, "how the recomputation agrees with reference: {agrees, difference, first, line, compared}"),
)
HEAD_KEYS: tuple[Key, ...] = (
    *(Key(name, RESULT, f"this head's {name} (the input split into heads, or projected)")
      for name in ("Q", "K", "V")),
    Key("lse", RESULT, "ln Σ e^logit per query"),
    Key("errors", RESULT, "when asked for: each stage's error against float64, {stage: {abs, rel, ulps}}"),
    Key("tiles", RESULT, "tiled: every tile's running max, sum and output"),
    Key("tiled_output", RESULT, "tiled: the output computed tile by tile"),
    Key("tiled_lse", RESULT, "tiled: the lse computed tile by tile"),
)
# The gradients in "grads" beside the inputs': QK-norm's parameters (attncli/problem/qk_norm.py, as its vjp names them).
PARAMETER_GRADS = tuple(f"{norm}.{part}" for norm in ("q_norm", "k_norm") for part in ("weight", "bias"))
ALIASES = {"q": "Q", "k": "K", "v": "V"}


def keys() -> tuple[Key, ...]:
    """Every top-level key, in the order written: the problem's, each mask rule's keys and the
    positions (rules.RULES), the bias, each variant's keys (variants.VARIANTS), the rules' echo,
    then the settings, results and labels. The registries are read at each call, so a rule or a
    variant registered later has its keys here, in every reader and writer."""
    return _keys(rules.RULES, variants.VARIANTS)


@functools.cache
def _keys(kinds: tuple, records: tuple) -> tuple[Key, ...]:
    rule_keys = rules.key_words(kinds)
    return (*PROBLEM, *(Key(name, INPUT, about) for name, about in rule_keys.items()),
            Key("bias", INPUT, "added to the logits; null is −∞"),
            *(key for variant in records for key in (
                Key(variant.name, INPUT, variant.about),
                *(Key(name, ECHO, about, variant.name) for name, about in variant.echoes))),
            Key("mask_rule", ECHO, "the mask rules in words", _listed(tuple(rule_keys))), *AFTER)


def _listed(names: tuple[str, ...]) -> str:
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)


def stage_names() -> tuple[str, ...]:
    """Every per-head stage of the forward and backward passes (the stage tables' names)."""
    return stages.names() + grads.names()


def top_names(*kinds: str) -> tuple[str, ...]:
    """The top-level keys of these kinds (all kinds when none is named)."""
    return tuple(key.name for key in keys() if not kinds or key.kind in kinds)


def head_names() -> tuple[str, ...]:
    return tuple(key.name for key in HEAD_KEYS) + stage_names()


def key(name: str) -> Key | None:
    return next((k for k in keys() if k.name == name), None)


def one_head() -> tuple[str, ...]:
    """One head's results as they may stand at the top level (an answers file's form for a one-head
    problem; `attn compute` checks them as head 0's): its stages and its tiles."""
    return stage_names() + ("tiles",)


def known() -> tuple[str, ...]:
    """Every top-level key a problem document may hold: the table's, and `one_head()`."""
    return top_names() + one_head()


MAX_DECIMALS = 17  # as check's --decimals: a double holds no more


def asked(doc: dict) -> dict:
    """An exercise's `"ask"` and `"decimals"`, checked (by `attn compute` reading a problem and by
    `attn check`, with the same words): {"require": (answer keys…), "decimals": N} as given."""
    out = {}
    if "ask" in doc:
        ask = doc["ask"]
        if not isinstance(ask, list) or not all(isinstance(s, str) for s in ask):
            raise InputError(f"ask is {describe(ask)}; expected a list of stage names ({', '.join(ASKABLE)})",
                             field="ask")
        for word in ask:
            if stage_of(word) not in ASKABLE:
                hint = did_you_mean(stage_of(word), ASKABLE) or f"; answers are {', '.join(ASKABLE)}"
                raise InputError(f"ask is {describe(ask)}, naming an unknown stage {quote(word)}{hint}", field="ask")
        out["require"] = tuple(ask)  # as --require: a missing one counts its cells as missing
    if "decimals" in doc:
        places = doc["decimals"]
        if isinstance(places, bool) or not isinstance(places, int) or not 0 <= places <= MAX_DECIMALS:
            raise InputError(f"decimals is {describe(places)}; expected a whole number from 0 to {MAX_DECIMALS}",
                             field="decimals")
        out["decimals"] = int(places)
    return out


def refuse_problem_set(doc, command: str = "attn compute") -> None:
    """A problem set (`attn exercise --count N`: {"problems": [...]}) is refused, saying how to pick one."""
    if isinstance(doc, dict) and isinstance(doc.get("problems"), list):
        raise InputError(f"a problem set of {len(doc['problems'])} problems (from attn exercise): pick one, "
                         f"e.g. jq '.problems[0]' set.json | {command} (problems count from 0)")


def has_results(doc: dict) -> bool:
    """Whether a (key-checked) document holds any echo or result to check (attncli/document/readback.py),
    or an .npz's results not yet read."""
    results = top_names(ECHO, RESULT) + one_head()
    return isinstance(doc.get("heads"), list) or any(key in doc for key in results) or bool(
        getattr(doc, "results", None))


def refuse_layers(doc, command: str = "attn compute") -> None:
    """A document of several layers (attn capture --layer all: {"layers": [...]}) where one problem
    belongs is refused, saying how to take one layer out."""
    if isinstance(doc, dict) and isinstance(doc.get("layers"), list):
        raise InputError(f"a document of {len(doc['layers'])} layers (attn capture of several): {command} reads "
                         "one problem; attn compute writes any one layer of it as a JSON document of its own",
                         field="layers")


def check_keys(doc: dict) -> dict:
    """The document with aliases resolved; an unknown key is refused, suggesting the closest."""
    names = known()
    if "problems" not in names:
        refuse_problem_set(doc)
    refuse_layers(doc)
    out = {}
    for name, value in doc.items():
        resolved = ALIASES.get(name, name)
        if resolved not in names:
            hint = did_you_mean(name, names + tuple(ALIASES), 0.5) or \
                f"; valid keys: {', '.join(top_names(INPUT, SETTING, LABEL))}"
            raise InputError(f"unknown key {quote(name)}{hint}")
        if resolved in out:
            raise InputError(f'both "{resolved}" and its alias "{resolved.lower()}" are given; keep one')
        out[resolved] = value
    return out


def check_output(doc: dict) -> dict:
    """The writer's side: every key of a document `attn compute` is about to write is in the
    schema (a key missing here is a bug, found by the tests). Returns the document."""
    names, per_head = set(top_names()), set(head_names())  # once: a document has many keys
    unknown = [name for name in doc if name not in names]
    for head in doc.get("heads") or ():
        unknown += [f"heads[].{name}" for name in head if name not in per_head]
    if unknown:
        raise AssertionError(f"attncli writes {', '.join(unknown)}, which attncli/document/schema.py does not list")
    return doc
