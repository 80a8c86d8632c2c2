"""JSON as we read it everywhere: a key twice in one object is an error naming the key, and the
slips people make writing numbers by hand get a hint."""

import json

import pytest
from conftest import SAMPLES

from attncli.base.errors import InputError
from attncli.document.loading import parse_json
from tests.conftest import SCOOTER, assert_error

SCOOTER_TEXT = json.dumps(SCOOTER)


@pytest.mark.parametrize("text, key", [
    ('{"Q": [1], "Q": [2]}', "Q"),
    ('{"a": {"b": 1, "b": 2}}', "b"),                  # at any depth
    ('[{"x": 1}, {"y": 1, "y": 1}]', "y"),             # inside lists, even with equal values
])
def test_duplicate_keys_are_refused(text, key):
    with pytest.raises(InputError) as caught:
        parse_json(text, "p.json")
    assert caught.value.message == f'invalid JSON: the key "{key}" appears twice in one object'


def test_the_same_key_in_different_objects_is_fine():
    assert parse_json('[{"a": 1}, {"a": 2}]', "p.json") == [{"a": 1}, {"a": 2}]


def test_duplicate_key_in_a_problem_file(run, problem_file):
    # issue 9: the last "Q" won silently.
    path = problem_file('{"Q": [0, 4], "K": [[1, 0]], "V": [[1]], "Q": [4, 0]}')
    assert_error(run("compute", path), "p.json: invalid JSON: the key \"Q\" appears twice")


def test_duplicate_key_in_an_answers_file(run, problem_file):
    problem = problem_file(SCOOTER_TEXT)
    answers = problem_file('{"weights": [[0.0454, 0.7679, 0.1867]], "weights": [[1, 0, 0]]}', "a.json")
    assert_error(run("check", answers, problem), "a.json: invalid JSON: the key \"weights\" appears twice")


def test_duplicate_key_in_a_heads_entry_of_answers(run, problem_file):
    problem = problem_file(SCOOTER_TEXT)
    answers = problem_file('{"heads": [{"scores": [[0, 4, 2]], "scores": [[1, 1, 1]]}]}', "a.json")
    assert_error(run("check", answers, problem), 'the key "scores" appears twice')


@pytest.mark.parametrize("text, lenient, message", [
    # the key given twice, then a trailing comma: the comma was named, with the line and column past the key
    ('{"weights": [[0.05, 0.77, 0.19]], "weights": [[1, 0, 0]],}', False,
     'invalid JSON at line 1, column 35: the key "weights" appears twice in one object; and at line 1, column 58: '
     "Expecting property name enclosed in double quotes; --lenient-json reads trailing commas, not a key given twice"),
    ('{"weights": [[0.05, 0.77, 0.19]], "weights": [[1, 0, 0]],}', True,
     'invalid JSON at line 1, column 35: the key "weights" appears twice in one object'),
    # a trailing comma, then the key given twice: both, in the order they come
    ('{"weights": [[0.05, 0.77, 0.19],],\n "weights": [[1, 0, 0]]}', False,
     'invalid JSON at line 1, column 33: Expecting value; and at line 2, column 2: the key "weights" appears twice'),
    ('{"weights": [[0.05, 0.77, 0.19],], // mine\n "weights": [[1, 0, 0]]}', True,
     'invalid JSON at line 2, column 2: the key "weights" appears twice in one object'),
])
def test_a_key_given_twice_beside_a_slip_lenient_reading_forgives_is_named(run, problem_file, text, lenient, message):
    """The lenient reading forgave the trailing comma, then met the key given twice, and showed the
    strict reading's error about the comma: the key given twice is the error no reading forgives."""
    problem = problem_file(SCOOTER_TEXT)
    answers = problem_file(text, "a.json")
    assert_error(run("check", answers, problem, *(["--lenient-json"] if lenient else [])), f"a.json: {message}")


def test_a_repeated_key_is_found_by_its_place_in_the_text():
    from attncli.document.json_text import repeated_key_at

    assert repeated_key_at('{"a": {"b": 1}, "c": [{"b": 2}, {"b": 3, "x\\"": "b"}],\n "d": {"e": 1, "e": 2}}') \
        == (2, 16, "e")
    assert repeated_key_at('{"a": 1, "b": [1,], "a": 2,}') == (1, 21, "a")  # the text need not parse
    assert repeated_key_at('[{"a": 1}, {"a": 2}]') is None and repeated_key_at('{"a": "a", "b": "a"}') is None
    # a closing brace ends its object's keys: the outer object's "k" is its first, beside a slip
    assert repeated_key_at('{"a": {"k": 1}, "k": 2,}') is None
    assert repeated_key_at('[{"k":1},{"k":2}]') is None
    assert repeated_key_at('{"a": {"k": 1}, "b": 2, "a": 3,}') == (1, 25, "a")


def test_duplicate_key_in_inline_json(run):
    assert_error(run("compute", "--q", '{"a": 1, "a": 2}', "--k", "1", "--v", "1"),
                 '--q: invalid JSON: the key "a" appears twice')


