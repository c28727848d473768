"""GPT-2 checkpoint import: numeric parity with Hugging Face's GPT2LMHeadModel, weight-name
variants and errors, and the byte-level BPE tokenizer's ids.

Reference numbers: tests/fixtures/hf/gpt2 (tests/fixtures/make_parity_fixtures.py gpt2),
made with PyTorch outside this project.
"""

import json
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import parity
from lmfactory import models
from lmfactory.models import registry
from lmfactory.models.gpt2 import GPT2Backbone, GPT2CausalLM
from lmfactory.models.gpt2 import gpt2_converters
from lmfactory.models.tokenizers import (import_huggingface_tokenizer, load_tokenizer,
                                         special_token_ids)


def _as_list(values):
    values = values.to_list() if hasattr(values, "to_list") else values
    values = values.numpy().tolist() if hasattr(values, "numpy") else values
    return [list(row) for row in values]


def _backbone_inputs(inputs):
    return {"token_ids": inputs["input_ids"].astype("int32"),
            "padding_mask": inputs["attention_mask"].astype("int32")}


def _hidden_states(backbone, x):
    """Hugging Face's `hidden_states` of GPT-2: the embeddings, each block's output, and
    in last place the final LayerNorm of the last block's output (`ln_f`)."""
    h = backbone.embeddings(x["token_ids"])
    states = [h]
    for block in backbone.transformer_layers:
        h = block(h, decoder_padding_mask=x["padding_mask"])
        states.append(h)
    states[-1] = backbone.layer_norm(states[-1])
    return states


@pytest.fixture(scope="module")
def fixture():
    return parity.load_fixture("gpt2")


@pytest.fixture(scope="module")
def imported(fixture):
    _, _, folder = fixture
    return models.load_checkpoint("gpt2", folder)


def _copy_checkpoint(folder, target, rename=None, extra=None, drop=(), config_update=None):
    """A copy of the fixture checkpoint with weights renamed / added / dropped."""
    target.mkdir()
    weights = load_file(str(folder / "model.safetensors"))
    weights = {(rename(k) if rename else k): v for k, v in weights.items()
               if k not in drop}
    weights.update(extra or {})
    save_file(weights, str(target / "model.safetensors"))
    with open(folder / "config.json") as f:
        config = json.load(f)
    config.update(config_update or {})
    with open(target / "config.json", "w") as f:
        json.dump(config, f)
    return target


def _outputs(backbone, inputs):
    return np.asarray(backbone(_backbone_inputs(inputs))["sequence_output"])


# --- parity -------------------------------------------------------------------------------

def test_gpt2_matches_hugging_face(fixture, imported):
    inputs, expected, _ = fixture
    mask = inputs["attention_mask"]
    x = _backbone_inputs(inputs)
    assert isinstance(imported, GPT2Backbone)
    config = imported.get_config()
    assert (config["num_layers"], config["hidden_dim"], config["num_heads"],
            config["intermediate_dim"], config["max_sequence_length"],
            config["vocabulary_size"]) == (2, 32, 4, 128, 64, 400)
    assert config["dropout"] == 0.0

    errors = {"last_hidden_state": parity.assert_close_on_tokens(
        imported(x)["sequence_output"], expected["last_hidden_state"], mask)}
    states = _hidden_states(imported, x)
    assert len(states) == len(expected["hidden_states"]) == 3
    for i, (ours, theirs) in enumerate(zip(states, expected["hidden_states"])):
        errors[f"hidden_states[{i}]"] = parity.assert_close_on_tokens(ours, theirs, mask)
    # The LM head is the tied token embedding (HF saved no separate lm_head.weight).
    logits = GPT2CausalLM(imported)(x)
    errors["lm_logits"] = parity.assert_close_on_tokens(logits, expected["head_logits"], mask)
    print("\ngpt2 parity, max abs error on real tokens: "
          + ", ".join(f"{k} {v:.2e}" for k, v in errors.items()))


def test_gpt2_is_registered_for_hugging_face_checkpoints():
    arch = models.get("gpt2")
    assert arch.hf_model_types == ("gpt2",)
    assert arch.converter("huggingface") is gpt2_converters.from_huggingface
    assert registry.find_by_hf_model_type("gpt2") == [arch]


# --- weight-name variants -----------------------------------------------------------------

