"""Issue 19's leftovers from earlier trials: what `--carry rounded` means, decimal commas in inline
values, find-the-slip marked by the Python API as by `attn check`, and LaTeX exports that
pdflatex can compile whatever the labels."""

import json
import re
import shutil
import subprocess
from decimal import Decimal

import pytest

from attncli.compute.attention import attend
from attncli.document.reading import build_problem
from attncli.hand.carry import Writer, held, root
from attncli.render.explain import explain
from tests.conftest import SAMPLES, SCOOTER

# --- (a) --carry rounded: the textbook's digits at 4 decimals --------------------------------------

ROUNDED_TEXTBOOK = """\
Step 2: scale by 1/√d_k, d_k = 2, √2 ≈ 1.4142 (used unrounded, as a calculator's √ key gives it)
  mechanic: 0.0000 / √2 = 0.0000
  scooter:  4.0000 / √2 = 2.8284
  petrol:   2.0000 / √2 = 1.4142
Step 3: softmax
  e^0.0000 = 1.0000   e^2.8284 = 16.9188   e^1.4142 = 4.1133   sum = 22.0321  (2.82842…, 1.41421… unrounded)
  mechanic = 1.0000 / 22.0321 = 0.0454 (4.5%)
  scooter  = 16.9188 / 22.0321 = 0.7679 (76.8%)
  petrol   = 4.1133 / 22.0321 = 0.1867 (18.7%)
Step 4: weighted sum of values
  0.0454 × [2.0, 0.0] = [0.0908, 0.0000]
  0.7679 × [0.0, 2.0] = [0.0000, 1.5358]
  0.1867 × [1.0, -1.0] = [0.1867, -0.1867]
  sum = [0.2775, 1.3491]
  with exact arithmetic: [0.2775, 1.3491] (the same)"""


def test_rounded_carry_gives_the_textbooks_digits_at_4_decimals(run):
    out = run("compute", SAMPLES / "scooter.json", "--explain", "--carry", "rounded").stdout
    assert ROUNDED_TEXTBOOK in out
    # not 4 / 1.4142 = 2.8285 (a printed √2), nor e^2.8284 = 16.9184 (a re-typed logit)
    assert "2.8285" not in out and "16.9184" not in out and "22.0333" not in out


def test_rounded_carry_says_what_it_carries_in_the_output_and_in_help(run):
    out = run("compute", SAMPLES / "scooter.json", "--explain", "--carry", "rounded").stdout
    assert ("Rounded carry: 4 decimals, as a learner with a calculator: each step re-types the numbers printed "
            "before it, except a key's logit, which stays on the display unrounded from its dot product to e^x "
            "(÷ √d_k, softcap, + bias); √d_k itself is not rounded.") in out
    help_text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", run("compute", "--help", env={"COLUMNS": "200"}).stdout).split())
    assert "rounded (a learner carrying --precision decimals on a calculator: each step re-types the numbers " \
           "printed before it, except a key's logit, unrounded on the display from its dot product to e^x; " \
           "√d_k is not rounded;" in help_text


def test_the_logit_stays_unrounded_through_the_bias_and_the_softcap_and_says_so():
    # 4/√2 + 0.5 = 3.32842…: e^3.32842… = 27.8944, where a re-typed 3.3284 would give 27.8932.
    doc = {**SCOOTER, "bias": [[0, 0.5, 0]]}
    lines = explain(attend(build_problem(doc)), carry="rounded")
    assert "  1: 4.0000 / √2 = 2.8284" in lines and "  1: 2.8284 + 0.5 = 3.3284" in lines
    assert "  e^0.0000 = 1.0000   e^3.3284 = 27.8944   e^1.4142 = 4.1133   sum = 33.0077  " \
           "(3.32842…, 1.41421… unrounded)" in lines
    capped = explain(attend(build_problem({**doc, "softcap": 2.0})), carry="rounded")
    # 2 tanh(2.82842… / 2) = 1.77677…; + 0.5 = 2.27677…: e^2.27677… = 9.7452 (e^2.2768 = 9.7454)
    assert "  1: 2 · tanh(2.8284 / 2) = 1.7768" in capped and "  1: 1.7768 + 0.5 = 2.2768" in capped
    assert "  e^0.0000 = 1.0000   e^2.2768 = 9.7452   e^1.2177 = 3.3795   sum = 14.1247  " \
           "(2.27677…, 1.21771… unrounded)" in capped


