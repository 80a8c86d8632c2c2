"""Typer wiring only: options in, `error: …` lines and exit codes out.

Heavy imports (numpy, rich tables) happen inside the commands that need them, so that
`attn --version` and `attn --help` start fast.
"""

from __future__ import annotations

import os
import sys
from enum import Enum
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

try:  # typer 0.2x vendors click
    from typer._click.exceptions import ClickException
except ImportError:  # pragma: no cover - older typer on the real click
    from click.exceptions import ClickException

from attncli import __version__
from attncli.errors import AttnError

EXIT_TROUBLE = 2  # as diff: 0 same/ok, 1 answers differ, 2 trouble


def fail(message: str) -> None:
    """One line on stderr, nothing on stdout, exit 2."""
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    sys.exit(EXIT_TROUBLE)


class AttnGroup(TyperGroup):
    """Turns every usage and input error into one `error: …` line and exit code 2."""

    def main(self, args=None, prog_name=None, **extra):
        extra.pop("standalone_mode", None)
        try:
            code = super().main(args=args, prog_name=prog_name, standalone_mode=False, **extra)
        except AttnError as error:
            fail(str(error))
        except ClickException as error:
            if type(error).__name__ == "NoArgsIsHelpError":  # bare `attn`: help, not an error
                print(error.format_message())
                sys.exit(0)
            fail(error.format_message().rstrip(".") + "; see --help")
        except typer.Abort:
            fail("aborted")
        except MemoryError:
            fail("out of memory; try --dtype float32 or a smaller problem")
        except Exception as error:  # a bug: still one line, but say so and how to see more
            if os.environ.get("ATTN_DEBUG"):
                raise
            fail(f"internal error ({type(error).__name__}: {error}); please report it, "
                 "and rerun with ATTN_DEBUG=1 for the traceback")
        except BrokenPipeError:
            # The reader went away (`attn … | head`): not an error. Point stdout at /dev/null so
            # that Python's final flush does not complain either.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(0)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(cls=AttnGroup, no_args_is_help=True, add_completion=False,
                  pretty_exceptions_enable=False,
                  help="attn: scaled dot-product attention, softmax(Q Kᵀ · scale + bias) V, step by step.")


