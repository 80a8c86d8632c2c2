"""`attn check --code`: a learner's function run on the battery of cases, each in a child process,
marked with a diagnosis. The implementations marked are small files in tests/code_samples/: the
textbook's function and one per classic bug. A representative subset runs in the fast suite; the
whole battery for every sample is in the slow profile."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from attncli import check_code
from attncli.base.errors import InputError
from attncli.cli import app
from tests.conftest import ROOT, fast_sample

SAMPLES = ROOT / "tests" / "code_samples"
runner = CliRunner()


def attn(*args):
    return runner.invoke(app, ["check", *args])


def sample(name: str, function: str = "attention") -> str:
    return f"{SAMPLES / name}.py:{function}"


def diagnoses(marks, case: str) -> set[str]:
    found = next(c for c in marks.cases if c.case.name == case)
    return {d for mark in found.marks.values() for d in mark.diagnosis}


# (sample, signature, layout, case, the diagnosis it must get)
CLASSIC = [
    ("no_scale", "Q, K, V", "L,d", "scooter", "no_scale"),
    ("scale_dk", "Q, K, V", "L,d", "random", "scale_by_dk"),
    ("wrong_axis", "Q, K, V", "L,d", "scooter", "softmax_wrong_axis"),
    ("no_max", "Q, K, V", "L,d", "large_logits", "softmax_no_max"),
    ("fill_1e9", "Q, K, V, mask", "L,d", "masked_row", "mask_fill_finite"),
    ("mask_inverted", "Q, K, V, mask", "L,d", "causal", "mask_inverted"),
    ("causal_bottom_right", "Q, K, V, is_causal", "L,d", "causal_non_square", "causal_misaligned"),
    ("transposed_k", "Q, K, V", "L,d", "dk_dv", "transposed_k"),
    ("unnormalised", "Q, K, V", "L,d", "scooter", "weights_unnormalised"),
    ("heads_mixed", "Q, K, V", "B,H,L,d", "batch", "batch_heads_mixed"),
    ("float32_sum", "Q, K, V", "L,d", "random", "float32"),
    ("infinite_loop", "Q, K, V", "L,d", "scooter", "timeout"),
    ("raises", "Q, K, V", "L,d", "scooter", "exception"),
    ("returns_list", "Q, K, V", "L,d", "scooter", "unreadable"),
]


@pytest.fixture(scope="module")
def endless():
    """The endless loop marked once for the tests that need it: each run of it waits out its time limit."""
    return check_code(sample("infinite_loop"), "Q, K, V", ["scooter"], layout="L,d", timeout=0.5)


# A case server each (a Python with numpy): the bugs whose diagnosis no other fast test makes in the fast
# suite; scale_dk, wrong_axis, transposed_k and raises (diagnosed by the hand-marking and hostile tests
# too) in the slow profile, which also marks every bug over the whole battery (below).
@pytest.mark.parametrize("name, signature, layout, case, wanted",
                         fast_sample(CLASSIC, *(c for c in CLASSIC if c[0] not in (
                             "scale_dk", "wrong_axis", "transposed_k", "raises"))), ids=[c[0] for c in CLASSIC])
def test_each_classic_bug_gets_its_diagnosis(request, name, signature, layout, case, wanted):
    if name == "infinite_loop":
        assert (signature, layout, case) == ("Q, K, V", "L,d", "scooter")  # as `endless` marks it
        marks = request.getfixturevalue("endless")
    else:
        marks = check_code(sample(name), signature, [case], layout=layout, timeout=1)
    assert not marks.all_pass
    assert wanted in diagnoses(marks, case)


def test_the_textbook_function_passes_every_case_it_can_be_called_on():
    marks = check_code(sample("textbook", "scaled_dot_product_attention"))
    assert marks.all_pass, marks.note()
    assert {c.case.name for c in marks.cases} == {"scooter", "random", "non_square", "dk_dv", "vector",
                                                  "large_logits", "float32"}
    assert all(set(c.marks) == {"output", "weights"} for c in marks.cases)  # (output, weights) both marked
    assert dict(marks.not_run)["causal"] == "needs a mask or is_causal parameter"


def test_a_function_object_runs_in_a_forked_child_and_is_marked():
    def attention(Q, K, V):
        s = Q @ K.T / np.sqrt(K.shape[-1])
        w = np.exp(s - s.max(-1, keepdims=True))
        return w / w.sum(-1, keepdims=True) @ V

    assert check_code(attention, cases="scooter,random").all_pass

    def broken(Q, K, V):
        return Q @ K.T @ V  # no softmax, no scale

    marks = check_code(broken, cases=["scooter"])
    assert not marks.all_pass and marks.score == (0, 1)


def test_the_flash_attention_forward_is_marked_against_its_tiles():
    signature = "Q, K, V, block_q, block_k"
    assert check_code(sample("fa2_forward", "flash_forward"), signature, "random").all_pass
    assert "l_without_alpha" in diagnoses(check_code(sample("fa2_l_without_alpha", "flash_forward"), signature,
                                                     "random"), "random")
    o_marks = check_code(sample("fa2_o_without_alpha", "flash_forward"), signature, "random")
    assert diagnoses(o_marks, "random") == {"O_without_alpha"}


def test_a_backward_pass_is_marked_against_attnclis():
    marks = check_code(sample("fa2_backward", "flash_backward"), "Q, K, V, O, lse, dO", "random,non_square")
    assert marks.all_pass
    assert set(marks.cases[0].marks) == {"d_Q", "d_K", "d_V"}


def test_a_passing_class_member_and_a_failing_one_exit_1_with_the_diagnosis(tmp_path):
    done = attn("--code", sample("textbook", "scaled_dot_product_attention"), "--cases", "scooter",
                "--format", "table")
    assert done.exit_code == 0, done.output
    assert "✓ scooter" in done.output and "all cases pass" in done.output
    done = attn("--code", sample("no_scale"), "--cases", "scooter", "--format", "table")
    assert done.exit_code == 1
    assert "no_scale: forgot to divide the scores by √d_k" in done.output


def test_a_class_marks_in_one_run_with_a_gradebook_and_results_json(tmp_path):
    for name in ("textbook", "no_scale", "raises", "infinite_loop", "returns_list"):
        text = (SAMPLES / f"{name}.py").read_text().replace("def scaled_dot_product_attention", "def attention")
        (tmp_path / f"{name}.py").write_text(text)
    pattern = f"{tmp_path}/*.py:attention"
    done = attn("--code", pattern, "--cases", "scooter,random", "--timeout", "0.5", "--format", "csv")
    assert done.exit_code == 1, done.output
    rows = done.output.strip().splitlines()
    assert rows[0].startswith("file,score,max,percent,scooter.output points")
    by_file = {row.split(",")[0].rsplit("/", 1)[1]: row for row in rows[1:]}
    assert by_file["textbook.py:attention"].split(",")[1:4] == ["2", "2", "100.0"]
    assert "no_scale" in by_file["no_scale.py:attention"] and "timeout" in by_file["infinite_loop.py:attention"]
    done = attn("--code", pattern, "--cases", "scooter", "--timeout", "0.5", "--format", "gradescope",
                "--points", "scooter=5")
    doc = json.loads(done.output)
    scores = {os.path.basename(f["file"]): f["results"]["score"] for f in doc["files"]}
    assert scores == {"infinite_loop.py:attention": 0, "no_scale.py:attention": 0, "raises.py:attention": 0,
                      "returns_list.py:attention": 0, "textbook.py:attention": 5}


HOSTILE = '''
import ctypes, sys
import numpy as np

def loops(Q, K, V):
    while True:
        pass

def allocates(Q, K, V):
    return np.ones(100 * 2**30, dtype=np.uint8)

def crashes(Q, K, V):
    ctypes.string_at(0)

def shouts(Q, K, V):
    print("\\x1b[2J\\x1b]0;pwned\\x07 hello")
    raise RuntimeError("\\x1b[31mred\\x1b[0m")

def reads(Q, K, V):
    return np.asarray(float(sys.stdin.readline() or "nan"))
'''


def hostile_class(tmp_path, functions=("loops", "allocates", "crashes", "shouts", "reads")) -> list[str]:
    (tmp_path / "hostile.py").write_text(HOSTILE)
    return [option for function in functions for option in ("--code", f"{tmp_path}/hostile.py:{function}")]


def test_hostile_submissions_never_stop_the_class_nor_reach_the_terminal_raw(tmp_path):
    """The endless loop runs in the JSON run only: each run of it takes its time limit and the grace
    after it (1.5 s of a core); the slow profile runs it in every format (the next test)."""
    args = hostile_class(tmp_path)
    for form in ("table", "json", "csv", "gradescope"):
        done = attn(*hostile_class(tmp_path, ("allocates", "crashes", "shouts", "reads")), "--cases", "scooter",
                    "--timeout", "0.5", "--memory", "512", "--format", form)
        assert done.exit_code == 1, done.output
        assert "\x1b" not in done.output and "\x07" not in done.output
    doc = json.loads(attn(*args, "--cases", "scooter", "--timeout", "0.5", "--format", "json").output)
    kinds = {f["file"].rsplit(":", 1)[1]: f["cases"]["scooter"].get("kind") for f in doc["files"]}
    assert kinds == {"loops": "timeout", "allocates": "memory", "crashes": "crash", "shouts": "exception",
                     "reads": None}  # stdin is empty: it returned NaN, of the wrong shape, marked wrong
    read = next(f for f in doc["files"] if f["file"].endswith("reads"))["cases"]["scooter"]
    assert read["stages"]["output"]["diagnosis"] == ["wrong_shape"]
    shouted = next(f for f in doc["files"] if f["file"].endswith("shouts"))["cases"]["scooter"]
    assert shouted["frame"]["function"] == "shouts" and "\\u001b[31mred" in shouted["failure"]
    page = tmp_path / "marks.html"
    done = attn(*hostile_class(tmp_path, ("shouts", "reads")), "--cases", "scooter", "--timeout", "0.5",
                "--report", str(page))
    assert "\x1b" not in page.read_text()


@pytest.mark.slow
def test_hostile_submissions_with_the_endless_loop_in_every_format(tmp_path):
    args = hostile_class(tmp_path)
    for form in ("table", "json", "csv", "gradescope"):
        done = attn(*args, "--cases", "scooter", "--timeout", "0.5", "--memory", "512", "--format", form)
        assert done.exit_code == 1, done.output
        assert "\x1b" not in done.output and "\x07" not in done.output
    page = tmp_path / "marks.html"
    done = attn(*args, "--cases", "scooter", "--timeout", "0.5", "--report", str(page))
    assert done.exit_code == 1 and "\x1b" not in page.read_text()


def test_the_last_frame_in_the_learners_file_is_named(endless):
    marks = endless
    frame = marks.cases[0].frame if marks.cases else marks.frame
    assert frame is not None, (marks.failure, marks.cases and marks.cases[0].failure)
    # the watchdog stops the loop at either of its two lines
    assert (frame.file, frame.function) == ("infinite_loop.py", "attention") and frame.code in ("while True:", "pass")


def test_a_forbidden_import_scores_0_everywhere(tmp_path):
    (tmp_path / "cheat.py").write_text("import attncli\n\ndef attention(Q, K, V):\n"
                                       "    return attncli.attend(Q=Q, K=K, V=V).final\n")
    marks = check_code(f"{tmp_path}/cheat.py:attention", cases="scooter,random", forbid=("attncli",))
    assert "attncli" in marks.forbidden and marks.score == (0, 2)
    assert all(c.kind == "forbidden" for c in marks.cases)
    # named through an attribute chain, never imported by name: the source is read for it too
    (tmp_path / "sneaky.py").write_text("import numpy\n\ndef attention(Q, K, V):\n"
                                        "    return V[:1] * numpy.linalg.norm(Q)\n")
    marks = check_code(f"{tmp_path}/sneaky.py:attention", cases="scooter", forbid=("numpy.linalg",))
    assert marks.forbidden == ("numpy.linalg.norm",) and marks.score == (0, 1)


def test_a_function_called_with_torch_tensors_returns_tensors(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "t.py").write_text("import torch\n\ndef attention(Q, K, V, mask):\n"
                                   "    return torch.nn.functional.scaled_dot_product_attention(Q, K, V, attn_mask=mask)\n")
    marks = check_code(f"{tmp_path}/t.py:attention", "Q, K, V, mask", "scooter,causal,padding,heads",
                       layout="B,H,L,d", array="torch")
    assert marks.all_pass, marks.note()


def test_a_teachers_problem_file_is_a_case(tmp_path):
    folder = tmp_path / "problems"
    folder.mkdir()
    (folder / "mine.json").write_text(json.dumps({"Q": [[1, 0], [0, 1]], "K": [[1, 1], [0, 2]],
                                                  "V": [[1, 2], [3, 4]], "description": "the teacher's own"}))
    marks = check_code(sample("textbook", "scaled_dot_product_attention"), cases=[str(folder), "scooter"])
    assert [c.case.name for c in marks.cases] == ["mine", "scooter"] and marks.all_pass


def test_bad_options_are_one_error_line_and_exit_2(tmp_path):
    done = attn("--code", sample("textbook"), "--signature", "Q, K, W")
    assert done.exit_code == 2 and "unknown parameter" in done.output
    done = attn("--code", f"{tmp_path}/absent.py:attention")
    assert done.exit_code == 2 and "no such file" in done.output
    done = attn("--code", sample("textbook"), "--cases", "scoter")
    assert done.exit_code == 2 and 'did you mean "scooter"' in done.output.lower() or "scooter" in done.output
    # '' was every case, no module forbidden, no points and no page, without a word
    for option, fragment in (("--cases", '--cases: is ""; expected case names'), ("--forbid", '--forbid: is ""'),
                             ("--points", '--points: is ""'), ("--report", '--report: "" has no known suffix')):
        done = attn("--code", sample("textbook"), option, "")
        assert done.exit_code == 2 and fragment in done.output, (option, done.output)
    done = attn("--code", sample("textbook"), "--cases", "scooter,,random")
    assert done.exit_code == 2 and '--cases: is "scooter,,random": item 2 is empty' in done.output
    done = attn("--code", sample("textbook"), "--weights", "1,2")
    assert done.exit_code == 2 and "marks answers, not code" in done.output
    with pytest.raises(InputError):
        check_code(sample("textbook"), "Q, K, V", layout="L,d,x")


def test_a_file_that_cannot_be_loaded_is_trouble_alone_and_a_zero_in_a_class(tmp_path):
    (tmp_path / "broken.py").write_text("def attention(Q, K, V:\n    pass\n")
    done = attn("--code", f"{tmp_path}/broken.py:attention", "--format", "json")
    assert done.exit_code == 2
    doc = json.loads(done.stdout)
    assert doc["error"].startswith("SyntaxError") and doc["frame"]["line"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("name, signature, layout, case, wanted", CLASSIC, ids=[c[0] for c in CLASSIC])
def test_each_classic_bug_over_the_whole_battery(name, signature, layout, case, wanted):
    marks = check_code(sample(name), signature, layout=layout, timeout=1)
    assert wanted in diagnoses(marks, case)
    passed = {c.case.name for c in marks.cases if c.passed}
    assert case not in passed


GQA_SDPA = '''
import numpy as np

def attention(Q, K, V, mask):
    """(B, H, L, d), K and V with the kv heads; mask as the convention given."""
    group = Q.shape[1] // K.shape[1]
    K, V = np.repeat(K, group, axis=1), np.repeat(V, group, axis=1)
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    scores = CONVENTION
    top = scores.max(axis=-1, keepdims=True)
    e = np.exp(scores - np.where(np.isfinite(top), top, 0))
    sums = e.sum(axis=-1, keepdims=True)
    return (e / np.where(sums == 0, 1, sums)) @ V
'''
CONVENTIONS = {"keep": "np.where(mask, scores, -np.inf)", "block": "np.where(mask, -np.inf, scores)",
               "additive": "scores + mask"}


@pytest.mark.parametrize("convention", fast_sample(list(CONVENTIONS), "block", "additive"))
def test_each_mask_convention_and_grouped_query_heads(tmp_path, convention):
    (tmp_path / "sdpa.py").write_text(GQA_SDPA.replace("CONVENTION", CONVENTIONS[convention]))
    spec = f"{tmp_path}/sdpa.py:attention"
    cases = "causal,padding,masked_row,heads,gqa,batch"
    marks = check_code(spec, "Q, K, V, mask", cases, layout="B,H,L,d", mask_convention=convention)
    assert marks.all_pass, marks.note()
    if convention == "block":  # read as True = attend, its mask is the other way round
        assert "mask_inverted" in diagnoses(check_code(spec, "Q, K, V, mask", "causal", layout="B,H,L,d"), "causal")


FAKE_JAX = '''
import numpy as np

class Array:
    def __init__(self, value):
        self.value = np.asarray(value)

    def __array__(self, dtype=None, copy=None):
        return self.value

def asarray(value):
    return Array(value)
'''


def test_jax_arrays_in_and_out(tmp_path, monkeypatch):
    """The jax path, with a stand-in jax (its numpy.asarray and an array type of its own): the function
    gets jax arrays and what it returns is read back."""
    (tmp_path / "jax").mkdir()
    (tmp_path / "jax" / "__init__.py").write_text("")
    (tmp_path / "jax" / "numpy.py").write_text(FAKE_JAX)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    (tmp_path / "j.py").write_text("import numpy as np\nimport jax.numpy as jnp\n\ndef attention(Q, K, V):\n"
                                   "    assert type(Q).__module__ == 'jax.numpy'\n"
                                   "    q, k, v = (np.asarray(a) for a in (Q, K, V))\n"
                                   "    s = q @ k.T / np.sqrt(k.shape[-1])\n"
                                   "    w = np.exp(s - s.max(-1, keepdims=True))\n"
                                   "    return jnp.asarray(w / w.sum(-1, keepdims=True) @ v)\n")
    assert check_code(f"{tmp_path}/j.py:attention", cases="scooter,random", array="jax").all_pass


def test_the_numpy_path_never_loads_torch():
    code = (f"from attncli import check_code; check_code({sample('textbook', 'scaled_dot_product_attention')!r}, "
            "cases='scooter'); import sys; print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.stdout.strip() == "False", done.stderr


def test_the_marks_page_shows_each_case(tmp_path):
    page = tmp_path / "marks.html"
    done = attn("--code", sample("no_scale"), "--cases", "scooter,random", "-o", str(page))
    assert done.exit_code == 1
    text = page.read_text()
    assert "scooter.output" in text and "no_scale: forgot to divide" in text and "not a sandbox" in text


def test_an_installed_module_is_named_module_colon_function(monkeypatch):
    monkeypatch.chdir(ROOT)
    done = attn("--code", "tests.code_samples.no_scale:attention", "--cases", "scooter", "--format", "json")
    assert done.exit_code == 1
    assert json.loads(done.stdout)["cases"]["scooter"]["stages"]["output"]["diagnosis"] == ["no_scale"]


def test_a_case_and_a_mistake_added_as_records_reach_every_path(monkeypatch, tmp_path):
    """The battery and the code mistakes are registries: one record each, and the runner, the marks
    and --cases read it."""
    from types import MappingProxyType

    from attncli.code import cases as battery_module
    from attncli.code import code_mistakes
    from attncli.marking.mistakes import Mistake
    from attncli.stages.table import compute_weights

    entry = battery_module.Entry("tiny", "a throwaway case", lambda projected, batched: None if projected else
                                 battery_module._case("tiny", "a throwaway case", {"Q": [[1, 2]], "K": [[1, 0], [0, 1]],
                                                                                  "V": [[3, 4], [5, 6]]}))
    monkeypatch.setattr(battery_module, "BATTERY", battery_module.BATTERY + (entry,))
    halved = Mistake("weights", "halved the weights", lambda block, x: compute_weights(block, x) / 2)
    monkeypatch.setattr(code_mistakes, "ALL", MappingProxyType({**code_mistakes.ALL, "halved": halved}))
    (tmp_path / "half.py").write_text("import numpy as np\n\ndef attention(Q, K, V):\n"
                                      "    s = Q @ K.T / np.sqrt(K.shape[-1])\n"
                                      "    w = np.exp(s - s.max(-1, keepdims=True))\n"
                                      "    return (w / w.sum(-1, keepdims=True) / 2) @ V\n")
    marks = check_code(f"{tmp_path}/half.py:attention", cases="tiny")
    assert [c.case.name for c in marks.cases] == ["tiny"]
    assert diagnoses(marks, "tiny") == {"halved"}


def _zeros(Q, K, V):
    return np.zeros((len(Q), len(V[0])))


@pytest.mark.parametrize("settings, field, fragment", [
    ({"tol": float("inf")}, "tol", "expected a finite number ≥ 0, found inf"),
    ({"tol": 1e308 * 10}, "tol", "found inf"),
    ({"tol": float("nan")}, "tol", "found nan"),
    ({"tol": -1}, "tol", "found -1"),
    ({"tol": "x"}, "tol", 'tol is the string "x"'),
    ({"timeout": float("nan")}, "timeout", "expected a finite number from 0.1 to 3,600, found nan"),
    ({"timeout": -1}, "timeout", "found -1"),
    ({"timeout": float("inf")}, "timeout", "found inf"),
    ({"timeout": "5"}, "timeout", 'timeout is the string "5"'),
    ({"timeout": None}, "timeout", "expected a number"),
    ({"memory": 0}, "memory", "at least 16"),
    ({"memory": 100.5}, "memory", "memory is the number 100.5"),
    ({"memory": True}, "memory", "memory is"),
    ({"forbid": 3}, "forbid", "expected module names"),
])
def test_check_codes_settings_are_read_as_the_options_are(settings, field, fragment):
    with pytest.raises(InputError) as caught:
        check_code(_zeros, cases="scooter", **settings)
    assert caught.value.field == field and fragment in str(caught.value)


def _imports_fractions(Q, K, V):
    import fractions  # noqa: F401  (forbidden below: the import fails in the child)
    return _zeros(Q, K, V)


def test_check_codes_forbid_as_a_string_is_module_names_not_letters():
    marks = check_code(_imports_fractions, cases="scooter", forbid="fractions")
    assert not marks.all_pass and "fractions" in marks.note()
    assert check_code(_imports_fractions, cases="scooter", forbid=("json", "fractions")).cases[0].failure


def test_a_one_by_one_case_and_one_nan_cell_are_said_in_the_singular(tmp_path):
    folder = tmp_path / "problems"
    folder.mkdir()
    (folder / "one.json").write_text(json.dumps({"Q": [[1]], "K": [[1]], "V": [[2]]}))
    (tmp_path / "nan.py").write_text("import numpy as np\ndef attention(Q, K, V):\n    return np.full((1, 1), np.nan)\n")
    done = attn("--code", f"{tmp_path}/nan.py:attention", "--cases", str(folder), "--format", "table")
    assert done.exit_code == 1
    text = " ".join(done.stdout.split())
    assert "(1 query × 1 key)" in text and "1 cell is NaN" in text


def test_a_named_pipe_among_the_cases_or_as_the_code_is_refused_unopened(tmp_path):
    folder = tmp_path / "problems"
    folder.mkdir()
    (folder / "mine.json").write_text(json.dumps({"Q": [[1]], "K": [[1]], "V": [[2]]}))
    os.mkfifo(folder / "pipe.json")
    done = attn("--code", sample("textbook"), "--cases", str(folder))  # opening the pipe would wait forever
    assert done.exit_code == 2 and f"{folder / 'pipe.json'}: is a named pipe, not a regular file" in done.output
    with pytest.raises(InputError, match="named pipe"):
        check_code(_zeros, cases=[str(folder)])
    os.mkfifo(tmp_path / "pipe.py")
    done = attn("--code", f"{tmp_path}/pipe.py:attention")
    assert done.exit_code == 2 and "pipe.py: is a named pipe, not a regular file" in done.output
    (tmp_path / "mine.py").write_text((SAMPLES / "textbook.py").read_text())
    done = attn("--code", f"{tmp_path}/*.py:attention", "--format", "csv")  # a class: the pipe scores 0
    assert done.exit_code == 2 and "pipe.py:attention: could not be marked: is a named pipe" in done.output


def test_a_case_may_take_the_time_limit_given_not_an_internal_cap(tmp_path):
    """A case is stopped at --timeout, never sooner: a function that takes 1.5 s with timeout 5 passes
    (a mutation capping the limit inside the runner went unnoticed; every other test's functions are quick)."""
    (tmp_path / "slow.py").write_text("import time\nimport numpy as np\n\ndef attention(Q, K, V):\n"
                                      "    time.sleep(1.5)\n    s = Q @ K.T / np.sqrt(K.shape[-1])\n"
                                      "    w = np.exp(s - s.max(-1, keepdims=True))\n"
                                      "    return w / w.sum(-1, keepdims=True) @ V\n")
    marks = check_code(f"{tmp_path}/slow.py:attention", cases="scooter", timeout=5)
    assert marks.all_pass, (marks.failure, [c.failure for c in marks.cases])


def test_a_case_whose_watchdog_never_writes_still_times_out_and_the_run_ends(tmp_path, monkeypatch):
    """The supervisor's backstop: past the limit and its grace it waits SLACK more seconds for the
    watchdog's stack, then kills the case whatever it is doing. A function that cancels the watchdog
    and sleeps still ends as a time-out with the limit in its message, soon after the backstop, and
    its process is gone."""
    import signal
    import time

    from attncli.code import supervise

    monkeypatch.setattr(supervise, "GRACE", 0.2)
    monkeypatch.setattr(supervise, "SLACK", 0.5)
    pid_file = tmp_path / "pid"

    def silent(Q, K, V):
        import faulthandler

        faulthandler.cancel_dump_traceback_later()  # the watchdog never writes its stack
        pid_file.write_text(str(os.getpid()))
        time.sleep(60)

    def hung(signum, frame):
        raise AssertionError("the run did not end: the supervisor waits for a stack that never comes")

    before = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    try:
        start = time.monotonic()
        marks = check_code(silent, cases="scooter", timeout=0.3)
        took = time.monotonic() - start
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)
    case = marks.cases[0]
    assert case.kind == "timeout" and case.failure == "timed out after 0.3 s", (case.kind, case.failure)
    assert 0.3 + 0.2 + 0.5 <= took < 10, took  # it waited for the stack (SLACK), then ended
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)


