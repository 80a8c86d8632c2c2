"""The explorer page in a real browser: Debian's Chromium, headless, driven by playwright (never
`playwright install`: the browser is /usr/bin/chromium). Skipped without it, except in CI (the CI
variable set), where a missing browser fails: .ci/run installs it.

One browser for the worker (conftest's `browser`, shared with the other BROWSER files); small pages. Each page is opened from file://, and every request it
makes other than its own file is recorded (there must be none)."""

import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import SAMPLES, fast_sample
from typer.testing import CliRunner

from attncli.cli import app

HOSTILE = '<img src=x onerror="document.title=\'PWNED\'">'


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """Write a sample's page once: pages("scooter.json", "--do", "ones") -> its path."""
    folder, made = tmp_path_factory.mktemp("pages"), {}

    def write(source, *args, name=None):
        key = (str(source), args)
        if key not in made:
            path = folder / (name or f"{Path(str(source)).stem}{len(made)}.html")
            result = CliRunner().invoke(app, ["compute", str(source), *args, "-o", str(path)])
            assert result.exit_code == 0, result.stderr
            made[key] = path
        return made[key]
    return write


class Opened:
    """A page opened in a fresh tab, with what it asked for over the network and said on its console."""

    def __init__(self, browser, path: Path, scheme: str = "light"):
        self.tab = browser.new_page(viewport={"width": 1280, "height": 900}, color_scheme=scheme)
        self.requests, self.errors, self.dialogs = [], [], []
        self.tab.on("request", lambda r: r.url != self.own and self.requests.append(r.url))
        self.tab.on("console", lambda m: m.type in ("error", "warning") and self.errors.append(m.text))
        self.tab.on("pageerror", lambda e: self.errors.append(str(e)))
        self.tab.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.go(path)

    def go(self, path: Path) -> None:
        """Open `path` in this tab, and wait for its script to have run."""
        self.own = path.resolve().as_uri()
        self.tab.goto(self.own)
        self.tab.wait_for_function("document.body.classList.contains('js')", timeout=10_000)

    def derivation(self) -> str:
        return self.tab.inner_text("#derivation")

    def close(self):
        self.tab.close()


@pytest.fixture
def opened(browser):
    tabs = []

    def open_(path, scheme="light"):
        tabs.append(Opened(browser, path, scheme))
        return tabs[-1]
    yield open_
    for tab in tabs:
        tab.close()


def test_clicking_a_weight_shows_its_softmax(opened, pages):
    page = opened(pages(SAMPLES / "scooter.json"))
    key = page.tab.get_attribute('thead th[data-key="scooter"]', "data-col")
    page.tab.click(f'td[data-stage="weights"][data-row="0"][data-col="{key}"]')
    text = page.derivation()
    assert "16.9188" in text and "22.0321" in text and "0.7679" in text
    assert page.tab.inner_text("#derivation .cur").strip() == "scooter  = 16.9188 / 22.0321 = 0.7679 (76.8%)"
    assert page.requests == [] and page.errors == []


def test_a_score_shows_its_products_and_the_keyboard_moves_between_cells(opened, pages):
    page = opened(pages(SAMPLES / "scooter.json"))
    page.tab.focus('td[data-stage="scores"][data-row="0"][data-col="0"]')
    assert page.tab.eval_on_selector('td[data-stage="scores"][data-col="0"]', "c => c.parentNode.classList.contains('hr')")
    page.tab.keyboard.press("ArrowRight")
    assert page.tab.evaluate("document.activeElement.dataset.col") == "1"
    page.tab.keyboard.press("Enter")
    assert "scooter:  (0.0)(0.0) + (4.0)(1.0) = 4.0000" in page.derivation()
    assert page.tab.eval_on_selector_all("#derivation .bar", "bars => bars.length") == 2
    highlighted = page.tab.eval_on_selector_all('table[data-title^="scores"] .hc', "cells => cells.length")
    assert highlighted >= 1  # the key column, header included


def test_a_long_rows_score_has_a_bar_for_every_product(opened, tmp_path):
    import json

    source, path = tmp_path / "long.json", tmp_path / "long.html"
    q, k = [[0.5] * 9 + [2.0]], [[1.0] * 10, [-1.0] * 10]
    source.write_text(json.dumps({"Q": q, "K": k, "V": [[1.0], [2.0]]}))
    assert CliRunner().invoke(app, ["compute", str(source), "-o", str(path)]).exit_code == 0
    page = opened(path)
    page.tab.click('td[data-stage="scores"][data-row="0"][data-col="1"]')
    assert "(10 terms) = -6.5000" in page.derivation()  # the hand calculation elides the middle …
    rows = page.tab.eval_on_selector_all("#derivation table tr", "rows => rows.map(r => r.innerText)")
    assert len(rows) == 11 and rows[-1].split("\t")[:4] == ["10", "2.0000", "-1.0000", "-2"]  # … the bars do not


