"""`attn capture` on the command line: a tiny Llama saved to a directory, captured, and computed; the
agreement line and its exit code (as diff: 0 agrees, 1 differs); the JSON's "agreement" read back;
the errors (no model, no tokenizer, the models extra missing); --text with a tokenizer built offline."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import MODELS, ROOT, Lazy, assert_error, fast_sample

pytestmark = MODELS
torch, transformers = Lazy("torch"), Lazy("transformers")  # imported by the first test that runs


@pytest.fixture(scope="module")
def tiny(tiny_llama):
    return tiny_llama


@pytest.fixture(scope="module")
def captured(tiny, tmp_path_factory):
    """The tiny model's layer 0 on 'the cat sat on the mat', in float64, as a file."""
    from typer.testing import CliRunner

    from attncli.cli import app

    path = tmp_path_factory.mktemp("docs") / "layer0.json"
    result = CliRunner().invoke(app, ["capture", str(tiny), "--text", "the cat sat on the mat", "--dtype",
                                      "float64", "-o", str(path)])
    assert result.exit_code == 0, result.stderr
    return path


def test_capture_then_compute_prints_the_agreement_line(run, captured):
    doc = json.loads(captured.read_text())
    assert doc["model"] == {"name": "tiny-llama", "class": "LlamaForCausalLM", "layer": 0}
    assert doc["query_labels"] == ["the", "cat", "sat", "on", "the", "mat"]
    result = run("compute", captured, "--stages", "weights", "--format", "table")
    assert result.exit_code == 0, result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("agrees with tiny-llama layer 0 to ") and last.endswith("(the model ran in float64)")


def test_text_gives_each_key_its_word(run, tiny, tmp_path):
    path = tmp_path / "words.json"
    result = run("capture", tiny, "--text", "the cat sat", "-o", path)
    assert result.exit_code == 0, result.stderr
    doc = json.loads(path.read_text())
    assert doc["word_ids"] == [0, 1, 2] and doc["key_labels"] == ["the", "cat", "sat"]
    ids = tmp_path / "ids.json"
    assert run("capture", tiny, "--ids", "2,3", "-o", ids).exit_code == 0
    assert "word_ids" not in json.loads(ids.read_text())  # no text, no words


@pytest.mark.parametrize("named, expected", [
    ("HuggingFaceTB/SmolLM2-135M", "HuggingFaceTB/SmolLM2-135M"), ("  tiny\n model ", "tiny model"),
    ("/home/someone/models/tiny", "copy"), ("./tiny", "copy"), ("", "copy"), (7, "copy")])
def test_the_model_is_named_by_its_config_unless_that_is_a_folder(run, tiny, tmp_path, named, expected):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(tiny, copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps(config | {"_name_or_path": named}))
    path = tmp_path / "named.json"
    result = run("capture", copy, "--ids", "2,3", "-o", path)
    assert result.exit_code == 0, result.stderr
    assert json.loads(path.read_text())["model"]["name"] == expected


