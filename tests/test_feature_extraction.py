"""Feature-based use of an encoder (models/feature_extraction.py; BERT §5.3, Table 7)."""

import numpy as np
import pytest

import keras

from lmfactory import models
from lmfactory.models.feature_extraction import (FEATURE_MODES, EncoderFeatures,
                                                 feature_width, select_features)

HIDDEN = 32
LAYERS = 5  # the *_last_four modes need four blocks; five tell sum_all from sum_last_four
INPUT_NAMES = ("token_ids", "padding_mask", "segment_ids")


def tiny_backbone(num_layers=LAYERS, dropout=0.0):
    return models.build("bert", "tiny", vocabulary_size=60, num_layers=num_layers,
                        hidden_dim=HIDDEN, num_heads=4, intermediate_dim=64,
                        max_sequence_length=16, dropout=dropout)


def batch(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "token_ids": rng.integers(1, 60, size=(2, 7)).astype("int32"),
        "padding_mask": np.array([[1] * 7, [1] * 5 + [0] * 2], dtype="int32"),
        "segment_ids": np.array([[0] * 4 + [1] * 3, [0] * 7], dtype="int32"),
    }


def expected_features(hidden_states, mode):
    """Table 7's rows written out over numpy arrays (embedding output first)."""
    h = [np.asarray(s) for s in hidden_states]
    return {
        "first_layer": h[0],
        "last_hidden": h[LAYERS],
        "second_to_last": h[LAYERS - 1],
        "sum_all": sum(h[i] for i in range(1, LAYERS + 1)),
        "sum_last_four": h[LAYERS - 3] + h[LAYERS - 2] + h[LAYERS - 1] + h[LAYERS],
        "concat_last_four": np.concatenate([h[LAYERS - 3], h[LAYERS - 2], h[LAYERS - 1],
                                            h[LAYERS]], axis=-1),
    }[mode]


@pytest.fixture(scope="module")
def backbone():
    return tiny_backbone()


@pytest.mark.parametrize("mode", FEATURE_MODES)
def test_each_mode_matches_hand_computation(backbone, mode):
    x = batch()
    states = backbone.call_with_states(x)
    assert len(states["hidden_states"]) == LAYERS + 1
    layer = EncoderFeatures(backbone, mode)
    features = np.asarray(layer(x))
    width = 4 * HIDDEN if mode == "concat_last_four" else HIDDEN
    assert features.shape == (2, 7, width) and feature_width(mode, HIDDEN) == width
    np.testing.assert_allclose(features, expected_features(states["hidden_states"], mode),
                               rtol=1e-5, atol=1e-5)


def test_modes_differ_from_each_other(backbone):
    """Guards against two modes silently reading the same layers."""
    x = batch(1)
    states = backbone.call_with_states(x)["hidden_states"]
    single = {m: np.asarray(select_features(states, m))
              for m in FEATURE_MODES if m != "concat_last_four"}
    names = sorted(single)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert np.abs(single[a] - single[b]).max() > 1e-3, (a, b)


def test_frozen_backbone_is_not_trained_and_runs_without_dropout():
    backbone = tiny_backbone(dropout=0.5)
    features = EncoderFeatures(backbone, "sum_last_four")
    assert backbone.trainable is False
    assert backbone.trainable_weights == [] and features.trainable_weights == []

    inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name)
              for name in INPUT_NAMES}
    tagger = keras.Model(inputs, keras.layers.Dense(3, name="tags")(features(inputs)))
    assert [w.path for w in tagger.trainable_weights] == ["tags/kernel", "tags/bias"]

    x = batch(2)
    # Fixed features: the same with training on, despite dropout 0.5 in the backbone.
    np.testing.assert_allclose(np.asarray(features(x, training=True)),
                               np.asarray(features(x, training=False)), rtol=0, atol=0)

    before = [np.array(w) for w in backbone.weights]
    head_before = np.array(tagger.get_layer("tags").kernel)
    tagger.compile(optimizer=keras.optimizers.SGD(0.5),
                   loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    tagger.train_on_batch(x, np.ones((2, 7), dtype="int32"))
    for old, new in zip(before, backbone.weights):
        np.testing.assert_array_equal(old, np.array(new))
    assert np.abs(np.array(tagger.get_layer("tags").kernel) - head_before).max() > 0


def test_unfrozen_backbone_is_trainable():
    backbone = tiny_backbone(num_layers=2)
    features = EncoderFeatures(backbone, "last_hidden", freeze_backbone=False)
    assert backbone.trainable
    assert len(features.trainable_weights) == len(backbone.trainable_weights) > 0


def test_get_config_round_trip(backbone, tmp_path):
    layer = EncoderFeatures(backbone, "concat_last_four", name="features")
    config = layer.get_config()
    assert config["mode"] == "concat_last_four" and config["freeze_backbone"] is True
    restored = EncoderFeatures.from_config(config)
    assert restored.get_config() == config
    assert restored.backbone.get_config() == backbone.get_config()

    # Through a saved downstream model, weights included.
    inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name)
              for name in INPUT_NAMES}
    model = keras.Model(inputs, layer(inputs))
    model.save(tmp_path / "features.keras")
    loaded = keras.models.load_model(tmp_path / "features.keras")
    x = batch(3)
    assert isinstance(loaded.get_layer("features"), EncoderFeatures)
    np.testing.assert_allclose(np.asarray(loaded(x)), np.asarray(model(x)), atol=1e-6)


def test_bad_arguments_have_clear_errors(backbone):
    with pytest.raises(ValueError, match="Unknown feature mode 'sum_all_layers'"):
        EncoderFeatures(backbone, "sum_all_layers")
    with pytest.raises(ValueError, match="at least 4 Transformer layers; this one has 2"):
        EncoderFeatures(tiny_backbone(num_layers=2), "concat_last_four")
    with pytest.raises(TypeError, match="call_with_states"):
        EncoderFeatures(keras.layers.Dense(3), "last_hidden")
    with pytest.raises(TypeError, match="input dict"):
        EncoderFeatures(backbone, "last_hidden")(batch()["token_ids"])
