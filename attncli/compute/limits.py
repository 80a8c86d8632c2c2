"""Memory, bounded before reading or allocating: the byte cap on text input, and the guard that
refuses a problem whose stages, and what the chosen view builds from them, cannot fit.

Every figure below was measured (peak RSS with /usr/bin/time -v); README "Big problems" has them.
The guard raises `ResourceError` without advice; `attn compute` adds the ways out it can offer.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

try:
    import resource  # Unix only
except ImportError:
    resource = None

from attncli.base.errors import AttnError, InputError, quote
from attncli.problem.groups import count, value_width
from attncli.stages import table as stages
from attncli.stages.grads import GRADIENTS, GRADS

# Parsing costs many times its text (peak RSS over file size): 4-5× for JSON of full-precision
# numbers in long rows, 9× for short numbers, 37× for JSON with one number per row, 135× for a CSV
# with one short number per row (its cells, rows and Typed floats). 24 MiB keeps that worst
# case near 3.2 GiB, under 4 GiB.
MAX_INPUT = 24 << 20
MAX_INPUT_VARIABLE = "ATTN_MAX_INPUT"
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
# What a view builds besides the arrays, per number (measured: JSON 81 bytes a number for numbers
# of about 22 characters with their ", ", Markdown 30, LaTeX 60, CSV 40, a rich table cell 700,
# a heatmap cell 1,100).
JSON_NUMBER = 96  # a float in a list (8 + 24), its text (≤ 26 characters) 2.2 times over as json.dumps joins it
JSON_ROW = 64  # each row's list
TEXT_NUMBER = 100  # markdown, LaTeX, CSV: a cell's text, its slot in a list, the joined document
RICH_CELL = 1200  # a rich table (--full) or heatmap cell, for every cell laid out at once
# An answers file holds at most the numbers of the JSON `attn compute` writes, each within this
# many bytes when pretty-printed (indent, a full-precision float, ",\n"), plus this slack.
ANSWER_NUMBER = 64
ANSWER_SLACK = 64 << 10


class ResourceError(AttnError):
    """The problem is valid but too big for this machine."""


def size_text(n: float) -> str:
    """1.5 GiB, 24 MiB, 64 KiB or 100 bytes."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}" if n < 10 * scale else f"{n / scale:.0f} {unit}"
    return f"{int(n)} bytes"


@dataclass(frozen=True)
class Cap:
    """A byte cap on one text input, and why it is what it is (the end of the error message)."""

    bytes: int
    why: str

    def refuse(self, found: int, source: str, exact: bool) -> InputError:
        """`found` bytes were seen: exactly (a file's size) or at least (a stream read past the cap)."""
        seen = f"the file is {size_text(found)}" if exact else f"more than {size_text(self.bytes)} of text"
        return InputError(f"{seen}; {self.why}", source)


def max_input() -> int:
    """The cap on one text input in bytes: $ATTN_MAX_INPUT (200M, 1G, 1.5G, 65536) or 24 MiB."""
    text = os.environ.get(MAX_INPUT_VARIABLE, "").strip()
    if not text:
        return MAX_INPUT
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?", text, re.IGNORECASE)
    value = match and int(float(match[1]) * _UNITS[match[2].upper()])
    if not value:
        raise InputError(f"{MAX_INPUT_VARIABLE} is {quote(text)}; expected a size such as 200M or 1G")
    return value


def text_cap() -> Cap:
    cap = max_input()
    how = f"{MAX_INPUT_VARIABLE}=1G raises it" if cap < 1 << 30 else f"set by {MAX_INPUT_VARIABLE}"
    return Cap(cap, f"text input is limited to {size_text(cap)} ({how}); save big matrices as .npy or .npz")


def answers_cap(problem) -> Cap:
    """No bigger than the JSON `attn compute` writes for this problem (every stage, pretty-printed):
    an answers file beyond that is refused before it is parsed."""
    numbers = sum(n for n, _, _ in _matrices(problem, ("inputs",) + stages.names(), False))
    text = sum(len(label) for label in (problem.query_labels or []) + (problem.key_labels or []))
    text += len(problem.title or "") + len(problem.description or "")
    bound = ANSWER_SLACK + ANSWER_NUMBER * numbers + 6 * text  # a character escaped is at most \uXXXX
    general = text_cap()
    if bound >= general.bytes:
        return general
    return Cap(bound, f"an answers file for this problem is at most {size_text(bound)}: its inputs and "
                      f"every stage are {numbers:,} numbers")


