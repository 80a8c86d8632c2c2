"""`attn check`: its options, declared once (commands/spec.py); check_run.py marks a learner's answers (or a class's) against the
computed stages."""

from attncli.commands import spec
from attncli.commands.edge import AUTO_HELP, formats
from attncli.commands.spec import Option
from attncli.errors import InputError, did_you_mean, quote
from attncli.stages import names as answer_options  # one --STAGE option per stage of the table

ANSWERS = "Answers given inline"


def _answer(stage: str) -> Option:
    """A learner's stage given inline: it sets that stage's key of the answers document."""
    return Option(stage, f"The learner's {stage} (path or inline text).", flags=(f"--{stage}",), key=stage,
                  matrix=True, panel=ANSWERS)  # the flag is the stage's name as written (--Q_rope)


OPTIONS: tuple[Option, ...] = (
    Option("files", "ANSWERS [PROBLEM], one file holding both, or many answer files (with --problem, or each "
           "holding its own problem).", type=list, argument=True),
    Option("problem", "The problem (compute input); every FILE is then an answers file.", flags=("--problem", "-p")),
    *(_answer(stage) for stage in answer_options()),  # one per stage of the stage table, after --problem
    Option("decimals", "Least decimals a value needs: with fewer it is correct only when exact (4, 0.5), "
           "otherwise imprecise (not correct).", type=int, low=0, high=17, default=2),
    Option("require", "Stages every answer must have, comma-separated (e.g. weights,output); a missing one "
           "counts its cells as missing (? in the table), not right.", metavar="STAGES"),
    Option("tol", "Accept cells within this absolute tolerance, instead of at the decimals written.",
           type=float, low=0.0),
    Option("format", f"{AUTO_HELP}. csv: a gradebook, one row per file. gradescope: Gradescope's autograder "
           "results.json.", flags=("--format", "-f"), default="auto",
           choices=formats("CheckFormat", "auto", "table", "json", "csv", "gradescope")),
    Option("precision", "Decimals for expected values.", type=int, low=0, high=17, default=4),
)
CheckFormat = spec.find(OPTIONS, "format").enum


@spec.command(OPTIONS)
def check(**given) -> None:
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
    o = spec.given(OPTIONS, given)
    required = _stages(o.require)
    answers = {option.key: getattr(o, option.name) for option in OPTIONS if option.panel == ANSWERS}
    # The one import kept inside a function, for start-up: numpy, the core and the views load when
    # check runs, so that `attn --version` and `attn --help` never import numpy.
    from attncli.commands.check_run import run

    run(o.files, o.problem, answers, o.format, o.precision, o.decimals, o.tol, required)


def _stages(text: str | None) -> tuple[str, ...]:
    """--require's comma list, checked."""
    if text is None:
        return ()
    stages = tuple(s.strip() for s in text.split(",") if s.strip())
    for stage in stages:
        if stage not in answer_options():
            hint = did_you_mean(stage, answer_options()) or f"; stages are {', '.join(answer_options())}"
            raise InputError(f"unknown stage {quote(stage)}{hint}", "--require")
    return stages
