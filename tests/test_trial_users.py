"""What a trial of merged main as its users would use it found (issues 18-20): the page's
derivations follow --carry as --explain does; a NaN or Infinity in a document names the key it
stands in."""

import json
import re

import numpy as np
import pytest
from conftest import SAMPLES, assert_error


def data_block(text: str) -> dict:
    return json.loads(re.search(r'<script type="application/json" id="attn-data">(.*?)</script>', text, re.S)[1])


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
    page = tmp_path / "page.html"
    assert run("compute", SAMPLES / "scooter.json", "--precision", "2", "-o", page).exit_code == 0
    lines = data_block(page.read_text())["rows"]["0"]["lines"]
    assert any(line.startswith("  0.05 × [2.0, 0.0] = [0.09, 0.00]") for line in lines)


@pytest.mark.parametrize("text, where, token", [
    ('{"Q": [[0, 4]], "K": [[1, 0]], "V": [[1]], "kv_heads": NaN}', "kv_heads", "NaN"),
    ('{"Q": [[0, 4]], "K": [[1, 0]], "V": [[1]], "rope": {"scaling": {"rope_type": "linear", "factor": Infinity}}}',
     "rope.scaling.factor", "Infinity"),
    ('{"Q": [[0, 4]], "K": [[1, 0], [0, -Infinity]], "V": [[1], [2]]}', "K[1][1]", "-Infinity"),
    ('{"Q": [[0, 4]], "K": [[1, 0]], "V": [[1]], "q_norm": {"type": "rms", "weight": [1, 1], "eps": 1e999}}',
     "q_norm.eps", "1e999"),
])
def test_a_nan_or_infinity_names_its_key(run, problem_file, text, where, token):
    result = run("compute", problem_file(text), "--stages", "weights")
    assert_error(result, "p.json: ", f"invalid JSON at {where}: ", token)


def test_a_nan_in_an_answer_file_names_its_stage(run, problem_file):
    answers = problem_file('{"weights": [[0.05, NaN, 0.19]]}', "answers.json")
    result = run("check", answers, SAMPLES / "scooter.json")
    assert_error(result, "answers.json: invalid JSON at weights[0][1]: NaN is not valid JSON")


def test_the_teachers_class_exits_as_its_guide_says(run, tmp_path, monkeypatch):
    """docs/howto/teachers.md's class (Cy's file is not JSON) exits 2, as its sentence says, and
    writes its marks page."""
    guide = (SAMPLES.parent / "docs" / "howto" / "teachers.md").read_text(encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    for name, text in re.findall(r"<!-- file: (answers/\w+\.json) -->\n```json\n(.*?)```", guide, re.S):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    key = run("exercise", "--seed", "5", "--queries", "2", "--keys", "3", "--answers")
    (tmp_path / "key.json").write_text(key.stdout, encoding="utf-8")
    files = sorted(str(path.relative_to(tmp_path)) for path in (tmp_path / "answers").iterdir())
    result = run("check", *files, "--problem", "key.json", "-o", "report.html")
    said = re.search(r"Expecting property name enclosed in double quotes[^\n]*\n```\n\nThe exit code is (\d)", guide)
    assert said and result.exit_code == int(said[1]) == 2, (said, result.exit_code)
    assert "answers/bob.json" in (tmp_path / "report.html").read_text(encoding="utf-8")


def test_the_docs_name_only_sections_the_readme_has():
    """The README is a front door now: a page under docs/ that sends the reader to a README
    section by name ("the README's "Guarantees"") names one that is still there."""
    root = SAMPLES.parent
    headings = {line.lstrip("#").strip() for line in (root / "README.md").read_text(encoding="utf-8").splitlines()
                if line.startswith("#")}
    named = [(path.name, name) for path in sorted((root / "docs").rglob("*.md"))
             for name in re.findall(r"README(?:'s|’s)? \"([^\"]+)\"", path.read_text(encoding="utf-8"))]
    assert [(page, name) for page, name in named if name not in headings] == []


def test_the_memory_guard_counts_each_threads_block(run, problem_file, monkeypatch, tmp_path):
    """--threads 64 on the output-only path: 8 blocks of 8 queries × 4,096 keys (256 KiB each), so 8
    workers hold 2 MiB of scores where one holds 256 KiB. With 1 MiB free the guard refuses it
    before computing, naming the threads' blocks and --threads 1, which fits."""
    from attncli.compute import limits

    path = problem_file(np.savez(tmp_path / "p.npz", Q=np.ones((64, 2)), K=np.ones((4096, 2)), V=np.ones((4096, 1)))
                        or (tmp_path / "p.npz").read_bytes(), "p.npz")
    out = tmp_path / "out.npy"
    monkeypatch.setattr(limits, "available_bytes", lambda: 1 << 20)
    result = run("compute", path, "--output", out, "--threads", "64")
    assert_error(result, "this problem would need", "8 threads' blocks (1 × 8 × 4096 each) 2.0 MiB", "--threads 1")
    assert not out.exists()
    assert run("compute", path, "--output", out, "--threads", "1").exit_code == 0


def test_the_command_a_page_names_for_a_row_carries_as_the_page_does(run, tmp_path):
    """A row past the page's budget names the command that explains it: with the page's
    precision and carry, so that its lines are the ones the page would have shown."""
    page = tmp_path / "page.html"
    run("compute", SAMPLES / "scooter.json", "--explain", "--carry", "rounded", "--precision", "2", "-o", page)
    assert data_block(page.read_text())["command"].endswith("scooter.json --precision 2 --carry rounded")
    run("compute", SAMPLES / "scooter.json", "-o", page)
    assert data_block(page.read_text())["command"].endswith("scooter.json")
