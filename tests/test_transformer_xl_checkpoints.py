"""Transformer-XL against Hugging Face's TransfoXLLMHeadModel (transformers 4.46.3) on the
tiny random fixture of tests/fixtures/make_transformer_xl_fixture.py: the hidden states of
a first segment (empty memory), the memories it leaves, the second segment's hidden states
given them, and the adaptive softmax's log-probabilities, each within 1e-4."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from parity import TOLERANCE, assert_close, load_fixture

from lmfactory import models
from lmfactory.models.transformer_xl.transformer_xl_converters import (
    causal_lm_from_huggingface, from_huggingface)

NAME = "transfo-xl"


def test_backbone_parity_with_memory():
    inputs, expected, folder = load_fixture(NAME)
    backbone = models.load_checkpoint("transformer_xl", str(folder))
    assert isinstance(backbone, type(from_huggingface(str(folder))))
    assert backbone.same_length and backbone.clamp_len == 5 and backbone.mem_len == 6
    first = backbone.call_with_memory(inputs["segment_1"])
    errors = [assert_close(first["sequence_output"], expected["last_hidden_state_1"]),
              assert_close(np.stack(first["memory"]), expected["mems_1"])]
    second = backbone.call_with_memory(inputs["segment_2"], first["memory"])
    errors.append(assert_close(second["sequence_output"], expected["last_hidden_state_2"]))
    # The functional model is the first segment with an empty memory.
    ids = inputs["segment_1"]
    plain = backbone({"token_ids": ids, "padding_mask": np.ones_like(ids)})
    errors.append(assert_close(plain["sequence_output"], expected["last_hidden_state_1"]))
    assert max(errors) <= TOLERANCE


def test_language_model_log_probabilities():
    inputs, expected, folder = load_fixture(NAME)
    model = causal_lm_from_huggingface(str(folder))
    ones = np.ones_like(inputs["segment_1"])
    log_probs, memory = model.call_with_memory(
        {"token_ids": inputs["segment_1"], "padding_mask": ones})
    assert_close(log_probs, expected["log_probs_1"])
    log_probs, _ = model.call_with_memory(
        {"token_ids": inputs["segment_2"], "padding_mask": np.ones_like(inputs["segment_2"])},
        memory)
    assert_close(log_probs, expected["log_probs_2"])
    np.testing.assert_allclose(np.exp(np.asarray(log_probs)).sum(-1), 1.0, atol=1e-5)


def test_converter_refuses_other_attention(tmp_path):
    _, _, folder = load_fixture(NAME)
    target = tmp_path / "xl"
    shutil.copytree(folder, target)
    config = json.loads((target / "config.json").read_text())
    config["attn_type"] = 2
    (target / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="attn_type"):
        from_huggingface(str(target))
