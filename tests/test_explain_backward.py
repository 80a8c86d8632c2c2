"""`--explain` with dO: one row's backward pass, every printed equation adding up."""

import re
from decimal import Decimal

from tests.conftest import SAMPLES, SCOOTER

NUMBER = r"(-?\d+\.\d+)"


def explain(run, *args):
    result = run("compute", *args, "--explain", "-f", "table")
    assert result.exit_code == 0, result.stderr
    return result.stdout


def half_unit(places=4):
    return Decimal(5).scaleb(-places - 1)


def test_scooter_backward_narration(run):
    out = explain(run, SAMPLES / "scooter.json", "--do", "0.5,-2")
    assert "Step B1: d_weights = dO · v" in out
    assert "  scooter:  (0.5)(0.0) + (-2.0)(2.0) = -4.0000" in out
    # Exact carry (the default): every number is the exact gradient rounded, as in the tables
    # (D = -2.55954…, d_scores = -1.10614…), with a note where the printed operands give another.
    assert "  (0.5)(0.2775) + (-2.0)(1.3491) = -2.5595" in out
    assert "  scooter:  0.7679 × (-4.0000 − (-2.5595)) = -1.1061  (0.76791…, -2.55954… unrounded)" in out
    assert "  d_q = [0.4482, -0.4482]" in out
    assert "with exact arithmetic: [0.4482, -0.4482] (the same)" in out


def check_lines_add_up(out):
    """Every B3 line `P × (dP − D) = dS` and every dot-product line holds at 4 decimals."""
    checked = 0
    for line in out.splitlines():
        m = re.search(rf"{NUMBER} × \({NUMBER} − \(?{NUMBER}\)?\) = {NUMBER}$", line)
        if m:
            p, dp, d, ds = map(Decimal, m.groups())
            assert abs(p * (dp - d) - ds) <= half_unit(), line
            checked += 1
        m = re.fullmatch(rf"\s+(?:\S+:\s+)?((?:\({NUMBER}\)\({NUMBER}\)(?: \+ )?)+) = {NUMBER}", line)
        if m and "Step" not in line:
            pairs = re.findall(rf"\({NUMBER}\)\({NUMBER}\)", m.group(1))
            total = sum(Decimal(a) * Decimal(b) for a, b in pairs)
            assert abs(total - Decimal(m.groups()[-1])) <= half_unit(), line
            checked += 1
    return checked


def test_printed_backward_arithmetic_adds_up(run):
    out = explain(run, SAMPLES / "multihead.json", "--do", "0.5,-1,2,0.25; 1,1,-1,0; 0,3,-2,1", "--row", "1")
    assert out.count("Step B4") == 2  # one per head
    assert check_lines_add_up(out) >= 12


def test_masked_keys_and_a_fully_masked_row(run, problem_file):
    doc = {**SCOOTER, "Q": [[0, 4], [1, 1]], "mask": [[True, False, True], [False, False, False]],
           "query_labels": ["a", "b"], "dO": "ones"}
    out = explain(run, problem_file(doc))
    assert "  1: masked, no gradient" in out and "  1: masked → 0" in out
    assert "every key is masked: the weights do not depend on the scores" in out
