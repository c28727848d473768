"""Tests of lmfactory.models.gpt3: GPT-3 (Brown et al. 2020) presets, parameter counts,
the alternating dense / locally banded layers, cached generation, serialization, training."""

import gc

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmfactory import models
from lmfactory.models import gpt3
from lmfactory.models.gpt2 import GPT2CausalLM
from lmfactory.models.gpt3 import GPT3Backbone

VOCAB = 97
BAND = 3
BATCH, SEQ = 2, 13


def _tiny(**overrides):
    config = dict(vocabulary_size=VOCAB, num_layers=4, num_heads=2, hidden_dim=32,
                  intermediate_dim=64, attention_band=BAND, max_sequence_length=64)
    config.update(overrides)
    return models.build("gpt3", "tiny", **config)


def _perturb(model, seed=0, scale=0.3):
    """Random weights large enough that greedy decoding does not collapse onto one token."""
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(0.0, scale, w.shape).astype("float32")
                       if w.ndim > 1 else w + rng.normal(0.0, 0.1, w.shape).astype("float32")
                       for w in model.get_weights()])


def _inputs(seed=0, lengths=(SEQ, 9)):
    rng = np.random.default_rng(seed)
    padding = (np.arange(SEQ)[None, :] < np.array(lengths)[:, None]).astype("int32")
    return {"token_ids": (rng.integers(1, VOCAB, (BATCH, SEQ)) * padding).astype("int32"),
            "padding_mask": padding}


@pytest.fixture(scope="module", autouse=True)
def _seed():
    keras.utils.set_random_seed(1234)


@pytest.fixture(scope="module")
def backbone():
    model = _tiny(dropout=0.0)
    _perturb(model)
    return model


# --------------------------------------------------------------------------- registry, presets


def test_registered_as_a_gpt2_style_decoder():
    arch = models.get("gpt3")
    gpt2 = models.get("gpt2")
    assert (arch.family, arch.tokenizer_kind, arch.objectives) == ("decoder", "bpe",
                                                                   ("causal_lm",))
    assert arch.backbone_cls is GPT3Backbone
    assert arch.pretrainer("causal_lm") is GPT2CausalLM and arch.head("causal_lm") is GPT2CausalLM
    assert arch.special_tokens == gpt2.special_tokens
    assert "Brown" in arch.paper and "Child" in arch.paper


TABLE_2_1 = {  # n_layers, d_model, n_heads, d_head, batch (tokens), learning rate
    "125M": (12, 768, 12, 64, 0.5e6, 6.0e-4),
    "350M": (24, 1024, 16, 64, 0.5e6, 3.0e-4),
    "760M": (24, 1536, 16, 96, 0.5e6, 2.5e-4),
    "1.3B": (24, 2048, 24, 128, 1e6, 2.0e-4),
    "2.7B": (32, 2560, 32, 80, 1e6, 1.6e-4),
    "6.7B": (32, 4096, 32, 128, 2e6, 1.2e-4),
    "13B": (40, 5140, 40, 128, 2e6, 1.0e-4),
    "175B": (96, 12288, 96, 128, 3.2e6, 0.6e-4),
}


def test_presets_follow_table_2_1():
    presets = models.presets("gpt3")
    assert set(presets) == {"tiny", *TABLE_2_1}
    for name, (layers, d_model, heads, d_head, batch, lr) in TABLE_2_1.items():
        config = presets[name]
        assert (config["num_layers"], config["hidden_dim"], config["num_heads"],
                config["head_dim"]) == (layers, d_model, heads, d_head), name
        assert config["intermediate_dim"] == 4 * d_model
        assert config["max_sequence_length"] == 2048 and config["vocabulary_size"] == 50257
        assert config["attention_band"] == 256
        settings = gpt3.training_settings(name)
        assert settings["batch_size_tokens"] == batch and settings["learning_rate"] == lr
        assert settings["adam_beta_2"] == 0.95 and settings["global_clipnorm"] == 1.0
    assert gpt3.GPT3_TRAINING["125M"]["paper_name"] == "GPT-3 Small"
    assert gpt3.GPT3_TRAINING["175B"]["paper_name"] == "GPT-3 175B"
    with pytest.raises(ValueError, match="Unknown GPT-3 preset 'huge'"):
        gpt3.training_settings("huge")