def _first_line(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.readline().strip()
    except (OSError, ValueError):
        return None


def available_bytes() -> int | None:
    """Memory the process can still get: the least of MemAvailable (else the free physical pages),
    the cgroup's limit less its usage, and the address-space limit (ulimit -v) less the address
    space in use; None if none is known."""
    limits = []
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            limits += [int(line.split()[1]) * 1024 for line in meminfo if line.startswith("MemAvailable:")]
    except OSError:
        pass
    if not limits:
        try:
            limits.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            pass
    for limit, usage in (("memory.max", "memory.current"),  # cgroup v2, then v1
                         ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")):
        cap, used = _first_line(f"/sys/fs/cgroup/{limit}"), _first_line(f"/sys/fs/cgroup/{usage}")
        if cap is not None and used is not None:
            if cap.isdigit() and used.isdigit() and int(cap) < 1 << 60:  # "max" or v1's huge number: none
                limits.append(max(0, int(cap) - int(used)))
            break
    if resource is not None:
        try:
            cap = resource.getrlimit(resource.RLIMIT_AS)[0]
            statm = _first_line("/proc/self/statm")
            if cap != resource.RLIM_INFINITY and statm:
                limits.append(max(0, cap - int(statm.split()[0]) * os.sysconf("SC_PAGE_SIZE")))
        except (OSError, ValueError):
            pass
    return min(limits) if limits else None


def check_fits(needs: dict[str, int], available: int | None = None, what: str = "this problem") -> None:
    """Raise ResourceError when the parts in `needs` (what → bytes) would not fit together; the
    message says `what` would need them (attn capture: "this capture")."""
    available = available_bytes() if available is None else available
    total = sum(needs.values())
    if available is not None and total > available:
        parts = ", ".join(f"{what} {size_text(n)}" for what, n in needs.items() if n)
        raise ResourceError(f"{what} would need {size_text(total)} ({parts}), and "
                            f"{size_text(available)} is available")


def stage_bytes(heads: int, lq: int, lk: int, itemsize: int, arrays: int) -> dict[str, int]:
    """The full trace's (H × Lq × Lk) arrays, for check_fits."""
    return {f"{arrays} score-sized arrays ({heads} × {lq} × {lk})": arrays * heads * lq * lk * itemsize}


def score_arrays(problem, backward: bool = False) -> int:
    """How many (H × Lq × Lk) arrays of the problem's dtype `attention.attend` holds at its peak,
    counted from the stage table: every present stage of that shape (the trace keeps them), plus
    the most that one stage needs beside them while it runs (`Stage.temporaries`, at least the one
    of the softmax's log-sum-exp). `backward`: what the backward pass adds to the trace's kept
    stages: the gradients its tables keep (grads.GRADIENTS over keys: d_weights, d_scores) and two
    at work (a vjp's result and one temporary, beside its input). tests/test_limits.py measures
    attend against both, for every combination of variants."""
    if backward:
        return sum(g.rows == "queries" and g.columns == "keys" for g in GRADIENTS) + 2
    present = stages.present(problem)
    kept = sum(stage.rows == "queries" and stage.columns == "keys" for stage in present)
    return kept + max(1, *(stage.temporaries(problem) for stage in present))


def backward_bytes(problem, itemsize: int) -> dict[str, int]:
    """The backward pass's score-sized arrays beside the full trace's, for check_fits."""
    return {"the backward pass's " + what: size for what, size in stage_bytes(
        problem.heads, problem.lq, problem.lk, itemsize, score_arrays(problem, backward=True)).items()}


def widths(problem) -> tuple[int, int, int]:
    """(H·d_k, H·d_v, d_out): the widths of a query's Q across heads, of its per-head outputs side
    by side, and of its final output."""
    inputs, heads = problem.inputs, problem.heads
    q = inputs["W_Q"] if problem.projected else inputs["Q"]
    hd_k = q.shape[-1] * (heads if q.ndim == 3 else 1)  # 3-D Q: the last axis is one head's
    hd_v = value_width(inputs, heads, count(problem))  # each query head's output, kv heads repeated
    return hd_k, hd_v, inputs["W_O"].shape[1] if "W_O" in inputs else hd_v


def _matrices(problem, shown, output_only: bool) -> list[tuple[int, int, int]]:
    """(numbers, row width, tables it is shown as) of every matrix a view of these stages writes;
    an upper bound."""
    heads, lq, lk = problem.heads, problem.lq, problem.lk
    hd_k, hd_v, d_out = widths(problem)
    d_k, d_v = max(1, hd_k // heads), max(1, hd_v // heads)
    found = [(a.size, a.shape[-1], 1) for a in problem.inputs.values()]  # echoed as given
    found += [(m.size, lk, 1) for m in (problem.bias, problem.mask)
              if m is not None]
    if "inputs" in shown:  # per-head Q, K, V
        found += [(lq * hd_k, d_k, heads), (lk * hd_k, d_k, heads), (lk * hd_v, d_v, heads)]
    if not output_only:
        found += [(heads * lq * lk, lk, heads) for stage in stages.present(problem)
                  if stage.name in shown and stage.columns == "keys"]  # the (H × Lq × Lk) stages
    found += [(lq * hd_v, d_v, heads), (lq * hd_v, hd_v, 1), (lq * d_out, d_out, 1)]  # outputs, concat, final
    found += [(heads * lq, lq, heads)]  # lse: one number per head and query
    if problem.dO is not None:  # the backward pass's tables and grads, when shown
        columns = {"keys": lk, "": max(d_k, d_v)}  # numbered columns: at most a head's widest
        found += [(heads * (lq if g.rows == "queries" else lk) * columns[g.columns], columns[g.columns], heads)
                  for g in GRADIENTS if g.name in shown]
        if GRADS in shown:  # one gradient per input, in its given shape
            found += [(a.size, a.shape[-1], 1) for a in problem.inputs.values()]
    return [(n, max(1, width), tables) for n, width, tables in found]


def view_bytes(problem, view: str, shown, full: bool = False, output_only: bool = False) -> int:
    """What a view builds from the trace: `json`, `markdown`, `latex`, `csv`, `table` (rich),
    or a binary file (`npz`, `npy`: nothing beyond the arrays)."""
    matrices = _matrices(problem, shown, output_only)
    numbers = sum(n for n, _, _ in matrices)
    if view == "json":
        return numbers * JSON_NUMBER + sum(n // width for n, width, _ in matrices) * JSON_ROW
    if view in ("markdown", "latex", "csv"):
        return numbers * TEXT_NUMBER
    if view == "table" and full:  # rich lays out one table at a time, but every head's heatmap at once
        largest = max(n // tables for n, _, tables in matrices)
        grids = problem.heads * problem.lq * problem.lk if "heatmap" in shown else 0
        return RICH_CELL * max(largest, grids)
    return 0  # elided tables and heatmaps are small; .npz and .npy hold the arrays themselves


def tile_bytes(problem, bq: int, bk: int, itemsize: int = 8, view: str = "table") -> dict[str, int]:
    """The tile trace of `--tiles BQ,BK` (attncli/compute/tiles.py), for check_fits: every tile's S and P
    (together two H × Lq × Lk arrays), and per tile and query its m_old, m, alpha, l and O; its JSON
    on top when written."""
    _, hd_v, _ = widths(problem)
    key_blocks = -(-problem.lk // bk)  # ceil
    numbers = 2 * problem.heads * problem.lq * problem.lk + key_blocks * problem.lq * (4 * problem.heads + hd_v)
    found = {f"the tile trace ({problem.heads} × {problem.lq} queries × {key_blocks} key blocks)": numbers * itemsize}
    if view == "json":
        found["its tiles' JSON"] = numbers * JSON_NUMBER
    return found


def needs(problem, view: str, shown, full: bool = False, output_only: bool = False,
          itemsize: int = 8) -> dict[str, int]:
    """Everything `attn compute` builds for this problem and view, for check_fits."""
    found = {}
    if not output_only:
        found = stage_bytes(problem.heads, problem.lq, problem.lk, itemsize, score_arrays(problem))
        if problem.dO is not None:
            found |= backward_bytes(problem, itemsize)
    text = "its JSON" if view == "json" else f"its {view} text" if view != "table" else "its tables"
    return found | {text: view_bytes(problem, view, shown, full, output_only)}
