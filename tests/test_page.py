"""The explorer page without a browser: the file is self-contained, every value cell carries the
pinned attributes and the number the terminal prints, the derivations are `--explain`'s lines,
user text is escaped, the policy allows only the page's own script and style, and a page too big
to open is refused before anything is written. tests/test_page_browser.py drives it in Chromium."""

import base64
import hashlib
import json
import re
from html.parser import HTMLParser

import numpy as np
import pytest
from conftest import SAMPLES, assert_error

from attncli import api
from attncli.compute.attention import attend
from attncli.document.reading import build_problem
from attncli.render import page as page_module
from attncli.render.explain import explain
from attncli.render.page import MAX_CELLS, script_json
from attncli.render.page_assets import CSS, JS
from attncli.render.text import number
from tests.conftest import SCOOTER
from tests.test_render_tables import GRADIENT_TITLES, backward_problem

HOSTILE = ['<img src=x onerror="document.title=\'PWNED\'">', "</script><script>document.title='PWNED'</script>",
           "a&amp;b"]


class Cells(HTMLParser):
    """Value cells (td with data-row) as (attributes, text); row and column headers; script blocks."""

    def __init__(self):
        super().__init__()
        self.cells, self.headers, self.scripts, self.tags = [], [], [], []
        self._open = None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag in ("td", "th", "script"):
            self._open = (tag, dict(attrs), [])

    def handle_data(self, data):
        if self._open:
            self._open[2].append(data)

    def handle_endtag(self, tag):
        if self._open and self._open[0] == tag:
            kind, attrs, text = self._open
            {"td": self.cells, "th": self.headers, "script": self.scripts}[kind].append((attrs, "".join(text)))
            self._open = None


def parsed(text: str) -> Cells:
    cells = Cells()
    cells.feed(text)
    return cells


def data_block(text: str) -> dict:
    return json.loads(re.search(r'<script type="application/json" id="attn-data">(.*?)</script>', text, re.S)[1])


@pytest.fixture(scope="module")
def scooter_page(tmp_path_factory):
    from typer.testing import CliRunner

    from attncli.cli import app

    path = tmp_path_factory.mktemp("page") / "scooter.html"
    result = CliRunner().invoke(app, ["compute", str(SAMPLES / "scooter.json"), "-o", str(path)])
    assert result.exit_code == 0, result.stderr
    return path.read_text(encoding="utf-8")


def test_the_suffix_and_the_format_write_the_same_page(run, tmp_path, scooter_page):
    result = run("compute", SAMPLES / "scooter.json", "--format", "html")
    assert result.exit_code == 0 and result.stdout == scooter_page
    assert scooter_page.startswith("<!DOCTYPE html>") and scooter_page.rstrip().endswith("</html>")
    assert_error(run("compute", SAMPLES / "scooter.json", "--format", "json", "-o", tmp_path / "p.html"),
                 "is written as html, but --format is json")


def test_the_page_loads_nothing(scooter_page):
    tags = parsed(scooter_page).tags
    assert not re.search(r"https?:|//[a-z]", scooter_page.replace("http-equiv", ""))
    assert not [t for t, attrs in tags if t in ("link", "img", "iframe", "object", "embed") or "src" in attrs]
    assert [t for t, _ in tags].count("script") == 2 and [t for t, _ in tags].count("style") == 1


def test_the_policy_allows_the_pages_own_script_and_style_only(scooter_page):
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', scooter_page)[1]
    digest = lambda text: base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()  # noqa: E731
    assert f"script-src 'sha256-{digest(JS)}'" in policy and f"style-src 'sha256-{digest(CSS)}'" in policy
    assert "default-src 'none'" in policy and "unsafe" not in policy
    assert f"<script>{JS}</script>" in scooter_page and f"<style>{CSS}</style>" in scooter_page


