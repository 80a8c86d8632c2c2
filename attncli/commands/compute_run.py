"""`attn compute`'s work, once commands/compute.py has made its plan: read the inputs, build the
problem, compute the trace (or the output alone, in blocks; or the tiles), and show it through the
chosen view. This module loads numpy and the core: compute.py imports it only when compute runs.

Start-up: what every run needs is imported at the top; what only some runs need (the blocked
path, the tiles, the explanation, --output FILE, --cost's writers, the read-back of a document
that holds results; each format's view, which render/formats.py imports when it writes) is
imported where it is used, so that `attn compute p.json --format json` pays for none of it
(together they would add about a tenth to its run time: the blocked path's thread pool loads
logging, the explanation the hand steps, the tables rich).
"""

import sys
from dataclasses import replace
from types import SimpleNamespace

from attncli.base import tokens
from attncli.base.errors import AttnError, InputError, one_line, plural
from attncli.commands import option_text as opt
from attncli.commands import spec
from attncli.commands.compute_options import OPTIONS, PARTS
from attncli.commands.edge import flag, warning, write_file
from attncli.compute import attention, limits
from attncli.document import agreement
from attncli.document.loading import OneMatrixError, gather
from attncli.document.reading import build_problem
from attncli.document.schema import has_results
from attncli.problem import recipes
from attncli.problem.masks import distance_notes, positions_line
from attncli.problem.rope import angle_notes
from attncli.render import out
from attncli.render.formats import View
from attncli.render.progress import progress
from attncli.stages import grads
from attncli.stages.table import get, stand_in

# The keys that give a mask: a masked-rows error names the option (or its file) that gave it, not the problem's file.
MASK_KEYS = ("mask", "window", "key_mask")
MAX_TILES = {True: 1_000, False: 100_000}  # tables draw about 4 ms a tile; JSON keeps about 5 KB a tile


def run(o: SimpleNamespace, plan: SimpleNamespace) -> None:
    """Compute and show: `o` holds compute's options by name, `plan` what compute.plan decided.
    Read the problem, check what the plan asks of it, compute, render; warnings come last."""
    if o.cost:  # the counts alone, no attention (compute.plan refused the options it would ignore)
        # Imported here, for start-up (see above): only --cost needs the counts.
        from attncli.commands import cost_run

        size = cost_run.sram(o.sram)
        problem = read(o, piped=plan.stdin is not None)
        cost_run.run(problem, size, plan, o, lambda: _attend(problem[0], True, plan.threads))
        return
    problem, source, doc, options = read(o, piped=plan.stdin is not None)
    shown, warnings = check(problem, plan, o)
    if o.error:  # each stage's error against float64, beside it (tables, --explain's roundings) or per head (JSON)
        if plan.format.name not in ("table", "json") and not o.explain:
            raise InputError(f"shows each stage's error in tables and JSON, not {plan.format.name}", "--error")
        if problem.dtype == "float64":
            raise InputError("shows each stage's error against a float64 reference; this run is float64, so every "
                             "error is 0: use --dtype float32, bfloat16 or float16", "--error")
        shown += ("errors",)
    trace, tiled = calculate(problem, plan, shown, o.full, (source, doc, options), warnings)
    agreed = _agreement(doc, trace, source)
    render(trace, tiled, shown, plan, o, agreed, doc.get("word_ids") if isinstance(doc, dict) else None)
    for notice in trace.warnings:  # the command line's and the computation's, as in the JSON
        sys.stderr.write(f"warning: {one_line(warning(notice))}\n")
    if agreed is not None and not agreed.agrees:
        sys.exit(1)  # as diff: 0 the same, 1 different (the model and attncli), 2 trouble


def _agreement(doc, trace, source):
    """A captured layer's reference (attncli/document/agreement.py) against the trace; its `agreement`, when the
    document holds one (attn compute's JSON read back), must say the same."""
    try:
        agreed = agreement.compare(doc, trace)
        if isinstance(doc, dict) and "agreement" in doc:
            agreement.check_claim(doc["agreement"], agreed)
    except AttnError as error:
        raise error.at(source) if source else error
    return agreed


