"""Reformer against the reference implementation (Hugging Face ReformerModelWithLMHead,
is_decoder) on the tiny fixture of tests/fixtures/make_reformer_fixture.py: 2 layers
["local", "lsh"], 16 positions in chunks of 4, 2 hashes, one right-padded row. The LSH
rotations the reference drew are an input (they are not weights); everything else comes
from the checkpoint through `models.load_checkpoint`."""

import os

import numpy as np
import pytest

from lmfactory import models
from lmfactory.models.reformer import ReformerBackbone
from lmfactory.models.reformer.reformer_converters import causal_lm_from_huggingface

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "hf", "reformer")


@pytest.fixture(scope="module")
def fixture():
    inputs = np.load(os.path.join(FIXTURE, "inputs.npz"))
    expected = np.load(os.path.join(FIXTURE, "expected.npz"))
    return ({"token_ids": inputs["input_ids"], "padding_mask": inputs["attention_mask"]},
            dict(expected))


def test_hf_reformer_parity(fixture):
    inputs, expected = fixture
    backbone = models.load_checkpoint("reformer", FIXTURE)
    assert isinstance(backbone, ReformerBackbone)
    assert backbone.attention_layers == ["local", "lsh"] and backbone.num_hashes == 2
    rotations = [None, expected["rotations_layer_1"]]
    real = inputs["padding_mask"] == 1
    hidden = backbone.call_with_rotations(inputs, rotations)["sequence_output"].numpy()
    assert hidden.shape == expected["last_hidden_state"].shape == (2, 16, 64)
    error = np.abs(hidden - expected["last_hidden_state"])[real].max()
    assert error <= 1e-4, error

    lm = causal_lm_from_huggingface(FIXTURE)
    logits = lm.lm_head(lm.backbone.call_with_rotations(inputs, rotations)
                        ["sequence_output"]).numpy()
    error = np.abs(logits - expected["head_logits"])[real].max()
    assert error <= 1e-4, error
    # The rotations matter: with the model's own draw the LSH layer attends elsewhere.
    own = backbone(inputs)["sequence_output"].numpy()
    assert np.abs(own - expected["last_hidden_state"])[real].max() > 1e-3


def test_converter_refuses_what_it_does_not_implement(tmp_path):
    import json
    import shutil

    for key, value in (("is_decoder", False), ("num_buckets", [2, 2]),
                       ("model_type", "bert")):
        folder = tmp_path / f"bad_{key}"
        shutil.copytree(FIXTURE, folder)
        config = json.loads((folder / "config.json").read_text())
        config[key] = value
        (folder / "config.json").write_text(json.dumps(config))
        with pytest.raises(ValueError):
            models.get("reformer").converter("huggingface")(str(folder))
