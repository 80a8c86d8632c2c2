"""`attn compute --rope …`: the options, the header line and JSON keys that state the convention,
per-head Q_rope and K_rope in every view, round trips, errors naming the option, the sample and
`attn exercise --kind rope`."""

import json

import numpy as np

from tests.conftest import SAMPLES, assert_error
from tests.test_check_rope import PROBLEM, K, Q, rope

PLAIN = {key: value for key, value in PROBLEM.items() if key != "rope"}


def test_options_turn_rope_on_and_choose_its_convention(run, problem_file):
    path = problem_file(PLAIN)
    doc = run.json("compute", path, "--rope")
    assert doc["rope"] == {"style": "half", "base": 10000.0, "dims": 4}
    assert doc["rope_rule"].startswith("half (Hugging Face Llama rotate_half: dim i pairs with i + dims/2); "
                                       "θ_i = 10000^(−2i/4)")
    np.testing.assert_allclose(doc["heads"][0]["Q_rope"], rope(Q), atol=1e-15)
    np.testing.assert_allclose(doc["heads"][0]["K_rope"], rope(K), atol=1e-15)
    np.testing.assert_allclose(doc["heads"][0]["scores"], rope(Q) @ rope(K).T, atol=1e-14)
    other = run.json("compute", path, "--rope-style", "interleaved", "--rope-base", "100", "--rope-dims", "2")
    assert other["rope"] == {"style": "interleaved", "base": 100.0, "dims": 2}  # each option implies --rope
    assert "rotates the first 2 of 4 dims (partial rotary)" in other["rope_rule"]
    assert "Q_rope" not in run.json("compute", path)["heads"][0]  # no rope, no stage


def test_each_option_replaces_its_own_field_of_the_files_rope(run, problem_file):
    doc = run.json("compute", problem_file(dict(PROBLEM, rope={"style": "half", "dims": 2})),
                   "--rope-style", "interleaved")
    assert doc["rope"] == {"style": "interleaved", "base": 10000.0, "dims": 2}


def test_the_table_header_and_titles_state_the_convention(run, problem_file):
    out = run("compute", problem_file(PROBLEM), "--format", "table").stdout
    assert "\nrope: half (Hugging Face Llama rotate_half: dim i pairs with i + dims/2); θ_i = 10000^(−2i/4); " \
           "angle = position · θ_i; rotates every dim of each head's Q and K\n" in out
    assert "\nQ_rope = Q rotated by q_positions (RoPE)\n" in out
    assert "\nscores = Q_rope K_ropeᵀ\n" in out
    labelled = dict(PROBLEM, query_labels=["a", "b"], key_labels=["x", "y", "z"], Q=Q[:2].tolist())
    out = run("compute", problem_file(labelled), "--format", "table", "--stages", "K_rope").stdout
    assert "│ z │" in out and "│ b │" not in out  # K_rope's rows are the keys


def test_json_output_reads_back_as_the_same_problem(run, problem_file, tmp_path):
    first = run("compute", problem_file(PROBLEM), "--rope-style", "interleaved", "--format", "json").stdout
    again = run("compute", problem_file(first, "out.json"), "--format", "json").stdout
    assert again == first
    assert run("compute", problem_file(PROBLEM), "--rope-style", "interleaved", "-o", tmp_path / "a.npz").exit_code == 0
    from_npz = json.loads(run("compute", tmp_path / "a.npz", "--format", "json").stdout)
    assert from_npz["rope"] == json.loads(first)["rope"]
    np.testing.assert_allclose(from_npz["output"], json.loads(first)["output"], rtol=0, atol=0)


def test_the_output_only_path_rotates_too(run, problem_file, tmp_path):
    full = run.json("compute", problem_file(PROBLEM))["output"]
    assert run("compute", problem_file(PROBLEM), "-o", tmp_path / "out.npy").exit_code == 0
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), full, rtol=0, atol=1e-15)


def test_csv_and_exports_carry_the_new_stages(run, problem_file):
    csv = run("compute", problem_file(PROBLEM), "--format", "csv", "--stages", "K_rope").stdout
    assert csv.splitlines()[0] == ",0,1,2,3" and len(csv.splitlines()) == 4
    markdown = run("compute", problem_file(PROBLEM), "--format", "markdown").stdout
    assert "**Q_rope** = Q rotated by q_positions (RoPE)" in markdown and "**scores** = Q_rope K_ropeᵀ" in markdown
    assert_error(run("compute", problem_file(PLAIN), "--format", "csv", "--stages", "Q_rope"),
                 "this problem has no rope (rotary positions), so it has no Q_rope stage", "--stages")