def test_every_value_cell_is_pinned_and_shows_the_terminals_number(scooter_page):
    trace = api.attend(**{k: v for k, v in json.loads((SAMPLES / "scooter.json").read_text()).items()
                          if k in api.input_keys()})
    cells = [(attrs, text) for attrs, text in parsed(scooter_page).cells if "data-row" in attrs]
    assert cells and all({"data-stage", "data-head", "data-row", "data-col"} <= set(attrs) for attrs, _ in cells)
    stages = {attrs["data-stage"] for attrs, _ in cells}
    assert {"Q", "K", "V", "scores", "scaled", "weights", "output", "sum", "lse"} <= stages
    for attrs, text in cells:
        if attrs["data-stage"] in ("scores", "scaled", "weights", "output"):
            value = trace.stage(attrs["data-stage"])[int(attrs["data-head"]), int(attrs["data-row"]), int(attrs["data-col"])]
            assert text == number(value, 4)
    headers = parsed(scooter_page).headers
    assert ({"data-row": "0", "data-query": "it"}, "it") in headers
    assert ({"data-col": "1", "data-key": "scooter"}, "scooter") in headers


def test_the_derivations_are_the_explain_commands_lines(run, scooter_page):
    data = data_block(scooter_page)
    explained = run("compute", SAMPLES / "scooter.json", "--explain", "--row", "#0").stdout.splitlines()
    row = data["rows"]["0"]
    start = explained.index(row["lines"][0])
    assert explained[start:start + len(row["lines"])] == row["lines"]
    first, end = row["heads"]["0"]["steps"]["weights"]
    assert row["lines"][first] == "Step 3: softmax"
    assert "  scooter  = 16.9188 / 22.0321 = 0.7679 (76.8%)" in row["lines"][first:end]
    first, end = row["heads"]["0"]["steps"]["scores"]
    assert row["lines"][first:end] == ["Step 1: raw scores, q · k", "  mechanic: (0.0)(1.0) + (4.0)(0.0) = 0.0000",
                                       "  scooter:  (0.0)(0.0) + (4.0)(1.0) = 4.0000",
                                       "  petrol:   (0.0)(0.5) + (4.0)(0.5) = 2.0000"]


@pytest.mark.parametrize("sample, args", [("multihead.json", ("--do", "ones")), ("rope.json", ()),
                                          ("window.json", ()), ("sinks.json", ())])
def test_every_row_of_a_sample_is_explained_as_explain_explains_it(run, tmp_path, sample, args):
    path = tmp_path / "p.html"
    assert run("compute", SAMPLES / sample, *args, "-o", path).exit_code == 0
    data = data_block(path.read_text(encoding="utf-8"))
    doc = json.loads((SAMPLES / sample).read_text())
    rows = len(doc.get("query_labels") or doc.get("Q") or doc.get("X"))
    assert sorted(data["rows"], key=int) == [str(i) for i in range(rows)]
    for i in (0, rows - 1):
        explained = run("compute", SAMPLES / sample, *args, "--explain", "--row", f"#{i}").stdout.splitlines()
        lines = data["rows"][str(i)]["lines"]
        assert "\n".join(lines) in "\n".join(explained)
        for part in data["rows"][str(i)]["heads"].values():
            assert set(part["steps"]) >= {"scores", "weights", "output"}
            assert all(lines[start].startswith(("Step", "Backward")) for start, _ in part["steps"].values())


def test_user_text_stays_text(run, problem_file):
    path = problem_file({"Q": [[1, 0]], "K": [[1, 0], [0, 1]], "V": [[1], [2]], "title": HOSTILE[0],
                         "description": HOSTILE[1], "query_labels": [HOSTILE[1]], "key_labels": HOSTILE[:2]},
                        name='x<b>"&.json')
    result = run("compute", path, "--format", "html")
    assert result.exit_code == 0, result.stderr
    text = result.stdout
    parts = parsed(text)
    assert [t for t, _ in parts.tags].count("script") == 2 and "img" not in [t for t, _ in parts.tags]
    assert "<img" not in text and "</script><script>document" not in text
    assert "&lt;img src=x onerror=&quot;document.title=&#x27;PWNED&#x27;&quot;&gt;" in text
    assert ({"data-col": "0", "data-key": HOSTILE[0]}, HOSTILE[0]) in parts.headers  # shown as written
    data = data_block(text)
    assert data["command"].startswith("attn compute '") and data["command"].endswith("""x<b>"&.json'""")  # quoted for the shell
    block = text.split('id="attn-data">')[1].split("</script>")[0]
    assert "<" not in block and ">" not in block and "&" not in block


