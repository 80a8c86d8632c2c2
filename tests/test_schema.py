"""One schema for the document (attncli/document/schema.py): every key `attn compute --format json` writes is
in it and reads back to the same result; echoes and results that disagree with the problem are
errors naming the keys; options over a file's keys replace them or are refused, never ignored."""

import json

import pytest
from conftest import SAMPLES, SCOOTER

from attncli.base.errors import InputError
from attncli.document import schema
from attncli.document.reading import build_problem, input_keys
from attncli.problem import rules, variants

GQA = {"Q": [[[1, 0], [0, 1]], [[0.5, 0.5], [1, 1]], [[0, 1], [1, 0]], [[1, 2], [0, 1]]],
       "K": [[[1, 0], [0, 1], [1, 1]], [[0, 1], [1, 0], [0.5, 0]]],
       "V": [[[1, 2], [3, 4], [5, 6]], [[0, 1], [1, 0], [2, 2]]]}
PROJECTED = {"X": [[1, 0, 2], [0, 1, 1], [1, 1, 0]], "W_Q": [[1, 0, 0, 1], [0, 1, 1, 0], [1, 1, 0, 0]],
             "W_K": [[0, 1, 1, 0], [1, 0, 0, 1], [0, 0, 1, 1]], "W_V": [[1, 2, 0, 1], [0, 1, 1, 0], [2, 0, 1, 1]],
             "b_Q": [0.1, 0, 0, -0.1], "W_O": [[1, 0], [0, 1], [1, 1], [0, 2]], "b_O": [0.5, -0.5], "heads": 2}
# Every variant: (problem, options). Each is written, read back, and written again.
VARIANTS = {
    "rope": (SCOOTER, ["--rope"]),
    "rope-interleaved": (SCOOTER, ["--rope-style", "interleaved", "--rope-base", "100"]),
    "alibi": (GQA, ["--alibi"]),
    "alibi-slopes": (SCOOTER, ["--alibi-slopes", "0.5"]),
    "softcap": (SCOOTER, ["--softcap", "1.5"]),
    "sinks": (SCOOTER, ["--sinks", "0.3"]),
    "window": ({**SCOOTER, "Q": [[0, 4], [1, 1], [2, 0]]}, ["--window", "1,0"]),
    "positions": (SCOOTER, ["--q-positions", "5", "--k-positions", "3,4,5", "--mask", "causal"]),
    "key_mask": (SCOOTER, ["--key-mask", "1,0,1"]),
    "mask-matrix-and-causal": ({**SCOOTER, "Q": [[0, 4], [1, 1], [2, 0]], "mask": [[1, 1, 0], [1, 1, 1], [0, 1, 1]],
                                "causal": True}, []),
    "bias": ({**SCOOTER, "bias": [[0, None, 1]]}, []),
    "projections-W_O": (PROJECTED, []),
    "gqa-3d": (GQA, ["--mask", "causal_lower_right"]),
    "do": (SCOOTER, ["--do", "ones"]),
    "do-projections": (PROJECTED, ["--do", "ones", "--softcap", "2", "--rope"]),
    "tiles": ({**SCOOTER, "Q": [[0, 4], [1, 1], [2, 0]]}, ["--tiles", "2,2"]),
    "explain": (SCOOTER, ["--explain"]),
    "round": (GQA, ["--round", "3", "--alibi"]),
    "float32": (SCOOTER, ["--dtype", "float32", "--round", "4"]),
    "uniform-rows": ({**SCOOTER, "key_mask": [False, False, False]}, ["--masked-rows", "uniform"]),
    "labels": ({**SCOOTER, "query_labels": ["it"], "key_labels": ["a", "b", "c"], "title": "t",
                "description": "d"}, []),
}


def _write(run, problem_file, doc, options, name="p.json"):
    result = run("compute", problem_file(doc, name), "--format", "json", *options)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def _keys(doc) -> tuple[set, set]:
    heads = doc["heads"] if isinstance(doc.get("heads"), list) else []
    return set(doc), {key for head in heads for key in head}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_key_written_is_in_the_schema_and_reads_back_the_same(run, problem_file, variant):
    doc, options = VARIANTS[variant]
    text = _write(run, problem_file, doc, options)
    top, per_head = _keys(json.loads(text))
    assert top <= set(schema.top_names()), top - set(schema.top_names())
    assert per_head <= set(schema.head_names()), per_head - set(schema.head_names())
    # Read back (without the options, which the file now holds): the same document.
    again = run("compute", problem_file(text, "out.json"), "--format", "json",
                *(["--explain"] if "--explain" in options else []),
                *(o for o in options if o.startswith(("--round", "--tiles"))),
                *([options[options.index("--round") + 1]] if "--round" in options else []),
                *([options[options.index("--tiles") + 1]] if "--tiles" in options else []))
    assert again.exit_code == 0, again.stderr
    assert again.stdout == text


