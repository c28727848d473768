"""ELMo (Peters et al. 2018): character ids, the token encoder's highway layers, the projected
LSTM cell with clipping, the residual connection, the directions of the biLM, the scalar
mix, the biLM loss, the bilm records and the feature-based heads."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmfactory import models
from lmfactory.components.pretraining_data import bilm
from lmfactory.models.elmo import (ElmoBackbone, ElmoBiLM, ElmoClassifier, ElmoPreprocessor,
                                   ElmoTagger)
from lmfactory.models.elmo.elmo_highway import ElmoHighway
from lmfactory.models.elmo.elmo_lstm_cell import ElmoLstmCell
from lmfactory.models.elmo.elmo_scalar_mix import ElmoScalarMix
from lmfactory.models.tokenizers import word_characters as chars

TINY = dict(vocabulary_size=40, num_layers=2, lstm_units=12, projection_dim=6,
            filters=[[1, 4], [2, 4], [3, 8]], num_highway_layers=2, character_embedding_dim=4,
            max_characters_per_token=10, dropout=0.0)
C = TINY["max_characters_per_token"]
P = TINY["projection_dim"]


def tiny_backbone(**overrides):
    keras.utils.set_random_seed(3)
    return ElmoBackbone(**{**TINY, **overrides})


def random_inputs(mask, seed=0):
    rng = np.random.default_rng(seed)
    mask = np.asarray(mask, "int32")
    characters = rng.integers(1, chars.CHARACTER_VOCABULARY_SIZE, mask.shape + (C,))
    return {"token_ids": (rng.integers(1, TINY["vocabulary_size"], mask.shape) * mask
                          ).astype("int32"),
            "character_ids": (characters * mask[..., None]).astype("int32"),
            "padding_mask": mask}


def numpy_nll(logits, labels):
    logits = np.asarray(logits, np.float64)
    logits = logits - logits.max(-1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return -np.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]


# --------------------------------------------------------------------------- registry


def test_registry_record_and_original_configuration():
    arch = models.get("elmo")
    assert arch.family == "recurrent" and arch.objectives == ("bilm",)
    assert arch.head("classification") is ElmoClassifier and arch.head("tagging") is ElmoTagger
    original = arch.presets["original"]
    assert sum(count for _, count in original["filters"]) == 2048  # §3.4
    assert [width for width, _ in original["filters"]] == list(range(1, 8))
    assert (original["lstm_units"], original["projection_dim"], original["num_layers"],
            original["num_highway_layers"], original["cell_clip"],
            original["max_characters_per_token"]) == (4096, 512, 2, 2, 3.0, 50)


def test_original_preset_has_the_published_93_6m_parameters():
    # 18.0M in the token encoder (CNN 0.2M, highways 16.8M, projection 1.0M) and 4 LSTMs of
    # 18.9M: the 93.6M of the released "original" ELMo biLM (its softmax is not part of it).
    backbone = models.build("elmo", "original")
    assert backbone.token_encoder.count_params() == 4_192 + 199_168 + 16_785_408 + 1_049_088
    assert backbone.count_params() == 18_037_856 + 4 * 18_890_752
    assert round(backbone.count_params() / 1e6, 1) == 93.6


# --------------------------------------------------------------------------- character ids


def test_character_ids_bytes_markers_and_padding():
    ids = chars.word_character_ids(tf.constant(["ab", "é", "", "<S>", "</S>"]), 6).numpy()
    pad, bow, eow = chars.PADDING_CHARACTER, chars.BEGIN_WORD, chars.END_WORD
    np.testing.assert_array_equal(ids[0], [bow, ord("a") + 1, ord("b") + 1, eow, pad, pad])
    np.testing.assert_array_equal(ids[1], [bow, 0xC3 + 1, 0xA9 + 1, eow, pad, pad])  # UTF-8
    np.testing.assert_array_equal(ids[2], [bow, eow, pad, pad, pad, pad])
    np.testing.assert_array_equal(ids[3], [bow, chars.BEGIN_SENTENCE, eow, pad, pad, pad])
    np.testing.assert_array_equal(ids[4], [bow, chars.END_SENTENCE, eow, pad, pad, pad])
    assert ids.min() >= 1 and ids.max() < chars.CHARACTER_VOCABULARY_SIZE


def test_character_ids_truncate_keeping_end_of_word_and_padded_tokens_are_zero():
    ids = chars.word_character_ids(tf.constant(["abcdefgh"]), 5).numpy()[0]
    np.testing.assert_array_equal(ids, [chars.BEGIN_WORD, 98, 99, 100, chars.END_WORD])
    words = tf.constant([["x", "y"], ["z", ""]])
    padded = chars.padded_character_ids(words, [[1, 1], [1, 0]], 4).numpy()
    assert (padded[1, 1] == chars.PADDED_TOKEN).all() and (padded[0, 1] != 0).all()
    with pytest.raises(ValueError, match="at least 3"):
        chars.word_character_ids(tf.constant(["a"]), 2)


# --------------------------------------------------------------------------- token encoder


def test_highway_formula_and_carry_bias():
    layer = ElmoHighway()
    x = np.random.default_rng(0).normal(size=(3, 5)).astype("float32")
    y = layer(x).numpy()
    gate_kernel, gate_bias = layer.gate.kernel.numpy(), layer.gate.bias.numpy()
    transform_kernel, transform_bias = layer.transform.kernel.numpy(), layer.transform.bias.numpy()
    np.testing.assert_allclose(gate_bias, -2.0)
    gate = 1 / (1 + np.exp(-(x @ gate_kernel + gate_bias)))
    expected = gate * np.maximum(x @ transform_kernel + transform_bias, 0) + (1 - gate) * x
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


def test_token_encoder_shapes():
    backbone = tiny_backbone()
    encoder = backbone.token_encoder
    assert encoder.cnn_width == 16 and len(encoder.highways) == 2
    out = encoder(random_inputs(np.ones((2, 3)))["character_ids"])
    assert tuple(out.shape) == (2, 3, P)


# --------------------------------------------------------------------------- LSTM cell


def test_lstm_cell_projection_and_clipping():
    cell = ElmoLstmCell(units=8, projection_dim=3, cell_clip=0.5, projection_clip=0.25)
    x = np.random.default_rng(1).normal(size=(4, 5)).astype("float32") * 50
    states = [np.zeros((4, 3), "float32"), np.full((4, 8), 10.0, "float32")]
    cell.build((None, 5))
    cell.kernel.assign(cell.kernel * 50)
    output, (h, c) = cell(x, states)
    assert tuple(output.shape) == (4, 3) and tuple(c.shape) == (4, 8)
    assert np.abs(c.numpy()).max() <= 0.5 + 1e-6 and np.isclose(np.abs(c.numpy()).max(), 0.5)
    assert np.abs(output.numpy()).max() <= 0.25 + 1e-6
    np.testing.assert_array_equal(output.numpy(), h.numpy())


def test_lstm_cell_step_matches_numpy():
    cell = ElmoLstmCell(units=4, projection_dim=2, cell_clip=3.0, projection_clip=3.0)
    rng = np.random.default_rng(2)
    x, h, c = (rng.normal(size=s).astype("float32") for s in ((3, 5), (3, 2), (3, 4)))
    output, (_, new_c) = cell(x, [h, c])
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    gates = np.concatenate([x, h], -1) @ cell.kernel.numpy() + cell.bias.numpy()
    i, f, g, o = np.split(gates, 4, axis=-1)
    expected_c = np.clip(sig(f + 1.0) * c + sig(i) * np.tanh(g), -3, 3)
    expected = np.clip((sig(o) * np.tanh(expected_c)) @ cell.projection_kernel.numpy(), -3, 3)
    np.testing.assert_allclose(new_c.numpy(), expected_c, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(output.numpy(), expected, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------- biLM


def test_layer_outputs_token_layer_duplicated_and_residual_between_layers():
    backbone = tiny_backbone()
    inputs = random_inputs(np.ones((2, 5)))
    out = backbone(inputs)
    layers = out["layer_outputs"].numpy()
    assert layers.shape == (2, 3, 5, 2 * P)
    tokens = backbone.token_encoder(inputs["character_ids"]).numpy()
    np.testing.assert_allclose(layers[:, 0, :, :P], tokens, atol=1e-6)
    np.testing.assert_allclose(layers[:, 0, :, P:], tokens, atol=1e-6)
    np.testing.assert_allclose(out["sequence_output"].numpy(), layers[:, -1], atol=1e-6)
    mask = tf.ones((2, 5), tf.bool)
    first = layers[:, 1, :, :P]
    second = backbone.forward_layers[1](first, mask=mask).numpy()
    np.testing.assert_allclose(layers[:, 2, :, :P], second + first, rtol=1e-5, atol=1e-5)
    first_backward = layers[:, 1, :, P:]
    second_backward = np.flip(backbone.backward_layers[1](first_backward, mask=mask).numpy(), 1)
    np.testing.assert_allclose(layers[:, 2, :, P:], second_backward + first_backward,
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mask", [[1, 1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1, 1]],
                         ids=["right_padding", "left_padding"])
def test_forward_sees_only_earlier_and_backward_only_later_tokens(mask):
    backbone = tiny_backbone()
    inputs = random_inputs([mask])
    real = [i for i, m in enumerate(mask) if m]
    changed_at = real[2]
    changed = {k: v.copy() for k, v in inputs.items()}
    changed["character_ids"][0, changed_at] = (changed["character_ids"][0, changed_at] % 200) + 7
    base = backbone(inputs)["sequence_output"].numpy()[0]
    new = backbone(changed)["sequence_output"].numpy()[0]
    forward_changed = np.abs(base[:, :P] - new[:, :P]).max(-1) > 1e-7
    backward_changed = np.abs(base[:, P:] - new[:, P:]).max(-1) > 1e-7
    assert [i for i in real if forward_changed[i]] == [i for i in real if i >= changed_at]
    assert [i for i in real if backward_changed[i]] == [i for i in real if i <= changed_at]
    # padding: the padded tokens' characters do not reach the real positions
    padded = {k: v.copy() for k, v in inputs.items()}
    padded["character_ids"][0, [i for i, m in enumerate(mask) if not m]] = 11
    again = backbone(padded)["sequence_output"].numpy()[0]
    np.testing.assert_allclose(again[real], base[real], atol=1e-6)


def test_padding_left_equals_right():
    backbone = tiny_backbone()
    right = random_inputs([[1, 1, 1, 0, 0]])
    left = {name: np.roll(value, 2, axis=1) for name, value in right.items()}
    a = backbone(right)["layer_outputs"].numpy()[0, :, :3]
    b = backbone(left)["layer_outputs"].numpy()[0, :, 2:]
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_targets_are_the_real_neighbours():
    backbone = tiny_backbone()
    inputs = random_inputs([[1, 1, 1, 0], [0, 1, 1, 1]])
    inputs["token_ids"] = np.array([[5, 6, 7, 0], [0, 8, 9, 10]], "int32")
    out = backbone(inputs)
    np.testing.assert_array_equal(out["forward_targets"].numpy(), [[6, 7, -1, -1],
                                                                   [-1, 9, 10, -1]])
    np.testing.assert_array_equal(out["backward_targets"].numpy(), [[-1, 5, 6, -1],
                                                                    [-1, -1, 8, 9]])


def test_bilm_loss_is_forward_plus_backward_nll():
    backbone = tiny_backbone()
    model = ElmoBiLM(backbone)
    model.compile(optimizer="adam")
    x = random_inputs([[1, 1, 1, 1], [1, 1, 1, 0]])
    weights = np.array([[1, 1, 0, 1], [1, 1, 1, 0]], "float32")
    out = model(x)
    loss = float(model.compute_loss(x, x["token_ids"], out, weights))
    ids = x["token_ids"]
    expected = 0.0
    for direction, shift in (("forward", 1), ("backward", -1)):
        nll, total = 0.0, 0.0
        for row in range(2):
            for k in range(4):
                target = k + shift
                if 0 <= target < 4 and x["padding_mask"][row, target] and x["padding_mask"][row, k]:
                    nll += weights[row, k] * numpy_nll(out[direction][row, k][None],
                                                       ids[row, target][None])[0]
                    total += weights[row, k]
        expected += nll / (total + 1e-5)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
    # the softmax is shared: one Dense layer reads both directions' top layer
    assert len([w for w in model.trainable_weights if "softmax" in w.path]) == 2
    forward_logits = model.softmax(backbone(x)["sequence_output"][..., :P]).numpy()
    np.testing.assert_allclose(forward_logits, out["forward"].numpy(), atol=1e-5)
    metrics = {m.name: m for m in model.metrics}
    assert {"forward_perplexity", "backward_perplexity"} <= set(metrics)


def test_bilm_trains_and_round_trips(tmp_path):
    backbone = tiny_backbone()
    model = ElmoBiLM(backbone)
    model.compile(optimizer=keras.optimizers.Adam(0.01))
    x = random_inputs(np.ones((4, 6)))
    history = model.fit(x, x["token_ids"], epochs=8, verbose=0, batch_size=4)
    losses = history.history["loss"]
    assert losses[-1] < losses[0]
    assert history.history["forward_perplexity"][-1] > 1.0
    path = str(tmp_path / "bilm.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, compile=False)
    np.testing.assert_allclose(loaded(x)["backward"].numpy(), model(x)["backward"].numpy(),
                               atol=1e-5)


# --------------------------------------------------------------------------- scalar mix


def test_scalar_mix_is_gamma_times_softmax_weighted_sum_and_l2():
    mix = ElmoScalarMix(3, dropout=0.0, l2=0.5)
    layers = np.random.default_rng(0).normal(size=(2, 3, 4, 6)).astype("float32")
    mix.build(layers.shape)
    mix.layer_weights.assign([0.3, -1.0, 2.0])
    mix.gamma.assign(1.7)
    s = np.exp([0.3, -1.0, 2.0]) / np.exp([0.3, -1.0, 2.0]).sum()
    expected = 1.7 * np.einsum("l,bltd->btd", s, layers)
    np.testing.assert_allclose(mix(layers).numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(sum(mix.losses)), 0.5 * (0.09 + 1.0 + 4.0), rtol=1e-5)
    top = ElmoScalarMix(3, mix="top", dropout=0.0)
    top.build(layers.shape)
    top.gamma.assign(2.0)
    np.testing.assert_allclose(top(layers).numpy(), 2.0 * layers[:, -1], rtol=1e-6)
    assert not top.losses
    with pytest.raises(ValueError, match="mix must be one of"):
        ElmoScalarMix(3, mix="bottom")


def test_scalar_mix_layer_norm_normalises_each_layer_before_weighting():
    mix = ElmoScalarMix(2, dropout=0.0, l2=0.0, layer_norm=True)
    layers = np.random.default_rng(1).normal(size=(1, 2, 3, 8)).astype("float32")
    layers[:, 0] *= 40.0
    layers[:, :, 2] = 0.0  # a padded token
    out = mix(layers).numpy()
    normalised = (layers - layers.mean(-1, keepdims=True)) / np.sqrt(
        layers.var(-1, keepdims=True) + 1e-3)
    np.testing.assert_allclose(out, 0.5 * normalised[:, 0] + 0.5 * normalised[:, 1],
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(out[0, 2], 0.0)


# --------------------------------------------------------------------------- heads


def head_inputs(batch=2, length=5):
    mask = np.ones((batch, length), "int32")
    mask[0, -2:] = 0
    return random_inputs(mask)


@pytest.mark.parametrize("mix", ["all", "top"])
def test_feature_based_heads_freeze_the_bilm(mix):
    backbone = tiny_backbone()
    inputs = head_inputs()
    classifier = ElmoClassifier(backbone, num_classes=3, mix=mix, elmo_at_output=True)
    assert tuple(classifier(inputs).shape) == (2, 3)
    assert not backbone.trainable
    assert not any(w.path.startswith(backbone.name) for w in classifier.trainable_weights)
    tagger = ElmoTagger(backbone, num_labels=4, mix=mix)
    assert tuple(tagger(inputs).shape) == (2, 5, 4)
    mixes = [w for w in tagger.trainable_weights if "layer_weights" in w.path]
    assert len(mixes) == (1 if mix == "all" else 0)


def test_classifier_trains_with_l2_on_the_mix_and_round_trips(tmp_path):
    backbone = tiny_backbone()
    inputs = head_inputs(4)
    model = ElmoClassifier(backbone, num_classes=2, l2=1.0, elmo_dropout=0.0, dropout=0.0)
    frozen = [w.numpy().copy() for w in backbone.weights]
    model.compile(optimizer=keras.optimizers.Adam(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    labels = np.array([0, 1, 0, 1])
    history = model.fit(inputs, labels, epochs=5, verbose=0, batch_size=4)
    assert history.history["loss"][-1] < history.history["loss"][0]
    for before, after in zip(frozen, backbone.weights):
        np.testing.assert_array_equal(before, after.numpy())
    path = str(tmp_path / "classifier.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, compile=False)
    np.testing.assert_allclose(loaded(inputs).numpy(), model(inputs).numpy(), atol=1e-5)


# --------------------------------------------------------------------------- bilm records


def test_bilm_windows_cover_every_target_once():
    stream = bilm.sentence_stream([[[5, 6, 7]], [[8, 9]]], begin_id=1, end_id=2)
    assert stream == [1, 5, 6, 7, 2, 1, 8, 9, 2]
    cut, dropped = bilm.windows(stream, 4)
    assert cut == [[1, 5, 6, 7], [7, 2, 1, 8]] and dropped == 2
    forward = [t for w in cut for t in w[1:]]
    backward = [t for w in cut for t in w[:-1]]
    assert forward == stream[1:7] and backward == stream[0:6]
    assert bilm.windows([1, 2], 4) == ([], 2)


def test_bilm_records_and_converter():
    table = np.arange(10 * bilm.CHARACTERS).reshape(10, bilm.CHARACTERS)
    state = bilm.BilmVocabulary(1, 2, table)
    config = {"max_seq_length": 4, "ngram_masking": 0}
    records, stats = bilm.shard_examples([[[5, 6, 7]], [[8, 9]]], state, config)
    assert stats == {"windows": 2, "tokens": 9, "dropped_tail_tokens": 2}
    parsed = tf.io.parse_example(tf.constant(records), bilm.feature_spec(config))
    x, y, weights = bilm.converter(config)(parsed)
    np.testing.assert_array_equal(x["token_ids"].numpy(), [[1, 5, 6, 7], [7, 2, 1, 8]])
    np.testing.assert_array_equal(y.numpy(), x["token_ids"].numpy())
    np.testing.assert_array_equal(x["character_ids"].numpy()[1], table[[7, 2, 1, 8]])
    assert x["padding_mask"].numpy().all() and weights.numpy().sum() == 8
    with pytest.raises(ValueError, match="ngram_masking"):
        bilm.check_config({"ngram_masking": 3})


# --------------------------------------------------------------------------- preprocessing


def word_tokenizer(lowercase=False):
    from lmfactory.models.tokenizers.word import WordTokenizer

    vocabulary = ["<pad>", "<unk>", "<S>", "</S>", "the", "cat", "sat"]
    return WordTokenizer(vocabulary, special_tokens=models.get("elmo").special_tokens,
                         lowercase=lowercase)


def test_preprocessor_frames_truncates_and_defines_bad_input():
    layer = ElmoPreprocessor(word_tokenizer(), sequence_length=5, max_characters_per_token=C)
    out = layer(tf.constant(["the cat", "", "the cat sat the cat", "ünknöwn"]))
    np.testing.assert_array_equal(out["token_ids"].numpy()[:3],
                                  [[2, 4, 5, 3, 0], [2, 3, 0, 0, 0], [2, 4, 5, 6, 3]])
    np.testing.assert_array_equal(out["padding_mask"].numpy()[1], [1, 1, 0, 0, 0])
    np.testing.assert_array_equal(out["words_kept"].numpy(), [2, 0, 3, 1])
    assert out["token_ids"].numpy()[3, 1] == 1  # <unk> word id, its spelling kept below
    spelled = chars.word_character_ids(tf.constant(["ünknöwn"]), C).numpy()[0]
    np.testing.assert_array_equal(out["character_ids"].numpy()[3, 1], spelled)
    assert (out["character_ids"].numpy()[1, 2:] == chars.PADDED_TOKEN).all()
    assert out["character_ids"].numpy()[0, 0, 1] == chars.BEGIN_SENTENCE


def test_preprocessor_lowercases_characters_only_with_a_lowercased_vocabulary():
    layer = ElmoPreprocessor(word_tokenizer(lowercase=True), sequence_length=4,
                             max_characters_per_token=C, lowercase=True)
    out = layer(tf.constant(["The CAT"]))
    np.testing.assert_array_equal(out["token_ids"].numpy(), [[2, 4, 5, 3]])
    np.testing.assert_array_equal(out["character_ids"].numpy()[0, 1],
                                  chars.word_character_ids(tf.constant(["the"]), C).numpy()[0])
    with pytest.raises(ValueError, match="not in the vocabulary"):
        ElmoPreprocessor(word_tokenizer(), sequence_length=4, begin_token="<BOS>")


def test_tagging_preprocessor_characters_follow_the_words_and_the_tagger_serves(tmp_path):
    from lmfactory.components.tasks.tagging_serving import export_tagger
    from lmfactory.models.elmo import ElmoTaggingPreprocessor

    layer = ElmoTaggingPreprocessor(word_tokenizer(), ["O", "B-x"], sequence_length=5,
                                    special_tokens={"cls": "<S>", "sep": "</S>", "pad": "<pad>"},
                                    max_characters_per_token=C)
    words = tf.ragged.constant([["the", "zebra"], ["cat", "sat", "the", "cat"]])
    tags = tf.ragged.constant([["O", "B-x"], ["O", "O", "B-x", "O"]])
    out = layer(words, tags)
    np.testing.assert_array_equal(out["token_ids"].numpy(), [[2, 4, 1, 3, 0], [2, 5, 6, 4, 3]])
    expected = chars.word_character_ids(tf.constant(["<S>", "the", "zebra", "</S>"]), C)
    np.testing.assert_array_equal(out["character_ids"].numpy()[0, :4], expected.numpy())
    assert (out["character_ids"].numpy()[0, 4] == chars.PADDED_TOKEN).all()
    np.testing.assert_array_equal(out["sample_weight"].numpy()[0], [0, 1, 1, 0, 0])

    model = ElmoTagger(tiny_backbone(vocabulary_size=7), num_labels=2)
    export_tagger(layer, model, str(tmp_path / "tagger"))
    serve = tf.saved_model.load(str(tmp_path / "tagger")).signatures["serving_default"]
    served = serve(sentences=tf.constant(["the zebra", "", "cat " * 9]))
    np.testing.assert_array_equal(served["lengths"].numpy(), [2, 0, 9])
    tags = served["tags"].numpy()
    assert set(tags[0, :2]) <= {b"O", b"B-x"} and tags[2, 8] == b"O"  # truncated word: O