def test_errors_name_the_option_or_the_field(run, problem_file):
    path = problem_file(PLAIN)
    assert_error(run("compute", path, "--rope-dims", "3"), "--rope-dims: rope.dims is the number 3", "even")
    assert_error(run("compute", path, "--rope-dims", "8"), "--rope-dims: rope.dims", "outside 2 … d_k = 4")
    assert_error(run("compute", path, "--rope-base", "0"), "--rope-base: rope.base is the number 0.0", "> 0")
    assert_error(run("compute", path, "--rope-base", "inf"), "--rope-base: expected a finite number, found inf")
    bad = problem_file(dict(PLAIN, rope={"style": "rotate_half"}), "bad.json")
    assert_error(run("compute", bad), "bad.json: rope.style is the string \"rotate_half\"", 'did you mean "half"')
    assert run("compute", path, "--rope-style", "neox").exit_code == 2  # typer's choice check


def test_help_states_the_conventions(run):
    out = " ".join(run("compute", "--help", env={"COLUMNS": "400", "NO_COLOR": "1"}).stdout.split())
    for fragment in ("--rope-style", "rotate_half", "rotate_every_two", "--rope-dims", "partial rotary"):
        assert fragment in out


def test_the_sample_is_causal_with_positions_and_rope(run):
    doc = json.loads((SAMPLES / "rope.json").read_text())
    assert doc["mask"] == "causal" and doc["rope"] and "q_positions" in doc
    out = run.json("compute", SAMPLES / "rope.json")
    assert "Q_rope" in out["heads"][0] and out["rope_rule"]
    example = run("example", "rope")
    assert example.exit_code == 0 and json.loads(example.stdout)["rope"]


def test_a_rope_exercise_is_small_and_its_key_checks(run):
    doc = json.loads(run("exercise", "--seed", "4", "--kind", "rope").stdout)
    assert doc["rope"] is True and doc["mask"] == "causal"
    assert np.array(doc["Q"]).shape == (3, 4)
    assert all(float(x) * 2 == int(float(x) * 2) for row in doc["Q"] + doc["K"] for x in row)  # halves at most
    key = run("exercise", "--seed", "4", "--kind", "rope", "--answers").stdout
    assert "Q_rope" in json.loads(key)["heads"][0]
    assert run("check", "-", input=key).exit_code == 0
    assert_error(run("exercise", "--seed", "4", "--kind", "rope", "--dim", "3"), "--dim", "must be even")


ROPE_SAMPLE = json.loads((SAMPLES / "rope.json").read_text(encoding="utf-8"))


def test_a_rope_option_keeps_the_files_other_rope_fields(run, problem_file):
    """Found by a user trial (a learner, a teacher, a hostile user): a --rope-… option replaces only its
    own field of the file's rope object."""
    path = problem_file(dict(ROPE_SAMPLE, rope={"style": "interleaved", "dims": 2}))
    assert run.json("compute", path, "--rope-base", "500000")["rope"] == \
        {"style": "interleaved", "base": 500000.0, "dims": 2}
    assert run.json("compute", path, "--rope")["rope"] == {"style": "interleaved", "base": 10000.0, "dims": 2}
    plain = problem_file({k: v for k, v in ROPE_SAMPLE.items() if k != "rope"}, "plain.json")
    assert run.json("compute", plain, "--rope")["rope"] == {"style": "half", "base": 10000.0, "dims": 4}
    assert run.json("compute", plain, "--rope-dims", "2")["rope"] == {"style": "half", "base": 10000.0, "dims": 2}


def test_a_rope_option_over_an_npz_keeps_its_rope_fields(run, problem_file, tmp_path):
    """Found by a user trial: a --rope-… option over an .npz keeps the archive's other rope fields."""
    path = problem_file(dict(ROPE_SAMPLE, rope={"style": "interleaved", "dims": 2}))
    assert run("compute", path, "-o", tmp_path / "r.npz").exit_code == 0
    assert run.json("compute", tmp_path / "r.npz", "--rope-base", "100")["rope"] == \
        {"style": "interleaved", "base": 100.0, "dims": 2}
