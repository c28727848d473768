"""AWD-LSTM's hidden state carried across BPTT windows (Merity et al. 2018 §4.1 / §5, the
reference's batchify + repackage_hidden): carried windows equal one long pass, no gradient
reaches an earlier window, the reader lays the streams out as batchify does (objective
causal_lm_bptt, variable-length windows), and the held-out perplexity with the carried
state equals the perplexity of one long pass over each stream."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmfactory.components.pretraining_data import bptt_streams, features, objectives
from lmfactory.components.tasks.language_model import evaluate_language_model
from lmfactory.components.trainer.model_artifact import KERAS_DIR, TASK_MODEL
from lmfactory.models.awd_lstm import AwdLstmBackbone, AwdLstmCausalLM

VOCAB = 40
TINY = dict(vocabulary_size=VOCAB, num_layers=2, embedding_dim=6, lstm_units=8,
            max_sequence_length=64)
ROWS = 2


@pytest.fixture(scope="module")
def lm():
    """A tiny LM carrying the state of 2 streams, without dropout (so that the training
    passes compared draw no masks)."""
    keras.utils.set_random_seed(3)
    backbone = AwdLstmBackbone(**TINY, dropout=0.0, dropout_hidden=0.0, dropout_input=0.0,
                               dropout_embedding=0.0, dropout_weight=0.0)
    return AwdLstmCausalLM(backbone, stream_batch_size=ROWS)


def window(ids, start, end, position):
    return {"token_ids": ids[:, start:end], "padding_mask": np.ones((len(ids), end - start),
                                                                    bool),
            "stream_position": np.full((len(ids),), position, "int32")}


def long_pass_states(lm, ids):
    """Per layer (h, c) [B, T + 1, units] after every position of one pass over ``ids``
    (the generation state protocol: slot p + 1 = the state after position p)."""
    state = lm.backbone.initial_state(ids.shape[0], ids.shape[1])
    _, state = lm.backbone.call_with_state(ids, state, 0)
    return [(h.numpy(), c.numpy()) for h, c in state]


@pytest.fixture(scope="module")
def stream_ids():
    return np.random.default_rng(0).integers(1, VOCAB, (ROWS, 23)).astype("int32")


def test_carried_windows_equal_one_long_pass(lm, stream_ids):
    bounds = [(0, 7), (7, 15), (15, 20), (20, 22)]  # variable lengths, the last one short
    states = long_pass_states(lm, stream_ids[:, :22])
    long_logits = lm.predictions({"token_ids": stream_ids[:, :22],
                                  "padding_mask": np.ones((ROWS, 22), bool)})["logits"]
    logits = []
    for k, (start, end) in enumerate(bounds):
        logits.append(lm(window(stream_ids, start, end, k), training=False).numpy())
        for (h_var, c_var), (h_all, c_all) in zip(lm.carried_states["eval"], states):
            np.testing.assert_allclose(h_var.numpy(), h_all[:, end], atol=1e-5)
            np.testing.assert_allclose(c_var.numpy(), c_all[:, end], atol=1e-5)
    np.testing.assert_allclose(np.concatenate(logits, axis=1), long_logits, atol=1e-5)
    # stream_position 0 starts the streams again: the state is reset, not carried.
    again = lm(window(stream_ids, 7, 15, 0), training=False).numpy()
    fresh = lm.predictions({"token_ids": stream_ids[:, 7:15],
                            "padding_mask": np.ones((ROWS, 8), bool)})["logits"].numpy()
    np.testing.assert_allclose(again, fresh, atol=1e-5)
    assert not np.allclose(again, logits[1], atol=1e-3)
    # Training keeps its own state; serving inputs (no stream_position) start from zero.
    assert all(np.all(v.numpy() == 0) for pair in lm.carried_states["train"] for v in pair)
    np.testing.assert_allclose(lm({k: v for k, v in window(stream_ids, 7, 15, 1).items()
                                   if k != "stream_position"}).numpy(), fresh, atol=1e-5)
    with pytest.raises(ValueError, match="carries the state of 2 streams"):
        lm(window(stream_ids[:1], 0, 5, 1))


def test_no_gradient_flows_into_the_previous_window(lm, stream_ids):
    first, second = window(stream_ids, 0, 9, 0), window(stream_ids, 9, 17, 1)
    targets = stream_ids[:, 10:18]
    lm.predictions(first, training=True, phase="train")
    carried = [tuple(tf.constant(v.numpy()) for v in pair)
               for pair in lm.carried_states["train"]]
    weights = lm.trainable_variables
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([v.value for pair in lm.carried_states["train"] for v in pair])
        loss = lm.objective(second, targets, None,
                            lm.predictions(second, training=True, phase="train"))
    state_grads = tape.gradient(loss, [v.value for pair in lm.carried_states["train"]
                                       for v in pair])
    assert all(g is None or np.all(g.numpy() == 0) for g in state_grads)
    truncated = tape.gradient(loss, weights)
    # The same gradient as a window run from the previous state taken as a constant ...
    with tf.GradientTape() as tape:
        output, _ = lm.backbone.call_from_state(
            {k: second[k] for k in ("token_ids", "padding_mask")}, carried, training=True)
        dropped = lm.output_dropout(output, training=True)
        loss = lm.objective(second, targets, None, {"logits": lm.logits(dropped),
                                                    "output": output,
                                                    "dropped_output": dropped})
    for a, b in zip(truncated, tape.gradient(loss, weights)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5)
    # ... and not the gradient through both windows (full backpropagation through time).
    with tf.GradientTape() as tape:
        both = {"token_ids": stream_ids[:, :17], "padding_mask": np.ones((ROWS, 17), bool)}
        predictions = lm.predictions(both, training=True)
        last = {k: v[:, 9:] for k, v in predictions.items()}
        loss = lm.objective(second, targets, None, last)
    full = tape.gradient(loss, weights)
    embedding = [i for i, w in enumerate(weights) if "embeddings" in w.path][0]
    assert not np.allclose(truncated[embedding].numpy(), full[embedding].numpy(), atol=1e-6)


def _write(folder, ids, length, objective="causal_lm_bptt"):
    """One document of ``ids`` as ``objective``'s records (+ pretraining_config.json)."""
    split = folder / "Split-eval"
    split.mkdir(parents=True)
    config = {"objective": objective, "max_seq_length": length}
    records, stats = objectives.get(objective).shard_examples([list(ids[:-1])],
                                                              int(ids[-1]), config)
    with tf.io.TFRecordWriter(str(split / "data-00000.gz"), "GZIP") as writer:
        for record in records:
            writer.write(record)
    (folder / "pretraining_config.json").write_text(json.dumps(config))
    return str(split / "*.gz"), config


