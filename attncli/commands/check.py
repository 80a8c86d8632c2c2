"""`attn check`: its options; check_run.py marks a learner's answers (or a class's) against the
computed stages."""

import inspect
from typing import Annotated, Optional

import typer

from attncli import names  # one --STAGE option per stage of the table (names.STAGES: no numpy at start-up)
from attncli.commands.edge import AUTO_HELP, formats
from attncli.errors import InputError, did_you_mean, quote


CheckFormat = formats("CheckFormat", "auto", "table", "json", "csv", "gradescope")


def _answer(stage: str):
    return typer.Option(f"--{stage}", help=f"The learner's {stage} (path or inline text).",
                        rich_help_panel="Answers given inline")


def _with_answer_options(command):
    """Give `command` one `--STAGE` option per stage of the stage table, after --problem; their
    values arrive in `**answers`."""
    signature = inspect.signature(command)
    params = [p for p in signature.parameters.values() if p.kind != p.VAR_KEYWORD]
    options = [inspect.Parameter(stage, inspect.Parameter.KEYWORD_ONLY, default=None,
                                 annotation=Annotated[Optional[str], _answer(stage)])
               for stage in names.STAGES]
    params = [p.replace(kind=p.KEYWORD_ONLY) for p in params]
    command.__signature__ = signature.replace(parameters=params[:2] + options + params[2:])
    return command


@_with_answer_options
def check(
    files: Annotated[Optional[list[str]], typer.Argument(
        help="ANSWERS [PROBLEM], one file holding both, or many answer files (with --problem, or each "
             "holding its own problem).", show_default=False)] = None,
    problem: Annotated[Optional[str], typer.Option(
        "--problem", "-p", help="The problem (compute input); every FILE is then an answers file.")] = None,
    decimals: Annotated[int, typer.Option(
        min=0, max=17, help="Least decimals a value needs: with fewer it is correct only when exact "
        "(4, 0.5), otherwise imprecise (not correct).")] = 2,
    require: Annotated[Optional[str], typer.Option(
        metavar="STAGES", help="Stages every answer must have, comma-separated (e.g. weights,output); "
        "a missing one counts its cells as missing (? in the table), not right.", show_default=False)] = None,
    tol: Annotated[Optional[float], typer.Option(
        min=0.0, help="Accept cells within this absolute tolerance, instead of at the decimals written.")] = None,
    format: Annotated[CheckFormat, typer.Option("--format", "-f", help=f"{AUTO_HELP}. csv: a gradebook, one "
                                                "row per file. gradescope: Gradescope's autograder "
                                                "results.json.")] = CheckFormat.auto,
    precision: Annotated[int, typer.Option(min=0, max=17, help="Decimals for expected values.")] = 4,
    **answers: Optional[str],
) -> None:
    """Mark a learner's answers: each cell ✓ correct, ↪ carried, ~ imprecise, ✗ wrong, with diagnoses.

    attn check answers.json problem.json

    attn check samples/scooter.json --weights "0.0454, 0.7679, 0.1867"

    attn check answers/*.json --problem problem.json --require weights,output

    Correct: the exact value rounded to the decimals written, ±1 in the last place (either
    rounding at an exact tie). With fewer than --decimals decimals (default 2) only the exact
    value is correct (4, 0.5, 0); anything else is imprecise and earns nothing. Rounding each
    stage to the decimals written and carrying those numbers forward (the textbook's method) is
    correct. --tol T instead accepts cells within T.

    Carried: wrong, but right when recomputed from the learner's own (wrong) earlier stage; it
    earns the mark. Stages not answered are listed and do not fail, unless --require names them.

    Exit codes: 0 every given cell right, 1 some not right (or a file with no answers), 2 trouble.
    """
    required = _stages(require)
    # The one import kept inside a function, for start-up: numpy, the core and the views load when
    # check runs, so that `attn --version` and `attn --help` never import numpy.
    from attncli.commands.check_run import run

    run(files, problem, answers, format.value, precision, decimals, tol, required)


def _stages(text: str | None) -> tuple[str, ...]:
    """--require's comma list, checked."""
    if text is None:
        return ()
    stages = tuple(s.strip() for s in text.split(",") if s.strip())
    for stage in stages:
        if stage not in names.STAGES:
            hint = did_you_mean(stage, names.STAGES) or f"; stages are {', '.join(names.STAGES)}"
            raise InputError(f"unknown stage {quote(stage)}{hint}", "--require")
    return stages
