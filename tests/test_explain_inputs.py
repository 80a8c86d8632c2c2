"""`--explain` writes the problem's given numbers as given, in both carries: a pocket-calculator
carry rounds the results of steps, never the data the user typed (docs/reference/explain.md's "Given numbers are
written as given"; carry.given)."""

import re
from decimal import Decimal

import pytest

from attncli.compute.attention import attend
from attncli.document.reading import build_problem
from attncli.render.explain import explain
from tests.conftest import SAMPLES
from tests.test_explain import NOTE, NUM, TERM, assert_rounded_carry, check_equations, holds

SCOOTER_K = [[1, 0], [0, 1], [0.5, 0.5]]
V3 = [[2, 0], [0, 2], [1, -1]]

# (command-line arguments, q, K, V, the scale as written or None for 1/√d_k); the user trial's two
# reproductions, and the textbook's scooter
CASES = {
    "a key of .25, .75": (["--q", "0,4", "--k", "1,0; 0,1; .25,.75", "--v", "2,0; 0,2; 1,-1"],
                          [0, 4], [[1, 0], [0, 1], [0.25, 0.75]], V3, None),
    "keys of 2.5 and 3.5, scale 1": (["--q", "1,0", "--k", "2.5,0; 3.5,0", "--v", "1;2", "--scale", "1"],
                                     [1, 0], [[2.5, 0], [3.5, 0]], [[1], [2]], "1.0"),
    "scooter": ([str(SAMPLES / "scooter.json")], [0, 4], SCOOTER_K, V3, None),
}


def exactly(values) -> list[Decimal]:
    return [Decimal(repr(float(x))) for x in values]


def numbers(text: str) -> list[Decimal]:
    return [Decimal(x) for x in text.split(", ")]


def step(lines: list[str], title: str) -> list[str]:
    """The lines of the step whose header contains `title`, up to the next step."""
    start = next(i for i, line in enumerate(lines) if line.startswith("Step") and title in line)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("Step")), len(lines))
    return lines[start + 1:end]


def assert_equations(lines: list[str], carry: str) -> dict:
    """Rounded carry: every printed equation holds but a logit's read unrounded, which says so;
    exact carry: every one that does not says why."""
    results, kinds = check_equations(lines)
    if carry == "rounded":
        assert_rounded_carry(lines, results)
    else:
        assert [line for line, ok in results if not ok and not NOTE.search(line)] == []
    return kinds


@pytest.mark.parametrize("carry", ["exact", "rounded"])
@pytest.mark.parametrize("precision", [0, 1, 2, 4])
@pytest.mark.parametrize("case", list(CASES))
def test_the_given_q_k_and_v_are_printed_and_used_as_given(run, case, precision, carry):
    args, q, K, V, scale = CASES[case]
    result = run("compute", *args, "--explain", "--precision", str(precision), "--carry", carry)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    header = next(line for line in lines if line.startswith("Query"))
    assert numbers(re.search(r"q = \[(.*)\]$", header)[1]) == exactly(q)
    scores = step(lines, "raw scores")
    assert len(scores) == len(K)
    for j, line in enumerate(scores):
        m = re.fullmatch(rf"\s+\S+:\s+((?:\({NUM}\)\({NUM}\)(?: \+ )?)+) = ({NUM})", line)
        assert m, line
        terms = [(Decimal(a), Decimal(b)) for a, b in TERM.findall(m[1])]
        assert terms == list(zip(exactly(q), exactly(K[j]))), line  # the given operands, not rounded ones
        # so the score printed is the real score rounded, in either carry: the trial's 3.2 was 3.0
        assert holds(m[2], sum((Decimal(repr(float(a))) * Decimal(repr(float(b))) for a, b in zip(q, K[j])),
                               Decimal(0))), line
        assert not NOTE.search(line), line  # nothing of the given numbers was rounded
    products = [line for line in step(lines, "weighted sum") if " × [" in line]
    assert [numbers(re.search(r" × \[(.*)\] = ", line)[1]) for line in products] == [exactly(v) for v in V]
    if scale is not None:
        assert f"scale by {scale} (given)" in result.stdout
        assert all(f" × {scale} = " in line for line in step(lines, "scale by"))
    kinds = assert_equations(lines, carry)
    assert kinds["product"] == sum(len(v) for v in V)  # the dot lines are checked above (padded labels)


def test_the_trials_lines_now_read_as_given(run):
    rounded = run("compute", *CASES["a key of .25, .75"][0], "--explain", "--precision", "1",
                  "--carry", "rounded").stdout
    assert "  2: (0.0)(0.25) + (4.0)(0.75) = 3.0\n" in rounded
    scooter = run("compute", SAMPLES / "scooter.json", "--explain", "--precision", "0", "--carry", "rounded").stdout
    assert "  petrol:   (0.0)(0.5) + (4.0)(0.5) = 2\n" in scooter
    exact = run("compute", *CASES["keys of 2.5 and 3.5, scale 1"][0], "--explain", "--precision", "0").stdout
    assert "  0: (1.0)(2.5) + (0.0)(0.0) = 2\n  1: (1.0)(3.5) + (0.0)(0.0) = 4\n" in exact
    key = run("compute", "--q", "1,0", "--k", "0.125,0", "--v", "1", "--explain", "--precision", "2").stdout
    assert "  0: (1.0)(0.125) + (0.0)(0.0) = 0.12\n" in key  # 0.125 rounds half-even: a tie, either holds


