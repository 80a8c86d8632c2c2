"""Tables rendered on a fixed-width, colourless console: exact text."""

import io

import numpy as np
import pytest
from rich.console import Console

from attncli.compute.attention import attend
from attncli.document.loading import read_document
from attncli.document.reading import build_problem
from attncli.render.tables import render
from attncli.render.text import number
from tests.conftest import SAMPLES, SCOOTER

ALL = ("inputs", "scores", "scaled", "masked", "weights", "output")


def rendered(doc, stages=ALL, width=100, precision=4):
    console = Console(file=io.StringIO(), width=width or 1000, color_system=None)
    render(attend(build_problem(doc)), console, stages, precision, width)
    return "\n".join(line.rstrip() for line in console.file.getvalue().splitlines())


def test_scooter_weights_and_output_exactly():
    doc, _ = read_document(str(SAMPLES / "scooter.json"))
    assert rendered(doc, ("scaled", "weights", "output")) == """\
attn · softmax(Q Kᵀ · scale + bias) V
The mechanic fixed the scooter because it was leaking petrol.
Which word does "it" attend to? One query, three keys, d_k = 2.
Q 1×2 · K 3×2 · V 3×2 · 1 head · d_k = 2 · d_v = 2 · float64
scale = 1/√d_k = 1/√2 = 0.7071
mask: none
rows are queries, columns are keys

scaled = scores · 0.7071 (1/√2)
╭────┬──────────┬─────────┬────────╮
│    │ mechanic │ scooter │ petrol │
├────┼──────────┼─────────┼────────┤
│ it │   0.0000 │  2.8284 │ 1.4142 │
╰────┴──────────┴─────────┴────────╯

weights = softmax(scaled) over keys
╭────┬──────────┬─────────┬────────┬────────┬────────╮
│    │ mechanic │ scooter │ petrol │    sum │    lse │
├────┼──────────┼─────────┼────────┼────────┼────────┤
│ it │   0.0454 │  0.7679 │ 0.1867 │ 1.0000 │ 3.0925 │
╰────┴──────────┴─────────┴────────┴────────┴────────╯

output = weights V
╭────┬────────┬────────╮
│    │      0 │      1 │
├────┼────────┼────────┤
│ it │ 0.2775 │ 1.3491 │
╰────┴────────┴────────╯
"""


def test_masked_stage_shows_minus_infinity_and_states_conventions():
    doc, _ = read_document(str(SAMPLES / "causal.json"))
    text = rendered(doc, ("masked",))
    assert "mask: causal: query i may attend key j when k_pos[j] ≤ q_pos[i] (top-left" in text
    assert "rows with every key masked: weights and output 0 (as PyTorch SDPA)" in text
    assert "│ the  │ 0.7071 │      −∞ │      −∞ │     −∞ │" in text


def _wide_problem():
    rng = np.random.default_rng(1)
    return {"Q": rng.normal(size=(2, 3)).round(3).tolist(), "K": rng.normal(size=(12, 3)).round(3).tolist(),
            "V": rng.normal(size=(12, 2)).round(3).tolist()}


def test_narrow_console_splits_columns_into_ranges_and_never_cuts_numbers():
    # 12 columns (at most MAX_COLUMNS): split into column ranges on a narrow console, never elided.
    text = rendered(_wide_problem(), ("weights",), width=60)
    assert "weights = softmax(scaled) over keys (columns 0–" in text and "middle elided" not in text
    assert "⋯" not in text and "…" not in text and all(len(line) <= 60 for line in text.splitlines())
    cells = [c.strip() for line in text.splitlines() if line.startswith("│   ") for c in line.split("│")[2:-1]]
    assert cells.count("sum") == 1 and [str(j) for j in range(12)] == [c for c in cells if c.isdigit()]


def test_full_splits_wide_tables_into_column_ranges():
    console = Console(file=io.StringIO(), width=60, color_system=None)
    render(attend(build_problem(_wide_problem())), console, ("weights",), 4, 60, full=True)
    text = console.file.getvalue()
    assert "weights = softmax(scaled) over keys (columns 0–" in text and "⋯" not in text
    assert all(len(line.rstrip()) <= 60 for line in text.splitlines())
    cells = [c.strip() for line in text.splitlines() if line.startswith("│   ") for c in line.split("│")[2:-1]]
    assert cells.count("sum") == 1 and "11" in cells  # every column shown once


