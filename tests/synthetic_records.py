"""Synthetic pretraining records in any registered objective's format (CONTRACTS §3), read
back through the objective's own reader: what the fingerprint (tests/fingerprint.py) and the
conformance harness (tests/conformance) train on, so neither names an objective's fields."""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def _synthetic_value(name: str, spec, rng, vocab: int, length_hint: int):
    shape = list(spec.shape)
    if spec.dtype == tf.float32:
        return rng.integers(0, 2, shape).astype("float32") if "weights" in name \
            else rng.random(shape).astype("float32")
    if name in ("input_mask", "context_mask"):
        n = shape[0]
        real = int(rng.integers(n // 2, n + 1))
        return (np.arange(n) < real).astype("int64")
    if name == "segment_ids":
        n = shape[0]
        return (np.arange(n) >= n // 2).astype("int64")
    if name.endswith("labels"):
        return rng.integers(0, 2, shape).astype("int64")
    if name == "masked_lm_positions":
        return np.sort(rng.choice(np.arange(1, length_hint), shape[0], replace=False)
                       ).astype("int64")
    return rng.integers(5, vocab, shape).astype("int64")


def write_pretraining_records(data_config: dict, path: str, vocab: int, count: int = 4,
                              seed: int = 7):
    """``count`` GZIP records of random values in the objective's record format
    (``features.feature_spec``), written to ``path``."""
    from lmfactory.components.pretraining_data import features

    spec = features.feature_spec(data_config)
    rng = np.random.default_rng(seed)
    with tf.io.TFRecordWriter(path, options="GZIP") as writer:
        for _ in range(count):
            feature = {}
            for name, one in sorted(spec.items()):
                value = _synthetic_value(name, one, rng, vocab,
                                         int(data_config["max_seq_length"]))
                if value.dtype.kind == "f":
                    feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=value))
                else:
                    feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=value))
            example = tf.train.Example(features=tf.train.Features(feature=feature))
            writer.write(example.SerializeToString())


def read_batches(data_config: dict, path: str, batch_size: int, count: int) -> list:
    """The first ``count`` ``(x, y, sample_weight)`` batches of the records at ``path``, read
    by ``features.make_dataset`` on one thread (dynamic masking draws from a stateful random
    op in a parallel map, whose draws would otherwise go to the batches in thread order)."""
    from lmfactory.components.pretraining_data import features

    dataset = features.make_dataset(path, data_config, batch_size=batch_size, shuffle=False,
                                    repeat=False)
    options = tf.data.Options()
    options.threading.private_threadpool_size = 1
    return list(dataset.with_options(options).take(count))
