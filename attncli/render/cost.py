"""The --cost view: a header naming the conventions and M, the per-stage counts of the naive and
the tiled algorithm side by side, and a summary (totals, the papers' Θ terms, the KV cache).
Tables (rich) or Markdown; JSON is `cost.to_dict`. Views never compute: every number is read
from the `Cost` (attncli/compute/cost.py).
"""

from __future__ import annotations

from attncli.base.errors import plural
from attncli.compute.cost import CONVENTIONS, Cost, Count
from attncli.compute.limits import size_text
from attncli.problem.masks import rule_lines
from attncli.problem.trace import Problem
from attncli.render.export import md
from attncli.render.text import shown

ALGORITHMS = ("naive", "tiled")
STAGE_COLUMNS = ("stage",) + tuple(f"{a} {what}" for a in ALGORITHMS for what in ("FLOPs", "read", "written",
                                                                                   "FLOP/byte"))
SUMMARY_COLUMNS = ("", "FLOPs", "bytes moved", "FLOP/byte", "Θ (numbers moved)")
FLOP_UNITS = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def flops_text(n: float) -> str:
    """4.29 G, 16.8 M, 512: three significant digits with an SI prefix."""
    for scale, prefix in FLOP_UNITS:
        if n >= scale:
            return f"{n / scale:.3g} {prefix}"
    return f"{n:.3g}"


def bytes_text(n: int) -> str:
    return "0" if n == 0 else size_text(n)


def intensity_text(x: float | None) -> str:
    return "on chip" if x is None else f"{x:.3g}"


def header(problem: Problem, found: Cost, escape=shown) -> list[str]:
    """The problem's sizes, M and the tiles it implies, and the conventions; the problem's title and
    description (user text) through `escape`."""
    s, t = found.shape, found.tiling
    lines = ["attn --cost · the forward pass's arithmetic, summed over the heads (no attention computed)"]
    lines += [escape(text) for text in (problem.title, problem.description) if text]
    lines.append(f"{plural(s.heads, 'head')} ({plural(s.kv_heads, 'kv head')}) · Lq = {s.lq:,} · "
                 f"Lk = {s.lk:,} · d_k = {s.d_k} · d_v = {s.d_v} · {problem.dtype} ({s.itemsize} bytes)")
    lines += [f"mask: {rule}" for rule in rule_lines(problem)]
    lines.append(f"on-chip memory M = {size_text(t.sram)} ({t.sram:,} bytes): tiles of B_r = "
                 f"{plural(t.block_rows, 'query')} × B_c = {plural(t.block_cols, 'key')}; {t.visible_tiles:,} of {t.tiles:,} tiles computed")
    lines += [f"convention: {line}" for line in CONVENTIONS]
    return lines


def stage_rows(found: Cost) -> list[list[str]]:
    """One row per stage, then the totals: FLOPs, read, written, FLOP/byte for each algorithm."""
    def cells(count: Count) -> list[str]:
        return [flops_text(count.flops), bytes_text(count.read), bytes_text(count.written),
                intensity_text(count.intensity)]

    rows = [[name] + cells(found.naive[name]) + cells(found.tiled[name]) for name in found.naive]
    return rows + [["total"] + cells(found.total("naive")) + cells(found.total("tiled"))]


def summary_rows(found: Cost) -> list[list[str]]:
    """The totals against the papers' Θ terms, and one decoded token against the KV cache."""
    bounds = found.bounds()
    rows = []
    for name, formula in zip(ALGORITHMS, ("N·d + N²", "N²·d² / M")):
        total = found.total(name)
        rows.append([name, flops_text(total.flops), bytes_text(total.bytes), intensity_text(total.intensity),
                     f"{formula} = {flops_text(bounds[name])}"])
    s = found.shape
    rows.append(["decode 1 token", flops_text(found.decode_flops), bytes_text(s.lk * found.kv_bytes_per_token),
                 intensity_text(found.decode_intensity), "reads the whole KV cache"])
    return rows


def footer(found: Cost) -> list[str]:
    s = found.shape
    return [f"the two products Q Kᵀ and weights V: {flops_text(found.matmul_flops)}FLOP "
            f"(2·Lq·Lk·(d_k + d_v) = 4·N²·d per head, FlashAttention-2's forward count); forward + backward "
            f"≈ 2.5 × that = {flops_text(2.5 * found.matmul_flops)}FLOP",
            f"KV cache: {found.kv_bytes_per_token:,} bytes per token per layer ({plural(s.kv_heads, 'kv head')} "
            f"× (d_k + d_v) × {s.itemsize} bytes); {size_text(s.lk * found.kv_bytes_per_token)} "
            f"for {s.lk:,} tokens"]


def markdown(problem: Problem, found: Cost) -> str:
    """The view as Markdown: the header as a list, the two tables, the footer."""
    def table(columns, rows) -> list[str]:
        return ["| " + " | ".join(columns) + " |", "|---|" + "---:|" * (len(columns) - 1),
                *("| " + " | ".join(row) + " |" for row in rows)]  # our own words and numbers

    lines = [f"- {line}" for line in header(problem, found, md)] + [""]
    lines += table(STAGE_COLUMNS, stage_rows(found)) + [""] + table(SUMMARY_COLUMNS, summary_rows(found)) + [""]
    return "\n".join(lines + [f"- {line}" for line in footer(found)]) + "\n"


class CostView:
    """A rich renderable: the header, the stage table, the summary table, the footer."""

    def __init__(self, problem: Problem, found: Cost):
        self.problem, self.found = problem, found

    def __rich_console__(self, console, options):
        # Imported here, for start-up: only the table view loads rich.
        from rich import box
        from rich.table import Table
        from rich.text import Text

        for line in header(self.problem, self.found):
            yield Text(line)
        for title, columns, rows in (("per stage", STAGE_COLUMNS, stage_rows(self.found)),
                                     ("in total", SUMMARY_COLUMNS, summary_rows(self.found))):
            table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
            for i, column in enumerate(columns):
                table.add_column(column, justify="left" if i == 0 else "right", no_wrap=True)
            for row in rows:
                table.add_row(*row)
            yield table
        for line in footer(self.found):
            yield Text(line)