def test_the_json_holds_the_agreement_and_reads_back(run, captured):
    result = run("compute", captured, "--format", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["agreement"]["agrees"] is True and doc["agreement"]["first"] is None
    assert doc["model"]["layer"] == 0 and "weights" in doc["reference"]
    assert result.stderr.startswith("agrees with tiny-llama layer 0")  # stdout stays one document
    again = run("compute", "-", "--format", "json", input=result.stdout)
    assert again.exit_code == 0, again.stderr
    doc["agreement"]["agrees"] = False
    wrong = run("compute", "-", "--format", "json", input=json.dumps(doc))
    assert wrong.exit_code == 2 and "agreement is " in wrong.stderr and "recomputation says: agrees" in wrong.stderr


def test_a_document_that_differs_from_its_model_exits_1(run, captured, tmp_path):
    doc = json.loads(captured.read_text())
    doc["reference"]["output"][3][5] += 1e-3
    path = tmp_path / "changed.json"
    path.write_text(json.dumps(doc))
    result = run("compute", path, "--stages", "output", "--format", "table")
    assert result.exit_code == 1
    assert result.stdout.strip().splitlines()[-1].startswith(
        "differs from tiny-llama layer 0: output, row 3, column 5: attncli ")


def test_decode_and_batch_index_from_the_command_line(run, tiny, tmp_path):
    path = tmp_path / "step.json"
    result = run("capture", tiny, "--ids", "3,1,4,1,5; 9,3", "--batch-index", "1", "--decode", "--dtype",
                 "float64", "-o", path)
    assert result.exit_code == 0, result.stderr
    doc = json.loads(path.read_text())
    # the tokenizer's words; an id it does not know (9) as itself
    assert doc["query_labels"] == ["cat"] and doc["key_labels"] == ["pad", "pad", "pad", "9", "cat"]
    assert doc["q_positions"] == [4] and doc["key_mask"] == [False] * 3 + [True] * 2
    assert doc.get("kv_heads") in (None, 2)
    computed = run("compute", path, "--format", "json")
    assert computed.exit_code == 0 and json.loads(computed.stdout)["agreement"]["agrees"]


@pytest.mark.parametrize("args, message", [
    (("/nowhere/model", "--ids", "1"), "error: MODEL /nowhere/model is neither a directory nor a model in the local "
                                       "Hugging Face cache (attn capture never downloads"),
    (("{tiny}",), "error: --ids: give the tokens: --ids 3,1,4,1,5 or --text"),
    (("{tiny}", "--ids", "1,x"), "error: --ids: is \"1,x\"; expected whole numbers ≥ 0 (digits 0-9) separated by commas"),
    (("{tiny}", "--ids", "1,64"), "error: --ids: has id 64, but the model's vocabulary has 64 ids (0 to 63)"),
    (("{tiny}", "--ids", "1,2", "--layer", "3"), "error: --layer: is '3', but there is 1 layer (0 to 0)"),
    (("{tiny}", "--ids", "1,2", "--layer", "0,x"), "error: --layer: is '0,x'; expected all, a layer number (3) or"),
    (("{tiny}", "--ids", "1,2", "--layer", "2-1"), "error: --layer: is '2-1': the range 2-1 runs backwards"),
    (("{tiny}", "--ids", "1,2", "--batch-index", "1"), "error: --batch-index: is 1, but there is 1 sequence"),
    (("{tiny}", "--ids", "1", "--decode"), "error: --decode: decode needs at least 2 tokens"),
    (("{tiny}", "--ids", "1", "-o", "x.txt"), "error: --output: is 'x.txt'; attn capture writes JSON or .npz"),
])
def test_errors_are_one_line(run, tiny, args, message):
    result = run("capture", *(str(a).format(tiny=tiny) for a in args))
    assert result.exit_code == 2
    assert result.stderr.startswith(message) and result.stderr.count("\n") == 1, result.stderr


def test_text_without_a_tokenizer_is_refused(run, tiny, tmp_path):
    model = transformers.LlamaForCausalLM.from_pretrained(tiny)
    model.save_pretrained(tmp_path / "bare")
    result = run("capture", tmp_path / "bare", "--text", "the cat")
    assert result.exit_code == 2 and "--text: needs a tokenizer saved in" in result.stderr


def test_without_the_models_extra_capture_says_how_to_install_it(tiny):
    """torch made unimportable: one error line naming the extra, exit 2."""
    code = ("import sys; sys.modules['torch'] = None; sys.argv[0] = 'attn'; "
            "from attncli.cli import main; main()")
    done = subprocess.run([sys.executable, "-c", code, "capture", str(tiny), "--ids", "1"], capture_output=True,
                          text=True, cwd=ROOT)
    assert done.returncode == 2
    assert done.stderr == ("error: attn capture needs the models extra (torch, transformers): pip install "
                           "'attncli[models]', or pip install -e '.[models]' in a clone\n")


# A real process each: --version is in the slow profile (tests/test_startup.py checks it loads nothing heavy).
@pytest.mark.parametrize("args", fast_sample([("--version",), ("capture", "--help"),
                                              ("compute", str(ROOT / "samples" / "scooter.json"), "--format", "json")],
                                             ("capture", "--help"),
                                             ("compute", str(ROOT / "samples" / "scooter.json"), "--format", "json")))
def test_no_other_command_loads_torch(args):
    code = ("import atexit, sys; atexit.register(lambda: sys.stderr.write(repr(sorted({m.split('.')[0] for m in "
            "sys.modules} & {'torch', 'transformers', 'safetensors'})) + '\\n')); sys.argv[0] = 'attn'; "
            "from attncli.cli import main; main()")
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT)
    assert done.stderr.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json", "generation_config.json"])
def test_output_never_overwrites_a_file_of_the_model(run, tiny, name):
    """`attn capture ./tiny -o tiny/config.json` replaced the model's config with the document: every
    file of the model directory is an input of the run, refused before the model is loaded."""
    before = (tiny / name).read_bytes()
    assert_error(run("capture", tiny, "--ids", "3,1,4", "-o", tiny / name),
                 f'error: --output: "{tiny / name}" is an input of this run; refusing to overwrite it')
    assert (tiny / name).read_bytes() == before


def test_output_never_overwrites_the_model_by_another_name(run, tiny, tmp_path):
    """A hard link (and a symbolic one) to a model file: the same file, compared by inode."""
    (tmp_path / "hard.json").hardlink_to(tiny / "config.json")
    (tmp_path / "soft.json").symlink_to(tiny / "model.safetensors")
    for name, model_file in (("hard.json", "config.json"), ("soft.json", "model.safetensors")):
        assert_error(run("capture", tiny, "--ids", "3,1", "-o", tmp_path / name),
                     "is an input of this run (as ", f'{model_file}"); refusing to overwrite it')
    json.loads((tiny / "config.json").read_text())


