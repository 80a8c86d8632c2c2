"""The kernels' arithmetic as numbers: per stage, the FLOPs and the bytes read and written by the
naive algorithm and by FlashAttention-2's tiled forward pass, the KV-cache bytes per decoded token,
and the arithmetic intensity (FLOPs / byte) of each. Pure: shapes, masks' key spans, no attention.

Conventions (the table header and the README say them; `CONVENTIONS` holds the words):
- A FLOP is one add, multiply, divide, max, compare, exp or tanh on one number; a product of an
  (a × k) and a (k × b) matrix is 2·a·k·b (FlashAttention-2 counts the forward pass as
  4·N²·d per head: its two products).
- Naive: every stage is one array in main memory, read by the next stage (FlashAttention's
  "standard attention", Algorithm 0, with each of attncli's stages materialised); every cell is
  computed, masked or not. A mask matrix is one byte a cell; a bias (or ALiBi's) one number.
- Tiled (FlashAttention-2, Algorithm 1): for an on-chip memory of M bytes and d = max(d_k, d_v),
  B_c = ⌈M / (4·d·itemsize)⌉ keys and B_r = min(B_c, d) queries a tile (FlashAttention's rule).
  Each query block loads Q_i once, walks the key blocks its rows may see (masks.key_span: a key
  block none of them may see is skipped), loading K_j and V_j for each, and writes O_i and its
  lse; S, P, m, ℓ stay on chip. The mask is evaluated only on the key blocks where some key may be
  hidden (masks.partly_hidden: a causal block's diagonal); a given mask matrix and bias are read
  for the tiles computed; causal, windows and ALiBi come from positions, on chip.
- Heads: every count is summed over the query heads; K and V are read per query head (a
  grouped-query kernel reads its kv head once per query head), while the KV cache holds kv_heads.
- Projections (X W, W_O), RoPE's cos/sin tables and sinks' extra logit are not counted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from attncli.base.errors import AttnError, InputError, quote
from attncli.problem import groups, masks, variants
from attncli.problem.trace import Problem
from attncli.stages import table as stages

# The default on-chip memory: 192 KiB, the L1/shared memory of one NVIDIA A100 streaming
# multiprocessor (FlashAttention's M).
DEFAULT_SRAM = 192 * 1024
MAX_SRAM = 1 << 40
UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "kb": 1000, "mb": 1000**2, "gb": 1000**3}
CONVENTIONS = (
    "a FLOP is one +, ×, ÷, max, exp or tanh on one number; an (a × k)(k × b) product is 2·a·k·b",
    "naive: every stage an array in main memory (FlashAttention's Algorithm 0), every cell computed",
    "tiled: FlashAttention-2's forward; B_c = ⌈M / (4·d·itemsize)⌉, B_r = min(B_c, d), d = max(d_k, d_v); "
    "key blocks no query of a block may see are skipped",
    "K and V read per query head; projections, RoPE tables and sinks not counted",
)


@dataclass(frozen=True)
class Count:
    """One stage's (or a total's) FLOPs and bytes, summed over the heads."""

    flops: int = 0
    read: int = 0  # bytes read from main memory (HBM)
    written: int = 0  # bytes written to it

    def __add__(self, other: Count) -> Count:
        return Count(self.flops + other.flops, self.read + other.read, self.written + other.written)

    @property
    def bytes(self) -> int:
        return self.read + self.written

    @property
    def intensity(self) -> float | None:
        """FLOPs per byte moved; None when nothing is moved (on chip)."""
        return self.flops / self.bytes if self.bytes else None


@dataclass(frozen=True)
class Shape:
    """What the counts depend on besides the masks."""

    heads: int
    kv_heads: int
    lq: int
    lk: int
    d_k: int
    d_v: int
    itemsize: int
    rope_dims: int = 0  # the rotated dims of each head (0: no RoPE)


@dataclass(frozen=True)
class Tiling:
    """The tile sizes an on-chip memory of `sram` bytes implies, and what the masks leave: the
    score cells computed, key rows loaded (Σ over query blocks), row·tile steps, masked cells."""

    sram: int
    block_rows: int  # B_r
    block_cols: int  # B_c
    tiles: int
    visible_tiles: int
    cells: int  # per head: query × key cells in the tiles computed
    key_loads: int  # per head: key (and value) rows loaded, Σ over query blocks
    row_steps: int  # per head: Σ over query blocks of rows × tiles computed (the running m, ℓ, O updates)
    masked_cells: int  # per head: cells of the tiles where the mask is evaluated


@dataclass(frozen=True, eq=False)
class Cost:
    shape: Shape
    tiling: Tiling
    naive: dict[str, Count]  # stage name -> its count, in the stage table's order
    tiled: dict[str, Count]

    def total(self, algorithm: str) -> Count:
        return sum(getattr(self, algorithm).values(), Count())

    @property
    def matmul_flops(self) -> int:
        """The two products, Q Kᵀ and weights V, over every cell: 4·Lq·Lk·d per head when d_k = d_v = d."""
        s = self.shape
        return s.heads * 2 * s.lq * s.lk * (s.d_k + s.d_v)

    @property
    def kv_bytes_per_token(self) -> int:
        """One layer's KV cache for one more token: a key and a value per kv head."""
        s = self.shape
        return s.kv_heads * (s.d_k + s.d_v) * s.itemsize

    @property
    def decode_flops(self) -> int:
        """One new query against the Lk cached keys, every query head: its two products."""
        s = self.shape
        return s.heads * 2 * s.lk * (s.d_k + s.d_v)

    @property
    def decode_intensity(self) -> float:
        """FLOPs per byte of the cache read for one decoded token: 2·(heads / kv_heads) / itemsize."""
        return self.decode_flops / (self.shape.lk * self.kv_bytes_per_token)

    def bounds(self) -> dict[str, float]:
        """The papers' Θ terms evaluated, in numbers (not bytes), summed over heads, constants
        dropped: naive N·d + N², tiled N²·d² / M (Dao et al. 2022, Theorem 2), with N² = Lq·Lk,
        N·d = (Lq + Lk)·d and M = sram / itemsize numbers."""
        s, d = self.shape, max(self.shape.d_k, self.shape.d_v)
        numbers = self.tiling.sram / s.itemsize
        return {"naive": s.heads * ((s.lq + s.lk) * d + s.lq * s.lk),
                "tiled": s.heads * s.lq * s.lk * d * d / numbers}


