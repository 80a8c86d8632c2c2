"""docs/real-models.md: its model (samples/models/tiny-llama) is what tests/fixtures/make_tiny_model.py
makes, and its option list is capture's option table. (Its console blocks run in the docs harness,
tests/test_docs.py, as `<!-- needs: models -->` blocks.)"""

import importlib.util

import numpy as np
import pytest

from attncli.commands import spec
from attncli.commands.capture import CAPTURE
from tests.conftest import ROOT, SAMPLES

DOC = ROOT / "docs" / "real-models.md"
START, END = "<!-- options: capture -->\n", "<!-- end options: capture -->\n"


def test_the_option_list_is_the_option_table():
    text = DOC.read_text(encoding="utf-8")
    assert text.split(START, 1)[1].split(END, 1)[0] == spec.reference(CAPTURE)


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