@pytest.mark.parametrize("sample", sorted(p.name for p in SAMPLES.glob("*.json")))
def test_every_sample_reads_back_to_the_same_document(run, sample):
    first = run("compute", SAMPLES / sample, "--format", "json")
    assert first.exit_code == 0, first.stderr
    again = run("compute", "-", "--format", "json", input=first.stdout)
    assert again.exit_code == 0, again.stderr
    assert again.stdout == first.stdout


def test_the_output_only_path_checks_the_results_it_does_not_compute(run):
    text = run("compute", SAMPLES / "causal.json", "--format", "json").stdout
    doc = json.loads(text)
    assert run("compute", "-", "--format", "json", "--stages", "output", input=text).exit_code == 0
    doc["heads"][0]["weights"][1][0] = 0.25
    result = run("compute", "-", "--format", "json", "--stages", "output", input=json.dumps(doc))
    assert result.exit_code == 2
    assert "heads[0].weights[1][0] is 0.25 but recomputing gives" in result.stderr


def test_the_schema_lists_each_key_once_with_a_kind():
    names = [key.name for key in schema.keys()]
    assert len(names) == len(set(names))
    assert all(key.kind in (schema.INPUT, schema.SETTING, schema.LABEL, schema.ECHO, schema.RESULT)
               for key in schema.keys() + schema.HEAD_KEYS)
    assert all(key.source for key in schema.keys() if key.kind == schema.ECHO)


def test_every_rules_and_variants_key_is_an_input_key_and_their_echoes_are_echoes():
    """The schema takes them from the registries (rules.RULES, variants.VARIANTS), not a copy."""
    kinds = {key.name: key.kind for key in schema.keys()}
    for name in rules.key_words():
        assert kinds[name] == schema.INPUT, name
    for variant in variants.VARIANTS:
        assert kinds[variant.name] == schema.INPUT, variant.name
        assert all(kinds[echo] == schema.ECHO and schema.key(echo).source == variant.name for echo, _ in variant.echoes)
    assert set(input_keys()) == set(schema.top_names(schema.INPUT, schema.SETTING, schema.LABEL))


@pytest.mark.parametrize("name", schema.top_names(schema.INPUT, schema.SETTING))
def test_every_input_and_setting_key_is_read_never_accepted_and_ignored(name):
    """A key of the problem with a value nothing could mean is refused, by a message naming it: the
    schema lists no key the reader skips."""
    with pytest.raises(InputError, match=name):
        build_problem({**SCOOTER, name: {"nonsense": 1}})


def test_a_key_the_writer_does_not_list_is_a_bug():
    with pytest.raises(AssertionError, match="weightz"):
        schema.check_output({"attncli": 1, "weightz": 1})
    with pytest.raises(AssertionError, match=r"heads\[\]\.weightz"):
        schema.check_output({"heads": [{"weights": [], "weightz": 1}]})


