"""AWD-LSTM (Merity et al. 2018) and ULMFiT (Howard & Ruder 2018): the semantics of each
dropout (DropConnect mask shared over time and batch, locked masks constant over time,
whole embedding rows), weight tying, AR / TAR, variable-length BPTT, NT-ASGD, cached
generation, and ULMFiT's concat pooling, discriminative and slanted triangular learning
rates and gradual unfreezing."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmfactory import models
from lmfactory.models.awd_lstm import (AWD_LSTM_PRESETS, AwdLstmBackbone, AwdLstmCausalLM,
                                       NtAsgd, UlmfitClassifier)
from lmfactory.models.awd_lstm.awd_lstm_causal_lm import (
    activation_regularization, temporal_activation_regularization)
from lmfactory.models.awd_lstm.concat_pooling import ConcatPooling
from lmfactory.models.awd_lstm.embedding_dropout import EmbeddingDropout
from lmfactory.models.awd_lstm.scaled_updates import apply_scaled_updates
from lmfactory.models.awd_lstm.slanted_triangular import SlantedTriangular
from lmfactory.models.awd_lstm.ulmfit_schedule import discriminative_scales
from lmfactory.models.awd_lstm.variable_bptt import sample_sequence_length
from lmfactory.models.awd_lstm.weight_drop_lstm import WeightDropLSTM

VOCAB = 30
TINY = dict(vocabulary_size=VOCAB, num_layers=2, embedding_dim=6, lstm_units=8,
            max_sequence_length=16)


def tiny_backbone(**overrides):
    keras.utils.set_random_seed(2)
    return AwdLstmBackbone(**{**TINY, **overrides})


def batch(rows=3, length=7, seed=0, lengths=None):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, VOCAB, (rows, length)).astype("int32")
    mask = np.ones((rows, length), "int32")
    for row, real in enumerate(lengths or []):
        mask[row, real:] = 0
    return {"token_ids": ids, "padding_mask": mask}


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def numpy_lstm(x, kernel, recurrent_kernel, bias):
    """The LSTM recurrence (gates i, f, g, o) with one recurrent kernel for every row and
    every step."""
    rows, steps, _ = x.shape
    units = recurrent_kernel.shape[0]
    h, c = np.zeros((rows, units)), np.zeros((rows, units))
    outputs = []
    for t in range(steps):
        z = x[:, t] @ kernel + h @ recurrent_kernel + bias
        i, f, g, o = np.split(z, 4, axis=-1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        outputs.append(h)
    return np.stack(outputs, axis=1)


# ----------------------------------------------------------------------------- registry


def test_registry_record_and_paper_sizes():
    arch = models.get("awd_lstm")
    assert arch.family == "recurrent" and arch.objectives == ("causal_lm_bptt", "causal_lm")
    assert set(arch.task_kinds) >= {"causal_lm", "classification"}
    paper = AWD_LSTM_PRESETS["wikitext2"]
    assert (paper["num_layers"], paper["embedding_dim"], paper["lstm_units"]) == (3, 400, 1150)
    assert (paper["dropout"], paper["dropout_hidden"], paper["dropout_input"],
            paper["dropout_embedding"], paper["dropout_weight"]) == (0.4, 0.3, 0.65, 0.1, 0.5)
    # WikiText-2's 33,278 words; the paper's model has 33M parameters (Table 2).
    backbone = models.build("awd_lstm", "wikitext2")
    assert [lstm.units for lstm in backbone.lstm_layers] == [1150, 1150, 400]
    assert 33.0e6 < backbone.count_params() < 34.0e6


# ----------------------------------------------------------------------------- dropouts


def test_dropconnect_mask_is_shared_over_time_and_batch_and_redrawn_per_call():
    keras.utils.set_random_seed(0)
    layer = WeightDropLSTM(4, weight_dropout=0.5, seed=3)
    x = np.random.default_rng(1).normal(size=(3, 6, 5)).astype("float32")
    layer.build(x.shape)
    kernel, recurrent, bias = (np.asarray(w) for w in
                               (layer.kernel, layer.recurrent_kernel, layer.bias))
    seed_state = np.asarray(layer.seed_generator.state)
    first = np.asarray(layer(x, training=True))
    second = np.asarray(layer(x, training=True))
    # The mask the first call drew: replay the generator from the same state.
    layer.seed_generator.state.assign(seed_state)
    dropped = np.asarray(layer.dropped_recurrent_kernel(training=True))
    kept = dropped != 0
    assert 0.3 < kept.mean() < 0.7
    np.testing.assert_allclose(dropped[kept], 2.0 * recurrent[kept], rtol=1e-6)
    # One masked kernel explains every step of every row of the first call ...
    np.testing.assert_allclose(first, numpy_lstm(x, kernel, dropped, bias), atol=1e-5)
    # ... the second call drew another mask; evaluation uses the whole kernel.
    assert not np.allclose(first, second)
    np.testing.assert_allclose(np.asarray(layer(x, training=False)),
                               numpy_lstm(x, kernel, recurrent, bias), atol=1e-5)


def test_locked_dropout_mask_is_constant_over_time():
    backbone = tiny_backbone(dropout_input=0.5, dropout_hidden=0.5)
    ones = np.ones((4, 9, 6), "float32")
    for layer in (backbone.input_dropout, backbone.hidden_dropouts[0]):
        out = np.asarray(layer(ones, training=True))
        np.testing.assert_array_equal(out, np.repeat(out[:, :1], 9, axis=1))
        assert set(np.unique(out)) == {0.0, 2.0}
        assert not np.array_equal(out[0, 0], out[1, 0])  # a mask per sequence
        np.testing.assert_array_equal(np.asarray(layer(ones, training=False)), ones)


def test_embedding_dropout_zeroes_whole_rows_of_the_matrix():
    layer = EmbeddingDropout(0.5, VOCAB, seed=4)
    ids = np.tile(np.arange(VOCAB, dtype="int32"), (3, 2))  # every word, 6 times
    embedded = np.random.default_rng(0).normal(size=ids.shape + (5,)).astype("float32") + 3
    out = np.asarray(layer(embedded, ids, training=True))
    dropped = np.all(out == 0.0, axis=-1)
    for word in range(VOCAB):
        occurrences = dropped[ids == word]
        assert occurrences.all() or not occurrences.any()  # the word everywhere or nowhere
    assert 0 < dropped.mean() < 1
    np.testing.assert_allclose(out[~dropped], 2.0 * embedded[~dropped], rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(layer(embedded, ids, training=False)), embedded)


def test_evaluation_is_deterministic_and_training_is_not():
    lm = AwdLstmCausalLM(tiny_backbone())
    x = batch()
    np.testing.assert_array_equal(np.asarray(lm(x)), np.asarray(lm(x)))
    assert not np.allclose(np.asarray(lm(x, training=True)), np.asarray(lm(x, training=True)))


def test_padding_on_either_side_leaves_real_positions_unchanged():
    backbone = tiny_backbone()
    x = batch(rows=1, length=5)
    alone = np.asarray(backbone(x)["sequence_output"])[0]
    ids = np.zeros((2, 8), "int32")
    mask = np.zeros((2, 8), "int32")
    ids[0, :5], mask[0, :5] = x["token_ids"][0], 1  # right padding
    ids[1, 3:], mask[1, 3:] = x["token_ids"][0], 1  # left padding
    ids[mask == 0] = 17
    out = np.asarray(backbone({"token_ids": ids, "padding_mask": mask})["sequence_output"])
    np.testing.assert_allclose(out[0, :5], alone, atol=1e-6)
    np.testing.assert_allclose(out[1, 3:], alone, atol=1e-6)


# ----------------------------------------------------------------------------- LM


def test_softmax_is_tied_to_the_embedding():
    backbone = tiny_backbone()
    lm = AwdLstmCausalLM(backbone)
    lm.output_bias.assign(np.linspace(-1, 1, VOCAB).astype("float32"))
    x = batch()
    hidden = np.asarray(backbone(x)["sequence_output"])
    table = np.asarray(backbone.token_embedding.embeddings)
    expected = hidden @ table.T + np.asarray(lm.output_bias)
    np.testing.assert_allclose(np.asarray(lm(x)), expected, atol=1e-5)
    # No output matrix of its own: the only weight the head adds is the bias.
    assert len(lm.trainable_variables) == len(backbone.trainable_variables) + 1


def test_ar_and_tar_against_numpy():
    rng = np.random.default_rng(3)
    dropped = rng.normal(size=(2, 5, 4)).astype("float32")
    output = rng.normal(size=(2, 5, 4)).astype("float32")
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], "int32")
    ar = float(activation_regularization(dropped, mask, 2.0))
    expected_ar = 2.0 * np.mean(dropped[mask == 1] ** 2)
    np.testing.assert_allclose(ar, expected_ar, rtol=1e-5)
    pairs = (mask[:, 1:] * mask[:, :-1]) == 1
    differences = (output[:, 1:] - output[:, :-1])[pairs]
    tar = float(temporal_activation_regularization(output, mask, 1.0))
    np.testing.assert_allclose(tar, np.mean(differences ** 2), rtol=1e-5)


def test_training_loss_is_nll_plus_ar_plus_tar():
    lm = AwdLstmCausalLM(tiny_backbone(), alpha=2.0, beta=1.0)
    x = batch()
    y = np.roll(x["token_ids"], -1, axis=1)
    predictions = lm.predictions(x, training=False)
    logits = np.asarray(predictions["logits"], np.float64)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = -np.take_along_axis(log_probs, y[..., None], axis=-1).mean()
    output = np.asarray(predictions["output"], np.float64)
    expected = nll + 2.0 * np.mean(output ** 2) + np.mean((output[:, 1:] - output[:, :-1]) ** 2)
    loss = float(lm.compute_loss(x=x, y=y, training=False))
    np.testing.assert_allclose(loss, expected, rtol=1e-5)


def test_variable_bptt_length_distribution():
    seed = keras.random.SeedGenerator(11)
    lengths = np.array([int(sample_sequence_length(70, 200, seed)) for _ in range(1500)])
    half = lengths < 52
    assert 0.02 < half.mean() < 0.09  # p = 0.95 of the full base length
    assert abs(lengths[~half].mean() - 70) < 1.0 and abs(lengths[~half].std() - 5) < 0.8
    assert abs(lengths[half].mean() - 35) < 3.0
    capped = [int(sample_sequence_length(70, 40, seed)) for _ in range(200)]
    assert max(capped) == 40 and min(capped) >= 5


@pytest.mark.parametrize("scale", [0.5, 0.0])
def test_scaled_updates_equal_a_scaled_learning_rate_under_adam(scale):
    rng = np.random.default_rng(0)
    start = rng.normal(size=(4, 3)).astype("float32")
    grads = [rng.normal(size=(4, 3)).astype("float32") for _ in range(3)]
    scaled, reference = keras.Variable(start), keras.Variable(start)
    optimizer, reference_optimizer = keras.optimizers.Adam(0.1), keras.optimizers.Adam(
        0.1 * scale if scale else 0.1)
    for grad in grads:
        apply_scaled_updates(optimizer, [tf.constant(grad)], [scaled], [scale])
        reference_optimizer.apply_gradients([(tf.constant(grad), reference)])
    expected = np.asarray(reference) if scale else start
    np.testing.assert_allclose(np.asarray(scaled), expected, atol=1e-6)


def test_variable_length_training_step_runs_a_prefix_and_learns():
    lm = AwdLstmCausalLM(tiny_backbone(), bptt=10)
    lm.compile(optimizer=keras.optimizers.Adam(0.01))
    x = batch(rows=4, length=12)
    y = np.roll(x["token_ids"], -1, axis=1)
    weights = np.ones(y.shape, "float32")
    before = float(lm.compute_loss(x=x, y=y, sample_weight=weights, training=False))
    history = lm.fit(x, y, sample_weight=weights, epochs=8, verbose=0).history
    after = float(lm.compute_loss(x=x, y=y, sample_weight=weights, training=False))
    assert after < before
    assert all(5 <= length <= 12 for length in history["sequence_length"])


def test_cached_greedy_generation_equals_recomputing_the_prefix():
    backbone = tiny_backbone()
    lm = AwdLstmCausalLM(backbone)
    rng = np.random.default_rng(5)
    for variable in lm.weights:
        if len(variable.shape) >= 2:
            variable.assign(rng.normal(0.0, 0.6, variable.shape).astype("float32"))
    prompts = np.array([[3, 9, 4], [7, 1, 12]], "int32")
    ids = np.asarray(lm.generate_ids(prompts, max_length=10, sampler="greedy")["token_ids"])
    for row in range(2):
        expected = list(prompts[row])
        while len(expected) < 10:
            x = {"token_ids": np.array([expected], "int32"),
                 "padding_mask": np.ones((1, len(expected)), "int32")}
            expected.append(int(np.asarray(lm(x))[0, -1].argmax()))
        assert ids[row].tolist() == expected
    assert len(set(ids[:, 3:].ravel().tolist())) > 2


def test_bad_inputs_get_clear_errors():
    lm = AwdLstmCausalLM(tiny_backbone())
    with pytest.raises(ValueError, match="token_ids"):
        lm({"token_ids": np.ones((1, 3), "int32")})
    with pytest.raises(ValueError, match="weight_dropout"):
        WeightDropLSTM(4, weight_dropout=1.0)
    with pytest.raises(ValueError, match="num_layers"):
        tiny_backbone(num_layers=0)


def test_nt_asgd_triggers_on_non_monotone_validation_and_averages_iterates():
    values = iter([5.0, 4.0, 3.0, 3.5, 3.6, 3.7, 2.0, 2.0, 2.0, 2.0])
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    averaging = NtAsgd(lambda _: next(values), check_every=2, non_monotone=2)
    iterates = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            iterates.append([np.asarray(v).copy() for v in self.model.trainable_variables])

    x = np.random.default_rng(0).normal(size=(16, 2)).astype("float32")
    model.fit(x, x.sum(1), batch_size=1, epochs=1, shuffle=False, verbose=0,
              callbacks=[Record(), averaging])
    # Checks every 2 steps see 5, 4, 3, 3.5, 3.6, 3.7: the check at step 2k triggers when
    # its value exceeds the best one before the last 2 earlier checks: 3.5 > 5, 3.6 > 4 are
    # false, 3.7 > 3 (step 12) is true. Then the iterates of steps 12..16 are averaged.
    assert averaging.history[:6] == [5.0, 4.0, 3.0, 3.5, 3.6, 3.7]
    assert averaging.trigger_step == 12
    expected = [np.mean([step[i] for step in iterates[11:]], axis=0) for i in range(2)]
    for variable, mean in zip(model.trainable_variables, expected):
        np.testing.assert_allclose(np.asarray(variable), mean, atol=1e-6)


def test_language_model_keras_round_trip(tmp_path):
    lm = AwdLstmCausalLM(tiny_backbone(), alpha=1.5)
    path = str(tmp_path / "lm.keras")
    lm.save(path)
    loaded = keras.saving.load_model(path, compile=False)
    x = batch()
    np.testing.assert_allclose(np.asarray(loaded(x)), np.asarray(lm(x)), atol=1e-6)
    assert loaded.alpha == 1.5


# ----------------------------------------------------------------------------- ULMFiT


def test_concat_pooling_against_numpy_with_left_and_right_padding():
    rng = np.random.default_rng(2)
    hidden = rng.normal(size=(3, 5, 4)).astype("float32")
    mask = np.array([[1, 1, 1, 0, 0], [0, 0, 1, 1, 1], [0, 0, 0, 0, 0]], "int32")
    out = np.asarray(ConcatPooling()(hidden, mask))
    for row in range(2):
        real = hidden[row][mask[row] == 1]
        expected = np.concatenate([real[-1], real.max(0), real.mean(0)])
        np.testing.assert_allclose(out[row], expected, atol=1e-6)
    np.testing.assert_array_equal(out[2], np.zeros(12))


def test_slanted_triangular_values():
    schedule = SlantedTriangular(0.01, total_steps=100, cut_frac=0.1, ratio=32)
    values = {step: float(schedule(step)) for step in (0, 5, 10, 55, 100, 150)}
    np.testing.assert_allclose(values[0], 0.01 / 32, rtol=1e-6)
    np.testing.assert_allclose(values[5], 0.01 * (1 + 0.5 * 31) / 32, rtol=1e-6)
    np.testing.assert_allclose(values[10], 0.01, rtol=1e-6)
    # p = 1 - 45 / (10 * 9) = 0.5 on the way down.
    np.testing.assert_allclose(values[55], 0.01 * (1 + 0.5 * 31) / 32, rtol=1e-6)
    np.testing.assert_allclose(values[100], 0.01 / 32, rtol=1e-6)
    np.testing.assert_allclose(values[150], 0.01 / 32, rtol=1e-6)


def _classifier_data(rows=8):
    x = batch(rows=rows, length=6, lengths=[6, 4, 5, 6, 3, 6, 2, 6][:rows])
    return x, np.arange(rows) % 2


def _group_snapshots(classifier):
    return [[np.asarray(v).copy() for v in group] for group in classifier.layer_groups()]


def test_discriminative_learning_rates_scale_each_groups_adam_step():
    classifier = UlmfitClassifier(tiny_backbone(dropout_weight=0.0), num_classes=2)
    learning_rate = 1e-3
    classifier.compile(optimizer=keras.optimizers.Adam(learning_rate),
                       loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = _group_snapshots(classifier)
    x, y = _classifier_data()
    classifier.fit(x, y, batch_size=8, epochs=1, verbose=0)
    after = _group_snapshots(classifier)
    scales = discriminative_scales(4)
    np.testing.assert_allclose(scales, [2.6 ** -3, 2.6 ** -2, 2.6 ** -1, 1.0])
    for group, scale in enumerate(scales):
        # Adam's first step moves each weight by lr * g / (|g| + eps), i.e. ~lr: the
        # largest move of a group is its own learning rate.
        largest = max(np.abs(b - a).max() for b, a in zip(before[group], after[group]))
        np.testing.assert_allclose(largest, learning_rate * scale, rtol=0.02)


def test_gradual_unfreezing_trains_one_more_group_per_period():
    classifier = UlmfitClassifier(tiny_backbone(), num_classes=2, total_steps=8,
                                  unfreeze_every=2)
    classifier.compile(optimizer=keras.optimizers.Adam(0.01),
                       loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = _classifier_data()
    snapshots = [_group_snapshots(classifier)]
    for _ in range(3):
        classifier.fit(x, y, batch_size=4, epochs=1, verbose=0)  # 2 steps
        snapshots.append(_group_snapshots(classifier))
    for period in range(3):
        changed = [any(not np.array_equal(b, a) for b, a in zip(before, after))
                   for before, after in zip(snapshots[period], snapshots[period + 1])]
        # Groups bottom to top: embedding, lstm_0, lstm_1, head; period p trains the top p + 1.
        assert changed == [group >= 3 - period for group in range(4)], (period, changed)
    # STLR replaced the optimizer's constant rate.
    assert isinstance(classifier.optimizer._learning_rate, SlantedTriangular)


def test_classifier_round_trip_and_padding_invariance(tmp_path):
    classifier = UlmfitClassifier(tiny_backbone(), num_classes=3)
    right = batch(rows=1, length=6, lengths=[4])
    left = {"token_ids": np.roll(right["token_ids"], 2, axis=1),
            "padding_mask": np.roll(right["padding_mask"], 2, axis=1)}
    np.testing.assert_allclose(np.asarray(classifier(right)), np.asarray(classifier(left)),
                               atol=1e-5)
    path = str(tmp_path / "classifier.keras")
    classifier.save(path)
    loaded = keras.saving.load_model(path, compile=False)
    np.testing.assert_allclose(np.asarray(loaded(right)), np.asarray(classifier(right)),
                               atol=1e-6)


def test_target_lm_fine_tuning_uses_discriminative_rates_and_stlr():
    lm = AwdLstmCausalLM(tiny_backbone(dropout_weight=0.0), variable_length=False,
                         total_steps=50, discriminative_factor=2.6, slanted_triangular=True)
    learning_rate = 1e-3
    lm.compile(optimizer=keras.optimizers.Adam(learning_rate))
    assert isinstance(lm.optimizer._learning_rate, SlantedTriangular)
    before = _group_snapshots(lm)
    x = batch(rows=4, length=8)
    y = np.roll(x["token_ids"], -1, axis=1)
    lm.fit(x, y, epochs=1, verbose=0)
    after = _group_snapshots(lm)
    # Step 0 of STLR: eta_max / 32; groups lstm_0, lstm_1, then the tied embedding and
    # the output bias at the full rate (the reference's LM split).
    groups = lm.layer_groups()
    assert groups[-1][0] is lm.backbone.token_embedding.embeddings
    assert groups[-1][-1] is lm.output_bias
    for group, scale in enumerate(discriminative_scales(3)):
        largest = max(np.abs(b - a).max() for b, a in zip(before[group], after[group]))
        np.testing.assert_allclose(largest, learning_rate / 32 * scale, rtol=0.02)


def test_continued_lm_training_carries_the_output_bias(monkeypatch):
    """Continued training of the same objective (ULMFiT's target-task LM fine-tuning, a
    causal LM's second stage) starts from the whole trained task model: the output bias,
    which lives on the task model and not the backbone, carries over; a base model of
    another objective leaves it fresh."""
    from types import SimpleNamespace

    from lmfactory.components.tasks import language_model
    from lmfactory.components.trainer import model_artifact

    keras.utils.set_random_seed(3)
    trained = AwdLstmCausalLM(tiny_backbone())
    trained.output_bias.assign(np.linspace(-1.0, 1.0, trained.output_bias.shape[0]))
    fresh = AwdLstmCausalLM(tiny_backbone())
    base_task = {"objective": "causal_lm"}
    monkeypatch.setattr(model_artifact, "read_model_config", lambda path: {"task": base_task})
    monkeypatch.setattr(model_artifact, "load_task_model", lambda path: trained)
    context = SimpleNamespace(fn_args=SimpleNamespace(base_model="/base"))

    base_task["objective"] = "mlm"
    language_model._carry_task_weights(context, fresh, "causal_lm")
    np.testing.assert_array_equal(np.asarray(fresh.output_bias), 0.0)

    base_task["objective"] = "causal_lm"
    language_model._carry_task_weights(context, fresh, "causal_lm")
    np.testing.assert_array_equal(np.asarray(fresh.output_bias),
                                  np.asarray(trained.output_bias))
    for mine, theirs in zip(fresh.weights, trained.weights):
        np.testing.assert_array_equal(np.asarray(mine), np.asarray(theirs))
    # The state carried per stream (of another batch size) stays as built; the rest carries.
    trained = AwdLstmCausalLM(tiny_backbone(), stream_batch_size=4)
    trained.output_bias.assign(np.linspace(-1.0, 1.0, trained.output_bias.shape[0]))
    streams = AwdLstmCausalLM(tiny_backbone(), stream_batch_size=2)
    language_model._carry_task_weights(context, streams, "causal_lm")
    np.testing.assert_array_equal(np.asarray(streams.output_bias),
                                  np.asarray(trained.output_bias))
    assert streams.carried_states["train"][0][0].shape == (2, 8)
