"""docs/real-models.md: its model (samples/models/tiny-llama) is what tests/fixtures/make_tiny_model.py
makes (its options are listed in docs/reference/options.md with the others). (Its console blocks run in the docs harness,
tests/test_docs.py, as `<!-- needs: models -->` blocks.)"""

import importlib.util
import re

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
    """docs/real-models.md's families table: one row per record of attncli/capture/families.py, in order,
    with what attn capture does with it (families.table)."""
    from attncli.capture.families import FAMILIES, table

    text = DOC.read_text(encoding="utf-8")
    written = text.split("<!-- families:", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    assert written == table(), "docs/real-models.md's families table is stale: run python docs/make_families.py"
    assert len(written) == 2 + len(FAMILIES)
    for row in written:  # four cells: a | in a family's words (CodeGen's [q | v | k]) is escaped
        assert len(re.split(r"(?<!\\)\|", row)) == 6, row


def test_the_tables_agrees_and_refused_are_the_tests():
    """Each family the table says agrees is captured and agrees in tests/test_capture.py (FAMILIES,
    NEEDS_QK_NORM); each it says is refused is refused there (REFUSED), by its own words."""
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from attncli.capture.families import FAMILIES, status
    from tests import test_capture

    def types(spec):
        return {getattr(transformers, config)(**settings).model_type for config, _, settings, *_ in spec.values()}

    agreeing, refused = types(test_capture.FAMILIES | test_capture.NEEDS_QK_NORM), types(test_capture.REFUSED)
    for model_type, family in FAMILIES.items():
        if status(family).startswith("refused"):
            assert model_type in refused and model_type not in agreeing, model_type
            words = next(words for config, _, settings, words in test_capture.REFUSED.values()
                         if getattr(transformers, config)(**settings).model_type == model_type)
            assert words in f"{family.label} {status(family).removeprefix('refused: ')}", model_type
        else:
            assert model_type in agreeing, model_type


def test_the_architecture_page_has_the_capture_family_recipe():
    """docs/architecture.md names the files a capture family takes, and they exist."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    recipe = text.split("- **A capture family**", 1)[1].split("\n- **", 1)[0]
    for path in ("attncli/capture/families.py", "attncli/capture/layouts.py", "tests/test_capture.py"):
        assert path in recipe and (ROOT / path).exists(), path