def _scooter_json(run, *options) -> dict:
    return json.loads(run("compute", "-", "--format", "json", *options, input=json.dumps(SCOOTER)).stdout)


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(d_k=3), "d_k is 3, but from Q (or W_Q) and heads it is 2: d_k is derived"),
    (lambda d: d.update(d_v=5), "d_v is 5, but from V (or W_V) and heads it is 2"),
    (lambda d: d.update(mask_rule="causal"), 'mask_rule is "causal", but from mask, causal, window, key_mask, prefix, q_positions and k_positions it is "none"'),
    (lambda d: d.update(attncli=2), "attncli is 2, but from this version of attn it is 1"),
    (lambda d: d.update(rope_rule="x"), "rope_rule is given, but rope gives none"),
    (lambda d: d["heads"][0]["weights"][0].__setitem__(1, 0.5), "heads[0].weights[0][1] is 0.5 but recomputing"),
    (lambda d: d["heads"][0]["Q"][0].__setitem__(0, 9), "heads[0].Q[0][0] is 9 but recomputing gives 0.0"),
    (lambda d: d["heads"][0]["lse"].__setitem__(0, 1), "heads[0].lse[0] is 1 but recomputing"),
    (lambda d: d.update(output=[[7, 0]]), "output[0][0] is 7 but recomputing"),
    (lambda d: d.update(concat=[[7, 0]]), "concat is given, but this problem has no concat"),
    (lambda d: d.update(warnings=["hi"]), 'warnings is ["hi"] but recomputing gives []'),
    (lambda d: d.update(weights=[[1, 0, 0]]), "weights[0][0] is 1 but recomputing"),
    (lambda d: d["heads"][0].update(masked=[[0, 0, 0]]),
     "heads[0].masked is given, but this problem has no masked"),
    (lambda d: d["heads"][0].update(weight=[[0, 0, 0]]), 'unknown key "weight" in heads[0] (did you mean "weights"?)'),
    (lambda d: d.update(tile_size=[1, 1]), "tile_size is given without the tiles"),
    (lambda d: d["heads"][0].update(tiled_lse=[1]), "given without tile_size"),
    (lambda d: d.update(explanation="x"), "explanation is \"x\"; expected a list of lines"),
])
def test_an_echo_or_result_that_disagrees_is_an_error_naming_it(run, change, message):
    doc = _scooter_json(run)
    change(doc)
    result = run("compute", "-", "--format", "json", input=json.dumps(doc))
    assert result.exit_code == 2
    assert message in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1


def test_results_agree_to_the_decimals_they_were_written_with(run):
    doc = _scooter_json(run)
    doc["heads"][0]["weights"] = [[0.0454, 0.7679, 0.1867]]  # as a person copies them
    assert run("compute", "-", "--format", "json", input=json.dumps(doc)).exit_code == 0
    doc["heads"][0]["weights"] = [[0.0454, 0.7678, 0.1867]]
    result = run("compute", "-", "--format", "json", input=json.dumps(doc))
    assert "heads[0].weights[0][1] is 0.7678 but recomputing gives 0.767917" in result.stderr
    assert "to mark answers, use attn check" in result.stderr


def test_an_option_that_changed_the_problem_is_named_when_its_results_disagree(run):
    text = run("compute", "-", "--format", "json", input=json.dumps(SCOOTER)).stdout
    result = run("compute", "-", "--format", "json", "--scale", "2", input=text)
    assert result.exit_code == 2
    assert "--scale changed the problem these came from" in result.stderr
    rope = run("compute", "-", "--format", "json", "--rope", input=json.dumps(SCOOTER)).stdout
    result = run("compute", "-", "--format", "json", "--rope-base", "100", input=rope)
    assert result.exit_code == 2
    assert "rope_rule is" in result.stderr and "--rope-base changed the problem" in result.stderr


def test_one_head_stages_at_the_top_level_are_head_zeros(run):
    good = _scooter_json(run)["heads"][0]["weights"]
    assert run("compute", "-", "--format", "json", input=json.dumps({**SCOOTER, "weights": good})).exit_code == 0
    many = run("compute", "-", "--format", "json", input=json.dumps({**GQA, "weights": [[1]]}))
    assert many.exit_code == 2 and "but the problem has 4 heads" in many.stderr


def test_alibi_slopes_alone_means_use_these_slopes(run):
    alone = _scooter_json(run, "--alibi-slopes", "0.5")  # via the option: alibi [0.5]
    by_key = run.json("compute", "-", input=json.dumps({**SCOOTER, "alibi_slopes": [0.5]}))
    assert by_key["heads"][0]["masked"] == alone["heads"][0]["masked"]
    assert by_key["alibi_slopes"] == [0.5]
    plain = _scooter_json(run)
    assert by_key["heads"][0]["weights"] != plain["heads"][0]["weights"]
    bad = run("compute", "-", "--format", "json", input=json.dumps({**SCOOTER, "alibi_slopes": ["a"]}))
    assert 'alibi_slopes[0] is the string "a"' in bad.stderr


@pytest.mark.parametrize("doc, message", [
    ({"alibi": True, "alibi_slopes": [0.5]},
     "alibi_slopes [0.5] contradicts alibi (the paper's slopes: [0.00390625])"),
    ({"alibi": [0.25], "alibi_slopes": [0.5]}, "alibi_slopes [0.5] contradicts alibi (its slopes: [0.25])"),
    ({"alibi": False, "alibi_slopes": [0.5]}, "alibi is false but alibi_slopes is given"),
])
def test_alibi_and_alibi_slopes_that_disagree_are_an_error_naming_both(run, doc, message):
    result = run("compute", "-", "--format", "json", input=json.dumps({**SCOOTER, **doc}))
    assert result.exit_code == 2
    assert message in result.stderr


