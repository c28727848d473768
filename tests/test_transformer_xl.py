"""Transformer-XL (Dai et al. 2019): what the conformance harness cannot know.

The relative shift (App. B) against an explicit gather, the stop-gradient through the memory
(§3.2), the clamp_len / same_length masks on a hand example, the exactness of segment-level
recurrence with an unbounded memory, the carried memory across train steps on ordered
streams, and the paper's parameter count."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmfactory import models
from lmfactory.components.pretraining_data import features, objectives
from lmfactory.models.transformer_xl import TransformerXLCausalLM
from lmfactory.models.transformer_xl.transformer_xl_masks import (attention_mask,
                                                                  relative_positions,
                                                                  relative_shift)

RNG = np.random.default_rng(0)


def tiny(**overrides):
    config = dict(dropout=0.0)
    config.update(overrides)
    return models.build("transformer_xl", "tiny", **config)


def test_registry_record():
    arch = models.get("transformer_xl")
    assert arch.family == "decoder" and arch.causal and arch.tokenizer_kind == "word"
    assert "causal_lm_streams" in arch.objectives and arch.hf_model_types == ("transfo-xl",)
    objective = objectives.get("causal_lm_streams")
    assert objective.ordered_streams and objective.causal
    assert not objectives.get("causal_lm").ordered_streams


def test_relative_shift_equals_explicit_gather():
    query_length, memory_length = 4, 3
    key_length = query_length + memory_length
    scores = RNG.normal(size=(2, 3, query_length, key_length)).astype("float32")
    shifted = np.asarray(relative_shift(tf.constant(scores)))
    for i in range(query_length):
        for j in range(i + memory_length + 1):  # every key query i may see
            # R's row m encodes distance K - 1 - m; query i, key j are i + M - j apart.
            row = key_length - 1 - (i + memory_length - j)
            np.testing.assert_allclose(shifted[..., i, j], scores[..., i, row])


def test_masks_same_length_and_clamp_on_a_hand_example():
    # 3 queries after 2 memory slots, mem_len 3: each query sees its last 3 positions.
    same = np.asarray(attention_mask(3, 2, mem_len=3, same_length=True))[0].astype(int)
    np.testing.assert_array_equal(same, [[1, 1, 1, 0, 0],
                                         [0, 1, 1, 1, 0],
                                         [0, 0, 1, 1, 1]])
    causal = np.asarray(attention_mask(3, 2))[0].astype(int)
    np.testing.assert_array_equal(causal, [[1, 1, 1, 0, 0],
                                           [1, 1, 1, 1, 0],
                                           [1, 1, 1, 1, 1]])
    # Only the last valid_memory_length slots hold states; padded keys are masked.
    partial = np.asarray(attention_mask(2, 2, valid_memory_length=1,
                                        padding_mask=tf.constant([[0, 1]])))[0].astype(int)
    np.testing.assert_array_equal(partial, [[0, 1, 0, 0], [0, 1, 0, 1]])
    np.testing.assert_array_equal(np.asarray(relative_positions(6, clamp_len=3)),
                                  [3, 3, 3, 2, 1, 0])
    np.testing.assert_array_equal(np.asarray(relative_positions(4)), [3, 2, 1, 0])
    # clamp_len in the model: distances beyond it share one encoding.
    backbone = tiny(clamp_len=2)
    encoding, _ = backbone.context(tf.zeros((1, 5), "int32"))
    encoding = np.asarray(encoding)
    np.testing.assert_allclose(encoding[0], encoding[2])
    assert not np.allclose(encoding[2], encoding[3])


def test_stop_gradient_through_memory():
    backbone = tiny(mem_len=8)
    first = tf.constant(RNG.integers(600, 700, (2, 4)), tf.int32)  # words of segment 1 only
    second = tf.constant(RNG.integers(10, 100, (2, 4)), tf.int32)
    table = backbone.token_embedding.embeddings[0]
    with tf.GradientTape(persistent=True) as tape:
        memory = backbone.call_with_memory(first, training=False)["memory"]
        tape.watch(memory)
        output = backbone.call_with_memory(second, memory)["sequence_output"]
        loss = tf.reduce_sum(output ** 2)
    gradient = tf.convert_to_tensor(tape.gradient(loss, table))
    assert float(tf.reduce_sum(tf.abs(tf.gather(gradient, np.arange(600, 700))))) == 0.0
    assert float(tf.reduce_sum(tf.abs(tf.gather(gradient, np.arange(10, 100))))) > 0.0
    assert all(g is None for g in tape.gradient(loss, memory))
    # ... while the memory does change the outputs.
    alone = backbone.call_with_memory(second)["sequence_output"]
    assert not np.allclose(alone, output, atol=1e-4)


@pytest.mark.parametrize("pre_norm, untie_biases", [(False, True), (True, False)])
def test_segments_with_unbounded_memory_equal_one_causal_pass(pre_norm, untie_biases):
    total, segment = 12, 4
    backbone = tiny(mem_len=total, clamp_len=1000, same_length=False, pre_norm=pre_norm,
                    untie_biases=untie_biases)
    model = TransformerXLCausalLM(backbone)
    ids = RNG.integers(0, 1000, (2, total)).astype("int32")
    full = np.asarray(model({"token_ids": ids, "padding_mask": np.ones_like(ids)}))
    memory, pieces = None, []
    for start in range(0, total, segment):
        chunk = ids[:, start:start + segment]
        log_probs, memory = model.call_with_memory(
            {"token_ids": chunk, "padding_mask": np.ones_like(chunk)}, memory)
        pieces.append(np.asarray(log_probs))
    error = np.abs(np.concatenate(pieces, axis=1) - full).max()
    assert error <= 1e-5, error
    assert memory[0].shape == (2, total, backbone.hidden_dim)


def test_decoding_state_reuses_memory_with_same_length():
    """Token-by-token decoding through the state equals one pass over the sequence, with
    same_length's window of mem_len positions applied alike."""
    backbone = tiny(mem_len=3, same_length=True)
    ids = RNG.integers(0, 1000, (2, 7)).astype("int32")
    full = np.asarray(backbone({"token_ids": ids, "padding_mask": np.ones_like(ids)})
                      ["sequence_output"])
    state, steps = backbone.initial_state(2, 8), []
    hidden, state = backbone.call_with_state(ids[:, :2], state, 0)
    steps.append(np.asarray(hidden))
    for index in range(2, 7):
        hidden, state = backbone.call_with_state(ids[:, index:index + 1], state, index)
        steps.append(np.asarray(hidden))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)
    unlimited = tiny(mem_len=3)  # the same weights without the window
    unlimited.set_weights(backbone.get_weights())
    other = np.asarray(unlimited({"token_ids": ids, "padding_mask": np.ones_like(ids)})
                       ["sequence_output"])
    np.testing.assert_allclose(other[:, :3], full[:, :3], atol=1e-6)
    assert not np.allclose(other[:, 3:], full[:, 3:], atol=1e-4)