def test_script_json_escapes_what_could_end_the_element():
    assert script_json({"a": "</script><!--&"}) == '{"a":"\\u003c/script\\u003e\\u003c!--\\u0026"}'
    assert json.loads(script_json({"a": "</script><!--&"})) == {"a": "</script><!--&"}


def test_masked_cells_are_marked(run, tmp_path):
    path = tmp_path / "causal.html"
    assert run("compute", SAMPLES / "causal.json", "-o", path).exit_code == 0
    cells = [(a, t) for a, t in parsed(path.read_text(encoding="utf-8")).cells if "data-row" in a]
    masked = {(a["data-stage"], a["data-row"], a["data-col"]) for a, _ in cells if a.get("class") == "x"}
    assert ("weights", "0", "1") in masked and ("masked", "0", "1") in masked and ("weights", "1", "0") not in masked
    assert not any(s in ("scores", "output", "Q") for s, _, _ in masked)


def test_a_page_too_big_is_refused_before_writing(run, problem_file, tmp_path):
    rng = np.random.default_rng(0)
    side = int((MAX_CELLS / 3) ** 0.5) + 4  # scores, scaled and weights: just past the cap
    doc = {name: rng.normal(size=(side, 2)).round(2).tolist() for name in ("Q", "K", "V")}
    target = tmp_path / "big.html"
    result = run("compute", problem_file(doc), "--full", "--stages", "scores,scaled,weights", "-o", target)
    assert_error(result, f"a page holds at most {MAX_CELLS:,}", "drop --full")
    assert not target.exists()
    small = run("compute", problem_file(doc), "--stages", "scores,scaled,weights", "-o", target)
    assert small.exit_code == 0 and "⋯" in target.read_text(encoding="utf-8")


def test_the_tiles_page_has_each_tiles_tables_and_each_rows_walk(run, tmp_path):
    path = tmp_path / "tiles.html"
    assert run("compute", SAMPLES / "tiny_tiles.json", "--tiles", "2,2", "-o", path).exit_code == 0
    text = path.read_text(encoding="utf-8")
    data = data_block(text)
    tiles = [a for a, _ in parsed(text).cells if a.get("data-stage") == "tiles"]
    assert {a["data-tile"] for a in tiles} >= {"1", "2"}
    walk = run("compute", SAMPLES / "tiny_tiles.json", "--tiles", "2,2", "--explain", "--row", "#1").stdout
    assert "\n".join(data["tiles"]["0:1"]) in walk


def test_the_notebook_shows_the_pages_tables_without_script():
    trace = api.attend(Q=[[0, 4]], K=[[1, 0], [0, 1], [0.5, 0.5]], V=[[2, 0], [0, 2], [1, -1]])
    html = api.view(trace)._repr_html_()
    assert "<script" not in html and 'data-stage="weights"' in html and ">0.7679<" in html
    tables, _ = page_module.collect(trace, ("inputs", "scores", "scaled", "weights", "output"))
    assert all(part in html for _, part in tables.parts)


def test_a_learners_marks_page(run, tmp_path):
    path = tmp_path / "report.html"
    result = run("check", SAMPLES / "scooter.json", "--weights", "0.0454, 0.70, 0.2", "-o", path)
    assert result.exit_code == 1 and result.stdout == ""
    text = path.read_text(encoding="utf-8")
    assert text == run("check", SAMPLES / "scooter.json", "--weights", "0.0454, 0.70, 0.2", "--format", "html").stdout
    cells = {a["data-col"]: (a, t) for a, t in parsed(text).cells if a.get("data-stage") == "weights"}
    assert [cells[c][0]["class"] for c in "012"] == ["mk-correct", "mk-wrong", "mk-imprecise"]
    assert cells["1"][1] == "0.70 ✗ 0.7679" and cells["1"][0]["data-mark"].startswith("wrong: yours 0.70, expected 0.7679")
    assert "  scooter  = 16.9188 / 22.0321 = 0.7679 (76.8%)" in data_block(text)["rows"]["0"]["lines"]
    assert "score: 1/3 right\n" in text


