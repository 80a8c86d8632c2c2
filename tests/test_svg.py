"""The weights as SVG (render/svg.py): `attn compute FILE -o heat.svg` and `--format svg`. Valid XML in SVG's
namespace, every label escaped (hostile ones included), masked cells crossed, one image for a grid of heads, and
a screenshot in Chromium compared with a reference picture (tests/fixtures/pictures/; ATTN_UPDATE_PICTURES=1
rewrites it after a change made on purpose, to be looked at before it is committed)."""

import os
import xml.etree.ElementTree as ET
from pathlib import Path

from conftest import SAMPLES, assert_error

SVG = "{http://www.w3.org/2000/svg}"
REFERENCE = Path(__file__).parent / "fixtures" / "pictures" / "causal_svg.png"
HOSTILE = ['</text><script>alert(1)</script>', 'a"b&c', "<!--", "]]>", "\x1b[31mred"]


def parsed(text: str) -> ET.Element:
    root = ET.fromstring(text)
    assert root.tag == f"{SVG}svg"
    return root


def test_one_svg_for_every_head_with_labels_and_a_scale(run, tmp_path):
    text = run("compute", SAMPLES / "multihead.json", "--format", "svg").stdout
    root = parsed(text)
    heads = [g for g in root.iter(f"{SVG}g") if g.get("class") == "head"]
    assert [g.get("data-head") for g in heads] == ["0", "1"]
    words = [t.text for t in root.iter(f"{SVG}text")]
    assert words.count("tea") == 4 and "weight" in words and "1.0" in words  # queries and keys, per head; the scale
    path = tmp_path / "heat.svg"
    assert run("compute", SAMPLES / "multihead.json", "-o", path).exit_code == 0
    assert path.read_text(encoding="utf-8") == text
    one = parsed(run("compute", SAMPLES / "multihead.json", "--format", "svg", "--head", "1").stdout)
    assert [g.get("data-head") for g in one.iter(f"{SVG}g") if g.get("class") == "head"] == ["1"]


def test_masked_cells_are_crossed(run):
    root = parsed(run("compute", SAMPLES / "causal.json", "--format", "svg").stdout)
    crossed = [p for p in root.iter(f"{SVG}path") if p.get("class") == "masked"]
    assert len(crossed) == sum(range(4))  # causal over 4 tokens: 3 + 2 + 1 keys hidden
    only_output = parsed(run("compute", SAMPLES / "causal.json", "--stages", "output", "--format", "svg").stdout)
    assert len([p for p in only_output.iter(f"{SVG}path") if p.get("class") == "masked"]) == 6  # weights computed


def test_every_label_is_escaped(run, problem_file):
    labels = HOSTILE + ["ok"]
    path = problem_file({"Q": [[1, 0]] * 6, "K": [[0, 1]] * 6, "V": [[1, 1]] * 6, "query_labels": labels,
                         "key_labels": labels, "title": "<svg onload=alert(1)>"})
    text = run("compute", path, "--format", "svg").stdout
    root = parsed(text)
    assert not any(e.tag.endswith("script") for e in root.iter()) and "\x1b" not in text
    assert "<script>" not in text and "<svg onload" not in text
    words = {t.text for t in root.iter(f"{SVG}text")}
    assert {'</text><script>alert(1)</script>', 'a"b&c', "<!--", "]]>", "\\u001b[31mred"} <= words


def test_a_big_problem_is_elided_keeping_the_picked_query(run, problem_file):
    n = 100
    path = problem_file({"Q": [[i % 7, 1] for i in range(n)], "K": [[1, j % 5] for j in range(n)],
                         "V": [[1, 0]] * n})
    root = parsed(run("compute", path, "--format", "svg", "--query", "#50").stdout)
    queries = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "query"]
    assert "50" in queries and "⋮" in queries and len(queries) < 70
    assert len(parsed(run("compute", path, "--format", "svg", "--full").stdout).findall(f".//{SVG}rect")) > n * n
    assert_error(run("compute", path, "--format", "svg", "--tiles", "2,2"), "--tiles")


def test_the_picture_looks_as_it_did(tmp_path, browser):
    from test_page_browser import _pixels
    from typer.testing import CliRunner

    from attncli.cli import app

    svg = tmp_path / "causal.svg"
    assert CliRunner().invoke(app, ["compute", str(SAMPLES / "causal.json"), "-o", str(svg)]).exit_code == 0
    tab = browser.new_page(viewport={"width": 620, "height": 260})
    tab.goto(svg.as_uri())
    shot = tab.screenshot()
    tab.close()
    if os.environ.get("ATTN_UPDATE_PICTURES"):
        REFERENCE.write_bytes(shot)
    width, height, pixels = _pixels(shot)
    ref_width, ref_height, reference = _pixels(REFERENCE.read_bytes())
    assert (width, height) == (ref_width, ref_height)
    differ = sum(a != b for a, b in zip(pixels, reference))
    assert differ <= 0.01 * len(pixels), f"{differ} of {len(pixels)} pixels differ from {REFERENCE.name}"
