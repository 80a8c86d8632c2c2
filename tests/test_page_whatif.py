"""The page's what-if (render/page_whatif.py and its script): an input edited through the page's
controls, every stage after it recomputed in the browser and held to attncli's numpy core on the
same edited problem, within 1e-12 absolute and relative; the changed cells marked and no other;
the pages it does not recompute say why. The browser is tests/test_page_browser.py's (Debian's
Chromium through playwright, skipped without it)."""

import json
import re
from dataclasses import replace

import numpy as np
import pytest
from conftest import SAMPLES
from test_page_browser import HOSTILE, Opened, pages, problem_file_module  # noqa: F401  (the fixtures, shared)
from test_stages import CAUSAL, DOUBLED, insert
from typer.testing import CliRunner

from attncli.base.errors import InputError
from attncli.cli import app
from attncli.compute.attention import attend
from attncli.document.layers import layer_document
from attncli.document.loading import read_document
from attncli.document.reading import build_problem
from attncli.problem import groups, masks
from attncli.problem.rules import Matrix
from attncli.render import page_whatif
from attncli.render.page import collect
from attncli.render.page_whatif_assets import WHATIF_JS
from attncli.render.text import number

TOLERANCE = 1e-12
UNSUPPORTED: dict[str, str] = {}  # the bundled samples it cannot recompute: none
SUPPORTED = sorted(s.name for s in SAMPLES.glob("*.json") if s.name not in UNSUPPORTED)


# What no bundled sample has: T5's relative bias, a given bias, a mask per head, a row whose every key
# is masked under the "uniform" policy (scale 1, as T5).
VARIED = {"Q": [[1, 0, 0.5, -1], [0, 1, 1, 0], [1, 1, -0.5, 0.5], [0.5, -1, 0, 1]],
          "K": [[1, 0, 0, 1], [0, 1, 1, 1], [-1, 0.5, 0.5, 0], [0, 0, 1, -1]],
          "V": [[1, 2, 0, 1], [0, 1, 2, -1], [1, 0, 1, 1], [2, 1, -1, 0]], "heads": 2, "scale": 1,
          "masked_rows": "uniform", "relative_bias": {"buckets": 4, "max_distance": 8, "bidirectional": True,
                                                      "embedding": [[0.5, -0.25], [0.125, 1], [-1, 0.75], [0.25, 0]]},
          "bias": [[0, -1, 0.5, 0], [0.25, 0, 0, -0.5], [0, 0, 1, 0], [-2, 0, 0, 0.5]],
          "mask": [[[1, 1, 0, 1], [1, 1, 1, 1], [0, 1, 1, 1], [1, 1, 1, 0]],
                   [[0, 0, 0, 0], [1, 0, 1, 1], [1, 1, 1, 1], [1, 1, 0, 1]]]}


# QK-norm as no bundled sample has it: a LayerNorm over a row's every head with 1 + weight and a bias
# for q, an RMSNorm with a weight per kv head for k, one kv head for two query heads, RoPE interleaved.
NORMED = {"Q": [[1, 0, 0.5, -1], [0, 1, 1, 0], [1, 1, -0.5, 0.5], [0.5, -1, 0, 1]],
          "K": [[1, 0.25], [0, 1], [-1, 0.5], [0.75, -1]], "V": [[1, 2], [0, 1], [1, 0], [2, 1]],
          "heads": 2, "kv_heads": 1, "mask": "causal", "rope": {"style": "interleaved"},
          "q_norm": {"type": "layer", "weight": [0.5, 1, -0.25, 2], "bias": [0.1, 0, -0.2, 0.3], "over": "all",
                     "weight_offset": 1, "eps": 0.001},
          "k_norm": {"type": "rms", "weight": [[1.5, 0.5]], "eps": 0.01}}


def problem_of(sample):
    """A bundled sample's problem (by name), or a document's."""
    return build_problem(json.loads((SAMPLES / sample).read_text()) if isinstance(sample, str) else sample)


def with_inputs(problem, edits: list[dict]):
    """`problem` with the edits of X and X_kv."""
    given = {name: np.array(array) for name, array in problem.inputs.items()}
    for e in edits:
        if e["what"] in ("X", "X_kv"):
            given[e["what"]][e["i"], e["j"]] = e["value"]
    return replace(problem, inputs=given)