def test_a_class_page_has_the_summary_and_a_section_per_file(run, tmp_path, problem_file):
    good = problem_file({"weights": [[0.0454, 0.7679, 0.1867]]}, name="good.json")
    odd = problem_file({"weights": [[0.2, 0.5, 0.3]]}, name="<i>odd&.json")
    path = tmp_path / "class.html"
    result = run("check", good, odd, "--problem", SAMPLES / "scooter.json", "-o", path)
    assert result.exit_code == 1, result.stderr
    text = path.read_text(encoding="utf-8")
    assert ">class summary<" in text and ">cells per stage<" in text and "<i>" not in text
    tabs = [t for t, a in parsed(text).tags if t == "button"]
    assert len(tabs) == 3 and "&lt;i&gt;odd&amp;.json" in text
    # each student's tab shows their file's name (escaped); its id stays ours
    assert '>good.json</button>' in text and '>&lt;i&gt;odd&amp;.json</button>' in text and 'id="tab-file-2"' in text
    assert_error(run("check", good, "--problem", SAMPLES / "scooter.json", "-o", tmp_path / "m.json"),
                 "writes a file only as the marks page (.html)")
    assert_error(run("check", good, "--problem", SAMPLES / "scooter.json", "-f", "csv", "-o", path),
                 "is written as html, but --format is csv")


CAUSAL_DO = {"Q": [[1, 0], [0, 1], [1, 1], [0.5, -1]], "K": [[1, 0], [0, 1], [1, 1], [0.5, -1]],
             "V": [[1, 0], [0, 1], [1, 1], [2, -1]], "mask": "causal", "dO": [[1, 0], [0, 1], [1, 1], [0.5, -1]]}


CELL = re.compile(r'<td(?: class="([a-z0-9]+)")? data-stage="([^"]*)" data-head="[^"]*" data-row="(\d+)" '
                  r'data-col="(\d+)"[^>]*>([^<]*)</td>')


def _page(run, tmp_path, doc) -> list[tuple[str, str, int, int, str]]:
    """The value cells of `doc`'s page: (class, stage, row, column, text)."""
    source, target = tmp_path / "p.json", tmp_path / "p.html"
    source.write_text(json.dumps(doc), encoding="utf-8")
    result = run("compute", source, "-o", target)
    assert result.exit_code == 0, result.stderr
    return [(c, s, int(i), int(j), t) for c, s, i, j, t in CELL.findall(target.read_text(encoding="utf-8"))]


def test_the_gradients_of_hidden_keys_are_marked_masked_on_the_page(run, tmp_path):
    """Mutation: the masked mark only on the stages from `masked` on, not the gradients: d_weights
    and d_scores of a hidden key (0) show as an ordinary 0."""
    cells = _page(run, tmp_path, CAUSAL_DO)
    for stage in ("weights", "d_weights", "d_scores"):
        marked = {(i, j) for c, s, i, j, _ in cells if s == stage and c == "x"}
        assert marked == {(i, j) for i in range(4) for j in range(4) if j > i}, stage


def test_negative_cells_take_the_second_colour(run, tmp_path):
    """Mutation: the heat class's sign test flipped (`finite > 0` for the `n` classes), so positive
    numbers are coloured as negative ones."""
    cells = _page(run, tmp_path, CAUSAL_DO)
    coloured = [(c, float(t.replace("−", "-"))) for c, s, _, _, t in cells if c and c != "x"]
    assert any(v < 0 for _, v in coloured) and any(v > 0 for _, v in coloured)
    assert all(c.startswith("n") == (v < 0) for c, v in coloured)


def test_a_row_without_a_final_section_has_no_final_span():
    """Mutation: `cut` finds a final section whenever there are more starts than heads, which the
    end-of-lines sentinel always gives: a one-head problem's row gets an empty final span."""
    from attncli.render.page_derive import cut

    trace = attend(build_problem(SCOOTER))
    lines = explain(trace, [0], None, 4, "exact")
    assert cut(trace, lines)["final"] is None
    rng = np.random.default_rng(0)
    two = {"Q": rng.normal(size=(2, 2, 2)).tolist(), "K": rng.normal(size=(2, 2, 2)).tolist(),
           "V": rng.normal(size=(2, 2, 2)).tolist(), "W_O": rng.normal(size=(4, 3)).tolist()}
    trace = attend(build_problem(two))
    lines = explain(trace, [0], None, 4, "exact")
    start, end = cut(trace, lines)["final"]
    assert start < end == len(lines)


