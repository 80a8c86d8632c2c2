"""`attn heads FILE --query it --key scooter`: which head makes a query attend some keys. Every head
of every layer in the file (a captured layer, or a document of several: attn capture --layer all),
ranked by the weight the query puts on the keys, with each head's largest keys, the first key's share
and the entropy. Its options are here; heads_run.py (numpy, the core) does the work."""

from attncli.commands import spec
from attncli.commands.edge import AUTO_HELP, formats
from attncli.commands.spec import Option

HEADS: tuple[Option, ...] = (
    Option("file", "JSON or .npz problem file (a captured layer, or several: attn capture --layer all), or - for "
           "stdin.", argument=True),
    Option("query", "The query (or queries: repeatable, or comma-separated) whose weights are ranked, by label or "
           "index, as attn compute --query: it, #9, or a word of several tokens (scooter).", type=list,
           metavar="LABEL|#INDEX"),
    Option("key", "The keys the heads are ranked by (their weights summed: a word's sub-tokens, several keys); "
           "without it each head's largest keys are listed in layer and head order.", type=list,
           metavar="LABEL|#INDEX"),
    Option("layer", "The layers of a document of several: one (3), several (3,7-9) or all (the default).",
           metavar="N"),
    Option("top", "Each head's this many largest keys (or words).", type=int, low=1, default=3, metavar="K"),
    Option("words", "Merge each word's sub-tokens (sc ##oot ##er: scooter) by summing their weights, by the "
           "word ids attn capture stores (else the tokens' marks: ##, Ġ, ▁).", type=bool),
    Option("rows", "Show this many heads per query, best first (default: every head).", type=int, low=1,
           metavar="N"),
    Option("format", f"{AUTO_HELP}. json: a list of rows, best first, each with layer, head, query, weight, "
           "top_keys, first_key, sink and entropy.", flags=("--format", "-f"), default="auto",
           choices=formats("HeadsFormat", "auto", "table", "json")),
)


@spec.command(HEADS)
def heads(**values) -> None:
    """Rank every head of every layer by how much a query attends some keys.

    attn heads s.npz --query it --key scooter --words

    (s.npz: every layer of a model on a sentence, as attn capture writes it with its own --layer all)

    The weight is the query's softmax weight summed over the keys named (a word: its sub-tokens);
    first_key is the weight on the first key (where many trained heads park attention), sink the
    weight a sinks variant's sink takes, entropy −Σ w ln w over the keys (0: one key; ln Lk: even).
    """
    o = spec.chosen(HEADS, values)
    # Imported here, for start-up: the work loads numpy and the core.
    from attncli.commands.heads_run import run

    run(o)