def _running(pid: int) -> bool:
    """Whether `pid` is alive (a zombie waiting for init to reap it is not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _all_end(pids: list[int], seconds: float, what: str) -> None:
    """Assert every process of `pids` ends within `seconds`; kill any that does not (the test's own
    clean-up, whatever the assertion says)."""
    import signal
    import time

    try:
        end = time.monotonic() + seconds
        while any(_running(pid) for pid in pids) and time.monotonic() < end:
            time.sleep(0.02)
        assert not any(_running(pid) for pid in pids), what
    finally:
        for pid in pids:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


def test_what_a_case_leaves_running_is_killed_when_it_ends(tmp_path):
    """A function object that starts background processes and returns: the supervisor kills what it
    left in the case's process group (the child's own, by setsid), and on Linux what it left in a
    session of its own too (the case's supervisor is their subreaper; a file's function: the next
    test)."""

    pid_file = tmp_path / "pid"

    def leaves_sleepers(Q, K, V):
        sleepers = [subprocess.Popen(["sleep", "60"]),
                    subprocess.Popen(["sleep", "61"], start_new_session=sys.platform.startswith("linux"))]
        pid_file.write_text(" ".join(str(s.pid) for s in sleepers))
        return np.zeros((Q.shape[0], V.shape[1]))

    check_code(leaves_sleepers, cases="scooter", timeout=5)
    _all_end([int(pid) for pid in pid_file.read_text().split()], 2, "the case's background processes outlived it")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a subreaper is Linux's")
def test_what_a_case_leaves_running_in_a_session_of_its_own_is_killed_when_it_ends(tmp_path):
    """`attn check --code` (a file's function, run by the case server): a process the case started in
    a new session, one it left by a double fork (`setsid sleep &` in a shell that exits), and a shell
    in a session of its own whose two children are orphaned to the server only once the shell is
    killed, all outside the case's process group, are re-parented to the server (its subreaper) and
    killed when the case ends (they outlived it before)."""

    pids = tmp_path / "pids"
    (tmp_path / "daemon.py").write_text(
        "import subprocess\nimport numpy as np\n\ndef attention(Q, K, V):\n"
        "    own = subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
        f"    subprocess.run(['sh', '-c', 'setsid sleep 61 & echo $! >> {pids}'], check=True)\n"
        f"    subprocess.Popen(['sh', '-c', 'sleep 62 & echo $! >> {pids}; sleep 63 & echo $! >> {pids}; wait'],\n"
        "                     start_new_session=True)\n"
        "    import time\n"
        f"    while len(open({str(pids)!r}).read().split()) < 3:\n"
        "        time.sleep(0.01)\n"
        f"    with open({str(pids)!r}, 'a') as f:\n"
        "        f.write(f'{own.pid}\\n')\n"
        "    s = Q @ K.T / np.sqrt(K.shape[-1])\n"
        "    w = np.exp(s - s.max(-1, keepdims=True))\n"
        "    return w / w.sum(-1, keepdims=True) @ V\n")
    done = attn("--code", f"{tmp_path}/daemon.py:attention", "--cases", "scooter", "--format", "json")
    assert done.exit_code == 0, done.output
    left = [int(pid) for pid in pids.read_text().split()]
    assert len(left) == 4
    _all_end(left, 3, "what the case left in a session of its own outlived it")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a subreaper is Linux's")
def test_a_function_object_that_kills_its_supervisor_is_a_crash_saying_so():
    """A function object's case runs under a supervisor of its own (fork_reaped_case): killing it is
    that case's crash, named as such (not "out of memory"), and the run goes on."""
    import signal

    def kills_its_parent(Q, K, V):
        os.kill(os.getppid(), signal.SIGKILL)
        return np.zeros((Q.shape[0], V.shape[1]))

    (case,) = check_code(kills_its_parent, cases="scooter", timeout=2).cases
    assert (case.kind, case.failure) == ("crash", "crashed: the process supervising it was stopped or killed (by the case?)")


HOSTILE_TO_THE_SERVER = '''
import os, signal, subprocess, sys, time
import numpy as np

def kills(Q, K, V):
    os.kill(os.getppid(), signal.SIGKILL)
    return np.zeros((Q.shape[0], V.shape[1]))

def stops(Q, K, V):
    os.kill(os.getppid(), signal.SIGSTOP)
    return np.zeros((Q.shape[0], V.shape[1]))

def spins(Q, K, V):
    sleeper = subprocess.Popen(["sleep", "64"], start_new_session=True)
    with open(os.environ["ATTN_TEST_PID"], "w") as f:
        f.write(str(sleeper.pid))
    while True:
        pass
'''


@pytest.mark.parametrize("function", ["kills", pytest.param("stops", marks=pytest.mark.slow)])  # stops: 10 s
def test_a_case_that_kills_or_stops_the_case_server_is_its_own_crash_and_the_class_goes_on(tmp_path, function):
    """A user trial: a submission that killed the case server (its parent) ended the class with "the
    case server stopped … please report it"; one that stopped it (SIGSTOP) hung `attn` for ever."""
    (tmp_path / "h.py").write_text(HOSTILE_TO_THE_SERVER)
    textbook = (ROOT / "tests" / "code_samples" / "textbook.py").read_text().replace(
        "def scaled_dot_product_attention", "def attention")
    (tmp_path / "t.py").write_text(textbook)
    done = attn("--code", f"{tmp_path}/h.py:{function}", "--code", f"{tmp_path}/t.py:attention", "--cases",
                "scooter", "--timeout", "0.1", "--format", "csv")
    rows = {row.split(",")[0].rsplit("/", 1)[1]: row for row in done.output.strip().splitlines()[1:]}
    assert done.exit_code == 1, done.output
    assert "crashed: the process supervising it was stopped or killed (by the case?)" in rows[f"h.py:{function}"]
    assert rows["t.py:attention"].split(",")[1:4] == ["1", "1", "100.0"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a subreaper is Linux's")
def test_an_interrupted_run_ends_the_case_and_what_it_started(tmp_path):
    """A user trial: Ctrl-C during a case left the case running (in the case server's session) and what it
    had started, until the case's time limit and beyond. Now the server ends them when told to."""
    import signal
    import time

    (tmp_path / "h.py").write_text(HOSTILE_TO_THE_SERVER)
    pid_file = tmp_path / "pid"
    env = dict(os.environ, PYTHONPATH=str(ROOT), ATTN_TEST_PID=str(pid_file))
    run = subprocess.Popen([sys.executable, "-m", "attncli", "check", "--code", f"{tmp_path}/h.py:spins", "--cases",
                            "scooter", "--timeout", "60"], env=env, start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sleeper = None
    try:
        end = time.monotonic() + 20
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < end:
            time.sleep(0.02)
        sleeper = int(pid_file.read_text())
        os.killpg(run.pid, signal.SIGINT)  # as Ctrl-C: the foreground process group
        assert run.wait(timeout=10) == 130
        end = time.monotonic() + 5
        while _running(sleeper) and time.monotonic() < end:
            time.sleep(0.02)
        assert not _running(sleeper), "what the interrupted case started outlived the run"
    finally:
        run.kill()
        if sleeper and _running(sleeper):
            os.kill(sleeper, signal.SIGKILL)


def test_each_function_in_a_class_is_out_of_one_point_a_case_whatever_its_classmates_return(tmp_path):
    """A user trial: a case's point was shared by the stages the *last* file returned, so a function that
    returned the output alone was out of 2 alone and out of 1 beside one returning (output, weights)."""
    textbook = (ROOT / "tests" / "code_samples" / "textbook.py").read_text().replace(
        "def scaled_dot_product_attention", "def attention")
    (tmp_path / "both.py").write_text(textbook)  # returns (output, weights)
    (tmp_path / "alone.py").write_text(textbook + "\n\ndef output_only(Q, K, V):\n    return attention(Q, K, V)[0]\n")
    for order in ((f"{tmp_path}/alone.py:output_only", f"{tmp_path}/both.py:attention"),
                  (f"{tmp_path}/both.py:attention", f"{tmp_path}/alone.py:output_only")):
        done = attn("--code", order[0], "--code", order[1], "--cases", "scooter,random", "--format", "csv")
        rows = {row.split(",")[0].rsplit("/", 1)[1]: row.split(",")[1:4] for row in done.output.strip().splitlines()[1:]}
        assert rows == {"alone.py:output_only": ["2", "2", "100.0"], "both.py:attention": ["2", "2", "100.0"]}, order
        doc = json.loads(attn("--code", order[0], "--code", order[1], "--cases", "scooter,random", "--format",
                              "json").output)
        assert [(f["score"], f["max"]) for f in doc["files"]] == [(2, 2), (2, 2)]
        table = attn("--code", order[0], "--code", order[1], "--cases", "scooter,random", "--format", "table").output
        assert "answered" not in table  # a function answers what it returns, not what its classmates did
        for f in doc["files"]:  # each stage's points and worth are its share: they add up to the score
            stages = [stage for case in f["cases"].values() for stage in case["stages"].values()]
            assert (sum(st["points"] for st in stages), sum(st["worth"] for st in stages)) == (2, 2), f["file"]


@pytest.mark.slow  # the supervisor's answer is awaited to the case's limit, grace and slack: 10 s
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a subreaper is Linux's")
def test_a_function_object_that_stops_its_supervisor_ends_its_case():
    """A user trial: check_code hung for ever on a function object that stopped (SIGSTOP) its supervisor."""
    import signal

    def stops_its_parent(Q, K, V):
        os.kill(os.getppid(), signal.SIGSTOP)
        return np.zeros((Q.shape[0], V.shape[1]))

    (case,) = check_code(stops_its_parent, cases="scooter", timeout=0.1).cases
    assert case.kind == "crash" and "the process supervising it was stopped or killed" in case.failure