def test_bare_names_buffers_and_a_tied_lm_head_load_the_same(fixture, imported, tmp_path):
    inputs, _, folder = fixture
    weights = load_file(str(folder / "model.safetensors"))
    extra = {"lm_head.weight": weights["transformer.wte.weight"]}
    for i in range(2):  # the causal-mask buffers older checkpoints saved
        extra[f"h.{i}.attn.bias"] = np.tril(np.ones((1, 1, 64, 64), "float32"))
        extra[f"h.{i}.attn.masked_bias"] = np.array(-1e4, "float32")
    bare = _copy_checkpoint(folder, tmp_path / "bare",
                            rename=lambda k: k.removeprefix("transformer."), extra=extra)
    np.testing.assert_array_equal(_outputs(gpt2_converters.from_huggingface(bare), inputs),
                                  _outputs(imported, inputs))


def test_untied_lm_head_is_rejected(fixture, tmp_path):
    _, _, folder = fixture
    weights = load_file(str(folder / "model.safetensors"))
    untied = _copy_checkpoint(folder, tmp_path / "untied", extra={
        "lm_head.weight": weights["transformer.wte.weight"] + 1.0})
    with pytest.raises(ValueError, match="lm_head.weight differs from the token embedding"):
        gpt2_converters.from_huggingface(untied)


def test_missing_and_unread_weights_are_errors(fixture, tmp_path):
    _, _, folder = fixture
    missing = _copy_checkpoint(folder, tmp_path / "missing",
                               drop=("transformer.h.1.mlp.c_fc.bias",))
    with pytest.raises(ValueError, match=r"h\.1\.mlp\.c_fc\.bias"):
        gpt2_converters.from_huggingface(missing)
    # A third block the config does not count.
    weights = load_file(str(folder / "model.safetensors"))
    third = {k.replace("h.1.", "h.2."): v for k, v in weights.items() if ".h.1." in k}
    unread = _copy_checkpoint(folder, tmp_path / "unread", extra=third)
    with pytest.raises(ValueError, match=r"did not read.*h\.2\."):
        gpt2_converters.from_huggingface(unread)
    shutil.rmtree(unread)
    wrong_shape = _copy_checkpoint(folder, tmp_path / "unread",
                                   config_update={"n_positions": 32})
    with pytest.raises(ValueError, match="Shape mismatch"):
        gpt2_converters.from_huggingface(wrong_shape)


@pytest.mark.parametrize("update,message", [
    ({"model_type": "openai-gpt"}, "reads 'gpt2' checkpoints only"),
    ({"activation_function": "relu"}, "activation_function is 'relu'"),
    ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
    ({"add_cross_attention": True}, "cross-attention"),
])
def test_configs_gpt2backbone_cannot_represent_are_rejected(update, message):
    config = gpt2_converters.backbone_config(
        {"model_type": "gpt2", "vocab_size": 10, "n_embd": 8, "n_layer": 1, "n_head": 2,
         "n_positions": 16}, "test")
    assert config["intermediate_dim"] == 32 and config["layer_norm_epsilon"] == 1e-5
    with pytest.raises(ValueError, match=message):
        gpt2_converters.backbone_config(
            {"model_type": "gpt2", "vocab_size": 10, "n_embd": 8, "n_layer": 1, "n_head": 2,
             "n_positions": 16, **update}, "test")


# --- the tokenizer ------------------------------------------------------------------------

def test_imported_gpt2_tokenizer_gives_the_reference_ids(fixture, tmp_path):
    _, _, folder = fixture
    expected = parity.tokenizer_expectations("gpt2")
    config = import_huggingface_tokenizer(str(folder), str(tmp_path / "vocab"))
    assert config["kind"] == "bpe"
    assert config["special_tokens"]["end_of_text"] == "<|endoftext|>"
    assert config["special_tokens"]["pad"] == "<|endoftext|>"
    tokenizer = load_tokenizer(str(tmp_path / "vocab"))
    assert tokenizer.vocabulary_size() == expected["vocab_size"] == 400
    # GPT-2's tokenizer adds no special tokens: the ids are the text's.
    assert _as_list(tokenizer.tokenize(expected["texts"])) == expected["ids"]
    for text, ids in zip(expected["texts"], expected["ids"]):
        assert _as_list(tokenizer.tokenize([text])) == [ids], repr(text)
    # <|endoftext|> is the last id, as in GPT-2's vocabulary, and is never split.
    ids = special_token_ids(str(tmp_path / "vocab"))
    assert ids["end_of_text"] == ids["pad"] == 399
    assert _as_list(tokenizer.tokenize(["a<|endoftext|>b"]))[0][1] == 399