def test_bounded_memory_keeps_the_last_mem_len_positions():
    backbone = tiny(mem_len=3)
    ids = RNG.integers(0, 1000, (1, 5)).astype("int32")
    result = backbone.call_with_memory(ids)
    assert [m.shape[1] for m in result["memory"]] == [3, 3]
    np.testing.assert_allclose(result["memory"][1], result["hidden_states"][1][:, -3:])


def _write_stream_records(path, segments):
    with tf.io.TFRecordWriter(path, options="GZIP") as writer:
        for segment in segments:
            example = tf.train.Example(features=tf.train.Features(feature={
                "input_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=segment))}))
            writer.write(example.SerializeToString())


def test_ordered_streams_reader_and_carried_memory(tmp_path):
    from lmfactory.components.pretraining_data.ordered_streams import stream_segments

    stream = list(range(1, 34))  # 33 ids, segments of L = 5 overlapping by one id
    segments, dropped = stream_segments(stream, 5)
    assert segments[0] == [1, 2, 3, 4, 5, 6] and segments[1] == [6, 7, 8, 9, 10, 11]
    assert len(segments) == 6 and dropped == 2
    path = str(tmp_path / "streams.gz")
    _write_stream_records(path, segments)
    config = features.resolve_config({"objective": "causal_lm_streams", "max_seq_length": 5})
    with pytest.raises(ValueError, match="stream order"):
        features.make_dataset(path, config, batch_size=2, shuffle=True, repeat=False)
    batches = list(features.make_dataset(path, config, batch_size=2, shuffle=False,
                                         repeat=True).take(4))
    # Two streams of 3 segments: row b of batch k + 1 continues row b of batch k.
    rows = [np.asarray(x["token_ids"]) for x, _, _ in batches]
    np.testing.assert_array_equal(rows[0], [[1, 2, 3, 4, 5], [16, 17, 18, 19, 20]])
    np.testing.assert_array_equal(rows[1], [[6, 7, 8, 9, 10], [21, 22, 23, 24, 25]])
    np.testing.assert_array_equal(np.asarray(batches[0][1])[0], [2, 3, 4, 5, 6])
    assert [int(x["stream_position"][0]) for x, _, _ in batches] == [0, 1, 2, 0]

    # The task model carries the memory across steps and empties it when the streams
    # start again: its loss on batch 1 is the one after batch 0's memory.
    backbone = tiny(vocabulary_size=40, cutoffs=[10], mem_len=8)
    model = TransformerXLCausalLM(backbone, stream_batch_size=2)
    model.compile(optimizer="sgd")  # learning rate irrelevant: only evaluation below
    (x0, y0, w0), (x1, y1, w1) = batches[0], batches[1]
    model.test_step((x0, y0, w0))
    carried = float(model.test_step((x1, y1, w1))["nll"])
    _, memory = model.call_with_memory(x0)
    log_probs, _ = model.call_with_memory(x1, memory)
    expected = -np.take_along_axis(np.asarray(log_probs), np.asarray(y1)[..., None], -1)
    no_memory = model({name: x0[name] for name in ("token_ids", "padding_mask")})
    nll0 = -np.take_along_axis(np.asarray(no_memory), np.asarray(y0)[..., None], -1)
    np.testing.assert_allclose(carried, (expected.mean() + nll0.mean()) / 2, rtol=1e-5)
    filled = model.memories["eval"][1]
    assert int(filled) == 8
    model.test_step(batches[3])  # stream_position 0: memory emptied, then 5 positions
    assert int(filled) == 5


def test_held_out_perplexity_is_scored_with_the_memory(tmp_path):
    """The LM task kind's evaluation reads the ordered streams in order, each segment after
    the memory of the previous ones (§4: evaluation with the memory)."""
    import json
    import os

    from lmfactory.components.pretraining_data.ordered_streams import stream_segments
    from lmfactory.components.tasks.language_model import evaluate_language_model
    from lmfactory.components.trainer.model_artifact import KERAS_DIR, TASK_MODEL

    keras.utils.set_random_seed(3)  # the weights: the memory's effect is checked below
    segments, _ = stream_segments(list(RNG.integers(1, 40, 33)), 5)  # 2 streams x 3
    split = tmp_path / "examples" / "Split-eval"
    split.mkdir(parents=True)
    _write_stream_records(str(split / "data.gz"), segments)
    (tmp_path / "examples" / "pretraining_config.json").write_text(
        json.dumps({"objective": "causal_lm_streams", "max_seq_length": 5}))
    model = TransformerXLCausalLM(tiny(vocabulary_size=40, cutoffs=[10], mem_len=8),
                                  stream_batch_size=2)
    os.makedirs(tmp_path / "model" / KERAS_DIR)
    model.save(str(tmp_path / "model" / KERAS_DIR / TASK_MODEL))
    result = evaluate_language_model(str(tmp_path / "model"), str(split / "*.gz"))

    config = features.resolve_config({"objective": "causal_lm_streams", "max_seq_length": 5})
    batches = list(features.make_dataset(str(split / "*.gz"), config, batch_size=2,
                                         shuffle=False, repeat=False))
    assert len(batches) == 3 and result["tokens"] == 30
    memory, with_memory, without_memory = None, [], []
    for x, y, _ in batches:
        log_probs, memory = model.call_with_memory(x, memory)
        with_memory.append(-np.take_along_axis(np.asarray(log_probs), np.asarray(y)[..., None], -1))
        alone, _ = model.call_with_memory(x)
        without_memory.append(-np.take_along_axis(np.asarray(alone), np.asarray(y)[..., None], -1))
    np.testing.assert_allclose(result["perplexity"], np.exp(np.mean(with_memory)), rtol=1e-6)
    # Segments after the first see the memory: their scores move by far more than the
    # tolerance above (random weights attend almost uniformly, so the shift is small).
    shift = np.abs(np.asarray(with_memory[1:]) - np.asarray(without_memory[1:]))
    assert shift.max() > 1e-3
    assert abs(result["perplexity"] / np.exp(np.mean(without_memory)) - 1) > 1e-5


def test_wikitext103_base_parameter_count():
    """Table 1's base model: 151M. Vocabulary 267,735 words (WikiText-103), cutoffs
    [20000, 40000, 200000], div_val 1, tied output weights. Hugging Face's
    TransfoXLLMHeadModel with this config counts 151,119,838 parameters."""
    backbone = models.build("transformer_xl", "wikitext103_base")
    model = TransformerXLCausalLM(backbone)
    count = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    assert count == 151_119_838


def test_cutoffs_past_a_smaller_learned_vocabulary_are_dropped():
    backbone = tiny(vocabulary_size=300)  # the preset's cutoffs are [200, 500]
    assert backbone.cutoffs == [200] and len(backbone.token_embedding.embeddings) == 1
    assert TransformerXLCausalLM(backbone)(
        {"token_ids": np.array([[1, 299]]), "padding_mask": np.ones((1, 2))}).shape == (1, 2, 300)


def test_bad_configs_raise():
    with pytest.raises(ValueError, match="cutoffs"):
        tiny(cutoffs=[500, 200])
    with pytest.raises(ValueError, match="same_length"):
        tiny(mem_len=0, same_length=True)
    with pytest.raises(ValueError, match="one tensor per layer"):
        tiny().call_with_memory(np.zeros((1, 3), "int32"), [np.zeros((1, 2, 32), "float32")])