def _version(value: bool) -> None:
    if value:
        print(f"attn {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """attn: scaled dot-product attention, softmax(Q Kᵀ · scale + bias) V, step by step.

    Exit codes as diff: 0 ok, 1 answers differ (check), 2 trouble (bad input or usage).
    """


class Format(str, Enum):
    auto = "auto"
    table = "table"
    json = "json"


class MaskedRows(str, Enum):
    zero = "zero"
    uniform = "uniform"
    error = "error"


class DType(str, Enum):
    float64 = "float64"
    float32 = "float32"


Matrix = Optional[str]


def _matrix(name: str, help: str):
    return typer.Option(f"--{name}", help=help, rich_help_panel="Matrices (a path or inline text)")


@app.command()
def compute(
    file: Annotated[Optional[str], typer.Argument(
        help="JSON problem file, or - for stdin (read when piped and no file is named).",
        show_default=False)] = None,
    q: Annotated[Matrix, _matrix("q", "Queries Q (Lq × d_k; 3-D: heads × Lq × d_k).")] = None,
    k: Annotated[Matrix, _matrix("k", "Keys K (Lk × d_k).")] = None,
    v: Annotated[Matrix, _matrix("v", "Values V (Lk × d_v).")] = None,
    x: Annotated[Matrix, _matrix("x", "Inputs X (L × d_model), instead of Q/K/V.")] = None,
    x_kv: Annotated[Matrix, _matrix("x-kv", "Cross-attention: keys and values come from X_kv.")] = None,
    wq: Annotated[Matrix, _matrix("wq", "W_Q (d_model × d_out): Q = X W_Q.")] = None,
    wk: Annotated[Matrix, _matrix("wk", "W_K: K = X_kv W_K.")] = None,
    wv: Annotated[Matrix, _matrix("wv", "W_V: V = X_kv W_V.")] = None,
    wo: Annotated[Matrix, _matrix("wo", "W_O (heads·d_v × d_out): output = concat(heads) W_O.")] = None,
    mask: Annotated[Optional[str], typer.Option(
        help="causal | causal_lower_right | a true/false matrix (Lq × Lk), true = may attend.",
        rich_help_panel="Masking")] = None,
    bias: Annotated[Matrix, typer.Option(
        help="Additive bias (Lq × Lk), added after scaling; -inf or null = blocked.",
        rich_help_panel="Masking")] = None,
    invert_mask: Annotated[bool, typer.Option(
        "--invert-mask", help="Read mask true as BLOCKED (nn.MultiheadAttention's convention).",
        rich_help_panel="Masking")] = False,
    masked_rows: Annotated[Optional[MaskedRows], typer.Option(
        help="A query whose every key is masked: zero (weights and output 0, as PyTorch SDPA; default), "
             "uniform (mean of V, as JAX), or error. A warning names such rows.",
        rich_help_panel="Masking", show_default=False)] = None,
    heads: Annotated[Optional[int], typer.Option(
        help="Split the feature axis of 2-D Q/K/V into this many contiguous heads.")] = None,
    scale: Annotated[Optional[float], typer.Option(help="Scale for Q Kᵀ (default 1/√d_k).")] = None,
    query_labels: Annotated[Optional[str], typer.Option(help="Row labels, comma-separated: it,they")] = None,
    key_labels: Annotated[Optional[str], typer.Option(help="Key labels, comma-separated.")] = None,
    dtype: Annotated[Optional[DType], typer.Option(help="Arithmetic: float64 (default) or float32.",
                                                   show_default=False)] = None,
    format: Annotated[Format, typer.Option(
        "--format", "-f", help="auto: tables on a terminal, JSON when piped.",
        rich_help_panel="Output")] = Format.auto,
    stages: Annotated[Optional[str], typer.Option(
        help="Comma-separated stages to show: inputs,scores,scaled,masked,weights,output.",
        rich_help_panel="Output")] = None,
    precision: Annotated[int, typer.Option(
        min=0, max=17, help="Decimals in tables.", rich_help_panel="Output")] = 4,
    round_: Annotated[Optional[int], typer.Option(
        "--round", min=0, max=17, help="Round JSON numbers to N decimals (default: full precision).",
        rich_help_panel="Output")] = None,
) -> None:
    """Compute softmax(Q Kᵀ · scale + bias) V and show every stage, per head.

    attn compute samples/scooter.json

    attn compute --q "0,4" --k "1,0; 0,1; .5,.5" --v "2,0; 0,2; 1,-1"

    Matrix options take a path (.json .csv .tsv .npy) or inline text ("1,0; 0,1" or "[[1,0],[0,1]]").

    Conventions (where libraries differ):
    rows are queries, columns are keys;
    mask true = the query may attend the key (PyTorch SDPA, JAX; --invert-mask for nn.MultiheadAttention);
    causal is top-left (query i sees keys j ≤ i), causal_lower_right is j ≤ i + Lk − Lq;
    a mask and a bias combine with AND;
    W_Q is (d_model × d_out) and Q = X W_Q (PyTorch's Linear.weight is its transpose).
    """
    from attncli.attention import attend
    from attncli.loading import gather
    from attncli.problem import build_problem

    matrices = {"Q": q, "K": k, "V": v, "X": x, "X_kv": x_kv, "W_Q": wq, "W_K": wk, "W_V": wv,
                "W_O": wo, "mask": mask, "bias": bias}
    settings = {"heads": heads, "scale": scale, "query_labels": _split(query_labels),
                "key_labels": _split(key_labels), "masked_rows": masked_rows and masked_rows.value,
                "dtype": dtype and dtype.value}
    shown = _stages(stages)
    doc, origin, source = gather(file, matrices, settings, stdin_is_terminal=sys.stdin.isatty())
    problem = build_problem(doc, origin, source, invert_mask=invert_mask)
    try:
        trace = attend(problem)
    except AttnError as error:
        raise error.at(source) if source else error
    for warning in trace.warnings:
        sys.stderr.write(f"warning: {warning}\n")
    if format == Format.json or (format == Format.auto and not sys.stdout.isatty()):
        from attncli.render.json import write_json

        write_json(trace, sys.stdout, shown, round_)
    else:
        from attncli.render.tables import print_tables

        print_tables(trace, shown, precision)


def _split(text: str | None) -> list[str] | None:
    return None if text is None else [label.strip() for label in text.split(",")]


def _stages(text: str | None) -> tuple[str, ...]:
    from attncli.trace import STAGES

    names = ("inputs",) + STAGES
    if text is None:
        return names
    chosen = tuple(name.strip() for name in text.split(",") if name.strip())
    for name in chosen:
        if name not in names:
            raise typer.BadParameter(f'unknown stage "{name}"; expected some of {",".join(names)}',
                                     param_hint="--stages")
    return chosen


def main() -> None:
    """Console-script entry point."""
    app()