@pytest.mark.parametrize("carry", ["exact", "rounded"])
def test_the_textbook_digits_in_both_carries(run, carry):
    out = run("compute", SAMPLES / "scooter.json", "--explain", "--carry", carry).stdout
    for line in ["  mechanic: (0.0)(1.0) + (4.0)(0.0) = 0.0000", "  scooter:  (0.0)(0.0) + (4.0)(1.0) = 4.0000",
                 "  petrol:   (0.0)(0.5) + (4.0)(0.5) = 2.0000", "  0.0454 × [2.0, 0.0] = [0.0908, 0.0000]",
                 "  0.7679 × [0.0, 2.0] = [0.0000, 1.5358]", "  0.1867 × [1.0, -1.0] = [0.1867, -0.1867]",
                 "  sum = [0.2775, 1.3491]"]:
        assert line + "\n" in out
    assert re.search(r"mechanic = \S+ / \S+ = 0\.0454 \(4\.5%\)\n  scooter  = \S+ / \S+ = 0\.7679 \(76\.8%\)\n"
                     r"  petrol   = \S+ / \S+ = 0\.1867 \(18\.7%\)", out)


# --- every kind of given number -------------------------------------------------------------------

GIVEN = {"X": [[0.25, 1.5]], "X_kv": [[0.125, -1], [2.5, 0.75]], "W_Q": [[0.5, 1], [0.25, -0.5]],
         "W_K": [[1, 0.5], [0.75, 0.25]], "W_V": [[1, 0], [0.5, 1]], "b_Q": [0.125, 0], "b_V": [0, -0.25],
         "bias": [[0.25, -0.5]], "sinks": 0.75, "scale": 0.375, "dO": [[0.5, -0.25]]}


@pytest.mark.parametrize("carry", ["exact", "rounded"])
@pytest.mark.parametrize("precision", [0, 1, 2, 4])
def test_x_w_b_bias_scale_sinks_and_dO_are_printed_as_given(precision, carry):
    lines = explain(attend(build_problem(GIVEN)), precision=precision, carry=carry)
    text = "\n".join(lines)
    assert "x = [0.25, 1.5]\n" in text
    assert "  q0: (0.25)(0.5) + (1.5)(0.25) + 0.125 = " in text and "  q1: (0.25)(1.0) + (1.5)(-0.5) + 0.0 = " in text
    assert "Step 3: scale by 0.375 (given)" in text and re.search(rf"  0: {NUM} × 0\.375 = ", text)
    assert re.search(rf"  0: {NUM} \+ 0\.25 = {NUM}", text) and re.search(rf"  1: {NUM} \+ -0\.5 = {NUM}", text)
    assert re.search(r"sink e\^(?:0\.75|\(0\.75 − \S+\)) = ", text)
    assert "  dO = [0.5, -0.25]  (this row of d_output)" in text
    assert re.search(rf"  0: \(0\.5\)\({NUM}\) \+ \(-0\.25\)\({NUM}\) = ", text.split("Backward pass")[1])  # dO · v
    projection = [line for line in lines if line.startswith(("  q0:", "  q1:"))]
    assert len(projection) == 2 and not any(NOTE.search(line) for line in projection)  # every operand exact
    assert_equations([line for line in lines if "Backward" not in line], carry)


def test_W_O_and_b_O_are_given_and_the_heads_d_output_is_computed():
    doc = {"Q": [[1, 0]], "K": [[1, 0], [0, 1]], "V": [[1, 2], [3, 4]], "W_O": [[0.125, 1], [0, 0.5]],
           "b_O": [0.25, 0], "dO": [[1, 1]]}
    lines = explain(attend(build_problem(doc)), precision=1, carry="rounded")
    text = "\n".join(lines)
    assert re.search(rf"  output0: \({NUM}\)\(0\.125\) \+ \({NUM}\)\(0\.0\) \+ 0\.25 = ", text)
    assert "  dO = [1.1, 0.5]  (this row of d_output)" in text  # dO W_Oᵀ = [1.125, 0.5], computed: 1 decimal


def test_a_given_number_past_six_decimals_is_rounded_and_said_so(run):
    def explained(precision, carry="exact"):
        return run("compute", "--q", "0.1234567,1", "--k", "1,0; 0,1", "--v", "1; 2", "--explain",
                   "--precision", str(precision), "--carry", carry).stdout
    assert "q = [0.12, 1.0]" in explained(2)
    assert "  0: (0.12)(1.0) + (1.0)(0.0) = 0.12\n" in explained(2)  # 0.1234567 rounds to 0.12: holds
    assert "q = [0.1234567, 1.0]" in explained(7)  # within --precision decimals: as given
    assert "q = [0.1234567, 1.0]" not in explained(6) and "q = [0.123457, 1.0]" in explained(6)
    assert "  0: (0.1)(1.0) + (1.0)(0.0) = 0.1\n" in explained(1, "rounded")  # rounded, then carried as printed
    noted = run("compute", "--q", "1,1", "--k", "0.1234567,0.1234567", "--v", "1", "--explain",
                "--precision", "2").stdout
    assert "  0: (1.0)(0.12) + (1.0)(0.12) = 0.25  (0.123… unrounded)\n" in noted


def test_the_explain_page_states_the_rule_and_its_example_is_what_attn_prints(run):
    readme = (SAMPLES.parent / "docs" / "reference" / "explain.md").read_text(encoding="utf-8")
    assert "max(`--precision`, 6) decimals" in readme
    block = readme.split('$ attn compute --q "1,0" --k "2.5,0; 3.5,0" --v "1;2" --scale 1 --explain --precision 0\n',
                         1)[1].split("```")[0]
    out = run("compute", *CASES["keys of 2.5 and 3.5, scale 1"][0], "--explain", "--precision", "0").stdout
    for line in block.splitlines():
        assert line == "…" or line in out.splitlines(), line
