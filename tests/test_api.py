"""The Python API: `from attncli import attend, check`, its rendering, and that it stays light."""

import io
import re
import subprocess
import sys

import numpy as np
import pytest
from rich.console import Console

import attncli
from attncli import AttnError, InputError, Marks, attend, check, view
from tests.conftest import ROOT, SCOOTER


def test_attend_returns_every_stage_as_arrays():
    trace = attend(**SCOOTER)
    assert trace.weights.shape == (1, 1, 3) and np.allclose(trace.weights[0, 0], [0.0454, 0.7679, 0.1867],
                                                            atol=5e-5)
    assert np.allclose(trace.scaled, trace.scores / np.sqrt(2)) and trace.masked is None
    masked = attend(Q=np.eye(2), K=np.eye(2), V=np.array([[1.0], [3.0]]), mask=np.array([[True, False]] * 2))
    assert masked.weights[:, :, 1].max() == 0 and np.allclose(masked.final, [[1], [1]])
    inverted = attend(Q=np.eye(2), K=np.eye(2), V=[[1], [3]], mask=[[True, False]] * 2, invert_mask=True)
    assert np.allclose(inverted.final, [[3], [3]])
    heads = attend(X=np.eye(2), W_Q=np.eye(2), W_K=np.eye(2), W_V=np.eye(2), heads=2, scale=1.0)
    assert heads.weights.shape == (2, 2, 2) and heads.scale == 1.0


def test_bad_input_raises_the_core_error_naming_the_field_without_cli_advice():
    with pytest.raises(InputError, match="K has 3 columns but Q has 2") as caught:
        attend(Q=[[1, 2]], K=[[1, 2, 3]], V=[[1]])
    assert "--" not in str(caught.value)
    with pytest.raises(TypeError, match="'Kk'"):
        attend(Q=[[1]], Kk=[[1]], V=[[1]])
    with pytest.raises(AttnError, match="weights has shape"):
        check({"weights": [[1, 0]]}, attend(**SCOOTER))


def test_check_marks_arrays_and_lists_with_the_cli_rules():
    trace = attend(**SCOOTER)
    marks = check({"scaled": [[0, 4, 2]], "weights": np.array([[0.0159, 0.8668, 0.1173]])}, trace)
    assert isinstance(marks, Marks) and list(marks) == ["scaled", "weights"]
    assert marks.score == (4, 6) and not marks.all_correct
    assert marks["scaled"].diagnosis == ("no_scale",) and marks["weights"].count("carried") == 3
    assert marks.to_dict()["stages"]["scaled"]["wrong"] == 2
    assert check({"weights": [0.0454, 0.7679, 0.1867]}, dict(SCOOTER)).all_correct
    assert not check({"weights": [0.0454, 0.7679, 0.1967]}, trace).all_correct
    assert check({"weights": [0.0454, 0.7679, 0.1967]}, trace, tol=0.02).all_correct


def render(obj, width=100) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(obj)
    return console.file.getvalue()


def test_a_trace_and_marks_render_as_the_terminal_tables_through_their_views():
    trace = attend(**SCOOTER, query_labels=["it"], key_labels=["cat", "sat", "mat"])
    text = render(view(trace))
    assert "weights = softmax(scaled) over keys" in text and "0.7679" in text and "│ it │" in text
    html = view(trace)._repr_html_()
    assert '<pre class="header">' in html and ">0.7679<" in html and "mat" in html and "<script" not in html
    marks = check({"weights": [0.0454, 0.7679, 0.1967]}, trace)
    assert "0.1967 ✗ 0.1867" in render(marks) and "0.1967 ✗ <span class=exp>0.1867</span>" in marks._repr_html_()
    assert render(view(marks)) == render(marks) and "0.1867</span>" in view(marks)._repr_html_()
    assert repr(marks) == "<Marks 2/3 cells right: weights>"
    with pytest.raises(TypeError, match="not dict"):
        view({"weights": [1]})


