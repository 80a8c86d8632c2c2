"""`attn check`'s work, once commands/check.py has read its options: read the problem and the
answers, mark them, and report. This module loads numpy and the core: check.py imports it only
when check runs. Start-up: the tables load rich, which takes longer than numpy; they are imported
only when a table is printed, so the JSON, CSV and Gradescope reports never load it."""

import hashlib
import re
import sys
from collections import Counter

import numpy as np

from attncli.base.errors import AttnError, InputError, ReaderGone, one_line, plural, quote
from attncli.commands.edge import auto_is_table, message
from attncli.compute import attention
from attncli.compute.limits import answers_cap
from attncli.document.loading import OneMatrixError, load_matrix, read_once
from attncli.document.reading import build_problem
from attncli.marking.answer_files import load_answers, npz_heads, read_answers_file
from attncli.marking.answer_keys import ASKED, asked_of, sort_keys
from attncli.marking.answers import (
    EMPTY_FILE,
    NO_ANSWERS,
    NoAnswers,
    check_document_shapes,
    check_shapes,
    problem_stages,
)
from attncli.marking.grading import DECIMALS, Rule
from attncli.marking.marks import all_correct, before_weights, stage_keys
from attncli.marking.slip import mark_document  # the stages, and a find-the-slip answer against the key's slip
from attncli.render import out
from attncli.render.gradebook import Grading, csv_gradebook, gradescope, gradescope_class, marks_dict
from attncli.render.json import dumps
from attncli.render.target import OutputError, check_target
from attncli.stages import grads
from attncli.stages.table import blocked
from attncli.stages.table import names as stage_names

EXIT_DIFFER = 1


def run(*args, **options) -> None:
    """Mark and report, as `attn check` documents; exits with its verdict (0, 1 or 2). A single
    answers file given as a pipe (`attn check <(…) problem.json`) is read once, however often it is
    looked at; a class's files must be regular files."""
    with read_once():
        _run(*args, **options)


