"""Found by an engineer's trial of `attn capture`: a float64 capture of a layer with scaled RoPE says
float32 (transformers computes the scaled frequencies in float32 whatever the dtype), so that it
agrees instead of failing at float64's tolerance; --decode on an encoder is refused, not captured
as a one-token sequence or a torch error."""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from attncli.capture.driver import capture, pad_left  # noqa: E402
from attncli.capture.families import CaptureError  # noqa: E402
from attncli.capture.loading import load  # noqa: E402
from attncli.compute.attention import attend  # noqa: E402
from attncli.document.agreement import compare  # noqa: E402
from attncli.document.reading import build_problem  # noqa: E402

SMALL = dict(vocab_size=64, hidden_size=32, num_attention_heads=4, num_hidden_layers=1, intermediate_size=32,
             max_position_embeddings=64, pad_token_id=0)
LONGROPE = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0, 1.1, 1.2, 1.3],
            "long_factor": [2.0, 3.0, 4.0, 5.0]}


def saved(tmp_path, config, model_class):
    torch.manual_seed(1)
    model = model_class(config)
    with torch.no_grad():  # weights large enough that float32 frequencies show past float64's tolerance
        for name, parameter in model.named_parameters():
            if "norm" not in name:
                parameter.mul_(5.0)
    model.save_pretrained(tmp_path / "model")
    return load(str(tmp_path / "model"), "float64")[0]


def test_a_float64_capture_with_scaled_rope_says_float32_and_agrees(tmp_path):
    config = transformers.Phi3Config(**SMALL, num_key_value_heads=2, original_max_position_embeddings=4,
                                     rope_parameters=LONGROPE)
    model = saved(tmp_path, config, transformers.Phi3ForCausalLM)
    ids, mask = pad_left([[3, 1, 4, 1, 5, 9, 2, 6]], 0)
    for decode in (False, True):
        doc = capture(model, ids, mask, decode=decode)
        found = compare(doc, attend(build_problem(doc)))
        assert doc["reference"]["dtype"] == "float32"
        assert found.agrees and found.difference > 1e-12, found.line()


def test_decode_on_an_encoder_is_refused(tmp_path):
    config = transformers.BertConfig(vocab_size=64, hidden_size=16, num_attention_heads=2, num_hidden_layers=1,
                                     intermediate_size=32, max_position_embeddings=64, pad_token_id=0)
    model = saved(tmp_path, config, transformers.BertModel)
    for rows in ([[3, 1, 4, 1]], [[3, 1, 4, 1], [7, 5]]):
        ids, mask = pad_left(rows, 0)
        with pytest.raises(CaptureError, match="decode is a step of a causal model's generation, but BERT is an "
                                               "encoder"):
            capture(model, ids, mask, batch_index=len(rows) - 1, decode=True)


@pytest.mark.parametrize("kind, parameters, edge", [
    ("longrope", LONGROPE, dict(original_max_position_embeddings=4)),
    ("dynamic", {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}, dict(max_position_embeddings=4))])
def test_decode_past_a_length_that_changes_the_scaling_is_refused(tmp_path, kind, parameters, edge):
    """The model rotates the cached keys at one length's frequencies and the step's query at the next
    one's: refused with the reason, where before the agreement line named a cell that differed. A
    decode step that stays on one side agrees, as does the whole sequence."""
    settings = dict(SMALL, num_key_value_heads=2, rope_parameters=parameters) | edge
    config_class, model_class = (transformers.Phi3Config, transformers.Phi3ForCausalLM) if kind == "longrope" else \
        (transformers.LlamaConfig, transformers.LlamaForCausalLM)
    model = saved(tmp_path, config_class(**settings), model_class)
    ids, mask = pad_left([[3, 1, 4, 1, 5, 9]], 0)
    with pytest.raises(CaptureError, match=f"decode with {kind} RoPE past "):
        capture(model, [ids[0][:5]], [mask[0][:5]], decode=True)
    for doc in (capture(model, [ids[0][:4]], [mask[0][:4]], decode=True), capture(model, ids, mask)):
        found = compare(doc, attend(build_problem(doc)))
        assert found.agrees, found.line()