@pytest.fixture
def zero_init(monkeypatch):
    """Parameter counts do not depend on initial values: fill weights with zeros (fast)."""
    def zeros(self, shape, dtype=None):
        return keras.ops.zeros(shape, dtype=dtype)

    monkeypatch.setattr(keras.initializers.RandomNormal, "__call__", zeros)


def test_parameter_counts_against_the_paper_names(zero_init):
    presets = models.presets("gpt3")
    # The formula against built models: the smallest preset and a tiny model whose
    # attention width (3 heads x 16) differs from d_model.
    small = models.build("gpt3", "125M")
    assert small.count_params() == gpt3.parameter_count(presets["125M"]) == 125_226_240
    del small
    gc.collect()
    odd = _tiny(num_heads=3, head_dim=16)
    assert odd.count_params() == gpt3.parameter_count(odd.get_config())
    # The rest by formula, against the sizes the paper names them by.
    expected = {"125M": (125.0e6, 125.5e6), "350M": (355e6, 357e6), "760M": (759e6, 762e6),
                # Table 2.1's XL row: 24 heads x 128 = 3072 wide attention for
                # d_model 2048 makes 1.52B (16 heads x 128 would make 1.32B).
                "1.3B": (1.51e9, 1.52e9),
                "2.7B": (2.64e9, 2.66e9), "6.7B": (6.65e9, 6.67e9),
                "13B": (12.9e9, 13.0e9), "175B": (174.5e9, 174.7e9)}
    for name, (low, high) in expected.items():
        count = gpt3.parameter_count(presets[name])
        assert low <= count <= high, (name, count)
    xl_16_heads = dict(presets["1.3B"], num_heads=16)
    assert 1.31e9 <= gpt3.parameter_count(xl_16_heads) <= 1.32e9


# --------------------------------------------------------------------------- architecture


def test_layers_alternate_dense_and_locally_banded(backbone):
    assert backbone.layer_patterns == ("dense", "local", "dense", "local")
    for i, block in enumerate(backbone.transformer_layers):
        attention = block._self_attention_layer
        assert attention.pattern == ("dense" if i % 2 == 0 else "local")
        assert attention.stride == (None if i % 2 == 0 else BAND)
        assert block.normalize_first
    assert all(p == "dense" for p in _tiny(attention_band=None).layer_patterns)


def test_banded_layer_only_sees_its_band(backbone):
    block = backbone.transformer_layers[1]
    x = np.random.default_rng(1).normal(size=(1, 10, 32)).astype("float32")
    changed = x.copy()
    changed[:, 4] = np.random.default_rng(2).normal(size=32)  # not a constant: pre-LN
    diff = np.abs(np.asarray(block(changed)) - np.asarray(block(x))).max(-1)[0]
    assert (diff[4:4 + BAND] > 1e-4).all()
    assert (diff[:4] == 0).all() and (diff[4 + BAND:] == 0).all()


def test_sparse_and_masked_dense_banded_layers_agree(backbone):
    dense = GPT3Backbone.from_config(
        {**backbone.get_config(), "attention_implementation": "masked_dense"})
    dense.set_weights(backbone.get_weights())
    inputs = _inputs()
    a = np.asarray(backbone(inputs)["sequence_output"])
    b = np.asarray(dense(inputs)["sequence_output"])
    assert np.abs(a[0] - b[0]).max() < 1e-5 and np.abs(a[1, :9] - b[1, :9]).max() < 1e-5
    # The band matters: the same weights with every layer dense give other outputs.
    all_dense = GPT3Backbone.from_config({**backbone.get_config(), "attention_band": None})
    all_dense.set_weights(backbone.get_weights())
    assert np.abs(np.asarray(all_dense(inputs)["sequence_output"])[0] - a[0]).max() > 1e-3


def test_head_dim_independent_of_width():
    model = _tiny(num_heads=3, head_dim=16)
    attention = model.transformer_layers[1]._self_attention_layer
    assert tuple(attention._query_dense.kernel.shape) == (32, 3, 16)
    assert tuple(attention._output_dense.kernel.shape) == (3, 16, 32)
    state = model.initial_state(2, 8)
    assert len(state) == 4 and all(tuple(buffer.shape) == (2, 3, 8, 16)
                                   for pair in state for buffer in pair)
    assert model(_inputs())["sequence_output"].shape == (BATCH, SEQ, 32)


