"""The binary formats' writers (render/formats.py): a trace's arrays, straight from it, never through
text. `.npy` holds the final output; `.npz` every stage under its JSON path, the inputs as given,
and what is needed to read the file back as a problem (attncli/document/loading.py reads it)."""

from __future__ import annotations

import json

import numpy as np

from attncli.document.writing import mask_and_bias
from attncli.problem.groups import count, grouped
from attncli.problem.trace import Trace
from attncli.problem.variants import input_keys as variant_keys
from attncli.stages.table import names


def npz_arrays(trace: Trace) -> dict:
    """Every stage under its JSON path (`heads/weights` is (H, Lq, Lk)), the inputs as given,
    and what is needed to read the file back as a problem."""
    p = trace.problem
    arrays = dict(p.inputs)
    for name in ("Q", "K", "V") + names():
        if trace.stage(name) is not None:
            arrays[f"heads/{name}"] = trace.stage(name)
    arrays["output"] = trace.final
    if "W_O" in p.inputs:  # as in JSON: the heads side by side before W_O
        arrays["concat"] = trace.concat
    arrays.update({key: np.asarray(value) for key, value in mask_and_bias(p).items()})
    arrays.update({key: np.array(json.dumps(value)) if isinstance(value, dict) else np.asarray(value)
                   for key, value in variant_keys(p).items()})  # alibi, softcap, sinks; relative_bias as JSON text
    if p.window is not None:  # an array holds no null: NaN stands for an unbounded side
        arrays["window"] = np.array([np.nan if b is None else b for b in p.window])
    if p.rope is not None:  # an array holds no object: the rope object as JSON text (rope.read takes it)
        arrays["rope"] = np.array(json.dumps(p.rope.to_json()))
    for norm in (p.q_norm, p.k_norm):  # QK-norm, as JSON text too (qk_norm.read takes it)
        if norm is not None:
            arrays[norm.name] = np.array(json.dumps(norm.to_json()))
    arrays["scale"] = np.array(trace.scale)
    arrays["masked_rows"] = np.array(p.masked_rows)
    arrays["dtype"] = np.array(p.dtype)
    if p.heads > 1 and not any(a.ndim == 3 for a in p.inputs.values()):
        arrays["heads"] = np.array(p.heads)
    if grouped(p):  # grouped-query attention: W_K and W_V (2-D K and V) hold kv_heads · d columns
        arrays["kv_heads"] = np.array(count(p))
    for key in ("query_labels", "key_labels", "title", "description"):
        if getattr(p, key) is not None:
            arrays[key] = np.array(getattr(p, key))
    if trace.gradients is not None:  # the backward pass: dO (input again), heads/d_Q …, grads/Q …
        arrays["dO"] = p.dO
        arrays.update({f"heads/{name}": array for name, array in trace.gradients.heads.items()})
        arrays.update({f"grads/{name}": array for name, array in trace.gradients.grads.items()})
    return arrays


def save_npy(trace: Trace, handle) -> None:
    """The .npy format's writer: the final output, as computed."""
    np.save(handle, trace.final)


def save_npz(trace: Trace, handle) -> None:
    """The .npz format's writer: `npz_arrays`."""
    np.savez(handle, **npz_arrays(trace))
