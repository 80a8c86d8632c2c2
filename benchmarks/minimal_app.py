"""The framework's floor: a minimal Typer app that reads a problem JSON and does the same numpy
arithmetic as `attn compute --format json` (used by bench.py as the start-up reference)."""

import json
from typing import Optional

import typer

app = typer.Typer(add_completion=False)


def _version(value: bool) -> None:
    if value:
        print("minimal 0")
        raise typer.Exit()


@app.command()
def main(file: Optional[str] = typer.Argument(None),
         version: bool = typer.Option(False, "--version", callback=_version, is_eager=True)) -> None:
    import numpy as np

    with open(file, encoding="utf-8") as handle:
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


if __name__ == "__main__":
    app()