def test_residual_projection_init():
    model = _tiny(num_layers=8, hidden_dim=64, intermediate_dim=256)
    scaled = np.concatenate([np.ravel(k.numpy()) for k in model.residual_projection_kernels()])
    other = model.transformer_layers[0]._feedforward_intermediate_dense.kernel.numpy()
    assert scaled.std() == pytest.approx(0.02 / np.sqrt(16), rel=0.1)
    assert other.std() == pytest.approx(0.02, rel=0.1)


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError, match="attention_band must be a positive integer"):
        _tiny(attention_band=0)
    with pytest.raises(ValueError, match="not divisible by num_heads"):
        _tiny(num_heads=3)
    with pytest.raises(ValueError, match="Unknown implementation 'flash'"):
        _tiny(attention_implementation="flash")


# --------------------------------------------------------------------------- generation


def test_cached_decoding_steps_equal_full_recompute(backbone):
    """Each cached step's hidden state equals the full forward pass at that position,
    well past the band (so banded layers must apply the band over the cache)."""
    ids = np.random.default_rng(2).integers(1, VOCAB, (2, 16)).astype("int32")
    full = np.asarray(backbone({"token_ids": ids,
                                "padding_mask": np.ones_like(ids)})["sequence_output"])
    state = backbone.initial_state(2, 16)
    hidden, state = backbone.call_with_state(ids[:, :4], state, 0)
    steps = [np.asarray(hidden)]
    for index in range(4, 16):
        hidden, state = backbone.call_with_state(ids[:, index:index + 1], state, index)
        steps.append(np.asarray(hidden))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)


def _greedy_by_full_recompute(lm, prompt, max_length):
    ids = list(prompt)
    while len(ids) < max_length:
        x = {"token_ids": np.array([ids], "int32"),
             "padding_mask": np.ones((1, len(ids)), "int32")}
        ids.append(int(np.asarray(lm(x))[0, -1].argmax()))
    return ids


@pytest.mark.filterwarnings("ignore:You are using a softmax over axis")
def test_cached_greedy_generation_equals_full_recompute(backbone):
    lm = GPT2CausalLM(backbone)
    prompts = np.array([[11, 12, 13, 0, 0], [21, 22, 23, 24, 25], [31, 0, 0, 0, 0]], "int32")
    lengths = np.array([3, 5, 1])
    max_length = 14
    out = np.asarray(lm.generate_ids(prompts, prompt_lengths=lengths,
                                     max_length=max_length)["token_ids"])
    for row in range(3):
        expected = _greedy_by_full_recompute(lm, prompts[row, :lengths[row]], max_length)
        assert out[row].tolist() == expected, row
    assert len(set(out[1, 5:].tolist())) > 1  # a real continuation, not one repeated id

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32),
                                  tf.TensorSpec([None], tf.int32)])
    def serve(ids, prompt_lengths):
        return lm.generate_ids(ids, prompt_lengths=prompt_lengths, max_length=max_length)

    traced = serve(tf.constant(prompts), tf.constant(lengths, tf.int32))
    np.testing.assert_array_equal(np.asarray(traced["token_ids"]), out)


# --------------------------------------------------------------------------- serialization


def test_config_keeps_band_head_dim_and_layer_patterns(backbone):
    # Identical outputs after the round trip: the conformance harness
    # (check_config_round_trip).
    config = backbone.get_config()
    assert config["attention_band"] == BAND and config["head_dim"] == 16
    clone = GPT3Backbone.from_config(config)
    assert clone.layer_patterns == backbone.layer_patterns


def test_causal_lm_keras_save_load(backbone, tmp_path):
    # The backbone's checkpoint folder and .keras round trips: the conformance harness
    # (check_checkpoint_round_trip).
    lm = GPT2CausalLM(backbone)
    lm.save(tmp_path / "lm.keras")
    restored = keras.models.load_model(tmp_path / "lm.keras")
    assert isinstance(restored.backbone, GPT3Backbone)
    assert restored.backbone.attention_band == BAND
    np.testing.assert_array_equal(np.asarray(restored(_inputs())), np.asarray(lm(_inputs())))


# --------------------------------------------------------------------------- training