def test_big_stages_are_elided_without_building_every_cell(monkeypatch):
    import attncli.render.tables as tables

    calls = []
    monkeypatch.setattr(tables, "number", lambda x, p: calls.append(1) or f"{x:.{p}f}")
    rng = np.random.default_rng(0)
    doc = {name: rng.normal(size=(512, 64)) for name in "QKV"}
    text = rendered(doc, ("scores", "weights"), width=None)
    assert "scores = Q Kᵀ (512×512, middle elided: --full shows all)" in text
    assert "│ ⋮   │" in text and len(calls) < 1000  # not 262,144


def test_precision_and_negative_zero():
    assert number(-0.00001, 4) == "0.0000"
    assert number(-np.inf, 4) == "−∞"  # U+2212
    assert number(2.0 / 3, 2) == "0.67"
    assert number(1.5e300, 2) == "1.50e+300"
    assert "0.045388" in rendered(SCOOTER, ("weights",), precision=6)


def test_multihead_titles_name_heads_and_final_output():
    doc, _ = read_document(str(SAMPLES / "multihead.json"))
    text = rendered(doc, ("inputs", "output"))
    for title in ("X 3×4", "W_O 4×4", "Q · head 0", "V · head 1", "output = weights V · head 1",
                  "concat = heads side by side", "output = concat W_O (final)"):
        assert title in text, title
    assert "projections: Q = X W_Q, W is (d_in × d_out)" in text


def test_a_long_explanation_line_folds_between_terms_on_a_terminal():
    # At 80 columns the terminal broke "sum =" from "22.032079"; the line now folds between the
    # e^x terms and before its note, the continuation indented under the step.
    from attncli.render.explain import explain

    trace = attend(build_problem(SCOOTER))
    for precision, expected in [
        (4, ["  e^0.0000 = 1.0000   e^2.8284 = 16.9188   e^1.4142 = 4.1133   sum = 22.0321",
             "    (2.82842…, 1.41421… unrounded)"]),
        (6, ["  e^0.000000 = 1.000000   e^2.828427 = 16.918829   e^1.414214 = 4.113250",
             "    sum = 22.032079  (2.8284271…, 1.4142135… unrounded)"]),
    ]:
        console = Console(file=io.StringIO(), width=80, color_system=None)
        render(trace, console, (), precision, 80, explain(trace, [0], [0], precision, "exact"))
        lines = [line.rstrip() for line in console.file.getvalue().splitlines()]
        start = lines.index("Step 3: softmax") + 1
        assert lines[start:start + 2] == expected
        assert max(map(len, lines)) <= 80
    wide = Console(file=io.StringIO(), width=1000, color_system=None)
    render(trace, wide, (), 4, None, explain(trace, [0], [0], 4, "exact"))  # a pipe: nothing folds
    assert "sum = 22.0321  (2.82842…, 1.41421… unrounded)" in wide.file.getvalue()


# d_Q's and d_K's titles for a problem whose scores are by K_rope, K_normed (grads.title): every view says them.
GRADIENT_TITLES = [
    ("rope.json", (), "d_Q = scale · d_scores K_rope, rotated back (RoPE⁻¹)",
     "d_K = scale · d_scoresᵀ Q_rope, rotated back (RoPE⁻¹)"),
    ("qk_norm.json", (), "d_Q = scale · d_scores K_rope, rotated back (RoPE⁻¹), back through q_norm",
     "d_K = scale · d_scoresᵀ Q_rope, rotated back (RoPE⁻¹), back through k_norm"),
    ("qk_norm.json", ("rope",), "d_Q = scale · d_scores K_normed, back through q_norm",
     "d_K = scale · d_scoresᵀ Q_normed, back through k_norm"),
]


def backward_problem(sample: str, without=()) -> dict:
    """A sample with dO = ones (and without the keys `without`)."""
    doc, _ = read_document(str(SAMPLES / sample))
    return {key: value for key, value in doc.items() if key not in without} | {"dO": "ones"}


@pytest.mark.parametrize("sample, without, d_Q, d_K", GRADIENT_TITLES)
def test_the_gradient_tables_are_titled_by_what_the_scores_read(sample, without, d_Q, d_K):
    doc = backward_problem(sample, without)
    text = rendered(doc, ("d_Q", "d_K"), width=300)
    titles = [line for line in text.splitlines() if line.startswith(("d_Q", "d_K"))]
    heads = build_problem(doc).heads
    heads = [f" · head {h}" for h in range(heads)] if heads > 1 else [""]
    assert titles == [title + head for head in heads for title in (d_Q, d_K)]