def test_output_errors_are_one_line_and_leave_the_previous_file(run, tiny, tmp_path):
    """A folder, a missing folder: refused before the model is loaded; nothing half-written."""
    (tmp_path / "folder.json").mkdir()
    assert_error(run("capture", tiny, "--ids", "3,1", "-o", tmp_path / "folder.json"),
                 "error: --output: cannot write", 'folder.json": it is a folder; name a file in it')
    assert_error(run("capture", tiny, "--ids", "3,1", "-o", tmp_path / "no" / "x.json"),
                 "error: --output: cannot write", '/no" does not exist')


def test_a_full_disk_leaves_the_previous_file_whole(run, tiny, tmp_path, monkeypatch):
    """The write fails as a full disk fails it (ENOSPC when the data is synced): one error line, the
    previous document intact, no temporary file left."""
    import errno

    from attncli.render import files

    target = tmp_path / "layer.json"
    target.write_text('{"previous": true}')

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files.os, "fsync", full)
    assert_error(run("capture", tiny, "--ids", "3,1,4", "-o", target),
                 f'error: --output: cannot write "{target}": no space left on device')
    assert target.read_text() == '{"previous": true}' and os.listdir(tmp_path) == ["layer.json"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_device_is_one_error(run, tiny, tmp_path):
    from tests.test_output_files import device

    device(tmp_path / "full.json", "full")
    assert_error(run("capture", tiny, "--ids", "3,1", "-o", tmp_path / "full.json"),
                 "error: --output: cannot write", 'full.json": no space left on device')


def test_the_output_is_written_atomically(run, tiny, tmp_path, monkeypatch):
    """Through render/files.py's writer, as attn compute -o: a temporary file renamed over FILE."""
    from attncli.render import files

    seen = []
    real = files.os.replace
    monkeypatch.setattr(files.os, "replace", lambda a, b: (seen.append((os.path.basename(a), b)), real(a, b)))
    target = tmp_path / "layer.json"
    assert run("capture", tiny, "--ids", "3,1", "-o", target).exit_code == 0
    assert len(seen) == 1 and files.temporary().fullmatch(seen[0][0]) and seen[0][1] == str(target)
    assert json.loads(target.read_text())["model"]["layer"] == 0


def test_the_wrote_line_escapes_the_model_and_file_names(run, tiny, tmp_path):
    """A model directory's name (an unpacked download's, say) reaches stderr as text, not as controls."""
    import shutil

    odd = tmp_path / "tiny\x1b[2J\u202ellama"
    shutil.copytree(tiny, odd)
    path = tmp_path / "out\x07.json"
    result = run("capture", odd, "--ids", "3,1,4", "-o", path)
    assert result.exit_code == 0, result.stderr
    assert "layer 0 of tiny\\u001b[2J\\u202ellama, 3 queries; attn compute " in result.stderr
    assert "out\\u0007.json" in result.stderr
    assert not {"\x1b", "\x07", "\u202e"} & set(result.stderr)


@pytest.mark.parametrize("family", ["deepseek_v2", "deepseek_v3"])
def test_a_layer_written_as_q_k_v_given_directly_is_captured_on_the_command_line(run, tmp_path, family):
    """DeepSeek's latent attention has no X (Q, K, V are given): the line after writing counts Q's rows
    (it read X and failed with an internal error after the file was written), and the file agrees."""
    from tests.test_capture import build

    out = tmp_path / "layer.json"
    result = run("capture", build(family, tmp_path), "--ids", "3,1,4,1,5", "--dtype", "float64", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert result.stderr.splitlines()[-1] == f"wrote {out}: layer 0 of {family}, 5 queries; attn compute {out}"
    assert run.json("compute", out)["agreement"]["line"].startswith(f"agrees with {family} layer 0 to ")


@pytest.mark.parametrize("cap, refused", [("1000", False), ("999", True)])
def test_json_just_within_the_text_cap_is_written_and_a_byte_more_is_refused(monkeypatch, cap, refused):
    """What capture writes, compute reads: JSON of exactly ATTN_MAX_INPUT bytes is readable."""
    from attncli.commands.capture_run import _readable
    from attncli.compute.limits import MAX_INPUT_VARIABLE

    monkeypatch.setenv(MAX_INPUT_VARIABLE, cap)
    if not refused:
        _readable(1000, "x.json", estimated=False)
        return
    with pytest.raises(Exception, match=r"x\.json would hold 1,000 B of JSON|x\.json would hold") as caught:
        _readable(1000, "x.json", estimated=False)
    assert "-o x.npz" in str(caught.value)
