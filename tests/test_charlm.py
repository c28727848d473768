"""The character Transformer LM (Al-Rfou et al. 2018): causal masking, per-layer positional
embeddings, the auxiliary losses and their schedule, the byte vocabulary, bits per character,
serialisation and a short training run on Tiny Shakespeare."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmfactory import models
from lmfactory.models.charlm import CharTransformerBackbone, CharTransformerLM
from lmfactory.models.charlm import charlm_vocabulary as vocabulary
from lmfactory.models.charlm.charlm_causal_lm import bits_per_character, intermediate_loss_weights
from lmfactory.models.charlm.charlm_evaluation import (evaluate_bits_per_character,
                                                       sliding_windows)

TINY = dict(vocabulary_size=256, num_layers=2, num_heads=4, hidden_dim=32, intermediate_dim=64,
            dropout=0.0, max_sequence_length=16)


def tiny_backbone(**overrides):
    keras.utils.set_random_seed(1)
    return CharTransformerBackbone(**{**TINY, **overrides})


def random_batch(batch=2, length=12, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, 256, size=(batch, length + 1)).astype("int32")
    x = {"token_ids": ids[:, :-1], "padding_mask": np.ones((batch, length), "int32")}
    return x, ids[:, 1:]


def numpy_nll(logits, labels):
    logits = np.asarray(logits, np.float64)
    logits = logits - logits.max(-1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return -np.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]


def weighted(values, weights):
    return float(np.sum(values * weights) / np.sum(weights))


# ----------------------------------------------------------------------------- backbone


def test_causal_mask_of_the_auxiliary_predictions():
    """The intermediate-layer and two-ahead logits never see a future character (the
    backbone's causal mask, and so the final logits', is the conformance harness's
    check_causal_mask)."""
    model = CharTransformerLM(tiny_backbone(), total_steps=10)
    x, _ = random_batch()
    changed = {k: v.copy() for k, v in x.items()}
    changed["token_ids"][:, 7] = (changed["token_ids"][:, 7] + 1) % 256
    for run in (lambda inputs: model.predictions(inputs)["intermediate_logits"][0],
                lambda inputs: model.predictions(inputs)["two_ahead_logits"][0]):
        before, after = np.asarray(run(x)), np.asarray(run(changed))
        np.testing.assert_allclose(before[:, :7], after[:, :7], atol=1e-6)
        assert np.abs(before[:, 7:] - after[:, 7:]).max(axis=-1).min() > 1e-4


def test_a_learned_positional_embedding_is_added_to_the_input_of_every_layer():
    backbone = tiny_backbone(num_layers=3)
    tables = [v for v in backbone.weights if "position_embedding" in v.path]
    assert [v.path for v in tables] == [f"position_embedding_{i}/embeddings" for i in range(3)]
    assert all(tuple(v.shape) == (16, 32) for v in tables)
    assert len({id(v) for v in tables}) == 3  # one table per layer, not shared

    x, _ = random_batch()
    states = backbone.call_with_states(x)
    hidden = states["hidden_states"]
    assert len(hidden) == 4
    # Layer i's output is the block applied to (layer i's input + its own positions).
    for i, block in enumerate(backbone.transformer_layers):
        expected = block(hidden[i] + np.asarray(tables[i])[None, :12],
                         decoder_padding_mask=x["padding_mask"])
        np.testing.assert_allclose(hidden[i + 1], expected, atol=1e-5)
    np.testing.assert_allclose(states["sequence_output"], backbone(x)["sequence_output"],
                               atol=1e-6)

    # Changing layer 2's table leaves the first two layers' outputs alone.
    tables[2].assign(tables[2] + 0.5)
    moved = backbone.call_with_states(x)["hidden_states"]
    for i in range(3):
        np.testing.assert_allclose(moved[i], hidden[i], atol=1e-6)
    assert np.abs(np.asarray(moved[3]) - np.asarray(hidden[3])).max() > 1e-3


def test_registry_and_presets():
    # The backbone's config round trip: the conformance harness (check_config_round_trip).
    arch = models.get("charlm")
    assert arch.family == "decoder" and arch.pretrainer("causal_lm") is CharTransformerLM
    assert set(arch.presets) == {"tiny", "T12", "T64"}
    t64 = arch.presets["T64"]
    assert (t64["num_layers"], t64["hidden_dim"], t64["intermediate_dim"], t64["num_heads"],
            t64["max_sequence_length"], t64["dropout"]) == (64, 512, 2048, 8, 512, 0.55)
    assert arch.presets["T12"]["num_layers"] == 12
    assert isinstance(models.build("charlm", "tiny"), CharTransformerBackbone)


def test_bad_arguments_are_rejected_with_a_clear_error():
    with pytest.raises(ValueError, match="divisible"):
        CharTransformerBackbone(**{**TINY, "num_heads": 5})
    backbone = tiny_backbone()
    with pytest.raises(ValueError, match="total_steps"):
        CharTransformerLM(backbone)
    model = CharTransformerLM(backbone, intermediate_losses=False)
    with pytest.raises(ValueError, match="max_sequence_length=16"):
        model.predictions({"token_ids": np.ones((1, 17), "int32"),
                           "padding_mask": np.ones((1, 17), "int32")})
    with pytest.raises(ValueError, match="padding_mask"):
        model({"token_ids": np.ones((1, 4), "int32")})


# ----------------------------------------------------------------------------- losses


def test_intermediate_loss_schedule_drops_layer_l_after_l_over_2n_of_training():
    # n = 4 layers, 80 steps: layer l contributes while step < l * 80 / 8 = 10 l.
    def weights(step):
        return np.asarray(intermediate_loss_weights(step, 80, 4)).tolist()

    assert weights(0) == weights(9) == [1.0, 1.0, 1.0]
    assert weights(10) == weights(19) == [0.0, 1.0, 1.0]
    assert weights(20) == weights(29) == [0.0, 0.0, 1.0]
    assert weights(30) == weights(40) == weights(79) == [0.0, 0.0, 0.0]
    # n = 2, 5 steps: layer 1 stops after 5 / 4 = 1.25 steps (steps 0 and 1 use it).
    assert np.asarray(intermediate_loss_weights(tf.constant(1, tf.int64), 5, 2)).tolist() == [1.0]
    assert np.asarray(intermediate_loss_weights(2, 5, 2)).tolist() == [0.0]


def test_schedule_follows_the_optimizer_step_inside_the_compiled_train_step():
    # n = 3 layers, 6 steps: layer 1 until step 1, layer 2 until step 2.
    backbone = tiny_backbone(num_layers=3)
    model = CharTransformerLM(backbone, total_steps=6)
    model.compile(optimizer=keras.optimizers.SGD(0.01))
    x, y = random_batch(batch=4)
    data = tf.data.Dataset.from_tensors((x, y)).repeat()
    history = model.fit(data, epochs=4, steps_per_epoch=1, verbose=0).history
    assert history["active_intermediate_layers"] == [2.0, 1.0, 0.0, 0.0]
    assert history["intermediate_loss"][0] > 0 and history["intermediate_loss"][2:] == [0, 0]
    assert int(model.optimizer.iterations) == 4
    # After half the training only the final layer's losses remain.
    loss = model.objective(y, model.predictions(x), step=model.current_step())
    predictions = model.predictions(x)
    final = numpy_nll(predictions["logits"], y).mean()
    two_ahead = numpy_nll(predictions["two_ahead_logits"][-1][:, :-1], y[:, 1:]).mean()
    np.testing.assert_allclose(float(loss), final + 0.5 * two_ahead, rtol=1e-5)


def test_multiple_positions_loss_is_the_mean_nll_over_all_positions():
    model = CharTransformerLM(tiny_backbone(), intermediate_losses=False,
                              multiple_targets=False)
    x, y = random_batch(batch=3)
    weights = np.ones(y.shape, "float32")
    weights[1, 9:] = 0.0  # padding positions carry weight 0
    predictions = model.predictions(x)
    loss = model.objective(y, predictions, weights)
    expected = weighted(numpy_nll(model(x), y), weights)
    np.testing.assert_allclose(float(loss), expected, rtol=1e-5)
    np.testing.assert_allclose(float(model.nll_tracker.result()), expected, rtol=1e-5)
    np.testing.assert_allclose(float(model.bpc_tracker.result()), expected / math.log(2),
                               rtol=1e-5)
    assert not predictions["intermediate_logits"] and not predictions["two_ahead_logits"]


def test_two_ahead_target_loss_weighted_one_half():
    model = CharTransformerLM(tiny_backbone(), intermediate_losses=False)
    assert len(model.two_ahead_classifiers) == 1
    x, y = random_batch(batch=3)
    weights = np.ones(y.shape, "float32")
    weights[2, 8:] = 0.0
    predictions = model.predictions(x)
    loss = float(model.objective(y, predictions, weights))
    final = weighted(numpy_nll(predictions["logits"], y), weights)
    # Position i's second target is y[i + 1]; the last real position has none.
    two_ahead_nll = numpy_nll(predictions["two_ahead_logits"][0][:, :-1], y[:, 1:])
    two_ahead = weighted(two_ahead_nll, weights[:, :-1] * weights[:, 1:])
    np.testing.assert_allclose(loss, final + 0.5 * two_ahead, rtol=1e-5)
    np.testing.assert_allclose(float(model.two_ahead_nll_tracker.result()), two_ahead,
                               rtol=1e-5)


def test_full_loss_sums_every_layer_with_its_schedule_weight():
    model = CharTransformerLM(tiny_backbone(num_layers=3), total_steps=12)
    assert len(model.intermediate_classifiers) == 2 and len(model.two_ahead_classifiers) == 3
    x, y = random_batch(batch=2)
    predictions = model.predictions(x)
    ones = np.ones(y.shape)
    next_nll = [weighted(numpy_nll(logits, y), ones)
                for logits in predictions["intermediate_logits"] + [predictions["logits"]]]
    two_nll = [weighted(numpy_nll(logits[:, :-1], y[:, 1:]), ones[:, 1:])
               for logits in predictions["two_ahead_logits"]]
    per_layer = [a + 0.5 * b for a, b in zip(next_nll, two_nll)]
    # 12 steps, n = 3: layer 1 until step 2, layer 2 until step 4.
    for step, active in ((0, [1, 1]), (2, [0, 1]), (4, [0, 0])):
        expected = per_layer[2] + sum(w * loss for w, loss in zip(active, per_layer[:2]))
        loss = model.objective(y, predictions, step=step)
        np.testing.assert_allclose(float(loss), expected, rtol=1e-5)


def test_bits_per_character_from_nll():
    assert bits_per_character(math.log(2)) == pytest.approx(1.0)
    assert bits_per_character(math.log(256)) == pytest.approx(8.0)


@pytest.mark.parametrize("num_ids,length,stride", [(40, 8, 8), (40, 8, 3), (41, 8, 1),
                                                   (9, 8, 4), (100, 16, 5)])
def test_sliding_windows_score_every_character_once(num_ids, length, stride):
    starts, first = sliding_windows(num_ids, length, stride)
    scored = [start + p + 1 for start, f in zip(starts, first) for p in range(f, length)]
    assert sorted(scored) == list(range(1, num_ids))
    assert starts[-1] == num_ids - 1 - length and first[0] == 0


def test_evaluate_bits_per_character_matches_a_direct_computation():
    model = CharTransformerLM(tiny_backbone(max_sequence_length=8), intermediate_losses=False)
    ids = np.random.default_rng(3).integers(0, 256, size=30).astype("int32")
    result = evaluate_bits_per_character(model, ids, sequence_length=8, stride=3, batch_size=4)
    # Each character t >= 1 from the first window (starts 0, 3, ..., and the last at 21)
    # that predicts it.
    starts = list(range(0, 22, 3)) + [21]
    total = 0.0
    for t in range(1, 30):
        start = next(s for s in starts if s + 1 <= t <= s + 8)
        window = ids[start:start + 8][None]
        logits = model({"token_ids": window, "padding_mask": np.ones_like(window)})
        total += numpy_nll(logits, ids[start + 1:start + 9][None])[0, t - start - 1]
    assert result["characters"] == 29
    np.testing.assert_allclose(result["nll"], total / 29, rtol=1e-5)
    np.testing.assert_allclose(result["bpc"], total / 29 / math.log(2), rtol=1e-5)


# ----------------------------------------------------------------------------- vocabulary


def test_byte_vocabulary_round_trip_and_tf_data():
    text = "To be, or not to be — ça va? 字"
    ids = vocabulary.encode(text)
    assert ids.tolist() == list(text.encode("utf-8")) and ids.max() < 256
    assert vocabulary.decode(ids) == text
    tokenizer = vocabulary.byte_tokenizer()
    assert tokenizer.vocabulary_size() == vocabulary.VOCABULARY_SIZE == 256
    mapped = tf.data.Dataset.from_tensor_slices([text, "ABC"]).map(tokenizer)
    assert [row.numpy().tolist() for row in mapped] == [ids.tolist(), [65, 66, 67]]
    assert tokenizer.detokenize(tf.constant(ids)) == text
    with pytest.raises(ValueError, match="256"):
        vocabulary.decode([300])


def test_causal_lm_batches_read_l_and_predict_the_next_l():
    ids = np.arange(1, 40, dtype="int32")
    blocks = vocabulary.causal_lm_blocks(ids, 8)
    assert blocks.shape == (4, 9) and blocks[1, 0] == blocks[0, -1]
    for random_windows in (False, True):
        x, y, weights = next(iter(vocabulary.causal_lm_dataset(
            ids, 8, batch_size=3, random_windows=random_windows)))
        np.testing.assert_array_equal(x["token_ids"][:, 1:], y[:, :-1])
        np.testing.assert_array_equal(y - x["token_ids"], np.ones((3, 8)))  # consecutive
        assert weights.numpy().min() == 1.0 and x["padding_mask"].dtype == tf.bool


# ----------------------------------------------------------------------------- saving, training


def test_task_model_config_and_keras_file_round_trip(tmp_path):
    model = CharTransformerLM(tiny_backbone(), total_steps=100, multiple_targets_weight=0.25)
    config = model.get_config()
    assert (config["total_steps"], config["multiple_targets_weight"]) == (100, 0.25)
    clone = CharTransformerLM.from_config(config)
    assert clone.get_config()["total_steps"] == 100
    path = str(tmp_path / "charlm.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, compile=False)
    assert isinstance(loaded, CharTransformerLM) and len(loaded.weights) == len(model.weights)
    x, _ = random_batch()
    np.testing.assert_allclose(loaded(x), model(x), atol=1e-5)
    for a, b in zip(loaded.predictions(x)["two_ahead_logits"],
                    model.predictions(x)["two_ahead_logits"]):
        np.testing.assert_allclose(a, b, atol=1e-5)
    np.testing.assert_allclose(loaded.predictions(x)["intermediate_logits"][0],
                               model.predictions(x)["intermediate_logits"][0], atol=1e-5)


def test_loss_decreases_on_tiny_shakespeare(shared_data):
    text = (shared_data / "tiny_shakespeare" / "input.txt").read_bytes()[:100_000]
    ids = vocabulary.encode(text)
    train, heldout = ids[:90_000], ids[90_000:]
    model = CharTransformerLM(tiny_backbone(max_sequence_length=32), total_steps=40)
    model.compile(optimizer=keras.optimizers.Adam(3e-3))
    before = evaluate_bits_per_character(model, heldout[:2_000], 32, stride=32)["bpc"]
    history = model.fit(vocabulary.causal_lm_dataset(train, 32, 16, random_windows=True),
                        epochs=4, steps_per_epoch=10, verbose=0).history
    after = evaluate_bits_per_character(model, heldout[:2_000], 32, stride=32)["bpc"]
    assert history["bpc"][-1] < history["bpc"][0] - 1.0
    assert after < before - 1.0, (before, after)


def test_cached_decoding_matches_the_full_forward_pass():
    model = CharTransformerLM(tiny_backbone(), total_steps=10)
    x, _ = random_batch(batch=2, length=10)
    full = np.asarray(model(x))
    state = model.backbone.initial_state(2, 10)
    logits, _, state = model.call_with_state(x["token_ids"][:, :4], state, 0)
    steps = [np.asarray(logits)]
    for index in range(4, 10):
        logits, _, state = model.call_with_state(x["token_ids"][:, index:index + 1], state,
                                                 index)
        steps.append(np.asarray(logits))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-4)


@pytest.mark.dag  # the slow tier (conftest.py)
def test_t12_parameter_count_matches_the_paper():
    # The paper: T12 has 44M parameters, auxiliary classifiers included (41M without).
    backbone = models.build("charlm", "T12")
    assert backbone.count_params() == 41_106_432
    model = CharTransformerLM(backbone, total_steps=1)
    assert model.count_params() == 44_138_240
