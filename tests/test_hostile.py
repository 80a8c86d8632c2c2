"""Issue 17, round three of "nothing silently ignored or misread": one test per item a hostile
user found, each failing on the code before the fix (the fuzzers in tests/test_fuzz.py generate
the new keys and run the properties over them)."""

import json

import numpy as np
import pytest

from attncli.compute import limits
from attncli.document.reading import build_problem
from attncli.document.text_input import parse_csv
from attncli.problem import masks
from tests.conftest import SAMPLES, SCOOTER, assert_error

QKV = ["--q", "1,0;0,1", "--k", "1,0;0,1", "--v", "1;2"]


# 1. Piped stdin beside matrix options is read; the options override its keys.
def test_piped_stdin_is_read_beside_matrix_options(run):
    doc = run.json("compute", *QKV, input='{"mask": "causal"}')
    assert doc["mask"] == "causal" and doc["heads"][0]["weights"][0] == [1.0, 0.0]
    over = run.json("compute", *QKV, input=json.dumps({"Q": [[9, 9], [9, 9]], "scale": 2}))
    assert over["Q"] == [[1, 0], [0, 1]] and over["scale"] == 2  # --q over the piped Q; its scale stays


def test_empty_stdin_beside_matrix_options_gives_nothing(run):
    assert run.json("compute", *QKV, input="")["heads"][0]["weights"][0][0] > 0.5
    assert run.json("compute", *QKV, input=" \n")["mask_rule"] == "none"


def test_piped_garbage_beside_matrix_options_is_an_error(run):
    assert_error(run("compute", *QKV, input="not json"), "<stdin>: invalid JSON")


# 2. One column of decimals written with commas is not two columns of whole numbers.
def test_a_column_of_decimal_commas_is_refused(run, tmp_path):
    (tmp_path / "v.csv").write_text("0,5\n1,25\n-0,75\n")
    result = run("compute", "--q", "1,0;0,1;1,1", "--k", "1,0;0,1;1,1", "--v", str(tmp_path / "v.csv"))
    assert_error(result, 'v.csv: row 1 is "0,5"', "decimals written with commas", "(0.5)",
                 "add a header row (d0,d1)", 'quote the cells ("0","5")')


@pytest.mark.parametrize("text, matrix", [
    ("d0,d1\n0,5\n1,25\n", [[0, 5], [1, 25]]),        # a header says two columns
    ('"0","5"\n"1","25"\n', [[0, 5], [1, 25]]),       # so do quotes
    ("0.5\n1.25\n", [[0.5], [1.25]]),                 # decimals with a point
    ("0,-5\n1,25\n", [[0, -5], [1, 25]]),             # a sign: no decimal comma
    ("0,5,1\n1,25,0\n", [[0, 5, 1], [1, 25, 0]]),     # three fields
    ("it,0,5\n", [[0, 5]]),                           # a label column
])
def test_unambiguous_two_column_files_still_read(text, matrix):
    assert parse_csv(text, "x.csv")[0] == matrix


def test_a_two_column_mask_of_whole_numbers_reads(run):
    assert parse_csv("1,0\n1,1\n", "m.csv", "mask")[0] == [[1, 0], [1, 1]]  # a mask has no decimals


# 3. ALiBi distances are exact whole numbers rounded once; far positions warn.
def test_alibi_distances_are_rounded_once_into_float32():
    # 2^53 + 2^29 + 1: float64 rounds it to a float32 tie (2^53 + 2^29), which float32 rounds down.
    problem = build_problem({"Q": [[1.0]], "K": [[1.0]], "V": [[1.0]], "alibi": [1], "dtype": "float32",
                             "q_positions": [2**53], "k_positions": [-(2**29 + 1)]})
    assert int(masks.bias(problem)[0, 0, 0]) == -(2**53 + 2**30)


def test_alibi_past_float32_whole_numbers_warns(run):
    args = ["compute", "--q", "0,4", "--k", "1,0;0,1;.5,.5", "--v", "2,0;0,2;1,-1", "--alibi-slopes", "1e6",
            "--q-positions", "9007199254740992", "--dtype", "float32", "--format", "json"]
    result = run(*args)
    assert result.exit_code == 0
    assert result.stderr.splitlines() == [
        "warning: ALiBi distances |q_pos − k_pos| reach 9,007,199,254,740,992, past 2^24 = 16,777,216, beyond "
        "which float32 does not hold every whole number: distances are rounded (to a multiple of up to "
        "1,073,741,824), so keys at different distances may get the same ALiBi penalty (float64 holds them up "
        "to 2^53: use --dtype float64)"]
    assert run(*args[:-4], "--format", "json").stderr == ""  # float64 holds them: no warning
    assert run(*args[:-6], "--q-positions", str(2**24), "--dtype", "float32", "--format", "json").stderr == ""