def test_alibi_slopes_that_agree_read_back(run):
    assert build_problem({**SCOOTER, "alibi": True, "alibi_slopes": [0.00390625]}).alibi_rule == "paper"
    assert build_problem({**SCOOTER, "alibi": True, "alibi_slopes": [0.0039]}).alibi_rule == "paper"  # as rounded
    with pytest.raises(InputError, match="contradicts alibi"):
        build_problem({**SCOOTER, "alibi": True, "alibi_slopes": [0.0038]})


def test_mask_option_replaces_the_files_whole_mask_rule(run, problem_file):
    path = problem_file({**SCOOTER, "Q": [[0, 4], [1, 1], [2, 0]], "mask": [[1, 1, 1]] * 3, "causal": True})
    assert None in run.json("compute", path)["heads"][0]["masked"][0]  # the file alone: causal
    doc = run.json("compute", path, "--mask", "1,1,1;1,1,1;1,1,1")
    assert "causal" not in doc
    assert None not in doc["heads"][0]["masked"][0]  # query 0 sees every key: not causal


def test_alibi_option_replaces_the_files_alibi_slopes(run, problem_file):
    path = problem_file({**SCOOTER, "alibi": [0.25], "alibi_slopes": [0.25]})
    doc = run.json("compute", path, "--alibi-slopes", "0.5")
    assert doc["alibi_slopes"] == [0.5]


def test_heads_option_over_a_files_per_head_results(run):
    text = run("compute", SAMPLES / "multihead.json", "--format", "json").stdout
    count = len(json.loads(text)["heads"])
    assert run("compute", "-", "--format", "json", "--heads", str(count), input=text).exit_code == 0
    result = run("compute", "-", "--format", "json", "--heads", "1", input=text)
    assert result.exit_code == 2
    assert f"--heads: 1 contradicts the file's heads, the per-head results of {count} heads" in result.stderr


def test_explain_json_reads_back(run):
    text = run("compute", SAMPLES / "scooter.json", "--format", "json", "--explain").stdout
    assert "explanation" in json.loads(text)
    again = run("compute", "-", "--format", "json", input=text)
    assert again.exit_code == 0, again.stderr
    assert "explanation" not in json.loads(again.stdout)


def test_npz_written_reads_back_with_its_results(run, tmp_path):
    path = tmp_path / "w.npz"
    assert run("compute", SAMPLES / "multihead.json", "-o", path).exit_code == 0
    assert run.json("compute", path)["output"] == run.json("compute", SAMPLES / "multihead.json")["output"]


def test_one_heads_tiles_at_the_top_level_are_head_zeros(run):
    text = run("compute", SAMPLES / "tiny_tiles.json", "--format", "json", "--tiles", "2,2").stdout
    doc = json.loads(text)
    assert len(doc["heads"]) == 1
    doc["tiles"] = doc["heads"][0].pop("tiles")
    assert run("compute", "-", "--format", "json", input=json.dumps(doc)).exit_code == 0, "top-level tiles"
    doc["tiles"][0]["m"][0] += 1
    result = run("compute", "-", "--format", "json", input=json.dumps(doc))
    assert result.exit_code == 2 and "tiles[0].m[0] is" in result.stderr


@pytest.mark.parametrize("variant", ["do-projections", "positions", "alibi", "window", "labels", "gqa-3d"])
def test_every_npz_member_is_a_schema_key(run, problem_file, tmp_path, variant):
    import numpy as np

    doc, options = VARIANTS[variant]
    path = tmp_path / "out.npz"
    assert run("compute", problem_file(doc), "-o", path, *options).exit_code == 0
    with np.load(path) as archive:
        names = archive.files
    for name in names:
        group, _, stage = name.rpartition("/")
        assert (stage in schema.head_names()) if group == "heads" else group == "grads" if group else \
            name in schema.top_names(), name
    assert run("compute", path, "--format", "json").exit_code == 0


def test_a_tile_size_making_more_tiles_than_a_document_holds_is_refused(run):
    doc = {"Q": [[1.0, 0.0]] * 400, "K": [[0.0, 1.0]] * 400, "V": [[1.0, 2.0]] * 400,
           "tile_size": [1, 1], "tiled_max_difference": 0.0}
    result = run("compute", "-", "--format", "json", input=json.dumps(doc))
    assert result.exit_code == 2 and "tile_size [1, 1] makes 160,000 tiles" in result.stderr
