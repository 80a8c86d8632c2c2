"""`attn heads`' views: the heads ranked (compute/focus.py's rows) as a table or JSON. Labels are
shown as read (base/tokens.py: `Ġit` as `it`), escaped by render/text.py; the JSON keeps the raw
tokens beside them."""

from __future__ import annotations

from rich import box
from rich.table import Table
from rich.text import Text

from attncli.compute.focus import Focus
from attncli.render.json import dumps
from attncli.render.tables import make_console
from attncli.render.text import rich_text, shown

Entry = tuple  # (name as read, positions, raw tokens): a key, or a word of several


def _named(picks) -> str:
    return " + ".join(name for name, _ in picks)


def heads_table(rows: list[Focus], entries: list[Entry], queries, keys) -> None:
    """One table: per head (best first) its layer, head, query, weight on the keys, top keys,
    first key's share and entropy."""
    console = make_console()
    what = f"the weight on {_named(keys)}" if keys else "layer and head"
    console.print(rich_text(f"heads by {what}, per query ({_named(queries)})", style="bold"))
    table = Table(box=box.ROUNDED, header_style="bold")
    for name in ("layer", "head", "query", *(("weight",) if keys else ()), "top keys", "first key", "entropy"):
        table.add_column(name, justify="left" if name in ("query", "top keys") else "right", no_wrap=True)
    for row in rows:
        top = ", ".join(f"{shown(entries[j][0])} {w:.3f}" for j, w in row.top)
        weight = (f"{row.weight:.4f}",) if keys else ()
        table.add_row(str(row.layer), str(row.head), rich_text(row.query), *weight, Text(top), f"{row.first:.4f}",
                      f"{row.entropy:.3f}")
    console.print(table)
    console.print(Text("weight: the query's weight summed over the keys named; first key: the weight on key 0; "
                       "entropy: −Σ w ln w over the keys, in nats"))


def heads_json(rows: list[Focus], entries: list[Entry], keys) -> str:
    """A list of rows, best first: layer, head, query, weight (null without --key), top_keys
    ({key, tokens, positions, weight}), first_key, sink, entropy."""
    return dumps([{"layer": r.layer, "head": r.head, "query": r.query, "weight": r.weight,
                   "keys": None if not keys else [name for name, _ in keys],
                   "top_keys": [{"key": entries[j][0], "tokens": entries[j][2], "positions": entries[j][1],
                                 "weight": w} for j, w in r.top],
                   "first_key": r.first, "sink": r.sink, "entropy": r.entropy} for r in rows])
