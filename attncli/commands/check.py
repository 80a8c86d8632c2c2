"""`attn check`: its options, declared once (commands/spec.py); check_run.py marks a learner's answers (or a class's) against the
computed stages."""

from attncli.base import (
    choices,
    names,  # one --STAGE option per stage of the table (no numpy at start-up)
)
from attncli.base.errors import InputError, comma_items, did_you_mean, quote
from attncli.base.points import MOST, read_points
from attncli.commands import spec
from attncli.commands.edge import AUTO_HELP, formats
from attncli.commands.spec import Option

ANSWERS = "Answers given inline"
PROBLEM = "The problem given inline"


def _answer(stage: str) -> Option:
    """A learner's stage given inline: it sets that stage's key of the answers document."""
    return Option(stage, f"The learner's {stage} (path or inline text).", flags=(f"--{stage}",), key=stage,
                  matrix=True, panel=ANSWERS)  # the flag is the stage's name as written (--Q_rope)


OPTIONS: tuple[Option, ...] = (
    Option("files", "ANSWERS [PROBLEM], one file holding both, or many answer files (with --problem, or each "
           "holding its own problem).", type=list, argument=True),
    Option("problem", "The problem (compute input); every FILE is then an answers file.", flags=("--problem", "-p")),
    # A quick check without a problem file: the problem's Q, K, V inline (over the problem file's, if any).
    *(Option(name.lower(), f"The problem's {name} (path or inline text), as attn compute --{name.lower()}: a quick "
             "check needs no problem file.", key=name, matrix=True, panel=PROBLEM) for name in "QKV"),
    *(_answer(stage) for stage in names.STAGES),  # one per stage of the stage table, after --problem
    Option("decimals", "Least decimals a value needs: with fewer it is correct only when exact (4, 0.5), "
           "otherwise imprecise (not correct). Default: the problem's \"decimals\", else 2.",
           type=int, low=0, high=17),
    Option("require", "Stages every answer must have, comma-separated (e.g. weights,output; also gradients as "
           "d_V, tiles: every tile of the problem's tile_size, slip); a missing one counts its cells as missing "
           "(? in the table), not right. Default: the problem's \"ask\".",
           metavar="STAGES"),
    Option("tol", "Accept cells within this absolute tolerance, instead of at the decimals written.",
           type=float, low=0.0),
    Option("format", f"{AUTO_HELP}. csv: a gradebook, one row per file. gradescope: Gradescope's autograder "
           "results.json.", flags=("--format", "-f"), default="auto",
           choices=formats("CheckFormat", "auto", "table", "json", "csv", "html", "gradescope")),
    Option("report", "Write the marks as a page to FILE.html (as --format html; docs/explorer.md): each cell "
           "coloured by its mark, a click shows yours, the expected value and the diagnosis; a class: the "
           "summary and a section per file. (--output is the learner's output stage.)", flags=("--report", "-o"),
           metavar="FILE.html"),
    Option("precision", "Decimals for expected values.", type=int, low=0, high=17, default=4),
    Option("points", f"Points per stage for the gradebook, Gradescope and the class summary (e.g. "
           "scores=1,masked=3,weights=2): a stage's N points are shared by its cells; a stage not named is worth "
           f"one point per cell; N above 0, at most {MOST:,.0f}. What a slip costs: imprecise=N (too few "
           "decimals, N points once per stage; default 1), percent=F and transposed=F (a stage written as "
           "percentages or transposed loses that fraction of its points; default 0.5).", metavar="STAGE=N,…"),
    Option("max_score", "Gradescope: scale every score so that a full answer scores this (above 0, at most "
           f"{MOST:,.0f}).", flags=("--max-score",), type=float, low=0.0, high=MOST),
    Option("visibility", "Gradescope: when students see the results.", default="visible",
           choices=("visible", "hidden", "after_due_date", "after_published")),  # Gradescope's words
    Option("lenient_json", "Read answers files with trailing commas, a missing comma between numbers on a "
           "line, or comments, and mark them with a note (without it such a file scores 0, with the line and "
           "column).", flags=("--lenient-json",), type=bool),
)
# attn check --code (attncli/code/): marking a learner's function, not their numbers. One block, kept
# apart so that edits to the options above merge cleanly.
CODE = "Marking code (--code)"
OPTIONS += (
    Option("code", "Mark a function instead of answers: FILE.py:FUNCTION (or module:FUNCTION); a quoted glob "
           "('submissions/*.py:attention') marks a class; repeatable. Each case runs in a child process with "
           "--timeout and --memory and no stdin. NOT A SANDBOX: it runs the file's code with your permissions, "
           "as pytest and nbgrader do.", metavar="FILE.py:FUNCTION", type=list, panel=CODE),
    Option("signature", "The function's parameters, in order: Q, K, V (default); Q, K, V, mask; Q, K, V, is_causal; "
           "x, W_Q, W_K, W_V; Q, K, V, block_q, block_k (a FlashAttention-2 forward returning (output, lse)); "
           "Q, K, V, O, lse, dO (a backward returning (dQ, dK, dV)).", default="Q, K, V", metavar="\"Q, K, V\"",
           panel=CODE),
    Option("mask_convention", "How the mask argument reads: keep (True = attend, PyTorch SDPA), block (True = "
           "blocked, nn.MultiheadAttention), additive (0 or −∞, added to the scores).", flags=("--mask-convention",),
           default="keep", choices=choices.MASK_CONVENTIONS, panel=CODE),
    Option("layout", "The axes of Q, K and V: L,d (one sequence), B,L,d (a batch), B,H,L,d (a batch of heads; "
           "K and V with the kv heads).", default="L,d", choices=choices.CODE_LAYOUTS, panel=CODE),
    Option("array", "Call the function with numpy arrays, torch tensors or jax arrays (torch and jax are imported "
           "only then).", default="numpy", choices=choices.CODE_ARRAYS, panel=CODE),
    Option("cases", "Which cases, comma-separated: names of the battery (docs/reference/check.md lists them) "
           "and problem files or folders of them (attn compute's input; each file one case). Default: every "
           "case the signature and layout can take.", metavar="CASES", panel=CODE),
    Option("timeout", "Seconds each case may take (loading the file included).", type=float, default=5.0,
           low=choices.CODE_TIMEOUT[0], high=choices.CODE_TIMEOUT[1], panel=CODE),
    Option("memory", "MiB of memory each case may allocate.", type=int, default=2048, low=choices.CODE_MEMORY, panel=CODE),
    Option("forbid", "Modules a submission may not import, comma-separated (e.g. attncli,torch.nn.functional): "
           "an import of one fails in the child and every case scores 0.", metavar="MODULES", panel=CODE),
)
CheckFormat = spec.find(OPTIONS, "format").enum
Visibility = spec.find(OPTIONS, "visibility").enum


