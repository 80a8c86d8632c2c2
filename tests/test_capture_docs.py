"""docs/real-models.md: its model (samples/models/tiny-llama) is what tests/fixtures/make_tiny_model.py
makes (its options are listed in docs/reference/options.md with the others). (Its console blocks run in the docs harness,
tests/test_docs.py, as `<!-- needs: models -->` blocks.)"""

import importlib.util

import numpy as np
import pytest

from tests.conftest import ROOT, SAMPLES

DOC = ROOT / "docs" / "real-models.md"


def test_the_tiny_model_is_what_its_script_makes(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    safetensors = pytest.importorskip("safetensors.numpy")
    location = ROOT / "tests" / "fixtures" / "make_tiny_model.py"
    script = importlib.util.spec_from_file_location("make_tiny_model", location)
    module = importlib.util.module_from_spec(script)
    script.loader.exec_module(module)
    module.make(tmp_path)
    made = safetensors.load_file(tmp_path / "model.safetensors")
    committed = safetensors.load_file(SAMPLES / "models" / "tiny-llama" / "model.safetensors")
    assert sorted(made) == sorted(committed)
    for name in made:
        np.testing.assert_array_equal(made[name], committed[name], err_msg=name)
    assert (tmp_path / "tokenizer.json").read_text() == (SAMPLES / "models" / "tiny-llama" / "tokenizer.json").read_text()


def test_the_families_table_is_the_registrys():
    """docs/real-models.md's families table: one row per record of attncli/capture/families.py, in order."""
    from attncli.capture.families import FAMILIES

    text = DOC.read_text(encoding="utf-8")
    table = text.split("<!-- families:", 1)[1].split("\n\n", 1)[0].splitlines()[3:]
    assert table == [f"| {f.label} | {f.exercises} |" for f in FAMILIES.values()]


def test_the_architecture_page_has_the_capture_family_recipe():
    """docs/architecture.md names the files a capture family takes, and they exist."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    recipe = text.split("- **A capture family**", 1)[1].split("\n- **", 1)[0]
    for path in ("attncli/capture/families.py", "attncli/capture/layouts.py", "tests/test_capture.py"):
        assert path in recipe and (ROOT / path).exists(), path