def _run(files: list[str] | None, problem: str | None, answers: dict[str, str | None], format: str, precision: int,
         decimals: int | None, tol: float | None, required: tuple[str, ...] | None, grading: dict | None = None,
         lenient: bool = False, output: str | None = None, matrices: dict[str, str | None] | None = None) -> None:
    """`run`. `output`: --report's file (the marks page), checked before any file is read.
    `matrices`: the problem's Q, K, V given inline (--q, --k, --v), over the problem file's keys;
    every FILE is then answers."""
    files = list(files or [])
    if output is not None:
        format = _page_target(output, format, files + [problem, *answers.values()])
    inline = {stage: value for stage, value in answers.items() if value is not None}  # --scores … --output
    matrices = {key: value for key, value in (matrices or {}).items() if value is not None}  # --q, --k, --v
    each_own = problem is None and len(files) > 2 and not matrices  # a class whose files each hold their problem
    if problem is None and len(files) == 2 and not inline and not matrices and "-" not in files:
        files, problem, each_own = _two_files(files)
    if matrices:
        pass  # the problem is given inline (over --problem's file, if any); every file is answers
    elif problem is None and not each_own:
        if not files:
            if sys.stdin.isatty():  # reading it would wait, silently, for a document typed in
                raise InputError('no problem: name one (attn check answers.json problem.json, or attn check '
                                 'problem.json --weights "0.05, 0.77, 0.19"), or pipe one '
                                 '(attn example scooter | attn check --weights "0.05, 0.77, 0.19")')
            files = ["-"]
        problem = files.pop() if len(files) == 2 or inline else files[0]
    if not files and not inline:
        raise InputError("no answers: give an answers file, or --scores/--scaled/--weights/--output")
    inline_answers = {}  # read once, laid over every answers file
    early = {}  # one answers file, read before the problem is computed: (document, note)

    def read_inline(built=None) -> None:
        """Within the answers cap (bigger answers are refused unread), and their shapes checked
        against the problem before it is computed (a wrong one is refused at once), as are those
        of a single answers file."""
        cap = answers_cap(built) if built is not None else None
        for stage, value in inline.items():
            inline_answers[stage] = load_matrix(value, f"--{stage}", "bias" if blocked(stage) else "number", cap,
                                                answer=True)[0]
            if built is not None:
                try:
                    check_shapes({stage: inline_answers[stage]}, built)
                except AttnError as error:
                    raise error.at(f"--{stage}")
        one = files[0] if len(files) == 1 and files[0] != problem and format not in ("csv", "gradescope") else None
        if built is not None:
            before_computing["problem"] = built
        if built is not None and one is None:
            return _shapes_first(built, cap)
        if built is None:
            return
        try:
            early[one] = read_answers_file(one, cap, lenient=lenient)
        except AttnError:
            return  # said when it is marked, as before
        try:
            check_document_shapes(early[one][0], built)
        except AttnError as error:
            raise error.at(one)

    refused = {}  # a class's file whose answers have the wrong shape: its error, found before computing

    def _shapes_first(built, cap) -> bool:
        """Each file of a class read and its shapes checked before the problem is computed: a
        file of the wrong shape scores 0 with its error (as a single file is refused at once);
        False (nothing to compute) when every file was refused and nothing is answered inline."""
        for name in files:
            if name in (problem, "-"):
                continue
            try:
                doc = read_answers_file(name, cap, lenient=lenient, regular=len(files) > 1)[0]
            except AttnError:
                continue  # said when it is marked, as before
            if not isinstance(doc, dict) or doc.keys() & {"Q", "K", "V", "X", "q", "k", "v"}:
                continue  # answers beside their own problem: that is said first, when it is marked
            try:
                check_document_shapes(doc, built)
            except AttnError as error:
                refused[name] = error.at(name)
        return not (files and not inline and all(name in refused for name in files))

    before_computing = {}  # the problem, as read_inline saw it before it was computed
    shared = None if each_own else _problem(problem, inline_matrices=matrices or None, before=read_inline)
    if shared is None:
        read_inline()
    built = shared[2].problem if shared and shared[2] is not None else before_computing.get("problem")
    if shared and grading:
        _points_fit(grading.get("points"), built)
    cap = answers_cap(built) if shared else None  # bigger answers are refused unread

    def answers_of(name: str | None):
        """(document, trace, note on how it was read)."""
        if name is None:  # answers inline, no answers file: the file is the problem (a key's stages are not the learner's)
            return {}, shared[2], None, shared[3]
        if name == problem:
            return shared[0], shared[2], None, shared[3]
        if each_own:  # a problem file, under the general text cap
            doc, note = read_answers_file(name, lenient=lenient, regular=len(names) > 1)
            own = _problem(name, doc)
            problems[name] = _fingerprint(own[2])
            return doc, own[2], note, own[3]
        if name in refused:
            raise refused[name]
        doc, note = early.pop(name) if name in early else \
            read_answers_file(name, cap, lenient=lenient, regular=len(names) > 1)  # a class: no FIFO holds it up
        return doc, shared[2], note, shared[3]

    problems: dict[str, bytes] = {}  # each file's own problem, when each holds one
    names = files or [None]
    # The gradebook formats record a submission that cannot be marked as a row scoring 0, also
    # when it is the only one: Gradescope needs a results.json whatever went wrong.
    many = len(names) > 1 or (format in ("csv", "gradescope") and names != [None])
    origin = {stage: f"--{stage}" for stage in inline}
    # None: the problem's, else the default; `key`: the problem's document (a find-the-slip key's slip)
    settings = {"tol": tol, "decimals": decimals, "require": required, "key": shared[0] if shared else None}
    stages = problem_stages(shared[2]) if shared and shared[2] is not None else None  # listed when a file answers none
    results = [_mark_one(name or problem, lambda n=name: answers_of(n), inline_answers, settings, many, origin, stages)
               for name in names]
    results = _flag_odd_problems(results, problems)
    rule = (shared[3] if shared else {}) | {k: v for k, v in settings.items() if v is not None and k != "key"}
    _report(shared[2] if shared else None, results, format, precision, rule.get("decimals", DECIMALS), tol,
            Grading(**(grading or {}), required=tuple(rule.get("require") or ())), output)


def _page_target(path: str, format: str, inputs: list) -> str:
    """--output FILE: an .html file that can be written and is no input; the format is html."""
    try:
        suffix = check_target(path, inputs, (".html",))  # the marks page; other suffixes: the advice below
    except OutputError as error:
        raise error.at("--report")
    if suffix != ".html":
        raise InputError(f"{quote(path)}: attn check writes a file only as the marks page (.html); JSON, CSV and "
                         "Gradescope's results go to stdout (attn check … --format json > marks.json)", "--report")
    if format not in ("auto", "html"):
        raise InputError(f"{quote(path)} is written as html, but --format is {format}; drop --format", "--report")
    return "html"