def check(problem, plan: SimpleNamespace, o: SimpleNamespace) -> tuple[tuple[str, ...], list[str]]:
    """(the stages shown, the warnings about the command line): what the plan asks of this
    problem (`o`: the options), refused before computing when it cannot be done."""
    stages = o.stages
    gradients = grads.names() + (grads.GRADS,)
    if problem.dO is not None and plan.tile_sizes is not None and stages is None and plan.suffix != ".npy":
        plan.output_only = False  # a file's dO, as --do: the tiles, the output and the gradients
    shown = plan.shown
    _check_backward(problem, shown if stages is not None else (), plan.output_only, plan.suffix,
                    plan.tile_sizes and stages is None)
    if problem.dO is not None and plan.format.can("backward") and not set(shown) & set(gradients):
        shown += gradients  # dO given: its gradients are shown beside whatever --stages chose
    stage = get(shown[0])
    if plan.format.stages == "one" and stage is not None and not stage.applies(problem):
        raise InputError(f"{stage.absent}, so it has no {stage.name} stage; "
                         f"use --stages {stand_in(problem, stage.name)}", "--stages")
    # Warnings are printed once the run has succeeded: an error is always the only line on stderr.
    warnings = []
    if problem.mask_rule == "causal" and problem.lq < problem.lk and positions_line(problem) is None:
        warnings.append(f"mask causal is top-left (query i sees keys j ≤ i), and there are fewer queries "
                        f"({problem.lq}) than keys ({problem.lk}); if the queries are the last tokens of the "
                        "keys' sequence (a KV cache), use causal_lower_right or give their q_positions")
    warnings += distance_notes(problem) + angle_notes(problem)  # positions past the dtype's precision
    if o.explain:  # before computing: the bound needs only the problem
        _bound_explain(problem, explained_rows(o, problem),
                       None if o.head is None else [opt.head(o.head, problem.heads)])
    if plan.tile_sizes is not None and recipes.lab(problem):
        raise InputError("the tiled online softmax runs in float64 or float32, with a −∞ fill and each row's max "
                         "subtracted; the precision lab's settings (--dtype bfloat16/float16, --mask-fill, "
                         "--no-max-subtraction) have no tiles: drop --tiles", "--tiles")
    if plan.tile_sizes is not None:
        _check_tile_count(problem, *plan.tile_sizes, table=plan.format.builds != "json")
    return shown, warnings


def calculate(problem, plan: SimpleNamespace, shown: tuple[str, ...], full: bool, read_back: tuple,
              warnings: list = ()):
    """(trace, tile trace or None): the one library call (the full trace, or the output alone in
    blocks), after the memory guard; the document's own results are checked against it (`read_back`:
    source, document, the options that changed it). `warnings` (check's) lead the trace's own, so
    that every view (stderr, the JSON's "warnings") says them all."""
    source, doc, options = read_back
    try:
        _guard(problem, plan.format, shown, full, plan.output_only, plan.tile_sizes, plan.threads)
        trace = _attend(problem, plan.output_only, plan.threads, "errors" in shown)
        trace = replace(trace, warnings=tuple(warnings) + tuple(trace.warnings))
        # echoes and results the document holds, read back (a captured layer's agreement: _agreement)
        read = {k: v for k, v in doc.items() if k != "agreement"} if "agreement" in doc else doc
        if has_results(read):
            # Imported here, for start-up (see above): only a document with results is read back
            # (the read-back loads the tiles and the counts).
            from attncli.document.readback import verify

            verify(read, trace, flag, tuple(options.values()))
        tiled = None if plan.tile_sizes is None else _tiles(problem, plan.tile_sizes)
    except AttnError as error:
        given = [options[key] for key in MASK_KEYS if key in options]
        if error.field == "masked_rows" and given:  # the rows are fully masked by the mask an option gave
            raise error.at(" and ".join(given))
        raise error.at(source) if source else error
    return trace, tiled


