"""The NNLM of Bengio et al. 2003 (models/nnlm): the output formula y = b + W x + U tanh(d +
H x) against a numpy re-computation, the n - 1 word window, the direct connections, the
weight decay on the weights and C but not the biases, and cached generation."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmfactory import models
from lmfactory.models.nnlm import NgramContext, NnlmBackbone, NnlmCausalLM

VOCABULARY = 40


def _lm(order=4, direct_connections=True, weight_decay=1e-4, seed=0, **overrides):
    keras.utils.set_random_seed(seed)
    backbone = models.build("nnlm", "small", vocabulary_size=VOCABULARY, embedding_dim=6,
                            hidden_dim=12, order=order, direct_connections=direct_connections,
                            max_sequence_length=24, **overrides)
    return NnlmCausalLM(backbone, weight_decay=weight_decay)


def _inputs(ids, mask=None):
    ids = np.asarray(ids, dtype="int32")
    mask = np.ones_like(ids) if mask is None else np.asarray(mask, dtype="int32")
    return {"token_ids": ids, "padding_mask": mask}


def _random_ids(shape, seed=1):
    return np.random.default_rng(seed).integers(0, VOCABULARY, shape).astype("int32")


def _numpy_logits(lm, ids):
    """y = b + W x + U tanh(d + H x), x = (C(w_t), ..., C(w_{t-n+2})), in numpy."""
    backbone = lm.backbone
    n, start = backbone.order, backbone.start_id
    C = backbone.word_features.embeddings.numpy()
    H, d = (w.numpy() for w in (backbone.hidden.kernel, backbone.hidden.bias))
    U, b = (w.numpy() for w in (backbone.output_layer.kernel, backbone.output_layer.bias))
    W = backbone.direct.kernel.numpy() if backbone.direct is not None else None
    batch, length = ids.shape
    logits = np.zeros((batch, length, VOCABULARY), dtype="float64")
    for row in range(batch):
        for t in range(length):
            words = [ids[row, t - k] if t - k >= 0 else start for k in range(n - 1)]
            x = np.concatenate([C[word] for word in words])
            y = b + U.T @ np.tanh(d + H.T @ x)
            if W is not None:
                y = y + W.T @ x
            logits[row, t] = y
    return logits


@pytest.mark.parametrize("direct_connections", [True, False])
def test_logits_are_b_plus_wx_plus_u_tanh_d_plus_hx(direct_connections):
    lm = _lm(order=4, direct_connections=direct_connections)
    ids = _random_ids((2, 7))
    logits = lm(_inputs(ids), training=False).numpy()
    np.testing.assert_allclose(logits, _numpy_logits(lm, ids), rtol=1e-4, atol=1e-5)
    backbone = lm.backbone
    assert (backbone.direct is not None) == direct_connections
    names = {weight.path.split("/")[0] for weight in lm.trainable_weights}
    assert ("direct" in names) == direct_connections
    # W x is what the direct connections add: the same weights without W give other logits.
    if direct_connections:
        without = _lm(order=4, direct_connections=False)
        for name in ("word_features", "hidden", "output_layer"):
            getattr(without.backbone, name).set_weights(getattr(backbone, name).get_weights())
        x = backbone(_inputs(ids))["context_output"].numpy()
        np.testing.assert_allclose(
            logits - without(_inputs(ids)).numpy(), x @ backbone.direct.kernel.numpy(),
            rtol=1e-4, atol=1e-5)


def test_context_is_exactly_the_last_n_minus_1_words():
    order, t = 4, 8
    lm = _lm(order=order)
    ids = _random_ids((1, 10))
    base = lm(_inputs(ids)).numpy()
    # The word n - 1 positions back (w_{t-3} for the prediction at t) is outside the window.
    outside = ids.copy()
    outside[0, t - (order - 1)] = (outside[0, t - (order - 1)] + 1) % VOCABULARY
    np.testing.assert_array_equal(lm(_inputs(outside)).numpy()[0, t], base[0, t])
    # ... while each of the n - 1 most recent words (w_t, w_{t-1}, w_{t-2}) is inside.
    for k in range(order - 1):
        inside = ids.copy()
        inside[0, t - k] = (inside[0, t - k] + 1) % VOCABULARY
        assert not np.allclose(lm(_inputs(inside)).numpy()[0, t], base[0, t])


def test_window_ids_most_recent_first_with_start_slots_and_left_padding():
    layer = NgramContext(order=3, start_id=99)
    ids = np.array([[5, 6, 7], [0, 8, 9]], dtype="int32")
    mask = np.array([[1, 1, 1], [0, 1, 1]], dtype="int32")
    windows = layer(ids, mask).numpy()
    assert windows.tolist() == [[[5, 99], [6, 5], [7, 6]],
                                [[99, 99], [8, 99], [9, 8]]]
    assert NgramContext.from_config(layer.get_config()).get_config() == layer.get_config()
    # A left-padded row is scored as the same words at the start of a text.
    lm = _lm(order=3)
    padded = lm(_inputs([[3, 3, 11, 12]], [[0, 0, 1, 1]])).numpy()[0, 2:]
    np.testing.assert_allclose(padded, lm(_inputs([[11, 12]])).numpy()[0], atol=1e-6)
    # A row that is all padding (an empty text) gives finite logits: the start context.
    empty = lm(_inputs([[0, 0]], [[0, 0]])).numpy()
    assert np.all(np.isfinite(empty)) and np.allclose(empty[0, 0], empty[0, 1])


def test_weight_decay_penalises_weights_and_c_but_not_biases():
    decay = 0.1
    lm = _lm(order=3, weight_decay=decay)
    ids = _random_ids((2, 6))
    x, y = _inputs(ids), _random_ids((2, 6), seed=2)
    names = ["word_features/embeddings", "hidden/kernel", "hidden/bias", "output/kernel",
             "output/bias", "direct/kernel"]
    weights = {weight.path: weight for weight in lm.trainable_weights}
    assert sorted(weights) == sorted(names)
    plain = NnlmCausalLM(lm.backbone, weight_decay=0.0)  # the same weights, no penalty

    def gradients(model):
        with tf.GradientTape() as tape:
            loss = model.compute_loss(x=x, y=y, y_pred=model(x, training=True))
        variables = {weight.path: weight for weight in model.trainable_weights}
        return dict(zip(variables, tape.gradient(loss, list(variables.values())))), loss

    decayed, loss = gradients(lm)
    undecayed, plain_loss = gradients(plain)
    expected_penalty = 0.5 * decay * sum(
        float(np.sum(np.square(weights[name].numpy()))) for name in names
        if not name.endswith("bias"))
    assert float(loss - plain_loss) == pytest.approx(expected_penalty, rel=1e-5)
    assert float(lm.weight_decay_penalty()) == pytest.approx(expected_penalty, rel=1e-5)
    for name in names:
        difference = np.asarray(tf.convert_to_tensor(decayed[name])) - np.asarray(
            tf.convert_to_tensor(undecayed[name]))
        expected = 0.0 if name.endswith("bias") else decay * weights[name].numpy()
        np.testing.assert_allclose(difference, expected, atol=1e-6, err_msg=name)


def test_cached_generation_equals_the_uncached_loop():
    lm = _lm(order=5)
    prompts = np.array([[4, 9, 13], [7, 2, 0]], dtype="int32")
    lengths = np.array([3, 2], dtype="int32")
    max_length = 12
    cached = lm.generate_ids(prompts, prompt_lengths=lengths, max_length=max_length,
                             sampler="greedy")["token_ids"].numpy()
    for row in range(2):
        tokens = list(prompts[row, :lengths[row]])
        while len(tokens) < max_length:
            logits = lm(_inputs([tokens])).numpy()[0, -1]
            tokens.append(int(np.argmax(logits)))
        assert cached[row].tolist() == tokens, (row, cached[row], tokens)
    # The compiled loop (as the SavedModel runs it) gives the same tokens.
    compiled = tf.function(lambda p: lm.generate_ids(p, max_length=max_length)["token_ids"])
    np.testing.assert_array_equal(compiled(tf.constant(prompts[:1])), cached[:1])


def test_state_is_position_addressed_and_steps_match_the_full_pass():
    lm = _lm(order=4)
    ids = _random_ids((2, 9))
    full = lm(_inputs(ids)).numpy()
    state = lm.initial_state(2, 12)
    assert tuple(state.shape) == (2, 4 - 2 + 12)
    logits, hidden, state = lm.call_with_state(ids[:, :5], state, 0)
    np.testing.assert_allclose(logits.numpy(), full[:, :5], atol=1e-5)
    for index in range(5, 9):
        step, _, state = lm.call_with_state(ids[:, index:index + 1], state, index)
        np.testing.assert_allclose(step.numpy()[:, 0], full[:, index], atol=1e-5)


def test_the_backbone_weights_are_the_whole_language_model(tmp_path):
    # The pipeline's fine-tuning stage warm-starts from the backbone's weights alone.
    lm = _lm(order=3)
    path = str(tmp_path / "backbone.weights.h5")
    lm.backbone.save_weights(path)
    fresh = _lm(order=3, seed=7)
    ids = _random_ids((2, 6))
    assert not np.allclose(fresh(_inputs(ids)), lm(_inputs(ids)))
    fresh.backbone.load_weights(path)
    np.testing.assert_array_equal(fresh(_inputs(ids)), lm(_inputs(ids)))
    assert len(lm.trainable_weights) == len(lm.backbone.trainable_weights)


def test_config_round_trips_and_bad_arguments_fail_clearly(tmp_path):
    lm = _lm(order=3, weight_decay=3e-4)
    clone = NnlmCausalLM.from_config(lm.get_config())
    assert clone.weight_decay == 3e-4 and clone.backbone.get_config() == lm.backbone.get_config()
    path = str(tmp_path / "nnlm.keras")
    lm.save(path)
    restored = keras.saving.load_model(path)
    ids = _random_ids((1, 5))
    np.testing.assert_allclose(restored(_inputs(ids)), lm(_inputs(ids)), atol=1e-6)
    with pytest.raises(ValueError, match="order"):
        NnlmBackbone(vocabulary_size=10, embedding_dim=4, hidden_dim=4, order=1)
    with pytest.raises(ValueError, match="weight_decay"):
        NnlmCausalLM(lm.backbone, weight_decay=-1.0)
    with pytest.raises(ValueError, match="max_sequence_length"):
        lm.generate_ids(np.array([[1, 2]], dtype="int32"), max_length=100)
    with pytest.raises(ValueError, match="no context"):
        lm.backbone.initial_state(1, 4, encoder_outputs=np.zeros((1, 2, 3)))


def test_presets_follow_section_4():
    presets = models.presets("nnlm")
    keys = ("order", "hidden_dim", "embedding_dim", "direct_connections")
    assert {key: presets["brown"][key] for key in keys} == {
        "order": 5, "hidden_dim": 100, "embedding_dim": 30, "direct_connections": False}
    assert {key: presets["ap_news"][key] for key in keys} == {
        "order": 6, "hidden_dim": 60, "embedding_dim": 100, "direct_connections": True}
    assert models.get("nnlm").family == "decoder"
