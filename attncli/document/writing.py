"""The JSON document `attn compute` writes, from a trace (attncli/problem/trace.py), and the one rounding
every view uses. It sits above the stage table and the backward pass's table, whose names are its
per-head keys; trace.py below them holds only the frozen records.
"""

from __future__ import annotations

import numpy as np

from attncli.base.arrays import plain
from attncli.problem import groups, recipes
from attncli.problem.masks import input_keys, rule_lines
from attncli.problem.trace import Problem, Trace
from attncli.problem.variants import input_keys as variant_keys
from attncli.stages import grads
from attncli.stages.table import names as stage_names  # `stages` is to_dict's argument: the names to write


def mask_and_bias(problem: Problem) -> dict:
    """The mask rules and bias as input keys (see masks.input_keys), the bias without the head
    axis it was broadcast to."""
    keys = input_keys(problem)
    if problem.bias is not None:
        keys["bias"] = problem.bias[0] if problem.bias.shape[0] == 1 else problem.bias
    return keys


def problem_dict(problem: Problem, scale: float, d_k: int, d_v: int) -> dict:
    """The problem's keys as `attn compute` echoes them (valid input; the mask normalised to
    true = may attend), before any result: to_dict's start, and --cost's document."""
    doc: dict = {"attncli": 1}
    for key in ("title", "description"):
        if getattr(problem, key) is not None:
            doc[key] = getattr(problem, key)
    doc.update({"dtype": problem.dtype, **precision_keys(problem), "scale": scale, "d_k": d_k, "d_v": d_v})
    doc.update({name: plain(array) for name, array in problem.inputs.items()})
    if groups.grouped(problem):  # `heads` (the list of per-head results) gives the query heads
        doc["kv_heads"] = groups.count(problem)
    for key, value in mask_and_bias(problem).items():
        doc[key] = plain(value) if isinstance(value, np.ndarray) else value
    doc.update(variant_keys(problem))
    doc["mask_rule"] = "; ".join(rule_lines(problem))
    doc["masked_rows"] = problem.masked_rows
    if problem.rope is not None:  # the input key, and its convention in words
        doc["rope"] = problem.rope.to_json()
        doc["rope_rule"] = problem.rope.describe(d_k)
    for norm in (problem.q_norm, problem.k_norm):  # QK-norm, as input keys
        if norm is not None:
            doc[norm.name] = norm.to_json()
    if problem.dO is not None:
        doc["dO"] = plain(problem.dO)
    return doc


def precision_keys(problem: Problem) -> dict:
    """The precision lab's settings (attncli/problem/recipes.py) as input keys, each only when it is
    not the default: a low dtype's recipe (and its words, an echo), the mask fill, max_subtraction."""
    keys: dict = {}
    recipe = recipes.recipe(problem)
    if recipe is not None:
        keys.update(accumulate=recipe.accumulate, store=recipe.store, recipe=recipe.line(problem.dtype))
    if problem.mask_fill != -np.inf:
        keys["mask_fill"] = problem.mask_fill
    if not problem.max_subtraction:
        keys["max_subtraction"] = False
    return keys


def to_dict(trace: Trace, stages=None, decimals: int | None = None) -> dict:
    """The JSON document `attn compute` writes. It is also valid input: the problem's keys are
    echoed at the top level (the mask normalised to true = may attend), results beside them.
    `stages`: the names to write ("inputs" for Q, K, V per head; "errors" for the precision lab's
    errors, --error); None: all but the errors."""
    stages = ("inputs",) + stage_names() + grads.names() + (grads.GRADS,) if stages is None else stages
    problem = trace.problem
    doc = problem_dict(problem, trace.scale, trace.d_k, trace.d_v)
    per_head = [name for name in ("Q", "K", "V") if "inputs" in stages]
    per_head += [name for name in stage_names() if name in stages and trace.stage(name) is not None]
    doc["heads"] = [{name: plain(trace.stage(name)[h], decimals) for name in per_head}
                    for h in range(problem.heads)]
    if trace.lse is not None and ("weights" in stages or "output" in stages):
        for head, lse in zip(doc["heads"], trace.lse):
            head["lse"] = plain(lse, decimals)
    lab = trace.precision
    if lab is not None and "errors" in stages:  # --error: each stage shown, against float64
        for h, head in enumerate(doc["heads"]):
            head["errors"] = {name: {kind: plain(array[h], decimals) for kind, array in error.items()}
                              for name, error in lab.errors.items() if name in per_head}
    if "W_O" in problem.inputs:
        doc["concat"] = plain(trace.concat, decimals)
    doc["output"] = plain(trace.final, decimals)
    if trace.gradients is not None:
        _gradients(doc, trace.gradients, stages, decimals)
    doc["query_labels"] = problem.query_labels
    doc["key_labels"] = problem.key_labels
    doc["warnings"] = list(trace.warnings)
    if lab is not None and lab.nonfinite is not None:
        doc["nonfinite"] = lab.nonfinite.to_json()
    return doc


def _gradients(doc: dict, gradients, stages, decimals: int | None) -> None:
    """The backward pass: its per-head stages beside the forward ones, `grads` at the top level
    (one per input, in the shape it was given)."""
    for h, head in enumerate(doc["heads"]):
        head.update({name: plain(gradients.heads[name][h], decimals) for name in grads.names() if name in stages})
    if grads.GRADS in stages:
        doc[grads.GRADS] = {name: plain(array, decimals) for name, array in gradients.grads.items()}