def picked(o: SimpleNamespace, problem, word_ids=None) -> tuple[list[int], list[int]]:
    """(query positions, key positions) that --query and --key name (attncli/base/tokens.py reads
    the labels and words)."""
    queries = opt.picks(o.query, problem.query_labels, problem.lq, "--query", word_ids if problem.lq == problem.lk
                        else None)
    keys = opt.picks(o.key, problem.key_labels, problem.lk, "--key", word_ids, "key")
    return opt.positions(queries), opt.positions(keys)


def explained_rows(o: SimpleNamespace, problem, word_ids=None) -> list[int] | None:
    """The rows --explain explains: --row's, else --query's, else its default (None)."""
    return opt.rows(o.row, problem.query_labels, problem.lq) or picked(o, problem, word_ids)[0] or None


def render(trace, tiled, shown: tuple[str, ...], plan: SimpleNamespace, o: SimpleNamespace, agreed=None,
           word_ids=None) -> None:
    """Show the trace through the planned format's writer (attncli/render/formats.py), and nothing
    else: tables drawn on the terminal, a text document on stdout or in --output's file, or a
    binary file's arrays straight from the trace. `agreed` (a captured layer's agreement with its
    model): its line after the tables (on stderr beside a document, which holds it as the key
    "agreement" when JSON); `word_ids` (a capture's): the words --query and --key may name."""
    problem, format = trace.problem, plan.format
    chosen = picked(o, problem, word_ids)
    heads_shown = None if o.head is None else [opt.head(o.head, problem.heads)]
    explanation = None
    if o.explain:  # the plan refused --explain for a format that cannot hold it
        explanation = _explain(o, trace, tiled, explained_rows(o, problem, word_ids), heads_shown, chosen[1],
                               word_ids)
    view = View(trace, shown, o.precision, o.round_, explanation, tiled, o.full, heads_shown, o.file,
                o.carry or "exact", None if agreed is None else agreed.keys, flag, chosen, o.stages is not None,
                None if agreed is None else (agreed.layer or 0, None if word_ids is None else list(word_ids)))
    if format.binary:
        write_file(o.output_file, plan.suffix, lambda handle: format.trace(view, handle))
    elif format.terminal:
        format.trace(view)
    else:
        text = format.trace(view)  # whole before the file is opened: a refusal (the page's size) leaves no file
        if o.output_file:
            write_file(o.output_file, plan.suffix, text)
        else:
            out.write_all(text)
    if agreed is not None:  # after the tables; on stderr beside a document (stdout stays the document)
        # The line names the document's model, text from someone else's file: escaped as a warning is.
        out.write_all(one_line(agreed.line()) + "\n", sys.stdout if format.terminal else sys.stderr)


def read(o: SimpleNamespace, piped: bool = False):
    """(problem, source, document, {key: the option (or its file) that changed it}): the document from the file or
    stdin (`piped` and no file named: read even beside matrix options, which override its keys)
    with the options' keys over it (commands/compute_options.py's table says which key each
    option sets), built into a problem."""
    matrices, settings, origin = spec.settings(OPTIONS, o, PARTS)
    try:
        doc, found, source = gather(o.file, matrices, settings, piped, o.layer, "--layer")  # several layers: compute_layers.py
    except OneMatrixError as error:
        error.message += f"; give it as a matrix option: --q {o.file}"
        raise
    found |= origin  # each setting named by the option that gave it (--alibi-slopes, --rope-style, …)
    problem = build_problem(doc, found | {"invert_mask": "--invert-mask"}, source, invert_mask=o.invert_mask)
    return problem, source, doc, found