PROBLEM_KEYS = {"Q", "K", "V", "X", "q", "k", "v"}
HEAD_PATH = re.compile(r"^heads\[(\d+)\]\.")


def _points_fit(points: dict | None, problem) -> None:
    """--points' `heads[h].stage` paths name heads the problem has (a one-head problem's stages are
    named alone)."""
    several = problem.heads > 1 or "W_O" in problem.inputs
    for path in points or {}:
        head = HEAD_PATH.match(path)
        if head and not several:
            raise InputError(f"{quote(path)}: the problem has one head; name the stage alone "
                             f"({path[head.end():]}=…)", "--points")
        if head and int(head.group(1)) >= problem.heads:
            raise InputError(f"{quote(path)}: the problem has {plural(problem.heads, 'head')}, numbered from 0", "--points")


def _holds(name: str) -> tuple[bool, bool]:
    """(holds a problem, holds answers) of a file, by its content; (False, False) when unreadable
    (marking it reports why)."""
    try:
        doc = _read_answers(name)
    except AttnError:
        return False, False
    if not isinstance(doc, dict):
        return False, False
    heads = doc.get("heads") if isinstance(doc.get("heads"), list) else []
    stages = set(stage_names() + grads.names()) | {"tiles"}
    members = {path.partition("/")[2] for path in getattr(doc, "results", None) or {} if path.startswith("heads/")}
    answers = bool((doc.keys() | members) & stages) or any(isinstance(h, dict) and h.keys() & stages for h in heads)
    return bool(doc.keys() & PROBLEM_KEYS), answers


def _two_files(files: list[str]) -> tuple[list[str], str | None, bool]:
    """(answer files, problem, each holds its own) for `attn check A B` without --problem, decided
    by content: a file holding answers and no problem is never the problem; two files each holding
    a problem and answers are each marked against their own; two bare problems are ambiguous."""
    (p1, a1), (p2, a2) = _holds(files[0]), _holds(files[1])
    if p1 and a1 and p2 and a2:
        return files, None, True
    if p1 and p2 and not a1 and not a2:
        raise InputError(f"both {files[0]} and {files[1]} hold a problem and no answers: name the problem "
                         "with --problem, and give the answers as a file or inline (--weights …)")
    if p1 and (a2 and not p2 or not a1 and a2):
        return [files[1]], files[0], False  # the answers came first in the other order
    return [files[0]], files[1], False


def _read_answers(name: str, cap=None, csv: bool = True):
    """An answers (or problem) document within `cap` (`attncli.marking.answer_files.load_answers`)."""
    return load_answers(name, cap, csv)


OWN_PROBLEM_CELLS = 1 << 16  # heads × queries × keys of a problem a learner's own file may set


def _fingerprint(trace) -> bytes:
    """What makes two files' own problems the same: their inputs and settings, as computed."""
    p = trace.problem
    parts = [f"{k}{v.shape}".encode() + np.ascontiguousarray(v).tobytes() for k, v in sorted(p.inputs.items())]
    return hashlib.sha256(b"|".join(parts) + repr((p.heads, trace.scale)).encode()
                          + np.ascontiguousarray(trace.stage("weights")).tobytes()).digest()


def _flag_odd_problems(results: list, problems: dict[str, bytes]) -> list:
    """In a class whose files each hold their problem, a file whose problem differs from the
    majority's is flagged (a student may have set their own, easy one), in its note and on stderr."""
    counts = Counter(problems.values())
    if len(counts) < 2:
        return results
    common, most = counts.most_common(1)[0]
    flagged = []
    for name, marks, note in results:
        if marks is not None and problems.get(name, common) != common:
            flag = f"its problem differs from the class's ({most} of {len(problems)} files {'shares' if most == 1 else 'share'} one)"
            sys.stderr.write(f"warning: {one_line(name)}: {flag}\n")  # a student's file name: text, not controls
            note = "; ".join(x for x in (flag, note) if x)
        flagged.append((name, marks, note))
    return flagged