def test_a_whole_root_and_a_given_scale_are_written_as_numbers():
    four = {"Q": [[1, 1, 1, 1]], "K": [[1, 0, 0, 0], [0, 1, 0, 0]], "V": [[1], [2]]}
    lines = explain(attend(build_problem(four)), carry="rounded")
    assert "Step 2: scale by 1/√d_k, d_k = 4, √4 = 2.0000" in lines and "  0: 1.0000 / 2.0000 = 0.5000" in lines
    given = explain(attend(build_problem({**SCOOTER, "scale": 0.5})), carry="rounded")
    assert "  1: 4.0000 × 0.5 = 2.0000" in given


def test_the_root_and_the_held_number():
    true, used, symbol = root(2, 4, "rounded")
    assert symbol == "√2" and str(used).startswith("1.41421356237309504880") and true == 2 ** 0.5
    assert root(2, 4, "exact")[1:] == (Decimal("1.4142"), None)  # the textbook divides by a printed √2
    assert root(9, 2, "rounded")[1:] == (Decimal("3.00"), None)
    w = Writer(4, "rounded")
    shown = w.result(("x", 0), w.onward(held(Decimal("2.8284"), Decimal("2.828427"))) * 2, 5.656854)
    assert str(shown) == "5.6569" and w.onward(shown) == Decimal("5.656854")
    assert shown * 1 == Decimal("5.6569")  # arithmetic re-types the printed number
    exact = Writer(4, "exact").result(("x", 0), Decimal("5.656854"), 5.656854)
    assert Writer(4, "exact").onward(exact) is exact


@pytest.mark.parametrize("precision", [2, 4, 6])
def test_rounded_carry_of_the_textbook_example_matches_exact_arithmetic_at_4_decimals_and_more(run, precision):
    out = run("compute", SAMPLES / "scooter.json", "--explain", "--carry", "rounded", "--precision",
              str(precision)).stdout
    assert f"/ √2 = {4 / 2 ** 0.5:.{precision}f}" in out


# --- (b) an inline "0,7311": two numbers, or a decimal comma? -----------------------------------------

COMMA_HINT = ('"0,7311" reads as two numbers, 0 and 7311: did you mean 0.7311? Write decimals with a point, '
              "and use spaces (or ';' between rows) between numbers")


def test_a_decimal_comma_where_another_shape_is_expected_is_named_in_the_error(run):
    result = run("check", SAMPLES / "scooter.json", "--weights", "0,7311")
    assert result.exit_code == 2 and result.stderr == (
        "error: --weights: weights has shape (1 × 2); expected (1 × 3): queries × keys (" + COMMA_HINT + ")\n")


def test_a_decimal_comma_that_fits_the_shape_is_read_as_two_numbers_with_a_note(run, problem_file):
    path = problem_file({"Q": [0, 4], "K": [[1, 0], [0, 1]], "V": [[1], [2]]})
    result = run("check", path, "--weights", "0,7311", "-f", "json")
    marks = json.loads(result.stdout)["stages"]["weights"]
    # the 0 is the whole part of 0.7311, no precision shortfall: wrong, never "imprecise" beside the hint
    assert result.exit_code == 1 and marks["cells"] == [["wrong", "wrong"]] and marks["notes"] == [COMMA_HINT]
    for plain in ("0.0180, 0.9820", "0 7311", "[0, 7311]", "0, 7311", "0; 7311"):
        result = run("check", path, "--weights", plain, "-f", "json")
        assert "did you mean" not in result.stdout + result.stderr, plain


def test_only_a_single_comma_between_digits_is_marked():
    from attncli.document.text_input import parse_inline

    assert parse_inline("0,7311", "--weights").comma == "0.7311"
    assert parse_inline(" −1,5 ", "--weights").comma == "-1.5"
    for text in ("0, 7311", "0,7311,2", "0.5,1", "1,0;0,1", "1"):
        assert getattr(parse_inline(text, "--weights"), "comma", None) is None, text
    assert getattr(parse_inline("1,0", "--mask", "mask"), "comma", None) is None


# --- (c) find-the-slip marked by the Python API as by attn check ---------------------------------------