def test_rope_angles_at_far_positions_warn(run):
    args = ["compute", "--q", "0,4", "--k", "1,0;0,1", "--v", "2;1", "--rope", "--format", "json"]
    assert run(*args, "--q-positions", "4000000000").stderr == ""
    far = run(*args, "--q-positions", "9007199254740992")
    assert far.exit_code == 0 and far.stderr.startswith("warning: RoPE angles position · θ_i are float64, and "
                                                         "at position 9,007,199,254,740,992 they may be off")


# 4. No value means "off": an option is off when it is left out.
@pytest.mark.parametrize("option, value", [("--softcap", ""), ("--softcap", "none"), ("--sinks", ""),
                                           ("--sinks", "null"), ("--alibi-slopes", "None"), ("--window", ""),
                                           ("--key-mask", "null"), ("--q-positions", " ")])
def test_empty_or_null_option_values_are_refused(run, option, value):
    assert_error(run("compute", *QKV, option, value), f"{option}: is", "which gives no value",
                 f"an option is off when it is left out: drop {option}")


def test_a_null_side_of_a_window_is_still_unbounded(run):
    assert run.json("compute", *QKV, "--window", "none,0")["window"] == [None, 0]


def test_causal_lower_right_with_keys_after_every_query_is_refused(run):
    three = ["--q", "1,0;0,1;1,1", "--k", "1,0;0,1;1,1", "--v", "1;2;3", "--mask", "causal_lower_right"]
    assert_error(run("compute", *three, "--k-positions", "5,6,7"),
                 "--k-positions: k_positions start at 5, after every query position that mask causal_lower_right "
                 "sets (Lk − Lq … Lk − 1 = 0 … 2)", "give mask causal with the queries' q_positions")
    some = run("compute", *three, "--k-positions", "2,6,7", "--format", "json")
    assert some.exit_code == 0 and "every key is masked for query 0, 1" in some.stderr  # some rows: a warning


# 5. -o never writes over an input.
def test_output_over_the_do_file_is_refused(run, tmp_path):
    d_o = tmp_path / "dO.json"
    d_o.write_text("[[1, 1]]")
    assert_error(run("compute", str(SAMPLES / "scooter.json"), "--do", str(d_o), "-o", str(d_o)),
                 "is an input of this run", "refusing to overwrite it")
    assert d_o.read_text() == "[[1, 1]]"


@pytest.mark.parametrize("option, text", [("--mask", "true,false\n"), ("--bias", "0,-inf\n"),
                                          ("--q", "[[1, 0]]"), ("--wo", "[[1]]")])
def test_output_over_any_matrix_file_is_refused(run, tmp_path, option, text):
    path = tmp_path / ("m.csv" if option in ("--mask", "--bias") else "m.json")
    path.write_text(text)
    args = {"--q": ["--k", "1,0;0,1", "--v", "1;2"], "--wo": ["--q", "1,0", "--k", "1,0;0,1", "--v", "1;2"]}
    base = args.get(option, ["--q", "1,0", "--k", "1,0;0,1", "--v", "1;2"])
    assert_error(run("compute", *base, option, str(path), "-o", str(path)), "is an input of this run")
    assert path.read_text() == text


# 6. --explain --tiles with huge numbers: e-notation, as plain --explain.
def test_explain_tiles_with_huge_numbers_uses_e_notation(run):
    result = run("compute", "--q", "1,0", "--k", "1,0;0,1", "--v", "1e40;2", "--explain", "--tiles", "1,1")
    assert result.exit_code == 0, result.stderr
    assert "O = 0.0000 · [0.0000] + 1.0000 · [1.0000e+40] = [1.0000e+40]" in result.stdout
    assert "output = O / l = [1.0000e+40] / 1.4931 = [6.6975e+39]" in result.stdout


# 7. --do with JSON is counted by the memory guard, and the advice works with --do.
def test_the_guard_counts_the_backward_tables_in_json(run, monkeypatch):
    problem = build_problem(SCOOTER | {"dO": "ones"})
    shown = ("output", "d_weights", "d_scores", "grads")
    with_grads = limits.view_bytes(problem, "json", shown)
    assert with_grads - limits.view_bytes(problem, "json", ("output",)) >= 2 * 3 * limits.JSON_NUMBER
    big = 1500  # 1500 × 1500 score-sized arrays: the JSON of d_weights and d_scores alone is ~430 MB
    q = np.zeros((big, 2)).tolist()
    doc = {"Q": q, "K": q, "V": q}
    plain = limits.needs(build_problem(doc), "json", ("output", "weights"))
    backward = limits.needs(build_problem(doc | {"dO": "ones"}), "json",
                            ("output", "weights", "d_output", "d_V", "d_weights", "D", "d_scores", "d_Q", "d_K",
                             "grads"))
    assert backward["its JSON"] - plain["its JSON"] > 2 * big * big * limits.JSON_NUMBER