@pytest.mark.parametrize("text, hint", [
    ("[[.5, 1]]", "JSON numbers need a leading zero: 0.5"),
    ("[1, -.5]", "JSON numbers need a leading zero: 0.5"),
    ("[1., 2]", "JSON numbers need a digit after the point: 1.0"),
    ("[[2, 0], [1, \u22121]]", "JSON numbers take the ASCII minus: -1, not \u22121"),  # copied from a PDF
])
def test_hand_written_number_slips_get_a_hint(run, text, hint):
    result = run("compute", "--q", "1,0", "--k", text, "--v", "1")
    assert_error(result, "--k: invalid JSON at line 1", hint)


def test_no_hint_for_other_json_errors():
    with pytest.raises(InputError) as caught:
        parse_json("[1, 2", "p.json")
    assert "(" not in caught.value.message


@pytest.mark.parametrize("text, where, token", [
    ('{"Q": [[0, 4]], "K": [[1, 0]], "V": [[1]], "kv_heads": NaN}', "kv_heads", "NaN"),
    ('{"Q": [[0, 4]], "K": [[1, 0]], "V": [[1]], "rope": {"scaling": {"rope_type": "linear", "factor": Infinity}}}',
     "rope.scaling.factor", "Infinity"),
    ('{"Q": [[0, 4]], "K": [[1, 0], [0, -Infinity]], "V": [[1], [2]]}', "K[1][1]", "-Infinity"),
    ('{"Q": [[0, 4]], "K": [[1, 0]], "V": [[1]], "q_norm": {"type": "rms", "weight": [1, 1], "eps": 1e999}}',
     "q_norm.eps", "1e999"),
])
def test_a_nan_or_infinity_names_its_key(run, problem_file, text, where, token):
    """Found by a trial of merged main as its users would use it (issues 18-20): a NaN or Infinity in a
    document names the key it stands in."""
    result = run("compute", problem_file(text), "--stages", "weights")
    assert_error(result, "p.json: ", f"invalid JSON at {where}: ", token)


def test_a_nan_in_an_answer_file_names_its_stage(run, problem_file):
    """Found by a trial of merged main as its users would use it (issues 18-20): a NaN in an answers file
    names the stage and cell it stands in."""
    answers = problem_file('{"weights": [[0.05, NaN, 0.19]]}', "answers.json")
    result = run("check", answers, SAMPLES / "scooter.json")
    assert_error(result, "answers.json: invalid JSON at weights[0][1]: NaN is not valid JSON")


# A key twice where JSON comes as text inside a value (an object key as an .npz holds it: rope,
# q_norm), or as an .npz member twice: the last one was taken, against "a key given twice is an error".
@pytest.mark.parametrize("key, text, repeated", [
    ("rope", '{"base": 10, "base": 20}', "base"),
    ("rope", '{"scaling": {"rope_type": "linear", "factor": 2, "factor": 4}}', "factor"),
    ("q_norm", '{"type": "rms", "type": "layer", "weight": [1, 1]}', "type"),
])
def test_a_key_twice_in_json_text_inside_a_document_is_refused(run, key, text, repeated):
    doc = {"Q": [[1, 0]], "K": [[1, 0]], "V": [[1]], key: text}
    assert_error(run("compute", "-", input=json.dumps(doc)),
                 f'<stdin>: {key}, given as JSON text: the key "{repeated}" appears twice in one object')
    over = run("compute", "-", "--rope-base", "5", input=json.dumps(doc))  # laid under an option too
    if key == "rope":
        assert_error(over, f'<stdin>: rope, given as JSON text: the key "{repeated}" appears twice')
    nested = json.dumps({**doc, key: "@"}).replace('"@"', text)  # as an object: refused as before
    assert_error(run("compute", "-", input=nested), f'the key "{repeated}" appears twice in one object')


def npz_with(tmp_path, members) -> str:
    import io
    import warnings
    import zipfile

    import numpy as np

    path = tmp_path / "twice.npz"
    with warnings.catch_warnings(), zipfile.ZipFile(path, "w") as archive:
        warnings.simplefilter("ignore")  # zipfile warns of the duplicate name it writes
        for name, value in members:
            buffer = io.BytesIO()
            np.save(buffer, np.asarray(value))
            archive.writestr(name, buffer.getvalue())
    return str(path)


@pytest.mark.parametrize("twice", ["Q.npy", "heads/weights.npy"])
def test_an_npz_member_twice_is_refused(run, tmp_path, twice):
    members = [("Q.npy", [[1.0, 0.0]]), ("K.npy", [[1.0, 0.0]]), ("V.npy", [[1.0]]),
               ("heads/weights.npy", [[[1.0]]]), (twice, [[9.0, 9.0]] if twice == "Q.npy" else [[[0.5]]])]
    path = npz_with(tmp_path, members)
    assert_error(run("compute", path), f'twice.npz: cannot read .npz: it holds "{twice}" twice; a key given twice is '
                 "an error, as in JSON: keep one")
    assert_error(run("check", path, "-f", "json"), f'it holds "{twice}" twice')