@pytest.mark.parametrize("named", ["the key's", "another stage", "the stage only"])
def test_the_api_marks_a_find_the_slip_answer_as_attn_check_does(run, tmp_path, named):
    from attncli import api
    from attncli.marking import slip

    key_path = tmp_path / "key.json"
    key_path.write_text(run("exercise", "--seed", "3", "--find-the-slip", "--answers").stdout, encoding="utf-8")
    key = json.loads(key_path.read_text(encoding="utf-8"))
    planted = key["slip"]
    other = next(m for m in slip.MISTAKES if slip.MISTAKES[m].stage != planted["stage"])
    answer = {"slip": {"the key's": planted, "another stage": {"stage": slip.MISTAKES[other].stage, "mistake": other},
                       "the stage only": {"stage": planted["stage"], "mistake": other}}[named]}
    answers = tmp_path / "a.json"
    answers.write_text(json.dumps(answer), encoding="utf-8")
    cli = json.loads(run("check", answers, key_path, "-f", "json").stdout)
    for problem in (key_path, str(key_path), key):  # a path or the key's document
        marks = api.check(answer, problem)
        assert marks.to_dict() == cli and list(marks) == ["slip"]
    assert cli["stages"]["slip"]["cells"] == {"the key's": [["correct", "correct"]],
                                              "another stage": [["wrong", "wrong"]],
                                              "the stage only": [["correct", "wrong"]]}[named]


def test_the_api_refuses_a_slip_against_a_problem_that_plants_none():
    from attncli import api
    from attncli.base.errors import InputError

    answer = {"slip": {"stage": "scaled", "mistake": "no_scale"}}
    for problem in (SCOOTER, attend(build_problem(SCOOTER))):
        with pytest.raises(InputError, match="plants no slip"):
            api.check(answer, problem)


# --- (d) LaTeX that pdflatex compiles, whatever the labels ---------------------------------------------

WIDE = {"Q": [[1, 0]], "K": [[1, 0], [0, 1], [1, 1]], "V": [[1], [2], [3]], "query_labels": ["ｉｔ"],
        "key_labels": ["ｃａｔ", "猫", "café"], "title": "全角 ｔｉｔｌｅ: 100％"}


def _pdflatex_safe(text: str) -> list[str]:
    """The characters in `text` that pdflatex's fonts cannot set, outside comments: none may be left."""
    body = "\n".join(line.split("%", 1)[0] if not line.startswith("%") else "" for line in text.splitlines())
    return sorted({c for c in body if c >= "\x80" and not ("\xc0" <= c <= "\xff" and c not in "×÷")
                   and c not in "–—…‘’“”"})


def test_full_width_and_cjk_labels_are_written_so_pdflatex_sets_them(run):
    out = run("compute", "-", "-f", "latex", "--stages", "weights", "--explain", input=json.dumps(WIDE)).stdout
    assert _pdflatex_safe(out) == []
    assert out.startswith("\\providecommand{\\attnchar}[1]{\\texttt{[U+#1]}}% a character pdflatex cannot set\n")
    assert " & cat & \\attnchar{732B} & café \\\\ \\hline" in out  # full-width ASCII: its letters; CJK: its code point
    assert "\nit & $" in out and "% 全角 ｔｉｔｌｅ: 100％" in out  # the header comments as written
    assert "\\ensuremath{\\surd}2" in out  # the explanation's symbols as math


def test_the_escapes_keep_the_text_and_leave_plain_exports_alone(run):
    from attncli.render.export import tex

    assert tex("ｃａｔ") == "cat" and tex("１００％") == r"100\%" and tex("ｘ＿ｉ") == r"x\_i"
    assert tex("猫") == r"\attnchar{732B}" and tex("😀") == r"\attnchar{1F600}"
    assert tex("Q Kᵀ · √2 ≈ 1.41, −∞") == r"Q K\ensuremath{^{\top}} \ensuremath{\cdot} \ensuremath{\surd}2 " \
                                          r"\ensuremath{\approx} 1.41, \ensuremath{-}\ensuremath{\infty}"
    assert tex("naïve – é…") == "naïve – é…" and tex("a\u3000b") == "a b"
    assert tex("猫", symbols=False) == "猫"
    plain = run("compute", SAMPLES / "scooter.json", "-f", "latex").stdout
    assert "attnchar" not in plain and _pdflatex_safe(plain) == []


def test_a_worksheet_is_pdflatex_safe_too(run):
    sheet = run("exercise", "--seed", "3", "--kind", "rope", "--format", "latex").stdout
    assert _pdflatex_safe(sheet) == [] and r"$\theta_i$" in sheet  # the worksheet's own math kept


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed (the text is tested above)")
def test_pdflatex_compiles_the_export(run, tmp_path):
    doc = {**WIDE, "mask": "causal", "bias": [[0, 0.5, "-inf"]]}
    body = run("compute", "-", "-f", "latex", "--stages", "scaled,masked,weights,output", "--explain",
               input=json.dumps(doc)).stdout
    (tmp_path / "body.tex").write_text(body, encoding="utf-8")
    (tmp_path / "doc.tex").write_text("\\documentclass{article}\n\\usepackage{amsmath}\n\\begin{document}\n"
                                      "\\input{body}\n\\end{document}\n", encoding="utf-8")
    result = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-2000:]