def test_tabs_go_through_the_heads(opened, pages):
    page = opened(pages(SAMPLES / "multihead.json", "--do", "ones"))
    tabs = page.tab.eval_on_selector_all("[role=tab]", "tabs => tabs.map(t => t.id)")
    assert tabs[:3] == ["tab-inputs", "tab-0", "tab-1"] and tabs[-1] == "tab-all"
    for tab in tabs:
        page.tab.click(f"#{tab}")
        shown = page.tab.eval_on_selector_all("[role=tabpanel]", "ps => ps.filter(p => !p.hidden).map(p => p.id)")
        assert shown == [tab.replace("tab-", "part-")]
    page.tab.click("#tab-1")
    page.tab.click('td[data-stage="weights"][data-head="1"][data-row="0"][data-col="2"]')
    assert "tea  = 16.9188 / 29.3742 = 0.5760 (57.6%)" in page.derivation()
    page.tab.focus("#tab-1")
    page.tab.keyboard.press("ArrowRight")
    assert page.tab.evaluate("document.activeElement.id") == "tab-all"
    page.tab.click('td[data-stage="final"][data-row="0"][data-col="0"]')
    assert "output0:" in page.derivation()
    assert page.requests == [] and page.errors == []


def _pixels(png: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, pixels as RGB bytes) of an 8-bit, non-interlaced PNG (Chromium's screenshots).
    Rows filtered None, Up or Sub are undone with numpy; Average and Paeth (a few rows) byte by byte."""
    width, height, depth, colour = struct.unpack(">IIBB", png[16:26])
    assert depth == 8 and colour in (2, 6)
    size, chunks, at = (3 if colour == 2 else 4), b"", 8
    while at < len(png):
        length, kind = struct.unpack(">I4s", png[at:at + 8])
        chunks += png[at + 8:at + 8 + length] if kind == b"IDAT" else b""
        at += 12 + length
    raw = np.frombuffer(zlib.decompress(chunks), np.uint8).reshape(height, width * size + 1)
    rows, previous = np.zeros((height, width * size), np.uint8), np.zeros(width * size, np.uint8)
    for y in range(height):
        kind, line = raw[y, 0], raw[y, 1:]
        if kind in (0, 2):
            rows[y] = line + previous if kind == 2 else line  # uint8: modulo 256
        elif kind == 1:
            rows[y] = np.cumsum(line.reshape(width, size), axis=0, dtype=np.uint8).reshape(-1)
        else:
            out, up = bytearray(line.tobytes()), previous.tolist()
            for x in range(len(out)):
                a, b = (out[x - size], up[x]) if x >= size else (0, up[x])
                c = up[x - size] if x >= size else 0
                out[x] = (out[x] + ((a + b) // 2 if kind == 3 else _paeth(a, b, c))) & 255
            rows[y] = np.frombuffer(bytes(out), np.uint8)
        previous = rows[y]
    flat = rows.reshape(height, width, size)[:, :, :3].reshape(-1, 3)
    return width, height, [bytes(pixel) for pixel in flat]


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c


def test_light_and_dark_are_both_drawn(opened, pages):
    shots, strips = {}, {}
    for scheme in ("light", "dark"):
        page = opened(pages(SAMPLES / "scooter.json"), scheme)
        shots[scheme] = page.tab.screenshot()
        # Decoding in Python takes a while: a strip across the title and the header is enough.
        strips[scheme] = _pixels(page.tab.screenshot(clip={"x": 0, "y": 0, "width": 1280, "height": 60}))
    assert [struct.unpack(">II", shot[16:24]) for shot in shots.values()] == [(1280, 900)] * 2
    assert all(len(shot) > 20_000 for shot in shots.values())  # a blank 1280 × 900 PNG is a few KB
    (w1, h1, light), (w2, h2, dark) = strips["light"], strips["dark"]
    assert (w1, h1) == (w2, h2) == (1280, 60)
    corner = 3 * w1 + 3
    assert min(light[corner]) > 230 and max(dark[corner]) < 60  # the background follows the scheme
    assert len(set(light)) > 20 and len(set(dark)) > 20  # text, tables, heat colours: not a blank page
    assert sum(a != b for a, b in zip(light, dark)) > len(light) // 2


def test_a_hostile_label_runs_nothing(opened, problem_file_module):
    page = opened(problem_file_module)
    assert page.tab.title() == HOSTILE and page.dialogs == [] and page.requests == []
    assert page.tab.eval_on_selector_all("img", "imgs => imgs.length") == 0
    page.tab.click('td[data-stage="weights"][data-row="0"][data-col="0"]')
    assert HOSTILE in page.derivation() and page.tab.title() == HOSTILE and page.errors == []


@pytest.fixture
def problem_file_module(tmp_path):
    import json

    source = tmp_path / "hostile.json"
    source.write_text(json.dumps({"Q": [[1, 0]], "K": [[1, 0], [0, 1]], "V": [[1], [2]], "title": HOSTILE,
                                  "query_labels": ["</script><script>alert(1)</script>"],
                                  "key_labels": [HOSTILE, "<b onmouseover=alert(1)>x</b>"]}))
    path = tmp_path / "hostile.html"
    result = CliRunner().invoke(app, ["compute", str(source), "-o", str(path)])
    assert result.exit_code == 0, result.stderr
    return path


# The fast suite opens a sample of the samples' pages (one head, several heads, RoPE, sinks, a window,
# cross-attention); the slow profile every one of them.
SOME_SAMPLES = ("scooter.json", "multihead.json", "rope.json", "sinks.json", "window.json", "cross.json")


@pytest.mark.parametrize("which", fast_sample(["some", "every"], "some"))
def test_every_samples_page_opens_cleanly(opened, pages, which):
    samples = sorted(SAMPLES.glob("*.json")) if which == "every" else [SAMPLES / name for name in SOME_SAMPLES]
    page = opened(pages(samples[0]))
    for sample in samples:  # one tab: each page in turn
        page.go(pages(sample))
        page.tab.click("[role=tabpanel]:not([hidden]) td[data-row]")  # the tab it opens on: the first head's
        assert page.derivation().strip(), sample.name
        assert (page.errors, page.requests, page.dialogs) == ([], [], []), sample.name


def test_a_marked_cell_shows_yours_the_expected_and_the_diagnosis(opened, tmp_path):
    path = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["check", str(SAMPLES / "scooter.json"), "--scores", "0, 4, 2",
                                      "--weights", "0.0159, 0.8668, 0.1173", "-o", str(path)])
    assert result.exit_code == 1, result.stderr
    page = opened(path)
    page.tab.click('td[data-stage="weights"][data-row="0"][data-col="1"]')
    text = page.derivation()
    assert "wrong: yours 0.8668, expected 0.7679" in text and "16.9188" in text
    assert "no_scale: forgot to divide the scores by √d_k" in text
    assert len(text.splitlines()) > 5 and page.errors == [] and page.requests == []


@pytest.mark.slow
def test_a_512_page_opens_and_a_click_explains_its_weight(browser, tmp_path):
    """How fast it opens is measured by benchmarks/page.py (its 512 × 512 row), not asserted here."""
    import json

    rng = np.random.default_rng(0)
    doc = {name: rng.normal(size=(512, 64)).round(3).tolist() for name in ("Q", "K", "V")} | {"mask": "causal"}
    (tmp_path / "big.json").write_text(json.dumps(doc))
    path = tmp_path / "big.html"
    assert CliRunner().invoke(app, ["compute", str(tmp_path / "big.json"), "-o", str(path)]).exit_code == 0
    page = Opened(browser, path)
    page.tab.click('td[data-stage="weights"][data-row="0"][data-col="0"]')
    page.tab.wait_for_function("document.getElementById('derivation').textContent.indexOf('softmax') >= 0")
    assert page.errors == [] and page.requests == []
    page.close()


def test_the_page_opens_on_the_first_head_and_a_link_opens_its_tab(opened, pages):
    path = pages(SAMPLES / "multihead.json")
    page = opened(path)
    shown = "ps => ps.filter(p => !p.hidden).map(p => p.id)"
    assert page.tab.eval_on_selector_all("[role=tabpanel]", shown) == ["part-0"]  # not the inputs
    for link, part in (("#part-1", "part-1"), ("#head-1", "part-1"), ("#inputs", "part-inputs"), ("#part-0", "part-0"),
                       ("#all", "part-all")):
        page.tab.goto(path.resolve().as_uri() + link)
        page.tab.wait_for_function("document.body.classList.contains('js')")
        assert page.tab.eval_on_selector_all("[role=tabpanel]", shown) == [part], link
    assert page.requests == [] and page.errors == []


def test_the_title_is_shown_once_and_the_empty_panel_takes_no_room(opened, pages):
    page = opened(pages(SAMPLES / "multihead.json"))
    title = "Two-head self-attention with projections"
    assert page.tab.inner_text("h1") == title and title not in page.tab.inner_text("pre.header")
    assert not page.tab.is_visible("#derivation")
    assert page.tab.evaluate("getComputedStyle(document.body).marginRight") == "0px"
    page.tab.click('td[data-stage="weights"][data-head="0"][data-row="1"][data-col="2"]')
    assert page.tab.is_visible("#derivation") and "softmax" in page.derivation()


def test_at_800_pixels_the_derivation_and_its_cell_are_both_in_view(browser, pages):
    page = Opened(browser, pages(SAMPLES / "multihead.json"))
    page.tab.set_viewport_size({"width": 800, "height": 900})
    cell = 'td[data-stage="weights"][data-head="0"][data-row="1"][data-col="2"]'
    page.tab.click(cell)
    panel = page.tab.eval_on_selector("#derivation", "p => p.getBoundingClientRect().toJSON()")
    box = page.tab.eval_on_selector(cell, "c => c.getBoundingClientRect().toJSON()")
    assert 0 <= panel["top"] < 900 and panel["bottom"] <= 900 + 1 and "softmax" in page.derivation()
    assert 0 <= box["top"] and box["bottom"] <= panel["top"]  # the cell clicked is not under the panel
    page.close()


def test_a_real_layers_page_opens_without_options(browser, tmp_path):
    """A layer of a small BERT-sized model (12 heads, 15 tokens projected from 384 numbers: 37,164 numbers over
    every stage) opens on its weights, at once, and says what it left out."""
    import json

    rng = np.random.default_rng(0)
    tokens = ["[CLS]", "the", "mechanic", "fixed", "the", "sc", "##oot", "##er", "because", "it", "was", "leaking",
              "petrol", ".", "[SEP]"]
    doc = {"X": rng.normal(size=(15, 384)).round(3).tolist(), "heads": 12, "scale": 0.17677669529663687,
           "query_labels": tokens, "key_labels": tokens}
    doc |= {w: (rng.normal(size=(384, 384)) / 20).round(4).tolist() for w in ("W_Q", "W_K", "W_V", "W_O")}
    (tmp_path / "layer.json").write_text(json.dumps(doc))
    path = tmp_path / "layer.html"
    result = CliRunner().invoke(app, ["compute", str(tmp_path / "layer.json"), "-o", str(path)])
    assert result.exit_code == 0, result.stderr
    page = Opened(browser, path)
    text = page.tab.inner_text("body")
    assert "this page shows weights alone" in text and "--stages inputs,scores,scaled,output,weights" in text
    assert page.tab.eval_on_selector_all("[role=tabpanel]", "ps => ps.filter(p => !p.hidden).map(p => p.id)") == \
        ["part-0"]
    page.tab.goto(path.resolve().as_uri() + "#head-3")
    page.tab.wait_for_function("document.body.classList.contains('js')")
    page.tab.click('td[data-stage="weights"][data-head="3"][data-row="9"][data-col="6"]')
    assert "attn compute" in page.derivation() and "--row" in page.derivation()  # names the command
    assert page.requests == [] and page.errors == []
    page.close()


@pytest.mark.slow
def test_the_minilm_layers_page_opens_on_its_weights(browser, minilm, tmp_path):
    """all-MiniLM-L6-v2's layer 4 on the scooter sentence (tests/conftest.py: captured once): the page opens
    without options, on the weights, "it" row's ##oot cell of head 3 at 0.5588 (how fast it opens and its size are
    measured by benchmarks/page.py, not asserted here)."""
    path = tmp_path / "minilm.html"
    result = CliRunner().invoke(app, ["compute", str(minilm), "--layer", "4", "-o", str(path)])
    assert result.exit_code == 0, result.stderr
    assert path.stat().st_size < 20_000_000
    page = Opened(browser, path)
    page.tab.goto(path.resolve().as_uri() + "#head-3")
    page.tab.wait_for_function("document.body.classList.contains('js')")
    cell = 'td[data-stage="weights"][data-head="3"][data-row="9"][data-col="6"]'
    assert page.tab.inner_text(cell) == "0.5588"
    assert page.tab.inner_text('th[data-row="9"]') == "it"
    page.tab.click(cell)
    assert "--explain" in page.derivation()
    assert page.requests == [] and page.errors == []
    page.close()


def test_a_class_page_lays_out_beside_the_panel_at_1280_pixels(opened, tmp_path, monkeypatch):
    """Issue 29: the class summary's notes column ran under the derivation panel. Its tables now
    wrap their words and fit beside the panel (file names as a teacher types them); a table still
    too wide (long paths) scrolls in its own box, never under the panel."""
    folder = Path(__file__).parent / "classes" / "causal"
    monkeypatch.chdir(folder)
    for name, files in (("short.html", sorted(p.name for p in folder.iterdir() if p.name[:2].isdigit())),
                        ("long.html", sorted(str(p) for p in folder.iterdir() if p.name[:2].isdigit()))):
        path = tmp_path / name
        result = CliRunner().invoke(app, ["check", *files, "-p", "problem.json", "--lenient-json", "-o", str(path)])
        assert result.exit_code == 1, result.stderr  # some answers differ (an empty file among them)
        page = opened(path)
        page.tab.evaluate("document.body.classList.add('open')")  # the panel as it is once a number is clicked
        boxes = page.tab.evaluate("""() => {
          const panel = document.getElementById('derivation').getBoundingClientRect().left;
          return Array.from(document.querySelectorAll('section:not([hidden]) .wide')).map(box => ({
            right: box.getBoundingClientRect().right, panel: panel, fits: box.scrollWidth <= box.clientWidth}));
        }""")
        assert len(boxes) == 3  # the class, the cells per stage, the diagnoses
        assert all(box["right"] <= box["panel"] for box in boxes), boxes
        assert name == "long.html" or all(box["fits"] for box in boxes), boxes
        assert page.errors == [] and page.requests == []


def _views_ready(page) -> None:
    page.tab.wait_for_function("document.body.getAttribute('data-views') === 'ready'", timeout=10_000)


VISIBLE_LINES = "ls => ls.filter(l => getComputedStyle(l).display !== 'none').length"


def test_the_model_view_finds_the_head_and_opens_it(opened, tmp_path):
    """Two made-up layers of two heads (tests/test_page_views.py's): choosing it and scooter ranks the heads
    as numpy's weights say (summed over sc ##oot ##er); a thumbnail opens its head; a weight's derivation,
    computed in the page, agrees with attncli's; the head view and the q·k view draw what they say."""
    import json

    from tests.test_heads import softmax_weights
    from tests.test_page_views import layer, two_layers

    source, path = tmp_path / "layers.json", tmp_path / "layers.html"
    source.write_text(json.dumps(two_layers()))
    assert CliRunner().invoke(app, ["compute", str(source), "-o", str(path)]).exit_code == 0
    page = opened(path)
    _views_ready(page)
    assert page.tab.eval_on_selector_all("#model-view canvas", "cs => cs.length") == 4
    page.tab.click('#pick-query button:text-is("it")')
    page.tab.click('#pick-key button:text-is("scooter")')
    expected = sorted((-softmax_weights(layer(n), h)[9, 5:8].sum(), n, h) for n in range(2) for h in range(2))
    best = page.tab.eval_on_selector("#model-view button.best", "b => [b.dataset.layer, b.dataset.head]")
    assert best == [str(expected[0][1]), str(expected[0][2])]
    ranked = page.tab.eval_on_selector_all("#ranked button", "bs => bs.map(b => b.innerText)")
    assert ranked[0] == f"1. layer {expected[0][1]} head {expected[0][2]}: {-expected[0][0]:.4f}" and len(ranked) == 4
    page.tab.click(f'#model-view button[data-layer="{expected[0][1]}"][data-head="{expected[0][2]}"]')
    assert page.tab.evaluate("location.hash") == f"#layer-{expected[0][1]}-head-{expected[0][2]}"
    assert page.tab.inner_text("#head-title") == f"layer {expected[0][1]} · head {expected[0][2]}"
    cell = '#head-weights td[data-q="9"][data-k="6"]'
    page.tab.click(cell)
    said = page.tab.eval_on_selector("#derivation .agree", "p => [+p.dataset.page, +p.dataset.attncli]")
    assert abs(said[0] - said[1]) < 1e-12 and said[1] == pytest.approx(
        softmax_weights(layer(expected[0][1]), expected[0][2])[9, 6], abs=1e-15)
    assert page.tab.inner_text("#derivation .cur:last-of-type").startswith("##oot  = ")
    assert page.tab.inner_text(cell) in page.derivation()
    lines = "#head-view line"
    assert page.tab.eval_on_selector_all(lines, "ls => ls.length") == 15 * 15  # no mask: every pair
    page.tab.hover('#head-view text[data-q="9"]')
    assert page.tab.eval_on_selector_all(lines, VISIBLE_LINES) == 15
    page.tab.focus('#head-view text[data-k="2"]')
    assert page.tab.eval_on_selector_all(lines, VISIBLE_LINES) == 15
    bars = page.tab.eval_on_selector_all("#head-qk tr.term", "rs => rs.map(r => +r.dataset.value)")
    score = float(page.tab.get_attribute("#head-qk .qk-sum", "data-score"))
    assert len(bars) == 4 and abs(sum(bars) - score) < 1e-12  # d_k = 4: a bar per dimension
    assert f"sum = score = {score:.4f}" in page.tab.inner_text("#head-qk .qk-sum")
    page.tab.click('#head-view text[data-k="5"]')  # a key token clicked: its word, scooter, unchosen
    assert page.tab.eval_on_selector_all("#pick-key [aria-pressed=true]", "bs => bs.length") == 0
    page.tab.click('#head-view text[data-k="6"]')  # chosen again, by its middle sub-token
    assert page.tab.inner_text("#pick-key [aria-pressed=true]") == "scooter"
    page.tab.goto(path.resolve().as_uri() + "#layer-0-head-1")
    _views_ready(page)
    assert page.tab.inner_text("#head-title") == "layer 0 · head 1"
    assert page.requests == [] and page.errors == []


@pytest.mark.slow
def test_the_minilm_layers_page_finds_layer_4_head_3_for_it_and_scooter(opened, minilm, tmp_path):
    """Issue 28's Done-when, on all-MiniLM-L6-v2's 6 layers of the scooter sentence: the page opens without
    options, the model view finds layer 4 head 3 for it → scooter (summed over sc ##oot ##er, as the model's own
    weights rank it: tests/test_heads.py), clicking its cell shows the derivation, the head view and the q·k
    view render."""
    from tests.test_heads import model_ranking

    path = tmp_path / "minilm.html"
    result = CliRunner().invoke(app, ["compute", str(minilm), "-o", str(path)])
    assert result.exit_code == 0, result.stderr
    assert path.stat().st_size < 20_000_000
    page = opened(path)
    _views_ready(page)
    assert page.tab.eval_on_selector_all("#model-view canvas", "cs => cs.length") == 6 * 12
    page.tab.click('#pick-query button:text-is("it")')
    page.tab.click('#pick-key button:text-is("scooter")')
    ranked = page.tab.eval_on_selector_all("#ranked button", "bs => bs.map(b => [+b.dataset.layer, +b.dataset.head])")
    assert [tuple(r) for r in ranked[:3]] == model_ranking(minilm, 9, [5, 6, 7])[:3] == [(4, 3), (5, 7), (5, 10)]
    page.tab.click("#model-view button.best")
    assert page.tab.inner_text("#head-title") == "layer 4 · head 3"
    page.tab.click('#head-weights td[data-q="9"][data-k="6"]')
    text = page.derivation()
    assert "##oot  = 1.0000 / 1.7895 = 0.5588 (55.9%)" in text and "softmax" in text
    said = page.tab.eval_on_selector("#derivation .agree", "p => [+p.dataset.page, +p.dataset.attncli]")
    assert abs(said[0] - said[1]) < 1e-12
    assert page.tab.eval_on_selector_all("#head-view line", "ls => ls.length") == 15 * 15
    bars = page.tab.eval_on_selector_all("#head-qk tr.term", "rs => rs.map(r => +r.dataset.value)")
    score = float(page.tab.get_attribute("#head-qk .qk-sum", "data-score"))
    assert len(bars) == 32 and f"{sum(bars):.4f}" == f"{score:.4f}" == "21.0301"
    assert page.requests == [] and page.errors == []


@pytest.mark.slow
def test_the_smollm2_page_groups_the_rotated_products_in_frequency_bands(opened, smollm2, tmp_path):
    """SmolLM2's 30 layers (RoPE, 9 query heads on 3 kv heads, causal): --query and --key open the best head
    as `attn heads` ranks it; the q·k view has a bar per rotation pair, in bands, summing to the score."""
    import json

    path = tmp_path / "smollm2.html"
    result = CliRunner().invoke(app, ["compute", str(smollm2), "--query", "it", "--key", "scooter", "-o", str(path)])
    assert result.exit_code == 0, result.stderr
    heads = CliRunner().invoke(app, ["heads", str(smollm2), "--query", "it", "--key", "scooter", "-f", "json"])
    rows = json.loads(heads.stdout)
    page = opened(path)
    _views_ready(page)
    ranked = page.tab.eval_on_selector_all("#ranked button", "bs => bs.map(b => [+b.dataset.layer, +b.dataset.head])")
    assert [tuple(r) for r in ranked[:3]] == [(r["layer"], r["head"]) for r in rows[:3]]
    assert page.tab.inner_text("#head-title").startswith(f"layer {rows[0]['layer']} · head {rows[0]['head']} (K of kv")
    bars = page.tab.eval_on_selector_all("#head-qk tr.term", "rs => rs.map(r => +r.dataset.value)")
    score = float(page.tab.get_attribute("#head-qk .qk-sum", "data-score"))
    assert len(bars) == 32 and abs(sum(bars) - score) < 1e-9 * max(1.0, abs(score))  # 64 dims: 32 pairs
    assert page.tab.eval_on_selector_all("#head-qk tr.band", "rs => rs.length") == 4
    lines = page.tab.eval_on_selector_all("#head-view line", "ls => ls.length")
    assert lines == 12 * 13 // 2  # causal: each query's keys up to itself
    assert page.requests == [] and page.errors == []


def test_a_captured_layers_views_tab_opens_from_a_link_and_keeps_head_links(opened, tmp_path):
    """One captured layer's tables page has the views as its first tab: #layer-2-head-1 opens it on that head
    (a thumbnail's click too), #head-1 still opens head 1's tables."""
    import json

    from tests.test_page_views import captured_layer

    source, path = tmp_path / "one.json", tmp_path / "one.html"
    source.write_text(json.dumps(captured_layer(2)))
    assert CliRunner().invoke(app, ["compute", str(source), "-o", str(path)]).exit_code == 0
    shown = "ps => ps.filter(p => !p.hidden).map(p => p.id)"
    page = opened(path)
    assert page.tab.eval_on_selector_all("[role=tabpanel]", shown) == ["part-0"]  # the weights, as before
    page.tab.click("#tab-views")
    page.tab.click('#model-view button[data-head="1"]')
    assert page.tab.eval_on_selector_all("[role=tabpanel]", shown) == ["part-views"]
    assert page.tab.inner_text("#head-title") == "layer 2 · head 1"
    for link, part in (("#head-1", "part-1"), ("#layer-2-head-0", "part-views")):
        page.tab.goto(path.resolve().as_uri() + link)
        _views_ready(page)
        assert page.tab.eval_on_selector_all("[role=tabpanel]", shown) == [part], link
    assert page.tab.inner_text("#head-title") == "layer 2 · head 0"
    assert page.requests == [] and page.errors == []


def test_masked_pairs_have_no_line_and_a_fully_masked_row_says_why(opened, tmp_path):
    import json

    rng = np.random.default_rng(0)
    doc = {name: rng.normal(size=(3, 4)).tolist() for name in ("Q", "K", "V")} | {
        "heads": 2, "mask": [[True, True, True], [False, False, False], [True, False, True]]}
    labels = [HOSTILE, "</script><script>alert(1)</script>", "<b onmouseover=alert(1)>x</b>"]
    source, path = tmp_path / "masked.json", tmp_path / "masked.html"
    source.write_text(json.dumps({"layers": [doc, doc], "title": HOSTILE, "query_labels": labels, "key_labels": labels}))
    assert CliRunner().invoke(app, ["compute", str(source), "-o", str(path)]).exit_code == 0
    page = opened(path)
    _views_ready(page)
    assert page.tab.eval_on_selector_all("#head-view line", "ls => ls.length") == 3 + 0 + 2
    assert page.tab.eval_on_selector_all("#head-weights td.x", "cs => cs.length") == 4
    page.tab.click('#head-weights td[data-q="1"][data-k="1"]')
    assert "every key of this row is masked" in page.derivation()
    page.tab.click('#head-weights td[data-q="2"][data-k="2"]')
    said = page.tab.eval_on_selector("#derivation .agree", "p => [+p.dataset.page, +p.dataset.attncli]")
    assert abs(said[0] - said[1]) < 1e-12 and "e^(−∞ − " in page.derivation()
    page.tab.hover('#head-view text[data-q="2"]')
    page.tab.click(f'#pick-key button:text-is("{labels[2]}")')  # hostile labels: text in every view, nothing runs
    assert page.tab.title() == HOSTILE and HOSTILE in page.derivation() and page.dialogs == []
    assert page.tab.eval_on_selector_all("img, b", "es => es.length") == 0
    assert page.requests == [] and page.errors == []


def _layers_page(tmp_path, doc: dict, *args, name: str = "layers") -> Path:
    import json

    source, path = tmp_path / f"{name}.json", tmp_path / f"{name}.html"
    source.write_text(json.dumps(doc))
    result = CliRunner().invoke(app, ["compute", str(source), *args, "-o", str(path)])
    assert result.exit_code == 0, result.stderr
    return path


def test_opening_another_head_clears_the_derivation_and_back_reopens_the_first(opened, tmp_path):
    """Issue 28's trial: the derivation kept the previous head's cell when a thumbnail, a ranked head or a
    link opened another; going back to the page's own address (no #…) did not reopen its head. The
    derivation's command names the file, shell-quoted (it was `attn compute FILE`)."""
    import shlex

    from tests.test_page_views import two_layers

    path = _layers_page(tmp_path, two_layers(), name="it's")
    page = opened(path)
    _views_ready(page)
    assert page.tab.inner_text("#head-title") == "layer 0 · head 0"
    page.tab.click('#head-weights td[data-q="9"][data-k="6"]')
    said = page.derivation()
    quoted = shlex.quote(str(tmp_path / "it's.json"))
    assert "layer 0 · head 0" in said and f"run attn compute {quoted} --layer 0" in said
    page.tab.click('#model-view button[data-layer="0"][data-head="0"]')  # the head open already: its cell stays
    assert page.derivation() == said and page.tab.evaluate("location.hash") == "#layer-0-head-0"
    page.tab.go_back()  # to the page's own address, which opens the same head: nothing changes
    page.tab.wait_for_function("location.hash === ''", timeout=5_000)
    title = page.tab.evaluate("""() => {  // the click and the heading read in one task: no hashchange between
        document.querySelector('#model-view button[data-layer="1"][data-head="1"]').click();
        return document.getElementById("head-title").textContent; }""")
    assert title == "layer 1 · head 1"  # opened at once (it opened on the hashchange: a race with this check)
    assert page.tab.evaluate("document.body.classList.contains('open')") is False
    assert page.tab.inner_text("#derivation").strip() == ""
    page.tab.go_back()
    page.tab.wait_for_function("document.getElementById('head-title').textContent === 'layer 0 · head 0'",
                               timeout=5_000)
    assert page.tab.evaluate("location.hash") == "" and page.errors == []


def test_the_pages_ranking_is_attn_heads_for_picked_keys_and_sub_tokens(opened, tmp_path):
    """Issue 28's trial: --key scooter,petrol ranked by scooter alone and --key '##oot' by the whole word;
    the page ranks every head as `attn heads -f json` does (the keys summed; a sub-token itself)."""
    import json

    from tests.test_page_views import two_layers

    source = tmp_path / "layers.json"
    source.write_text(json.dumps(two_layers()))
    for n, key in enumerate(("scooter,petrol", "##oot")):
        path = _layers_page(tmp_path, two_layers(), "--query", "it", "--key", key, name=f"k{n}")
        heads = json.loads(CliRunner().invoke(app, ["heads", str(source), "--query", "it", "--key", key,
                                                    "-f", "json"]).stdout)
        page = opened(path)
        _views_ready(page)
        ranked = page.tab.eval_on_selector_all("#ranked button", "bs => bs.map(b => b.innerText)")
        assert ranked == [f"{i + 1}. layer {r['layer']} head {r['head']}: {r['weight']:.4f}"
                          for i, r in enumerate(heads)], key


def test_the_derivation_names_each_stage_and_the_views_say_signs_by_position(opened, tmp_path):
    """A softcapped, causal layer: the derivation names the softcap stage by its title (not "masked"), and
    says nothing of a later stage where none changed the weight; a fully masked row has no undefined
    e^(−∞ − −∞); minus is "−" throughout; q·k bars grow from a zero axis, left when negative; a long
    label is shortened with its full text in a <title>, inside the head view."""
    import re

    rng = np.random.default_rng(1)
    long = "x" * 60
    labels = ["a", long, "c", "d"]
    plain = {name: rng.normal(size=(4, 8)).tolist() for name in ("Q", "K", "V")} | {"heads": 2, "mask": "causal"}
    capped = plain | {"softcap": 1.5}
    doc = {"layers": [plain, capped], "query_labels": labels, "key_labels": labels}
    page = opened(_layers_page(tmp_path, doc))
    _views_ready(page)
    page.tab.click('#head-weights td[data-q="2"][data-k="1"]')
    said = page.tab.inner_text("#derivation pre")  # the steps (the note's command holds the file's name)
    assert "then" not in said and not re.search(r"-\d", said)  # layer 0: the mask changed nothing kept
    page.tab.click('#model-view button[data-layer="1"][data-head="0"]')
    page.tab.click('#head-weights td[data-q="2"][data-k="1"]')
    said = page.tab.inner_text("#derivation pre")
    assert "then capped = 1.5 · tanh(scaled / 1.5)" in said and not re.search(r"-\d", said)
    placed = page.tab.eval_on_selector_all("#head-qk tr.term", """rs => rs.map(r => {
        const bar = r.querySelector("rect.bar"), axis = +r.querySelector("line.axis").getAttribute("x1");
        return [+r.dataset.value, +bar.getAttribute("x"), +bar.getAttribute("width"), axis]; })""")
    assert any(v < 0 for v, *_ in placed) and any(v > 0 for v, *_ in placed)
    for value, x, width, axis in placed:
        assert (x + width == pytest.approx(axis, abs=0.01)) if value < 0 else x == pytest.approx(axis, abs=0.01)
    shown = page.tab.eval_on_selector('#head-view text[data-q="1"]', """t => [t.firstChild.textContent,
        t.querySelector("title").textContent, t.getBBox().x, t.ownerSVGElement.getBBox().x]""")
    assert shown[0].endswith("…") and len(shown[0]) < 40 and shown[1] == long and shown[2] >= 0
    assert page.errors == []


def test_a_fully_masked_rows_derivation_has_no_undefined_expression(opened, tmp_path):
    mask = [[True, True, True], [False, False, False], [True, False, True]]
    doc = {name: np.eye(3, 4).tolist() for name in ("Q", "K", "V")} | {"mask": mask}
    page = opened(_layers_page(tmp_path, {"layers": [doc, doc]}))
    _views_ready(page)
    page.tab.click('#head-weights td[data-q="1"][data-k="1"]')
    said = page.derivation()
    assert "no visible key" in said and "masked_rows" in said and "−∞ − −∞" not in said


def test_in_print_the_weights_table_fits_and_in_the_dark_masked_is_dim(browser, tmp_path):
    from tests.test_page_views import two_layers

    path = _layers_page(tmp_path, two_layers())
    tab = browser.new_page(viewport={"width": 560, "height": 900})
    try:
        tab.goto(path.resolve().as_uri())
        tab.wait_for_function("document.body.getAttribute('data-views') === 'ready'", timeout=10_000)
        tab.emulate_media(media="print")
        right, room = tab.evaluate("""[document.querySelector('#head-weights table').getBoundingClientRect().right,
            document.getElementById('head-weights').getBoundingClientRect().right]""")
        assert right <= room + 1
    finally:
        tab.close()
    masked = {name: np.zeros((3, 4)).tolist() for name in ("Q", "K", "V")} | {"mask": "causal"}  # rows even
    path = _layers_page(tmp_path, {"layers": [masked, masked]}, name="dark")
    tab = browser.new_page(color_scheme="dark")
    try:
        tab.goto(path.resolve().as_uri())
        tab.wait_for_function("document.body.getAttribute('data-views') === 'ready'", timeout=10_000)
        pixels = tab.evaluate("""(() => { const c = document.querySelector('#model-view canvas');
            const d = c.getContext('2d').getImageData(0, 0, 3, 3).data, out = [];
            for (let p = 0; p < 9; p++) out.push(d[4 * p] + d[4 * p + 1] + d[4 * p + 2]);
            return out; })()""")
        assert pixels[2] < pixels[3]  # row 0, key 2: masked, dimmer than row 1's weight 0.5
        assert "brighter on a dark one" in tab.inner_text("#views")
    finally:
        tab.close()