def test_the_first_row_is_derived_even_past_the_budget(monkeypatch):
    """Mutation: the budget check drops `and found["rows"]`, so a problem whose one row costs more
    than the budget gets no derivation at all rather than its first."""
    from attncli.render import page_derive

    trace = attend(build_problem(SCOOTER))
    monkeypatch.setattr(page_derive, "BUDGET", page_derive.row_cost(trace) - 1)
    found = page_derive.derivations(trace, [0], 4)
    assert list(found["rows"]) == ["0"] and found["missing"] == []


def test_the_page_derives_with_the_carry_explain_uses(run, tmp_path):
    """`--explain --carry rounded -o page.html`: a click shows the rounded carry's lines (0.05 ×
    [2.0, 0.0] = [0.10, 0.00]), the same as the explanation printed above the tables, not the
    exact carry's (0.09)."""
    page = tmp_path / "page.html"
    result = run("compute", SAMPLES / "scooter.json", "--explain", "--carry", "rounded", "--precision", "2",
                 "-o", page)
    assert result.exit_code == 0, result.stderr
    explained = run("compute", SAMPLES / "scooter.json", "--explain", "--carry", "rounded", "--precision", "2",
                    "--format", "table").stdout
    lines = data_block(page.read_text())["rows"]["0"]["lines"]
    assert "  0.05 × [2.0, 0.0] = [0.10, 0.00]" in lines
    assert all(line in explained for line in lines if line.strip())


def test_the_page_without_explain_derives_exactly(run, tmp_path):
    """Found by a trial of merged main as its users would use it (issues 18-20): without --explain the
    page's derivations carry exactly, as --explain does by default."""
    page = tmp_path / "page.html"
    assert run("compute", SAMPLES / "scooter.json", "--precision", "2", "-o", page).exit_code == 0
    lines = data_block(page.read_text())["rows"]["0"]["lines"]
    assert any(line.startswith("  0.05 × [2.0, 0.0] = [0.09, 0.00]") for line in lines)


def test_the_command_a_page_names_for_a_row_carries_as_the_page_does(run, tmp_path):
    """A row past the page's budget names the command that explains it: with the page's
    precision and carry, so that its lines are the ones the page would have shown."""
    page = tmp_path / "page.html"
    run("compute", SAMPLES / "scooter.json", "--explain", "--carry", "rounded", "--precision", "2", "-o", page)
    assert data_block(page.read_text())["command"].endswith("scooter.json --precision 2 --carry rounded")
    run("compute", SAMPLES / "scooter.json", "-o", page)
    assert data_block(page.read_text())["command"].endswith("scooter.json")


@pytest.mark.parametrize("sample, without, d_Q, d_K", GRADIENT_TITLES)
def test_the_pages_gradient_tables_are_titled_by_what_the_scores_read(run, sample, without, d_Q, d_K):
    page = run("compute", "-", "--stages", "d_Q,d_K", "-f", "html",
               input=json.dumps(backward_problem(sample, without))).stdout
    titles = re.findall(r"<h2>(d_[QK] = [^<]*)</h2>", page)
    assert titles and {title.split(" · head")[0] for title in titles} == {d_Q, d_K}


