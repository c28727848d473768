"""tf.data input for fine-tuning on raw task records (CONTRACTS §1)."""

from __future__ import annotations

import tensorflow as tf


def make_classification_dataset(file_pattern: str, preprocessor, text_features: list[str],
                                batch_size: int, shuffle: bool, repeat: bool,
                                seed: int | None = None, label_feature: str = "label",
                                input_names=None) -> tf.data.Dataset:
    """Yields ``(packed inputs, label)`` batches; tokenization runs in the input pipeline.
    ``input_names``: keep only these packed inputs (the model's input names)."""
    files = tf.io.gfile.glob(file_pattern)
    if not files:
        raise FileNotFoundError(f"No task records match {file_pattern!r}")
    spec = {name: tf.io.FixedLenFeature([], tf.string) for name in text_features}
    spec[label_feature] = tf.io.FixedLenFeature([], tf.int64)

    def to_model_inputs(serialized):
        parsed = tf.io.parse_example(serialized, spec)
        segments = tuple(parsed[name] for name in text_features)
        packed = preprocessor(segments)
        if input_names is not None:
            packed = {name: packed[name] for name in input_names}
        return packed, parsed[label_feature]

    dataset = tf.data.TFRecordDataset(sorted(files), compression_type="GZIP")
    if shuffle:
        dataset = dataset.shuffle(20_000, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    dataset = dataset.batch(batch_size, drop_remainder=repeat)
    dataset = dataset.map(to_model_inputs, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.prefetch(tf.data.AUTOTUNE)
