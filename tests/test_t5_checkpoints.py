"""T5 checkpoint import: numeric parity with Hugging Face's T5ForConditionalGeneration
(T5 v1.0 tied / rescaled output, T5.1.1 gated-GELU / untied), cached decoding against the
full pass on the converted weights, and the converter's errors.

Reference numbers: tests/fixtures/hf/t5 and tests/fixtures/hf/t5_v1_1
(tests/fixtures/make_t5_fixture.py), made with PyTorch outside this project.
"""

import json
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import parity
from lmfactory import models
from lmfactory.models.t5 import T5Seq2SeqLM


def _inputs(inputs):
    return {"encoder_token_ids": inputs["input_ids"].astype("int32"),
            "encoder_padding_mask": inputs["attention_mask"].astype("int32"),
            "decoder_token_ids": inputs["decoder_input_ids"].astype("int32"),
            "decoder_padding_mask": inputs["decoder_attention_mask"].astype("int32")}


@pytest.mark.parametrize("name", ["t5", "t5_v1_1"])
def test_converted_t5_matches_hugging_face(name):
    inputs, expected, folder = parity.load_fixture(name)
    backbone = models.load_checkpoint("t5", folder)
    with open(folder / "config.json") as f:
        config = json.load(f)
    assert backbone.tie_embeddings == config.get("tie_word_embeddings", True)
    assert backbone.feed_forward == config["feed_forward_proj"]
    x = _inputs(inputs)
    outputs = backbone(x, training=False)
    errors = {
        "encoder": parity.assert_close_on_tokens(outputs["encoder_sequence_output"],
                                                 expected["encoder_last_hidden_state"],
                                                 inputs["attention_mask"]),
        "decoder": parity.assert_close_on_tokens(outputs["decoder_sequence_output"],
                                                 expected["decoder_last_hidden_state"],
                                                 inputs["decoder_attention_mask"]),
    }
    logits = T5Seq2SeqLM(backbone)(x, training=False)
    errors["logits"] = parity.assert_close_on_tokens(logits, expected["logits"],
                                                     inputs["decoder_attention_mask"])
    print(name, errors)


def test_cached_decoding_matches_the_full_pass_on_converted_weights():
    inputs, expected, folder = parity.load_fixture("t5_v1_1")
    backbone = models.load_checkpoint("t5", folder)
    lm = T5Seq2SeqLM(backbone)
    x = _inputs(inputs)
    row = slice(0, 1)  # the row with no decoder padding
    state = lm.initial_state(1, 30, encoder_token_ids=x["encoder_token_ids"][row],
                             encoder_padding_mask=x["encoder_padding_mask"][row])
    logits = []
    # The first 10 positions in one call, then one position per call (protocol rule 3).
    step, state = lm.call_with_state(x["decoder_token_ids"][row, :10], state, 0)[::2]
    logits.append(np.asarray(step))
    for index in range(10, 30):
        step, _, state = lm.call_with_state(x["decoder_token_ids"][row, index:index + 1],
                                            state, index)
        logits.append(np.asarray(step))
    parity.assert_close(np.concatenate(logits, axis=1), expected["logits"][row])


def test_converter_refuses_what_it_cannot_represent(tmp_path):
    _, _, folder = parity.load_fixture("t5")
    copy = tmp_path / "t5"
    shutil.copytree(folder, copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps(dict(config, feed_forward_proj="gated-silu")))
    with pytest.raises(ValueError, match="feed_forward_proj"):
        models.load_checkpoint("t5", copy)
    (copy / "config.json").write_text(json.dumps(dict(config, model_type="bart")))
    with pytest.raises(ValueError, match="model_type is 'bart'"):
        models.load_checkpoint("t5", copy)
    (copy / "config.json").write_text(json.dumps(config))
    weights = load_file(copy / "model.safetensors")
    weights.pop("decoder.block.1.layer.1.EncDecAttention.k.weight")
    save_file(weights, copy / "model.safetensors")
    with pytest.raises(ValueError, match="EncDecAttention.k.weight"):
        models.load_checkpoint("t5", copy)
    weights["decoder.block.1.layer.1.EncDecAttention.k.weight"] = np.zeros((32, 32), "float32")
    weights["encoder.extra.weight"] = np.zeros((2,), "float32")
    save_file(weights, copy / "model.safetensors")
    with pytest.raises(ValueError, match="did not read"):
        models.load_checkpoint("t5", copy)
