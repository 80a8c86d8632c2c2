"""`--output FILE`: the trace as .json, .md, .tex or .csv (text), .npy (the final output) or .npz
(every stage), written
atomically: a temporary file in the same folder, renamed over FILE only when complete."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from attncli.trace import STAGES, Trace, mask_and_bias

TEXT_SUFFIXES = (".json", ".md", ".tex", ".csv")  # written as the text the format's view makes


def npz_arrays(trace: Trace) -> dict[str, np.ndarray]:
    """Every stage under its JSON path (`heads/weights` is (H, Lq, Lk)), the inputs as given,
    and what is needed to read the file back as a problem."""
    p = trace.problem
    arrays = dict(p.inputs)
    for name in ("Q", "K", "V") + STAGES:
        if trace.stage(name) is not None:
            arrays[f"heads/{name}"] = trace.stage(name)
    arrays["concat"], arrays["output"] = trace.concat, trace.final
    arrays.update({key: np.asarray(value) for key, value in mask_and_bias(p).items()})
    arrays["scale"] = np.array(trace.scale)
    arrays["masked_rows"] = np.array(p.masked_rows)
    arrays["dtype"] = np.array(p.dtype)
    if p.heads > 1 and not any(a.ndim == 3 for a in p.inputs.values()):
        arrays["heads"] = np.array(p.heads)
    for key in ("query_labels", "key_labels", "title", "description"):
        if getattr(p, key) is not None:
            arrays[key] = np.array(getattr(p, key))
    return arrays


def write_output(trace: Trace, path: str, suffix: str, json_text=None) -> None:
    """Write atomically. `json_text()` gives the text of a .json (.md, .tex, .csv) file."""
    folder = str(Path(path).resolve().parent)
    handle = tempfile.NamedTemporaryFile(dir=folder, prefix=".attn-", suffix=suffix, delete=False)
    try:
        with handle:
            if suffix in TEXT_SUFFIXES:
                handle.write(json_text().encode("utf-8"))
            elif suffix == ".npy":
                np.save(handle, trace.final)
            else:
                np.savez(handle, **npz_arrays(trace))
        os.replace(handle.name, path)
    except BaseException:
        os.unlink(handle.name)
        raise