def _problem(name: str | None, doc=None, inline_matrices: dict[str, str] | None = None, before=None):
    """(document, source, trace) of a problem file (or an answers document holding its problem);
    metadata keys (a student's name) are set aside, and in a learner's own file unknown keys too.
    `inline_matrices`: Q, K, V as --q, --k, --v give them, over the file's (no file: the problem).
    `before(problem)` runs once the problem is read, before it is computed."""
    source, own_file = name, doc is not None
    if inline_matrices:
        doc = ({} if name is None else _read_answers(name, csv=False)) | {
            key: load_matrix(value, f"--{key.lower()}")[0] for key, value in inline_matrices.items()}
        source = name or "--q/--k/--v"
    elif doc is None:
        try:
            doc = _read_answers(name, csv=False)  # a problem file may hold answers too
        except OneMatrixError as error:
            error.message += "; give a learner's matrix as an option, e.g. --weights FILE"
            raise
    elif isinstance(doc, dict) and not doc.keys() & {"Q", "K", "V", "X", "q", "k", "v"}:
        raise InputError("holds answers but no problem (Q, K, V): name the problem with --problem", source)
    try:
        asked = asked_of(doc)
        own = sort_keys({k: v for k, v in doc.items() if k not in ASKED} if isinstance(doc, dict) else doc,
                        strict=not own_file).doc
    except AttnError as error:
        raise error.at(source)
    try:
        built = build_problem(own, source=None if inline_matrices else source)
    except AttnError as error:  # a key given inline is named by its option (--v), as attn compute names it
        raise error.at(f"--{error.key.lower()}" if error.key in (inline_matrices or {}) else source)
    if own_file and built.heads * built.lq * built.lk > OWN_PROBLEM_CELLS:
        raise InputError(f"its own problem has {built.heads * built.lq * built.lk:,} scores (heads × queries × keys); "
                         f"a learner's file may set one of at most {OWN_PROBLEM_CELLS:,}: give the class's problem "
                         "with --problem", source)
    if before is not None and before(built) is False:
        return doc, source, None, asked  # nothing to compute: every answers file was refused
    try:
        return doc, source, attention.attend(built), asked
    except AttnError as error:
        raise error.at(source)


def _mark_one(name: str, answers, inline_answers: dict, settings: dict, many: bool, origin: dict[str, str],
              stages: tuple[str, ...] | None = None):
    """(file, marks or None, error or None). With several files a bad one is reported and skipped,
    and a file with no answers scores 0 (the message lists the problem's `stages`, or its own
    problem's). An error about a stage given inline names its option (`--weights`) instead of the file."""
    try:
        trace = None
        doc, trace, read, asked = answers()
        doc = npz_heads(doc, trace)  # before the overlay, which keeps a plain dict
        doc = _overlay(doc, inline_answers, trace) if isinstance(doc, dict) else doc  # read_answers names a wrong type
        chosen = asked | {key: value for key, value in settings.items() if value is not None}
        marks = mark_document(trace, doc, strict=not many, **chosen)  # in a class an unknown key is a note
        notes = ([f"{read} (--lenient-json)"] if read else []) + sort_keys(doc, before_weights(trace), False).notes()
        return name, marks, "; ".join(notes) or None
    except NoAnswers as error:
        blank = error.named(name, problem_stages(trace) if trace is not None else stages)
        if not many:
            raise blank.at("") from None  # the message names the file already
        return name, None, blank.message
    except AttnError as error:
        error.at(origin.get(error.key, name))
        if not many:
            raise
        sys.stderr.write(f"error: {one_line(message(error))}\n")
        return name, None, message(error, source=False)
    except (ValueError, TypeError, LookupError, ArithmeticError, StopIteration, RecursionError, MemoryError) as error:
        # A file no rule foresaw: it scores 0 with the reason, and the class goes on.
        if not many:
            raise
        note = f"could not be marked ({type(error).__name__}: {one_line(str(error)) or 'no detail'})"
        sys.stderr.write(f"error: {one_line(name)}: {note}\n")
        return name, None, note