def test_the_guard_advises_what_works_with_do(run, monkeypatch, tmp_path):
    monkeypatch.setattr(limits, "available_bytes", lambda: 3_000_000)
    q = tmp_path / "q.npy"
    np.save(q, np.zeros((200, 4)))
    result = run("compute", "--q", str(q), "--k", str(q), "--v", str(q), "--do", "ones", "--format", "json")
    assert_error(result, "this problem would need", "--output grads.npz (every stage and gradient, no text)")
    assert "--stages output" not in result.stderr  # --do refuses it


# 12. A file's dO with --tiles adds the gradients, as --do does.
def test_a_files_do_with_tiles_adds_the_gradients(run):
    from_file = run.json("compute", "--tiles", "1,2", input=json.dumps(SCOOTER | {"dO": "ones"}))
    from_option = run.json("compute", "--tiles", "1,2", "--do", "ones", input=json.dumps(SCOOTER))
    assert "d_Q" in from_file["heads"][0] and "grads" in from_file
    assert from_file["grads"] == from_option["grads"] and from_file["heads"][0]["tiles"] == from_option["heads"][0]["tiles"]


# 10. (part) A float32 softcap or sink that the dtype cannot hold is named, not "output overflows";
# no numpy RuntimeWarning beside the error line.
@pytest.mark.parametrize("option, value, fragment", [
    ("--sinks", "1e39", "--sinks: sinks[0] is 1e+39, beyond float32's largest finite value 3.4e+38"),
    ("--softcap", "1e39", "--softcap: softcap is 1e+39, which is ∞ in float32"),
    ("--softcap", "1e-50", "--softcap: softcap is 1e-50, which is 0 in float32")])
def test_float32_variants_out_of_range_are_named(run, option, value, fragment):
    assert_error(run("compute", *QKV, "--dtype", "float32", option, value), fragment, "or use --dtype float64")


# 9. Out of memory in `check` advises no option of `compute`.
def test_out_of_memory_in_check_advises_checks_own_way(run, monkeypatch):
    import attncli.commands.check_run

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(attncli.commands.check_run, "mark_document", exhausted)
    result = run("check", str(SAMPLES / "scooter.json"), "--weights", "0.1,0.8,0.1")
    assert_error(result, "out of memory; check keeps every stage of the problem in memory")
    assert "--stages" not in result.stderr and "--output" not in result.stderr


# 8. --explain is bounded: refused past a stated size, saying which --row or --head to choose.
@pytest.mark.parametrize("shapes, options, fragment", [
    (((1, 2000), (2, 2000), (2, 1)), [], "this problem has rows 2,000 numbers wide"),
    (((1, 2), (5000, 2), (5000, 1)), [], "this problem has 5,000 keys"),
    (((1, 40), (2, 40), (2, 20)), ["--heads", "20"], "this problem has 20 heads: choose one with --head N"),
    (((70, 2), (2, 2), (2, 1)), ["--row", *",".join(str(i) for i in range(65)).split(",")], "65 rows × heads")])
def test_explain_refuses_what_is_not_hand_sized(run, tmp_path, shapes, options, fragment):
    paths = []
    for name, shape in zip("qkv", shapes):
        np.save(tmp_path / f"{name}.npy", np.ones(shape))
        paths += [f"--{name}", str(tmp_path / f"{name}.npy")]
    if options[:1] == ["--row"]:
        options = [a for i in options[1:] for a in ("--row", i)]
    assert_error(run("compute", *paths, *options, "--explain"), "--explain: is a hand calculation", fragment)


def test_explain_of_one_head_among_many_is_allowed(run, tmp_path):
    for name, shape in zip("qkv", ((1, 40), (2, 40), (2, 20))):
        np.save(tmp_path / f"{name}.npy", np.ones(shape))
    result = run("compute", *(a for n in "qkv" for a in (f"--{n}", str(tmp_path / f"{n}.npy"))),
                 "--heads", "20", "--head", "3", "--explain")
    assert result.exit_code == 0, result.stderr


# 10. (part) An angle beyond float64 names rope.base, not "scale the inputs down".
def test_an_overflowing_rope_angle_names_rope_base(run, tmp_path):
    np.save(tmp_path / "q.npy", np.ones((1, 200)))
    np.save(tmp_path / "k.npy", np.ones((2, 200)))
    result = run("compute", "--q", str(tmp_path / "q.npy"), "--k", str(tmp_path / "k.npy"), "--v", "1;2",
                 "--rope-base", "1e-300", "--q-positions", "9007199254740992")
    assert_error(result, "rope.base is 1e-300: at position 9,007,199,254,740,992 the angle position · θ_98",
                 "is beyond float64; expected a base of at least 1")
    assert "scale the inputs down" not in result.stderr
