"""Next-token segments of one ordered token stream, read as parallel streams (Dai et al.
2019, §3.2 and the reference's LMOrderedIterator; Merity et al. 2018's BPTT batches).

A model that carries state from one segment to the next (Transformer-XL's memory, an LSTM's
hidden state across BPTT windows) needs its batches in the order of the text: the corpus is
one token stream cut into B parallel streams, and row b of batch k + 1 continues row b of
batch k. This objective writes the segments in stream order and DECLARES it
(``Objective.ordered_streams``), so the reader and the trainer arrange the rest:

* Records (per shard, documents in canonical order, each followed by the end-of-text id):
  ``input_ids[L+1]``, segment s holding stream ids [s L, (s + 1) L] (consecutive segments
  share one id: the last target of one is the first input of the next), ``L`` =
  ``max_seq_length``. The shard's tail shorter than L + 1 ids is dropped and counted.
* Reader (``features.make_dataset``): files in name order, records in file order, the N
  records cut into ``batch_size`` = B contiguous streams of N // B segments (the remainder
  dropped); batch k holds segment k of every stream. Never shuffled.
* Batch: x = ``token_ids``, ``padding_mask`` [B, L] and ``stream_position`` [B] (k, the
  batch's index in this pass over the streams; 0 = the streams start, state is reset);
  y = next ids [B, L]; sample_weight [B, L] ones.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import tensorflow as tf

from lmfactory.components.pretraining_data import causal_lm, registry

OBJECTIVE_NAME = "causal_lm_streams"
STREAM_POSITION = "stream_position"


def stream_segments(stream: Sequence[int], length: int) -> tuple:
    """``(segments, dropped)``: windows of ``length + 1`` ids every ``length`` ids."""
    count = max(0, (len(stream) - 1) // length)
    segments = [list(stream[start * length:start * length + length + 1])
                for start in range(count)]
    return segments, len(stream) - count * length - (1 if count else 0)


def shard_examples(documents: Sequence[Sequence[int]], end_of_text_id: int, config: dict,
                   seed_scope: Iterable = ()) -> tuple:
    """Serialized segments of one shard's stream (no randomness: ``seed_scope`` unused)."""
    stream = []
    for document in documents:
        stream.extend(int(i) for i in document)
        stream.append(int(end_of_text_id))
    segments, dropped = stream_segments(stream, int(config["max_seq_length"]))
    serialized = [causal_lm.to_tf_example(segment).SerializeToString(deterministic=True)
                  for segment in segments]
    return serialized, {"segments": len(serialized), "tokens": len(stream),
                        "dropped_tail_tokens": max(dropped, 0)}


def parallel_streams(records: tf.data.Dataset, num_streams: int,
                     fewer_streams: bool = False) -> tf.data.Dataset:
    """Ordered records -> ``(k, [num_streams] records)``: the N records cut into
    ``num_streams`` contiguous streams of N // num_streams, element k holding record k of
    each stream (the reference's batchify). Counts the records once (eagerly). With
    ``fewer_streams`` (a single pass, e.g. evaluation), N < num_streams records make N
    streams of one segment instead of an error."""
    total = int(records.reduce(np.int64(0), lambda count, _: count + 1))
    if fewer_streams and 0 < total < num_streams:
        num_streams = total
    per_stream = total // num_streams
    if per_stream < 1:
        raise ValueError(f"{OBJECTIVE_NAME}: {total} segments cannot fill {num_streams} "
                         f"parallel streams (batch_size); use a smaller batch")
    streams = tuple(records.skip(row * per_stream).take(per_stream)
                    for row in range(num_streams))
    return tf.data.Dataset.zip(streams).map(lambda *rows: tf.stack(rows)).enumerate()


def stream_rows(records: tf.data.Dataset, spec: dict, num_streams: int) -> np.ndarray:
    """Ordered records -> token rows [num_streams, S + 1], read eagerly (for a reader that
    cuts other windows): the records joined back into their token stream (each one's shared
    last id once) and cut into ``num_streams`` contiguous rows of S = (tokens - 1) //
    num_streams next-token positions, consecutive rows sharing one id (the reference's
    ``batchify`` over tokens; the remainder dropped)."""
    parsed = records.batch(4096).map(lambda serialized: tf.io.parse_example(serialized, spec))
    chunks = [batch["input_ids"].numpy() for batch in parsed]
    if not chunks:
        raise ValueError(f"{OBJECTIVE_NAME}: no segments to read")
    segments = np.concatenate(chunks)
    stream = np.concatenate([segments[:, :-1].reshape(-1), segments[-1, -1:]])
    per_stream = (len(stream) - 1) // num_streams
    if per_stream < 1:
        raise ValueError(f"{OBJECTIVE_NAME}: {len(stream)} tokens cannot fill {num_streams} "
                         f"parallel streams (batch_size); use a smaller batch")
    return np.stack([stream[row * per_stream:(row + 1) * per_stream + 1]
                     for row in range(num_streams)])


def stream_windows(rows: np.ndarray, lengths, repeat: bool,
                   seed: int | None = None) -> tf.data.Dataset:
    """Token rows [B, S] -> ``(k, ids [B, n_k + 1])``: consecutive windows of every row,
    window k predicting the n_k positions after the previous ones (``lengths(rng, S - 1)``
    per pass, ``rng`` seeded by ``(seed, pass)``; consecutive windows share one id).
    ``repeat``: pass after pass, forever."""
    rows = np.asarray(rows, np.int64)

    def windows():
        epoch = 0
        while True:
            rng = np.random.default_rng(None if seed is None else [int(seed), epoch])
            start = 0
            for k, length in enumerate(lengths(rng, rows.shape[1] - 1)):
                yield np.int32(k), rows[:, start:start + length + 1]
                start += length
            epoch += 1
            if not repeat:
                return

    return tf.data.Dataset.from_generator(windows, output_signature=(
        tf.TensorSpec([], tf.int32), tf.TensorSpec([rows.shape[0], None], tf.int64)))


def window_features(position, ids):
    """A window of `stream_windows` -> the parsed features the converter takes."""
    return {"input_ids": ids, STREAM_POSITION: tf.fill(tf.shape(ids)[:1], position)}


def converter(config: dict):
    return ordered_batch


def ordered_batch(features: dict):
    """Segments [B, L+1] -> x (``token_ids``, ``padding_mask``, ``stream_position``),
    next ids, weights."""
    x, next_ids, weights = causal_lm.causal_lm_batch(features)
    x[STREAM_POSITION] = tf.cast(features[STREAM_POSITION], tf.int32)
    return x, next_ids, weights


OBJECTIVE = registry.register(registry.Objective(
    name=OBJECTIVE_NAME,
    document=registry.STREAM,
    vocabulary_state=causal_lm.end_of_text_id,
    shard_examples=shard_examples,
    feature_spec=causal_lm.feature_spec,
    converter=converter,
    causal=True,
    check_config=causal_lm.check_config,
    vocabulary_record=causal_lm.vocabulary_record,
    ordered_streams=True,
    paper="Dai et al. 2019, Transformer-XL §3.2 (segment-level recurrence over consecutive "
          "segments; the reference's LMOrderedIterator)"))
