"""The start-up floor with attn's options: a Typer app with attn's commands, each with as many
parameters of the same kinds as attn's (`bench.py startup` checks the counts), whose `compute`
reads a problem JSON and does the same numpy arithmetic as `attn compute --format json`.

A minimal Typer app (minimal_app.py) has two options; Typer builds every option of every command
at start-up, so attn's ~76 options cost something of their own. This app pays that too, so
`attn ÷ floor` is what attncli's own code costs.

    python benchmarks/floor_app.py compute samples/scooter.json
"""

import inspect
import json
from enum import Enum
from typing import Annotated, Optional

import typer

# One letter per parameter, as attn declares them: s str, i int, f float, b flag, e a choice
# (str Enum); A an argument, * a list, ? optional (default None).
SPECS = {
    "compute": "As? s? s? s? s? s? s? s? s? s? s? s? s? b s? s? s? s? i? b e? f? i? e? s? b s? s? i? s? s? s? e? e "
               "s? i i? b e? s*? i? b s? b i? s? b s?",
    "check": "As*? s? s? s? s? s? s? s? s? s? s? s? i? s? f? e s? i s? f? e b s*? s e e e s? f i s?",
    "exercise": "i? s i? i i? i? i? e? i? s? b i e b",
    "example": "As?",
    "posenc": "i i f e i",
    "capture": "As? s? s? i i b e? s?",
}


class Choice(str, Enum):
    auto = "auto"
    table = "table"
    json = "json"
    csv = "csv"
    latex = "latex"


TYPES = {"s": str, "i": int, "f": float, "b": bool, "e": Choice}
DEFAULTS = {"s": "", "i": 1, "f": 1.0, "b": False, "e": Choice.auto}


def parameters(spec: str) -> list[inspect.Parameter]:
    params = []
    for n, kind in enumerate(spec.split()):
        letter = kind.lstrip("A")[0]
        kind_type = list[TYPES[letter]] if "*" in kind else TYPES[letter]
        optional = kind.endswith("?")
        info = typer.Argument() if kind.startswith("A") else typer.Option(f"--option-{n}", help=f"Option {n}.")
        params.append(inspect.Parameter(f"p{n}", inspect.Parameter.KEYWORD_ONLY,
                                        default=None if optional else DEFAULTS[letter],
                                        annotation=Annotated[Optional[kind_type] if optional else kind_type, info]))
    return params


def command(name: str, body):
    def run(**values):
        body(values)
    run.__name__ = name
    run.__signature__ = inspect.Signature(parameters(SPECS[name]))
    return run


def compute(values: dict) -> None:
    import numpy as np

    with open(values["p0"], encoding="utf-8") as handle:
        doc = json.load(handle)
    q, k, v = (np.atleast_2d(np.array(doc[name], dtype=np.float64)) for name in "QKV")
    scale = 1 / np.sqrt(q.shape[-1])
    scores = q @ k.T
    scaled = scores * scale
    exps = np.exp(scaled - scaled.max(axis=-1, keepdims=True))
    weights = exps / exps.sum(axis=-1, keepdims=True)
    output = weights @ v
    print(json.dumps({"scale": scale, "heads": [{"scores": scores.tolist(), "scaled": scaled.tolist(),
                                                  "weights": weights.tolist(), "output": output.tolist()}],
                      "output": output.tolist()}))


app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False)


def _version(value: bool) -> None:
    if value:
        print("floor 0")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True)] = False) -> None:
    """The floor app."""


for _name in SPECS:
    app.command()(command(_name, compute if _name == "compute" else lambda values: None))

if __name__ == "__main__":
    app()