def _check_tile_count(problem, bq: int, bk: int, table: bool) -> None:
    """Refuse a tile trace too long to show, before computing it (tiles of 1 at L = 3000 are nine
    million tables)."""
    def count(q: int, k: int) -> int:
        return problem.heads * -(-problem.lq // q) * -(-problem.lk // k)

    most = MAX_TILES[table]
    if count(bq, bk) > most:
        side = 2
        while count(side, side) > most:
            side *= 2
        raise InputError(f"{bq},{bk} makes {count(bq, bk):,} tiles ({plural(problem.heads, 'head')} × "
                         f"{-(-problem.lq // bq):,} "
                         f"query blocks × {-(-problem.lk // bk):,} key blocks); "
                         f"{'tables show' if table else 'the JSON holds'} at most {most:,}: use bigger tiles, "
                         f"such as --tiles {side},{side}", "--tiles")


def _check_backward(problem, asked_for, output_only: bool, suffix: str | None, tiled_default: bool) -> None:
    """A gradient asked for with --stages needs dO; dO needs the full trace (the weights), which the output-only
    path does not keep."""
    asked = [name for name in asked_for if name in grads.names() + (grads.GRADS,)]
    if asked and problem.dO is None:
        raise InputError(f"{asked[0]} is a gradient of the backward pass, which needs dO; add --do ones "
                         "(or a matrix of the final output's shape)", "--stages")
    if problem.dO is not None and output_only:
        if suffix == ".npy":
            raise InputError("a .npy file holds only the final output; the backward pass (dO) needs every "
                             "stage: write .npz or .json, or drop --do", "--output")
        if tiled_default:
            raise InputError("shows the tiles and the output alone unless --stages says more; the backward pass "
                             "(dO) needs the weights: add --stages output,grads, or drop dO", "--tiles")
        raise InputError("output computes only the final output, in blocks; the backward pass (dO) needs the "
                         "weights: add weights (or d_Q, grads, …) to --stages, or drop --do", "--stages")


# --explain is a hand calculation: for hand-sized rows. Past these it is refused before any line
# is written (a row of d_k = 200,000, or 100,000 heads, ran for minutes into megabytes of text).
EXPLAIN_MOST = {"keys": 4096, "width": 1024, "heads": 16, "rows": 64}


def _bound_explain(problem, rows: list[int] | None, heads_shown: list[int] | None) -> None:
    """Refuse an explanation too big to read, saying which --row or --head to choose."""
    split = ("Q", "K", "V", "W_Q", "W_K", "W_V")  # 2-D: every head's columns side by side
    width = max(a.shape[-1] // (problem.heads if a.ndim == 2 and key in split else 1)
                for key, a in problem.inputs.items() if a.ndim >= 1)
    heads = problem.heads if heads_shown is None else len(heads_shown)
    count = (len(rows) if rows else min(problem.lq, 3)) * heads
    for what, found, fix in (
            ("keys", problem.lk, "explain a smaller problem (or a slice of its keys)"),
            ("width", width, "explain a smaller problem (rows this wide are not for hand calculation)"),
            ("heads", heads, "choose one with --head N"),
            ("rows", count, "choose fewer rows with --row (and one head with --head N)")):
        if found > EXPLAIN_MOST[what]:
            said = {"keys": f"{found:,} keys", "width": f"rows {found:,} numbers wide",
                    "heads": f"{found:,} heads", "rows": f"{found:,} rows × heads"}[what]
            raise InputError(f"is a hand calculation, for at most {EXPLAIN_MOST['keys']:,} keys, rows "
                             f"{EXPLAIN_MOST['width']:,} numbers wide, {EXPLAIN_MOST['heads']} heads and "
                             f"{EXPLAIN_MOST['rows']} rows × heads; this problem has {said}: {fix}", "--explain")


def _explain(o: SimpleNamespace, trace, tiled, rows, heads_shown, keep=(), word_ids=None) -> list[str]:
    """--explain's lines: the hand calculation of the rows asked for, or one row through the tiles."""
    # Imported here, for start-up (see above): only --explain needs the hand calculation.
    from attncli.render.explain import explain
    from attncli.render.tiles import explain_tiles

    lab = trace.precision
    if o.carry == "rounded" and lab is not None and lab.recipe is not None:
        raise InputError(f"rounded carry re-types each number to {o.precision} decimals, as a calculator; a "
                         f"{trace.problem.dtype} run's explanation writes exact arithmetic and each rounding to "
                         f"{trace.problem.dtype} it did: drop --carry rounded", "--carry")
    if tiled is None:
        p = trace.problem
        raw = list(p.key_labels) if p.key_labels else [str(j) for j in range(p.lk)]
        words = [group for _, group in tokens.words(raw, word_ids if word_ids is not None and len(word_ids) == p.lk
                                                      else None)]
        return explain(trace, rows, heads_shown, o.precision, o.carry or "exact", keep, o.full, words, o.error)
    if o.carry is not None:
        raise InputError("--explain --tiles writes each step from the numbers as printed; drop --carry", "--carry")
    return explain_tiles(tiled, trace, rows, heads_shown, o.precision)


def _guard(problem, format, shown, full: bool, output_only: bool, tile_sizes=None, threads=None) -> None:
    """Refuse, before computing, a problem whose stages and view would not fit in memory (what the
    format builds beside the arrays is its record's `builds`), naming the ways out that would fit:
    only the output (in blocks), a binary file, single precision, one thread (each of the
    output-only path's threads holds a block of its own)."""
    available = limits.available_bytes()
    itemsize = 8 if problem.dtype == "float64" or recipes.lab(problem) else 4  # the lab keeps float64 copies
    plan = {"view": format.builds, "shown": shown, "full": full, "output_only": output_only, "itemsize": itemsize}

    def total(threads=threads, **change) -> dict[str, int]:
        now = plan | change
        found = limits.needs(problem, **now)
        if now["output_only"]:
            found |= _scratch(problem, now["itemsize"], threads)
        if tile_sizes is not None:  # the tile trace comes on top of the trace
            found |= limits.tile_bytes(problem, *tile_sizes, now["itemsize"], now["view"])
        return found

    def fits(**change) -> bool:
        return available is None or sum(total(**change).values()) <= available

    try:
        limits.check_fits(total(), available)
    except limits.ResourceError as error:
        ways = [way for way, works in (
            ("--stages output (computed in blocks of at most 64 MiB a thread)",  # never with dO: the backward pass needs every stage
             not output_only and problem.dO is None and fits(output_only=True, shown=("output",))),
            ("--output grads.npz (every stage and gradient, no text)" if problem.dO is not None
             else "--output FILE.npz (no text)", not format.binary and tile_sizes is None and fits(view="nothing")),
            ("--dtype float32", itemsize == 8 and fits(itemsize=4)),
            ("--threads 1", output_only and threads != 1 and fits(threads=1))) if works]
        error.message += "; use " + " or ".join(ways) if ways else "; make the problem smaller"
        raise


def _scratch(problem, itemsize: int, threads: int | None) -> dict[str, int]:
    """The output-only path's blocks of scores (blocks.py's `scratch`), one per thread, for the
    guard: at most as many threads work as there are blocks (masks may narrow a block: an upper
    bound)."""
    # Imported here, for start-up (see above): only the output-only path needs the blocks.
    from attncli.compute.blocks import block_rows
    from attncli.compute.threads import workers

    heads, lq, lk = problem.heads, problem.lq, problem.lk
    step = min(block_rows(heads, lq, lk, itemsize), lq)
    count = min(workers(threads), -(-lq // step))
    return {f"{count} threads' blocks ({heads} × {step} × {lk} each)": count * heads * step * lk * itemsize}


def _tiles(problem, sizes: tuple[int, int]):
    """--tiles's tile trace."""
    # Imported here, for start-up (see above): only --tiles needs them.
    from attncli.compute.tiles import attend_tiles

    return attend_tiles(problem, *sizes)


def _attend(problem, output_only: bool, threads: int | None, errors: bool = False):
    """The full trace, or only the output in blocks on `threads` workers (None: every core); a
    progress bar when it takes a while. `errors` (--error): through the precision lab, which
    measures each stage against float64 (a float32 run too)."""
    with progress(problem.lq, problem.heads * problem.lq * problem.lk) as done:
        if errors:
            return attention.attend(problem, progress=done, lab="--error")
        if output_only and not recipes.lab(problem):  # the lab computes every stage, always
            # Imported here, for start-up (see above): only the output-only path computes in blocks.
            from attncli.compute.blocks import attend_output

            return attend_output(problem, threads=threads, progress=done)
        return attention.attend(problem, progress=done)


