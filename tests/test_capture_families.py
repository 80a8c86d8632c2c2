"""How `attn capture` reads a layer's modules and config as attncli's keys
(attncli/capture/families.py), on stand-in objects: no torch. tests/test_capture.py runs the
families' tiny models."""

import numpy as np

from attncli.document.reading import build_problem


def test_dynamic_scaling_takes_the_configs_max_position_embeddings():
    """Mutation: `rope` no longer adds the config's max_position_embeddings to a dynamic (or
    longrope) scaling, which transformers reads beside rope_parameters: attncli would refuse the
    captured layer (dynamic needs it) or grow the base at another length."""
    from types import SimpleNamespace

    from attncli.capture.families import rope

    for kind, extra in (("dynamic", {"factor": 2.0}),
                        ("longrope", {"short_factor": [1.0] * 4, "long_factor": [2.0] * 4,
                                      "original_max_position_embeddings": 16})):
        config = SimpleNamespace(model_type="llama", max_position_embeddings=64,
                                 rope_parameters={"rope_type": kind, "rope_theta": 10000.0, **extra})
        found = rope(SimpleNamespace(), config, 0, 8)
        assert found["scaling"]["max_position_embeddings"] == 64
        build_problem({"Q": np.ones((2, 8)).tolist(), "K": np.ones((2, 8)).tolist(), "V": np.ones((2, 2)).tolist(),
                       "rope": found})


def test_the_scale_is_the_modules_inv_norm_factor():
    """Mutation: `scale` reads `scaling` alone, not BLOOM's `inv_norm_factor` (equal to 1/√d in
    BLOOM itself, so the captured models cannot tell)."""
    from types import SimpleNamespace

    from attncli.capture.families import scale

    assert scale(SimpleNamespace(inv_norm_factor=0.3), 4) == 0.3
    assert scale(SimpleNamespace(scaling=0.2, inv_norm_factor=0.3), 4) == 0.2
    assert scale(SimpleNamespace(), 4) == 0.5
