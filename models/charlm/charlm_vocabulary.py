"""The character vocabulary of the character Transformer LM (Al-Rfou et al. 2018 §3).

The paper models text8 (27 characters) and enwik8, whose 100M bytes are modelled byte by
byte (205 distinct byte values occur). For arbitrary UTF-8 text the faithful and simplest
"character" is therefore the byte: ids are the raw UTF-8 byte values 0..255, so the
vocabulary is fixed (no learning step), every text is representable and ``decode(encode(t))
== t``. A non-ASCII character spans several ids (e.g. "é" is 195, 169), as in enwik8.

This module reads a text as one unbroken stream (the paper's setting): there, id 0 (the NUL
byte) doubles as padding and end-of-text (the ingestion stage rejects records holding NUL
bytes, CONTRACTS §1, so it never occurs inside a text, and keras-nlp's
``ByteTokenizer.detokenize`` drops it). The pipeline uses the "byte"
tokenizer kind instead (`lmfactory.models.tokenizers.Utf8ByteTokenizer`): the same ids
0..255 for the bytes, plus a real ``<|endoftext|>`` token at id 256 that separates documents
and starts generation, so `decode` here and its ``detokenize`` agree on every byte id.

* `byte_tokenizer`: the in-graph tokenizer (keras-nlp ``ByteTokenizer`` without its default
  lowercasing), usable inside ``tf.data`` and a SavedModel.
* `encode` / `decode`: the same mapping in numpy, for whole corpora.
* `causal_lm_blocks` / `causal_lm_dataset`: character blocks in the ``causal_lm`` record layout
  (CONTRACTS §3: ``L + 1`` ids per block; the model reads ``[:-1]`` and predicts ``[1:]``).
"""

from __future__ import annotations

import keras_nlp
import numpy as np

from lmfactory.models.backend import tf

VOCABULARY_SIZE = 256
PAD_ID = 0
END_OF_TEXT_ID = 0


def byte_tokenizer(sequence_length: int | None = None):
    """keras-nlp's ``ByteTokenizer`` mapping a UTF-8 string to its byte values (no
    lowercasing, no Unicode normalisation: the text is modelled exactly as written).
    With ``sequence_length`` it returns dense [batch, sequence_length] ids padded with 0."""
    return keras_nlp.tokenizers.ByteTokenizer(
        lowercase=False, sequence_length=sequence_length, normalization_form=None)


def encode(text: str | bytes) -> np.ndarray:
    """The ids of ``text`` (its UTF-8 bytes) as an int32 array."""
    if isinstance(text, str):
        text = text.encode("utf-8")
    if not isinstance(text, (bytes, bytearray)):
        raise TypeError(f"encode takes str or bytes, got {type(text).__name__}")
    return np.frombuffer(bytes(text), dtype=np.uint8).astype(np.int32)


def decode(ids) -> str:
    """The text of byte ids (invalid UTF-8 sequences become U+FFFD)."""
    ids = np.asarray(ids)
    if ids.size and (ids.min() < 0 or ids.max() >= VOCABULARY_SIZE):
        raise ValueError(f"Character ids must lie in [0, {VOCABULARY_SIZE}), got "
                         f"[{ids.min()}, {ids.max()}]")
    return ids.astype(np.uint8).tobytes().decode("utf-8", errors="replace")


def _check_stream(ids, sequence_length: int) -> np.ndarray:
    ids = np.asarray(ids, dtype=np.int32)
    if ids.ndim != 1:
        raise ValueError(f"Expected a 1-D stream of character ids, got shape {ids.shape}")
    if sequence_length < 1:
        raise ValueError(f"sequence_length must be >= 1, got {sequence_length}")
    if ids.size < sequence_length + 1:
        raise ValueError(f"A stream of {ids.size} ids is shorter than one block of "
                         f"sequence_length + 1 = {sequence_length + 1} ids")
    return ids


def causal_lm_blocks(ids, sequence_length: int) -> np.ndarray:
    """Non-overlapping blocks [N, sequence_length + 1] of the stream ``ids`` (the tail that
    does not fill a block is dropped), the ``input_ids`` of ``causal_lm`` records."""
    ids = _check_stream(ids, sequence_length)
    count = (ids.size - 1) // sequence_length
    starts = np.arange(count) * sequence_length
    return ids[starts[:, None] + np.arange(sequence_length + 1)[None, :]]


def to_causal_lm_batch(blocks):
    """Blocks [B, L + 1] -> ``(x, y, sample_weight)`` as ``features.make_dataset`` gives
    them for ``causal_lm`` records: ``x = {token_ids [B, L], padding_mask}``, ``y`` the next
    ids [B, L], weights 1 (a block of characters holds no padding)."""
    blocks = tf.cast(blocks, tf.int32)
    token_ids, next_ids = blocks[:, :-1], blocks[:, 1:]
    padding_mask = tf.ones_like(token_ids, dtype=tf.bool)
    return ({"token_ids": token_ids, "padding_mask": padding_mask}, next_ids,
            tf.cast(padding_mask, tf.float32))


def causal_lm_dataset(ids, sequence_length: int, batch_size: int, random_windows: bool,
                      seed: int = 0) -> tf.data.Dataset:
    """Training or evaluation batches of ``(x, y, sample_weight)`` from a stream of ids.

    ``random_windows=True``: an endless stream of blocks starting at uniformly random
    offsets (every character is a possible block start; the paper's fixed-context training
    examples, §2). ``False``: the non-overlapping blocks of `causal_lm_blocks`, once, in
    order (the last batch may be smaller).
    """
    ids = _check_stream(ids, sequence_length)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if not random_windows:
        blocks = tf.data.Dataset.from_tensor_slices(causal_lm_blocks(ids, sequence_length))
        return blocks.batch(batch_size).map(to_causal_lm_batch).prefetch(tf.data.AUTOTUNE)
    stream = tf.constant(ids)
    last_start = ids.size - (sequence_length + 1)
    offsets = tf.range(sequence_length + 1)

    def block(random_value):
        start = tf.cast(tf.math.floormod(random_value, last_start + 1), tf.int32)
        return tf.gather(stream, start + offsets)

    starts = tf.data.Dataset.random(seed=seed)
    return (starts.map(block).batch(batch_size, drop_remainder=True)
            .map(to_causal_lm_batch).prefetch(tf.data.AUTOTUNE))


__all__ = ["END_OF_TEXT_ID", "PAD_ID", "VOCABULARY_SIZE", "byte_tokenizer", "causal_lm_blocks",
           "causal_lm_dataset", "decode", "encode", "to_causal_lm_batch"]