def test_the_core_is_free_of_views():
    """A trace is a record: it neither renders itself nor imports a view (rich shows its repr)."""
    trace = attend(**SCOOTER)
    assert not hasattr(trace, "_repr_html_") and not hasattr(trace, "__rich_console__")
    code = ("import sys; from attncli.compute.attention import attend; from attncli.document.reading import build_problem; "
            "attend(build_problem({'Q': [[1]], 'K': [[1]], 'V': [[1]]})); "
            "print(sorted(m for m in sys.modules if m.startswith(('attncli.render', 'rich'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "[]"


def test_import_attncli_is_light_and_the_api_loads_no_cli():
    code = ("import sys, attncli; light = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('numpy', 'rich', 'typer', 'attncli')); "
            "from attncli import attend, check; t = attend(Q=[[1]], K=[[1]], V=[[1]]); check({'weights': [1]}, t); "
            "print(light, [m for m in sys.modules if m.startswith(('typer', 'attncli.cli', 'attncli.commands', "
            "'click'))])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "['attncli'] []"
    assert "attend" in dir(attncli)
    with pytest.raises(AttributeError):
        attncli.nothing


def test_the_python_api_page_examples_run():
    page = (ROOT / "docs" / "reference" / "python.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert len(blocks) == 2  # attend and check, then view
    namespace = {}
    for block in blocks:
        exec(compile(block, "docs/reference/python.md", "exec"), namespace)
    assert "weights = softmax(scaled) over keys" in render(namespace["view"](namespace["trace"]))


def test_typed_floats_count_their_decimals_and_computed_ones_do_not():
    trace = attend(**SCOOTER)
    assert check({"weights": [0.05, 0.77, 0.19]}, trace).all_correct  # typed at 2 decimals
    assert not check({"weights": [0.0454, 0.7679, 0.1967]}, trace).all_correct
    assert check({"weights": trace.weights[0].tolist()}, trace).all_correct  # computed: the problem's decimals
    # an array: marked at the problem's decimals (2 here), whatever its floats hold (issue 29)
    assert check({"weights": trace.weights[0] + 3e-3}, trace).all_correct
    assert not check({"weights": trace.weights[0] + 3e-2}, trace).all_correct
    assert not check({"weights": trace.weights[0] + 3e-4}, trace, decimals=4).all_correct
    assert check({"weights": [0.0, 0.8, 0.2]}, trace)["weights"].count("imprecise") == 3  # fewer than decimals=2
    assert check({"weights": [0.1, 0.8, 0.2]}, trace, decimals=1).all_correct
    marks = check({"weights": [0.0454, 0.7679, 0.1867]}, trace, require=("weights", "output"))
    assert marks["output"].count("missing") == 2 and marks.score == (3, 5) and not marks.all_correct


def test_the_docstring_examples_run():
    import doctest

    import attncli.api

    for module in (attncli, attncli.api):
        assert doctest.testmod(module).failed == 0, module.__name__


# A masked array's mask was dropped: np.ma.array([[0, 999]], mask=[[0, 1]]) computed with 999.
@pytest.mark.parametrize("Q, field", [(np.ma.array([[0, 999]], mask=[[0, 1]]), "Q"),
                                      ([np.ma.array([0, 999], mask=[0, 1])], "Q[0]"),
                                      ([[0, np.ma.masked]], "Q[0][1]")])
def test_a_masked_array_input_is_refused_naming_it(Q, field):
    with pytest.raises(InputError, match=r"masked array \(numpy\.ma\) with 1 masked cell") as error:
        attend(Q=Q, K=[[1, 0], [0, 1]], V=[[1], [2]])
    assert error.value.field == field and error.value.message.startswith(field + " is a masked array")


def test_a_masked_answer_is_refused_and_an_unmasked_one_is_its_data():
    trace = attend(Q=[[0, 1]], K=[[1, 0], [0, 1]], V=[[1], [2]])
    for answers, field in (({"weights": np.ma.array([[0.33, 0.67]], mask=[[0, 1]])}, "weights"),
                           ({"heads": [{"weights": np.ma.array([[0.33, 0.67]], mask=[[1, 0]])}]}, "heads[0].weights")):
        with pytest.raises(InputError, match="masked array") as error:
            check(answers, trace)
        assert error.value.field == field
    assert check({"weights": np.ma.array(trace.weights[0])}, trace).score == (2, 2)  # nothing masked: its data
    plain = attend(Q=np.ma.array([[0, 4]]), K=[[1, 0], [0, 1]], V=[[1], [2]])
    assert plain.scores.tolist() == [[[0.0, 4.0]]]


# attend(..., dtype=np.float32), the type rather than its name, was a TypeError.
@pytest.mark.parametrize("dtype, name", [(np.float32, "float32"), (np.dtype("float32"), "float32"),
                                         (np.float64, "float64"), (float, "float64"), ("float32", "float32")])
def test_dtype_takes_numpys_types_as_their_names(dtype, name):
    trace = attend(Q=[[0, 4]], K=[[1, 0], [0, 1]], V=[[1], [2]], dtype=dtype)
    assert trace.problem.dtype == name and trace.weights.dtype == np.dtype(name)
    assert check({"weights": [[0.018, 0.982]]}, {"Q": [[0, 4]], "K": [[1, 0], [0, 1]], "V": [[1], [2]],
                                                 "dtype": dtype}).trace.problem.dtype == name


@pytest.mark.parametrize("dtype, found", [(np.float16, "dtype is numpy's float16; expected float64 or float32"),
                                          (np.int8, "dtype is numpy's int8"), (object, "dtype is type")])
def test_other_dtypes_are_refused_by_name(dtype, found):
    with pytest.raises(InputError, match=re.escape(found)) as error:
        attend(Q=[[0, 4]], K=[[1, 0], [0, 1]], V=[[1], [2]], dtype=dtype)
    assert error.value.field == "dtype"