def parse_size(text: str) -> int:
    """'192KiB', '192 KiB', '64KB', '1.5MiB', '196608' or '196608B' -> bytes (a whole number ≥ 1)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*", text)
    unit = match and match[2].lower()
    if not match or unit not in UNITS:
        raise InputError(f"{quote(text)} is not a size; expected a number of bytes with B, KiB, MiB, GiB, "
                         "KB, MB or GB (192KiB)", field="sram")
    size = float(match[1]) * UNITS[unit]
    if size != int(size) or not 1 <= size <= MAX_SRAM:
        raise InputError(f"{quote(text)} is {size:g} bytes; expected a whole number of bytes from 1 to 1 TiB",
                         field="sram")
    return int(size)


def shape_of(problem: Problem) -> Shape:
    """The per-head widths and head counts from the inputs' shapes (as attention.head_inputs splits
    them), without projecting anything."""
    inputs, heads, kv_heads = problem.inputs, problem.heads, groups.count(problem)  # `kv_heads`, or K's
    if problem.projected:
        d_k, d_v = inputs["W_Q"].shape[1] // heads, inputs["W_V"].shape[1] // kv_heads
    elif inputs["Q"].ndim == 3:  # heads split; a 2-D K, V beside it is one shared kv head
        d_k, d_v = inputs["K"].shape[-1], inputs["V"].shape[-1]
    else:
        d_k, d_v = inputs["Q"].shape[1] // heads, inputs["V"].shape[1] // kv_heads
    itemsize = {"float64": 8, "float32": 4}.get(problem.dtype, 2)  # bfloat16, float16: 2 bytes
    dims = 0 if problem.rope is None else problem.rope.dims or d_k
    return Shape(heads, kv_heads, problem.lq, problem.lk, d_k, d_v, itemsize, dims)


def tile_sizes(shape: Shape, sram: int) -> tuple[int, int]:
    """(B_r, B_c): B_c = ⌈M / (4·d·itemsize)⌉, B_r = min(B_c, d), d = max(d_k, d_v); each at most
    the problem's length (a tile larger than the problem is the problem)."""
    d = max(shape.d_k, shape.d_v)
    cols = -(-sram // (4 * d * shape.itemsize))
    return max(1, min(cols, d, shape.lq)), max(1, min(cols, shape.lk))


def tiling(problem: Problem, shape: Shape, sram: int) -> Tiling:
    """Walk the query blocks: the key blocks each may see (masks.key_span), and those where the
    mask must be evaluated (masks.partly_hidden)."""
    rows_per, cols_per = tile_sizes(shape, sram)
    lq, lk = shape.lq, shape.lk
    found = dict(visible_tiles=0, cells=0, key_loads=0, row_steps=0, masked_cells=0)
    for q0 in range(0, lq, rows_per):
        rows = slice(q0, min(q0 + rows_per, lq))
        b = rows.stop - rows.start
        first, stop = masks.key_span(problem, rows)
        if first >= stop:
            continue  # every key is hidden from every row of the block: no tile computed
        keys = _blocks(first, stop, cols_per, lk)
        width, count = keys.stop - keys.start, -(-(keys.stop - keys.start) // cols_per)
        found["visible_tiles"] += count
        found["cells"] += b * width
        found["key_loads"] += width
        found["row_steps"] += b * count
        hidden = masks.partly_hidden(problem, rows, keys)
        if hidden is not None:
            part = _blocks(hidden.start, hidden.stop, cols_per, lk)
            found["masked_cells"] += b * (part.stop - part.start)
    tiles = -(-lq // rows_per) * -(-lk // cols_per)
    return Tiling(sram, rows_per, cols_per, tiles, **found)


def _blocks(start: int, stop: int, size: int, length: int) -> slice:
    """The key columns of the blocks of `size` that meet [start, stop)."""
    return slice(start // size * size, min(-(-stop // size) * size, length))


def cost(problem: Problem, sram: int = DEFAULT_SRAM) -> Cost:
    """The counts for `problem` with `sram` bytes on chip. Raises AttnError for a stage it has no
    count for (a stage added to the stage table needs its line in COUNTS)."""
    shape = shape_of(problem)
    tiles = tiling(problem, shape, sram)
    naive, tiled = {}, {}
    for stage in stages.present(problem):
        count_naive, count_tiled = counts(stage.name)
        naive[stage.name] = _heads(count_naive(problem, shape), shape.heads)
        tiled[stage.name] = _heads(count_tiled(problem, shape, tiles), shape.heads)
    return Cost(shape, tiles, naive, tiled)


def counts(name: str) -> tuple:
    """(naive count, tiled count) of stage `name`: its line in COUNTS, or, for the stage a variant
    brings (variants.VARIANTS: the softcap's capped), its record's FLOPs per score cell, every stage
    an array in main memory. Raises AttnError for a stage with neither."""
    if name in COUNTS:
        return COUNTS[name]
    own = next((variant for variant in variants.VARIANTS if variant.stage == name), None)
    if own is None:
        raise AttnError(f"the stage {name} has no cost count (attncli/compute/cost.py COUNTS, or the flops of "
                        "the variant that brings it)")
    return _naive_cells(own.flops), _tiled_cells(own.flops)


def _heads(count: Count, heads: int) -> Count:
    return Count(count.flops * heads, count.read * heads, count.written * heads)


def _logit_terms(problem: Problem, shape: Shape) -> tuple[int, int, int]:
    """(FLOPs per cell of the additive terms, bytes per cell a naive pass reads for them, bytes
    per cell the tiled pass reads): a bias adds 1 FLOP and is read; a variant that joins the masked
    stage adds its `flops` (ALiBi's −slope·|q − k| is 4), made from positions and parameters on chip
    and read as an array by the naive pass; a given mask matrix is one byte a cell, read by both;
    the other rules come from positions."""
    s = shape.itemsize
    bias, joining = problem.bias is not None, variants.joining(problem, "masked")
    matrix = problem.mask is not None
    flops = bias + sum(variant.flops for variant in joining)
    naive = (bias + len(joining)) * s + masks.has_rules(problem)
    return flops, naive, bias * s + matrix


# Per head. Naive: a = Lq·Lk cells, every stage one array read by the next.
def _naive_rope(length):
    def count(problem, shape):
        size = getattr(shape, length) * shape.d_k * shape.itemsize
        return Count(3 * getattr(shape, length) * shape.rope_dims, size, size)
    return count


def _norm_flops(problem, which: str) -> int:
    """QK-norm's FLOPs per number: x², Σ, × r, × w (RMSNorm); LayerNorm adds − mean, its Σ and + b."""
    return 4 if getattr(problem, which).type == "rms" else 7


def _naive_norm(length, which):
    def count(problem, shape):
        size = getattr(shape, length) * shape.d_k * shape.itemsize
        return Count(_norm_flops(problem, which) * getattr(shape, length) * shape.d_k, size, size)
    return count


def _tiled_norm(length, which):
    def count(problem, shape, tiles):
        rows = shape.lq if length == "lq" else tiles.key_loads  # K_j is normalised each time it is loaded
        return Count(_norm_flops(problem, which) * rows * shape.d_k)
    return count


def _naive_cells(flops_per_cell: int):
    def count(problem, shape):
        cells = shape.lq * shape.lk
        return Count(flops_per_cell * cells, cells * shape.itemsize, cells * shape.itemsize)
    return count


def _naive_scores(problem, shape):
    s = shape.itemsize
    return Count(2 * shape.lq * shape.lk * shape.d_k, (shape.lq + shape.lk) * shape.d_k * s, shape.lq * shape.lk * s)


def _naive_masked(problem, shape):
    cells, s = shape.lq * shape.lk, shape.itemsize
    flops, read, _ = _logit_terms(problem, shape)
    return Count((masks.has_rules(problem) + flops) * cells, cells * (s + read), cells * s)


def _naive_output(problem, shape):
    s, cells = shape.itemsize, shape.lq * shape.lk
    return Count(2 * cells * shape.d_v, (cells + shape.lk * shape.d_v) * s, shape.lq * shape.d_v * s)


# Tiled: on chip except Q_i (once), K_j and V_j (each tile computed), O_i and lse (written once).
def _tiled_rope(length):
    def count(problem, shape, tiles):
        rows = shape.lq if length == "lq" else tiles.key_loads  # K_j is rotated each time it is loaded
        return Count(3 * rows * shape.rope_dims)
    return count


def _tiled_cells(flops_per_cell: int):
    return lambda problem, shape, tiles: Count(flops_per_cell * tiles.cells)


def _tiled_scores(problem, shape, tiles):
    return Count(2 * tiles.cells * shape.d_k, (shape.lq + tiles.key_loads) * shape.d_k * shape.itemsize)


def _tiled_masked(problem, shape, tiles):
    flops, _, read = _logit_terms(problem, shape)
    return Count(tiles.masked_cells + flops * tiles.cells, read * tiles.cells)


def _tiled_weights(problem, shape, tiles):
    """Per cell: rowmax, − m, exp, rowsum (4); per row and tile: m = max(m_old, ·), alpha = e^(m_old − m),
    ℓ = alpha·ℓ + Σ (5); per row at the end lse = m + ln ℓ (2), written."""
    return Count(4 * tiles.cells + 5 * tiles.row_steps + 2 * shape.lq, 0, shape.lq * shape.itemsize)


def _tiled_output(problem, shape, tiles):
    """P V per tile, O = alpha·O_old + P V (2 per row, column and tile), O / ℓ at the end."""
    d_v, s = shape.d_v, shape.itemsize
    flops = 2 * tiles.cells * d_v + 2 * tiles.row_steps * d_v + shape.lq * d_v
    return Count(flops, tiles.key_loads * d_v * s, shape.lq * d_v * s)


# stage name -> (naive count, tiled count): one line per stage of the stage table (attncli/stages/table.py);
# a variant's own stage (capped) is counted from its record instead (`counts`).
COUNTS = {
    "Q_normed": (_naive_norm("lq", "q_norm"), _tiled_norm("lq", "q_norm")),
    "K_normed": (_naive_norm("lk", "k_norm"), _tiled_norm("lk", "k_norm")),
    "Q_rope": (_naive_rope("lq"), _tiled_rope("lq")),  # (a, b) → (a cos − b sin, …): 3 a number
    "K_rope": (_naive_rope("lk"), _tiled_rope("lk")),
    "scores": (_naive_scores, _tiled_scores),
    "scaled": (_naive_cells(1), _tiled_cells(1)),
    "masked": (_naive_masked, _tiled_masked),
    "weights": (_naive_cells(5), _tiled_weights),  # naive: max, − max, exp, Σ, ÷
    "output": (_naive_output, _tiled_output),
}


def to_dict(found: Cost) -> dict:
    """JSON's "cost": exact integers (bytes and FLOPs summed over heads), intensities as floats."""
    def algorithm(name: str) -> dict:
        total = found.total(name)
        return {"stages": {stage: _count(count) for stage, count in getattr(found, name).items()},
                "total": _count(total)}

    s, t = found.shape, found.tiling
    return {
        "sram": t.sram, "itemsize": s.itemsize, "heads": s.heads, "kv_heads": s.kv_heads,
        "lq": s.lq, "lk": s.lk, "d_k": s.d_k, "d_v": s.d_v,
        "block_rows": t.block_rows, "block_cols": t.block_cols, "tiles": t.tiles, "visible_tiles": t.visible_tiles,
        "naive": algorithm("naive"), "tiled": algorithm("tiled"), "matmul_flops": found.matmul_flops,
        "bounds": found.bounds(),
        "kv_cache": {"bytes_per_token": found.kv_bytes_per_token, "bytes": s.lk * found.kv_bytes_per_token,
                     "decode_flops": found.decode_flops, "decode_intensity": found.decode_intensity},
    }


def _count(count: Count) -> dict:
    return {"flops": count.flops, "read": count.read, "written": count.written, "intensity": count.intensity}