def test_streams_are_laid_out_as_batchify_with_variable_windows(tmp_path):
    corpus = np.arange(1, 206)  # the id of each token is its corpus position + 1
    pattern, config = _write(tmp_path, corpus, length=12)  # 17 segments: every token
    rows = 4
    data = features.make_dataset(pattern, config, rows, shuffle=False, repeat=True, seed=5,
                                 training=True)
    batches = list(data.take(24).as_numpy_iterator())
    positions = [int(x["stream_position"][0]) for x, _, _ in batches]
    passes = [k for k, position in enumerate(positions) if position == 0]
    assert passes[0] == 0 and len(passes) >= 2
    first_pass = batches[:passes[1]]
    per_stream = (len(corpus) - 1) // rows  # batchify over the token stream
    lengths = [x["token_ids"].shape[1] for x, _, _ in first_pass]
    assert sum(lengths) == per_stream and min(lengths[:-1]) >= bptt_streams.MIN_WINDOW
    assert len(set(lengths)) > 1  # sampled per window (§4.1)
    for row in range(rows):
        inputs = np.concatenate([x["token_ids"][row] for x, _, _ in first_pass])
        targets = np.concatenate([y[row] for _, y, _ in first_pass])
        start = row * per_stream
        np.testing.assert_array_equal(inputs, corpus[start:start + per_stream])
        np.testing.assert_array_equal(targets, corpus[start + 1:start + per_stream + 1])
    for (x, y, _), (nxt, _, _) in zip(first_pass, first_pass[1:]):
        np.testing.assert_array_equal(nxt["token_ids"][:, 0], y[:, -1])  # row b continues b
    assert positions[:passes[1]] == list(range(passes[1]))
    second_lengths = [x["token_ids"].shape[1] for x, _, _ in batches[passes[1]:passes[2]]] \
        if len(passes) > 2 else None
    assert second_lengths != lengths  # a fresh draw each pass
    # Evaluation windows: the records' length, the last one shorter, one pass.
    eval_lengths = [x["token_ids"].shape[1] for x, _, _ in features.make_dataset(
        pattern, config, rows, shuffle=False, repeat=False)]
    assert eval_lengths == [12] * (per_stream // 12) + [per_stream % 12]
    with pytest.raises(ValueError, match="cannot fill 500 parallel streams"):
        features.make_dataset(pattern, config, 500, shuffle=False, repeat=False)


def test_held_out_perplexity_with_carried_state_equals_one_long_pass(lm, tmp_path):
    corpus = np.random.default_rng(1).integers(1, VOCAB, 25)  # 4 segments of 6: all
    pattern, _ = _write(tmp_path / "examples", corpus, length=6)
    model_dir = tmp_path / "model"
    os.makedirs(model_dir / KERAS_DIR)
    lm.save(str(model_dir / KERAS_DIR / TASK_MODEL))
    result = evaluate_language_model(str(model_dir), pattern, batch_size=16)
    # One pass over each of the 2 streams (batchify over the 25 tokens: 12 predictions
    # each, read in windows of 6), from the zero state.
    rows = np.stack([corpus[:13], corpus[12:25]]).astype("int32")
    logits = lm.predictions({"token_ids": rows[:, :-1],
                             "padding_mask": np.ones((2, 12), bool)})["logits"]
    nll = keras.losses.sparse_categorical_crossentropy(rows[:, 1:], logits, from_logits=True)
    assert result["tokens"] == 24
    np.testing.assert_allclose(result["perplexity"], float(np.exp(np.mean(nll))), rtol=1e-5)
    # Independent windows from the zero state score differently.
    window_logits = lm.predictions({"token_ids": rows[:, :-1].reshape(-1, 6),
                                    "padding_mask": np.ones((4, 6), bool)})["logits"]
    window_nll = keras.losses.sparse_categorical_crossentropy(
        rows[:, 1:].reshape(-1, 6), window_logits, from_logits=True)
    assert not np.isclose(np.mean(window_nll), np.mean(nll), rtol=1e-4)