def test_a_class_pages_table_is_the_terminals_with_carried_cells_and_stages_answered(run, tmp_path, problem_file):
    rounded = problem_file({"weights": [0.0, 0.8, 0.2], "output": [0.3, 1.3]}, name="rounded.json")
    carried = problem_file({"scaled": [0, 2.8, 1.4], "weights": [0.0465, 0.7649, 0.1886]}, name="carried.json")
    path = tmp_path / "class.html"
    run("check", rounded, carried, "--problem", SAMPLES / "scooter.json", "-o", path)
    table = path.read_text(encoding="utf-8").split(">class summary<")[1].split("</table>")[0]
    header = re.findall(r"<th>([^<]*)</th>", table)
    assert header[:4] == ["file", "score", "%", "answered"]
    row = re.findall(r"<td[^>]*>([^<]*)</td>", table.split("carried.json")[1].split("</tr>")[0])
    terminal = run("check", rounded, carried, "--problem", SAMPLES / "scooter.json", "-f", "table").stdout
    shown = [c.strip() for c in next(line for line in terminal.splitlines() if "carried.json" in line).split("│")[2:-1]]
    assert row[:len(shown)] == shown and "3/3 ↪3" in row


def test_heat_classes_are_made_for_the_shown_cells_alone_by_the_whole_tables_largest():
    """Issue 24 item 15: a 4000 × 4000 table made 16 million class strings for the 1,024 cells a
    page shows (48 s, 4.8 GB for a 352 KB page); the classes still scale by the whole table's
    largest finite magnitude, wherever it is."""
    rng = np.random.default_rng(0)
    matrix = rng.normal(size=(300, 300))
    matrix[150, 150] = -40.0  # the largest magnitude, in the elided middle: every shown cell is pale
    matrix[0, 1] = -np.inf
    rows, cols = [0, 1, 299], [0, 1, 2, 299]
    levels = page_module._levels(matrix, "scores", rows, cols)
    assert set(levels) == set(rows) and all(set(levels[i]) == set(cols) for i in rows)
    for i in rows:
        for j in cols:
            value = matrix[i, j] if np.isfinite(matrix[i, j]) else 0.0
            level = min(9, int(np.rint(abs(value) / 40 * 9)))
            assert levels[i][j] == ("" if level == 0 else ("n" if value < 0 else "p") + str(level))
    assert page_module._levels(np.array([[0.5, 1.0]]), "weights", [0], [0, 1]) == {0: {0: "p4", 1: "p9"}}


def test_a_first_row_far_past_the_budget_is_named_not_derived(monkeypatch):
    from attncli.compute.attention import attend
    from attncli.document.reading import build_problem
    from attncli.render import page_derive

    trace = attend(build_problem({"X": np.eye(4).tolist(), "W_Q": np.eye(4).tolist(), "W_K": np.eye(4).tolist(),
                                  "W_V": np.eye(4).tolist(), "heads": 2}))
    assert page_derive.row_cost(trace) == 2 * (4 * (2 + 2) * (1 + 4) + 2 * 4)  # projections: products of width 4
    monkeypatch.setattr(page_derive, "BUDGET", 1)
    monkeypatch.setattr(page_derive, "FIRST_MOST", page_derive.row_cost(trace))
    assert list(page_derive.derivations(trace, [0, 1], 4)["rows"]) == ["0"]  # the first, past the budget
    monkeypatch.setattr(page_derive, "FIRST_MOST", page_derive.row_cost(trace) - 1)
    found = page_derive.derivations(trace, [0, 1], 4)
    assert found["rows"] == {} and found["missing"] == [0, 1]


def test_picked_rows_are_explained_first_and_the_title_is_not_repeated(run, tmp_path, monkeypatch):
    from attncli.render import page_derive

    path = tmp_path / "p.html"
    doc = tmp_path / "p.json"
    rng = np.random.default_rng(1)
    doc.write_text(json.dumps({"title": "My title", "Q": rng.normal(size=(6, 2)).tolist(),
                               "K": rng.normal(size=(6, 2)).tolist(), "V": rng.normal(size=(6, 2)).tolist(),
                               "query_labels": list("abcdef")}))
    monkeypatch.setattr(page_derive, "BUDGET", 1)  # one row only: the first asked for
    assert run("compute", doc, "--query", "e", "-o", path).exit_code == 0
    text = path.read_text(encoding="utf-8")
    data = json.loads(re.search(r'id="attn-data">(.*?)</script>', text).group(1))
    assert list(data["rows"]) == ["4"] and "Rows 0–3, 5 are not explained" in text
    assert text.count("My title") == 2  # <title> and <h1>, not the header again