@spec.command(OPTIONS)
def check(**values) -> None:
    """Mark a learner's answers: each cell ✓ correct, ↪ carried, ~ imprecise, ✗ wrong, with diagnoses.

    attn check answers.json problem.json

    attn check samples/scooter.json --weights "0.0454, 0.7679, 0.1867"

    attn check --q "0,4" --k "1,0; 0,1; .5,.5" --v "2,0; 0,2; 1,-1" --weights "0.0454, 0.7679, 0.1867"

    attn check answers/*.json --problem problem.json --require weights,output

    Correct: the exact value rounded to the decimals written, ±1 in the last place (either
    rounding at an exact tie). With fewer than --decimals decimals (default 2) only the exact
    value is correct (4, 0.5, 0); anything else is imprecise and earns nothing. Rounding each
    stage to the decimals written and carrying those numbers forward (the textbook's method) is
    correct. --tol T instead accepts cells within T.

    Carried: wrong, but right when recomputed from the learner's own (wrong) earlier stage; it
    earns the mark. Stages not answered are listed and do not fail, unless --require names them.

    Code: attn check --code my_attention.py:attention runs the function on a battery of cases (each
    in a child process) and marks what it returns, stage by stage, with a diagnosis of each failing
    case; exit 0 when every case passes. It runs the file's code with your permissions, as pytest
    and nbgrader do: it is not a sandbox.

    Exit codes: 0 every given cell right, 1 some not right (or a file with no answers), 2 trouble.
    """
    o = spec.chosen(OPTIONS, values)
    if o.code:
        _max_score(o.max_score)
        # Imported here, for start-up (as check_run below): the code path loads numpy and the core.
        from attncli.commands.check_code import run_code

        run_code(o, [option.name for option in OPTIONS if option.panel == ANSWERS])
        return
    required = _stages(o.require)
    answers = {option.key: getattr(o, option.name) for option in OPTIONS if option.panel == ANSWERS}
    matrices = {option.key: getattr(o, option.name) for option in OPTIONS if option.panel == PROBLEM}
    # The one import kept inside a function, for start-up: numpy, the core and the views load when
    # check runs, so that `attn --version` and `attn --help` never import numpy.
    from attncli.commands.check_run import run

    grading = {"points": _points(o.points), "max_score": _max_score(o.max_score), "visibility": o.visibility}
    run(o.files, o.problem, answers, o.format, o.precision, o.decimals, o.tol, required, grading, o.lenient_json,
        o.report, matrices)


def _stages(text: str | None) -> tuple[str, ...] | None:
    """--require's comma list, checked (None when not given: the problem's "ask" applies)."""
    if text is None:
        return None
    # '' would require nothing, in place of the problem's "ask", without a word
    stages = tuple(comma_items(text, "stage names, comma-separated (e.g. weights,output)", "--require"))
    for stage in stages:
        if names.stage_of(stage) not in names.ASKABLE:
            hint = did_you_mean(names.stage_of(stage), names.ASKABLE) or f"; answers are {', '.join(names.ASKABLE)}"
            raise InputError(f"unknown stage {quote(stage)}{hint}", "--require")
    return stages


def _max_score(value: float | None) -> float | None:
    """--max-score, checked: a number above 0, at most MOST (0 would score every file 0)."""
    if value is not None and not 0 < value <= MOST:  # also refuses nan and inf
        raise InputError(f"{value:g} is not a number above 0, at most {MOST:,.0f}", "--max-score")
    return value


def _points(text: str | None) -> dict[str, float] | None:
    """--points' `stage=N` list, checked (attncli/base/points.py)."""
    try:
        return read_points(text)
    except InputError as error:
        raise error.at("--points") from None