def _overlay(doc: dict, inline_answers: dict, trace) -> dict:
    """The inline answers laid over a document's: each replaces that stage at the top level and in
    heads[0], where read_answers would otherwise prefer the file's (the final output only when it is
    head 0's output). A stage given for every head at once (heads × rows × columns: a CSV with a
    `head` column, as `attn compute -f csv` writes several heads) replaces that stage in each head."""
    count = trace.problem.heads
    listed = doc.get("heads") if isinstance(doc.get("heads"), list) else []
    per_head = {stage: value for stage, value in inline_answers.items() if count > 1 and _every_head(value, count)
                and all(entry is None or isinstance(entry, dict) for entry in listed)}
    doc = doc | {stage: value for stage, value in inline_answers.items() if stage not in per_head}
    heads = doc.get("heads")
    if inline_answers and isinstance(heads, list) and heads and isinstance(heads[0], dict):
        single = trace.problem.heads == 1 and "W_O" not in trace.problem.inputs
        replaced = {stage for stage in inline_answers if (stage != "output" or single) and stage not in per_head}
        doc["heads"] = [{k: v for k, v in heads[0].items() if k not in replaced}] + heads[1:]
    if per_head:
        heads = [dict(entry or {}) for entry in listed] + [{} for _ in range(count - len(listed))]
        for stage, value in per_head.items():
            for h in range(count):
                heads[h][stage] = value[h]
        doc["heads"] = heads
    return doc


def _every_head(value, count: int) -> bool:
    """Whether an inline answer is a stack of `count` matrices, one per head."""
    return isinstance(value, list) and len(value) == count and all(
        isinstance(m, list) and m and isinstance(m[0], list) for m in value)


def _blank(error: str | None) -> bool:
    """A file marked 0 because it answered nothing (not a file that could not be read)."""
    return error is not None and error.startswith((NO_ANSWERS, EMPTY_FILE))


def _report(trace, results, format: str, precision: int, decimals: int = 2, tol=None,
            grading: Grading = Grading(), output: str | None = None) -> None:
    as_json = format == "json" or (format == "auto" and not auto_is_table())
    # As diff: 2 trouble (a file that could not be read; a single file with no answers, in every
    # format), 1 some answer differs (in a class, a file with no answers is one that differs).
    code = 0
    if any(m is None and (not _blank(e) or len(results) == 1) for _, m, e in results):
        code = 2
    elif not all(m is not None and all_correct(m) for _, m, _ in results):
        code = EXIT_DIFFER
    if format == "html":
        _page(trace, results, precision, Rule(decimals, tol), grading, output)
        sys.exit(code)
    try:
        _print_report(trace, results, format, precision, decimals, tol, as_json, grading)
        sys.stdout.flush()
    except BrokenPipeError:
        raise ReaderGone(code) from None  # the reader left; the verdict is still the exit status
    sys.exit(code)


def _page(trace, results, precision: int, rule: Rule, grading: Grading, output: str | None) -> None:
    """The marks page (render/page_marks.py), to --report's file or stdout."""
    # Imported here, for start-up (see above): only the page needs it.
    from attncli.render.files import Interrupted, write_output
    from attncli.render.page_marks import marks_page

    text = marks_page(trace, results, precision, rule, grading.points, grading.required)
    if output is None:
        out.write_all(text)
        return
    try:
        write_output(output, ".html", text)
    except OutputError as error:
        raise error.at("--report")
    except Interrupted as stop:  # SIGTERM or SIGHUP: the temporary file is gone; die of it
        stop.die()


def _print_report(trace, results, format: str, precision: int, decimals: int, tol, as_json: bool,
                  grading: Grading) -> None:
    if format == "csv":
        sys.stdout.write(csv_gradebook(results, grading.points, grading.required))
    elif format == "gradescope":
        doc = gradescope(results[0][1], results[0][2], grading=grading, file=results[0][0]) if len(results) == 1 \
            else gradescope_class(results, grading)
        sys.stdout.write(dumps(doc) + "\n")
    elif as_json:
        if len(results) == 1:
            doc = marks_dict(results[0][1], trace, grading.points)
        else:
            doc = {"files": [{"file": f} | (marks_dict(m, points=grading.points) | ({"note": e} if e else {})
                                            if m is not None else {"error": e})
                             for f, m, e in results],
                   "all_correct": all(m is not None and all_correct(m) for _, m, _ in results)}
        sys.stdout.write(dumps(doc) + "\n")
    else:
        # Imported here, for start-up (see above): only the tables need rich.
        from attncli.render.marks import print_marks
        from attncli.render.summary import print_class_summary
        from attncli.render.tables import make_console

        console = make_console()
        if len(results) == 1:
            print_marks(trace, results[0][1], console, precision, Rule(decimals, tol), grading.points)
        else:
            print_class_summary(results, console, grading.points, stage_keys(trace) if trace is not None else None,
                                grading.required)