def edited(problem, edits: list[dict]):
    """The trace attncli computes for `problem` with the page's edits: an entry of X (or X_kv) in the
    problem's inputs; then each head's Q, K and V given as (H, L, d) (a K or V edit changes its kv
    head's, so every query head of its group), a mask bit by a mask matrix of the same visibility,
    the scale as given."""
    problem = with_inputs(problem, edits)
    trace = attend(problem)
    arrays = {name: np.array(getattr(trace, name)) for name in "QKV"}
    visible = masks.visible(problem)
    visible = np.ones((1, problem.lq, problem.lk), bool) if visible is None else np.array(visible)
    scale, group = problem.scale, problem.heads // groups.count(problem)
    for e in edits:
        if e["what"] == "scale":
            scale = e["value"]
        elif e["what"] in ("X", "X_kv"):
            continue
        elif e["what"] == "mask":
            visible[e["h"] if visible.shape[0] > 1 else 0, e["i"], e["j"]] = bool(e["value"])
        else:
            heads = [e["h"]] if e["what"] == "Q" else range(e["h"] // group * group, e["h"] // group * group + group)
            for h in heads:
                arrays[e["what"]][h, e["i"], e["j"]] = e["value"]
    inputs = arrays | {name: problem.inputs[name] for name in ("W_O", "b_O") if name in problem.inputs}
    rules = (Matrix(visible),) if any(e["what"] == "mask" for e in edits) else problem.rules
    return attend(replace(problem, inputs=inputs, kv_heads=None, scale=scale, rules=rules))


def value_of(trace, stage: str, head: str, row: str, col: str, given=None) -> float | None:
    """The value a page cell shows, from a trace (and for X, X_kv: the problem's inputs `given`); None
    for a table the what-if does not recompute."""
    i = int(row)
    if stage in ("X", "X_kv"):
        return float(given[stage][i, int(col)])
    if stage in ("concat", "final"):
        return float(getattr(trace, stage)[i, int(col)])
    if stage == "sum":
        return float(trace.weights[int(head)].sum(axis=1)[i])
    if stage == "lse":
        return float(trace.lse[int(head), i])
    if stage in ("Q", "K", "V") or stage in trace.stages:
        return float(trace.stage(stage)[int(head), i, int(col)])
    return None


def written(trace) -> dict:
    """{(stage, head, row, col): heat class} of each value cell of the page attncli writes for `trace`."""
    tables, _ = collect(trace, ("inputs", *trace.stages), fallback=("weights",))  # a real layer's page: its weights
    html = "".join(part for _, part in tables.parts if isinstance(part, str))
    found = {}
    for attributes in re.findall(r"<td ([^>]*data-row[^>]*)>", html):
        a = dict(re.findall(r'([a-z-]+)="([^"]*)"', attributes))
        found[(a["data-stage"], a["data-head"], a["data-row"], a["data-col"])] = a.get("class", "")
    return found


def close(found, expected, what: str, size=None) -> None:
    """Within TOLERANCE absolutely and relatively (−∞ where numpy has −∞). Relatively to the value,
    or to `size` where given: for a sum of terms of both signs (a real layer's output, 15 weights
    times values near 1e-5 that nearly cancel), the sum of the terms' magnitudes, the scale its
    rounding is measured at (BLAS adds them in another order than the page)."""
    found, expected = np.asarray(found, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    size = np.abs(expected) if size is None else size
    assert found.shape == expected.shape, what
    assert (np.isneginf(found) == np.isneginf(expected)).all(), what
    finite = np.isfinite(expected)
    error = np.abs(found[finite] - expected[finite])
    relative = error / np.maximum(size[finite], np.finfo(float).tiny)
    assert np.isfinite(found[finite]).all(), what
    assert error.max(initial=0) <= TOLERANCE, f"{what}: absolute error {error.max():.3g}"
    assert relative[size[finite] > TOLERANCE].max(initial=0) <= TOLERANCE, f"{what}: relative error {relative.max():.3g}"


def check(page, problem, edits_made: int = 1, terms: bool = False) -> None:
    """The page's stages against numpy's for its edits, and its marks: every cell whose value numpy
    changes is outlined and shows numpy's new number and heat class; every cell numpy leaves alone
    is not, and keeps its text. `terms`: the output's relative error is measured against the sum of
    its terms' magnitudes (`close`)."""
    edits = page.tab.evaluate("window.attnWhatIf.edits()")
    assert len(edits) == edits_made
    now, expected, original = page.tab.evaluate("window.attnWhatIf.now()"), edited(problem, edits), attend(problem)
    for name in ["Q", "K", "V", *(s for s in expected.stages)]:
        size = np.abs(expected.weights) @ np.abs(expected.V) if terms and name == "output" else None
        close(now[name], expected.stage(name), f"{edits} {name}", size)
    close(now["lse"], expected.lse, f"{edits} lse")
    if "final" in now:
        close(now["final"], expected.final, f"{edits} final")
    cells = page.tab.evaluate("""Array.from(document.querySelectorAll("td[data-stage][data-row]")).map(c =>
        [c.dataset.stage, c.dataset.head, c.dataset.row, c.dataset.col, c.textContent, c.classList.contains("wi"),
         Array.from(c.classList).filter(k => /^([pn][1-9]|x)$/.test(k)).join(" ")])""")
    heat, given = written(expected), with_inputs(problem, edits).inputs
    marked = 0
    for stage, head, row, col, text, outlined, shade in cells:
        assert heat.get((stage, head, row, col), shade) == shade, f"{edits}: {stage} head {head} row {row} col {col}"
        new = value_of(expected, stage, head, row, col, given)
        old = value_of(original, stage, head, row, col, problem.inputs)
        where = f"{edits}: {stage} head {head} row {row} col {col}"
        if new is None:  # a table it does not recompute: X, W_Q, …
            assert not outlined, where
        elif new == old:
            assert not outlined and text == number(old, 4), where
        elif abs(new - old) > TOLERANCE * max(1.0, abs(old)):
            assert outlined and text == number(new, 4), f"{where}: {text} {number(new, 4)}"
            marked += 1
    assert marked


def edit(page, what: str, value, head: int = 0, row: int = 0, col: int = 0) -> None:
    """An edit as a learner makes it: a click on the cell (its head's tab first), a value typed, apply."""
    if what == "scale":
        page.tab.select_option("#wi-what", "scale")
    else:
        page.tab.click(f"#tab-{'inputs' if what.startswith('X') else head}")
        stage, head = ("masked" if what == "mask" else what), ("" if what.startswith("X") else head)
        page.tab.click(f'td[data-stage="{stage}"][data-head="{head}"][data-row="{row}"][data-col="{col}"]')
        assert page.tab.input_value("#wi-what") == what
    if value is not None:
        page.tab.fill("#wi-value", str(value))
    page.tab.click("#wi-apply")
    status = page.tab.inner_text("#wi-status")
    assert status.startswith("recomputed"), status


def reset(page) -> None:
    page.tab.click("#wi-reset")
    assert page.tab.evaluate("window.attnWhatIf.edits().length") == 0
    assert page.tab.eval_on_selector_all("td.wi, td.wi-edit", "cs => cs.length") == 0


def sweep(page, sample: str) -> None:
    """One sample's page: a query entry, a key entry (the last head's: with grouped-query attention, its
    group's), a mask bit (a hidden key shown) when it has a mask, the scale, and an entry of X and X_kv
    when it is projected from them; each checked, then reset."""
    problem = problem_of(sample)
    trace = attend(problem)
    last = problem.heads - 1
    edit(page, "Q", 1.375, last, problem.lq - 1, 0)
    check(page, problem)
    reset(page)
    edit(page, "K", -0.625, last, problem.lk - 1, trace.d_k - 1)
    check(page, problem)
    reset(page)
    if trace.masked is not None:
        hidden = np.argwhere(np.isneginf(trace.masked[0]))
        i, j = (int(x) for x in hidden[0]) if len(hidden) else (problem.lq - 1, 0)
        edit(page, "mask", None, 0, i, j)  # the click offers the flipped bit
        check(page, problem)
        reset(page)
    edit(page, "scale", 0.3)
    check(page, problem)
    for name in ("X", "X_kv"):
        if name in problem.inputs:
            reset(page)
            edit(page, name, -0.875, 0, 1, 0)  # Q, K and V projected again
            check(page, problem)


def test_an_edit_is_recomputed_as_numpy_computes_it_and_only_changed_cells_are_marked(browser, pages):  # noqa: F811
    """The fast representative: sinks (a mask with a key no query sees, a sink per head, K and V shared
    by both heads): a Q, a K, a mask bit and a scale edit through the controls, each checked; the numbers
    are written as Python writes them (a tie to even); a bad value is refused, saying so; a page it does
    not recompute (the tiles') says why and has no controls."""
    page = Opened(browser, pages(SAMPLES / "sinks.json"))
    sweep(page, "sinks.json")
    reset(page)
    edit(page, "Q", 1.375, 1, 2, 0)
    page.tab.click('td[data-stage="scores"][data-head="1"][data-row="2"][data-col="2"]')  # q = (1.375, −1), k = (1, 1)
    note = page.tab.inner_text("#derivation .wi-note")
    assert "after your edits this number is 0.3750" in note and "q · k = (1.3750)(1.0000) + (-1.0000)(1.0000) = 0.3750" in note
    assert "the derivation below is of the original numbers" in note.lower()
    reset(page)
    edit(page, "Q", 2000, 1, 2, 1)  # logits past e^709: only a softmax that subtracts the row's max holds them
    check(page, problem_of("sinks.json"))
    values = [0.03125, -0.03125, 0.00005, 1.00015, -2e-9, 0.5, 2.5e15, -1e-300, 123.45675, 1.00005e15, -1.00015e15,
              4503599627370497.5, 1.5e300]
    assert page.tab.evaluate("vs => vs.map(window.attnWhatIf.number)", values) == [number(v, 4) for v in values]
    reset(page)
    page.tab.select_option("#wi-what", "Q")
    page.tab.fill("#wi-value", "1e999")
    page.tab.click("#wi-apply")
    assert page.tab.inner_text("#wi-status").startswith('error: value is "1e999"; expected a finite number')
    page.tab.select_option("#wi-what", "scale")
    page.tab.fill("#wi-value", "1e308")
    page.tab.click("#wi-apply")
    assert "error: scaled overflows" in page.tab.inner_text("#wi-status")
    assert page.tab.evaluate("window.attnWhatIf.edits().length") == 0
    assert (page.errors, page.requests, page.dialogs) == ([], [], [])
    page.go(pages(SAMPLES / "tiny_tiles.json", "--tiles", "2,2"))  # a page it does not recompute: says why
    assert page.tab.inner_text("#wi-why") == "What-if is not available on this page: the tile tables (--tiles) are " \
        "not recomputed."
    assert page.tab.query_selector("#wi-form") is None and page.tab.evaluate("window.attnWhatIf") is None
    assert (page.errors, page.requests, page.dialogs) == ([], [], [])
    page.close()


def test_the_status_names_hostile_labels_as_text(browser, problem_file_module):  # noqa: F811
    page = Opened(browser, problem_file_module)
    page.tab.click('td[data-stage="K"][data-row="0"][data-col="1"]')
    page.tab.fill("#wi-value", "2")
    page.tab.click("#wi-apply")
    assert f"K · head 0 · key {HOSTILE} · column 1: 0 → 2" in page.tab.inner_text("#wi-status")
    assert page.tab.title() == HOSTILE and page.tab.eval_on_selector_all("img", "imgs => imgs.length") == 0
    assert (page.errors, page.requests, page.dialogs) == ([], [], [])
    page.close()


@pytest.mark.slow
def test_every_supported_samples_page_recomputes_as_numpy(browser, pages, tmp_path):  # noqa: F811
    """Every bundled sample the what-if supports, VARIED and NORMED; then a mask bit that would leave a row with no
    key under the "error" policy is refused, as numpy refuses it."""
    page = Opened(browser, pages(SAMPLES / SUPPORTED[0]))
    for n, doc in enumerate((VARIED, NORMED)):
        (tmp_path / f"doc{n}.json").write_text(json.dumps(doc))
    for sample in [*SUPPORTED, VARIED, NORMED]:
        page.go(pages(SAMPLES / sample) if isinstance(sample, str)
                else pages(tmp_path / f"doc{(VARIED, NORMED).index(sample)}.json"))
        sweep(page, sample)
        assert (page.errors, page.requests, page.dialogs) == ([], [], []), sample
    strict = VARIED | {"masked_rows": "error", "mask": [[[1, 0, 0, 0]] * 4] * 2}
    (tmp_path / "strict.json").write_text(json.dumps(strict))
    page.go(pages(tmp_path / "strict.json"))
    page.tab.click("#tab-1")
    page.tab.click('td[data-stage="masked"][data-head="1"][data-row="2"][data-col="0"]')
    page.tab.click("#wi-apply")
    assert page.tab.inner_text("#wi-status") == "error: head 1: every key is masked for query 2 (the masked-rows " \
        "policy is error); not applied"
    with pytest.raises(InputError, match="head 1: every key is masked for query 2"):
        edited(problem_of(strict), [{"what": "mask", "h": 1, "i": 2, "j": 0, "value": 0}])
    page.close()


@pytest.mark.parametrize(("sample", "args", "why"), [
    ("tiny_tiles.json", ["--tiles", "2,2"], "the tile tables (--tiles) are not recomputed"),
    ("scooter.json", ["--dtype", "float32"], "it recomputes float64 runs only"),
    ("scooter.json", ["--do", "ones"], "the backward pass (dO) is not recomputed"),
])
def test_a_page_it_cannot_recompute_says_why_in_one_line_and_has_no_controls(tmp_path, sample, args, why):
    path = tmp_path / "page.html"
    result = CliRunner().invoke(app, ["compute", str(SAMPLES / sample), *args, "-o", str(path)])
    assert result.exit_code == 0, result.stderr
    text = path.read_text()
    assert re.search(r'<p class="note" id="wi-why">What-if is not available on this page: ([^<]*)\.</p>', text)[1] \
        .startswith(why) and 'id="wi-form"' not in text


def test_a_stage_it_does_not_know_refuses_the_page(monkeypatch, tmp_path):
    """The what-if reads the stage table: a stage added to it (test_stages.py's throwaway `doubled`)
    is named in the page's one line, never skipped; and every stage it says it recomputes has its
    step in the script."""
    insert(monkeypatch, DOUBLED)
    (tmp_path / "causal.json").write_text(json.dumps(CAUSAL))
    result = CliRunner().invoke(app, ["compute", str(tmp_path / "causal.json"), "-o", str(tmp_path / "page.html")])
    assert result.exit_code == 0, result.stderr
    assert 'id="wi-why">What-if is not available on this page: the stage doubled is not recomputed.' \
        in (tmp_path / "page.html").read_text()
    assert all(f'name === "{name}"' in WHATIF_JS for name in page_whatif.RECOMPUTED)


def test_the_inputs_are_embedded_at_full_precision():
    trace = attend(problem_of("random_4x8.json"))
    found = json.loads(json.dumps(page_whatif.data(trace, 4)))
    for name in "QKV":
        assert (np.array(found[name]) == getattr(trace, name)).all()  # every bit: repr round-trips
    assert found["scale"] == trace.scale and found["stages"] == ["scores", "scaled", "weights", "output"]


@pytest.mark.slow
def test_a_real_layers_what_if_agrees_with_numpy(browser, minilm, tmp_path):  # noqa: F811
    """all-MiniLM-L6-v2's layer 4 (tests/conftest.py: captured once), its page opened without options: its
    views tab finds head 3 for it → scooter and draws its derivation, head view and q·k view; then a key entry of "sc" (scooter's first sub-token) in head 3 typed into the controls changes the weights
    of head 3 only, as numpy computes them (the output's relative error against its terms' size)."""
    path = tmp_path / "minilm.html"
    result = CliRunner().invoke(app, ["compute", str(minilm), "--layer", "4", "-o", str(path)])
    assert result.exit_code == 0, result.stderr
    doc = read_document(str(minilm))
    problem = build_problem(layer_document(doc[0] if isinstance(doc, tuple) else doc, 4))
    page = Opened(browser, path)
    # Issue 28's Done-when on this one page: the views tab's model view finds head 3 for it → scooter,
    # its cell's derivation, the head view and the q·k view; then the what-if below.
    page.tab.click("#tab-views")
    page.tab.wait_for_function("document.body.getAttribute('data-views') === 'ready'", timeout=10_000)
    page.tab.click('#pick-query button:text-is("it")')
    page.tab.click('#pick-key button:text-is("scooter")')
    assert page.tab.eval_on_selector("#model-view button.best", "b => [b.dataset.layer, b.dataset.head]") == ["4", "3"]
    page.tab.click("#model-view button.best")
    assert page.tab.inner_text("#head-title") == "layer 4 · head 3"
    page.tab.click('#head-weights td[data-q="9"][data-k="6"]')
    assert "##oot  = 1.0000 / 1.7895 = 0.5588 (55.9%)" in page.derivation()
    assert page.tab.eval_on_selector_all("#head-view line", "ls => ls.length") == 15 * 15
    bars = page.tab.eval_on_selector_all("#head-qk tr.term", "rs => rs.map(r => +r.dataset.value)")
    assert len(bars) == 32 and f"{sum(bars):.4f}" == "21.0301"
    page.tab.click("#tab-0")
    for name, value in (("what", "K"), ("head", "3"), ("row", "5"), ("col", "0"), ("value", "2.5")):
        (page.tab.select_option if name == "what" else page.tab.fill)(f"#wi-{name}", value)
    page.tab.click("#wi-apply")
    check(page, problem, terms=True)
    heads = page.tab.eval_on_selector_all("td.wi", "cs => [...new Set(cs.map(c => c.dataset.head))]")
    assert heads == ["3"] and (page.errors, page.requests) == ([], [])
    page.close()
