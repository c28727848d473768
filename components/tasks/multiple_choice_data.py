"""Multiple-choice data and accuracy (BERT §4.4) for the ``multiple_choice`` task kind
(components/tasks/multiple_choice.py), which fine-tunes in the DAG.

* `make_multiple_choice_dataset`: `MultipleChoiceExample` records (or TFRecords of
  ``components/example_gen/multiple_choice_readers.py``'s `to_tf_example`) -> ``(inputs [B, C, T],
  label [B])`` batches, packed in tf.data by a `MultipleChoicePreprocessor`.
* `choice_accuracy`: the fraction of questions whose highest-scoring choice is the answer.
"""

from __future__ import annotations

import os
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf

from lmfactory.components.example_gen.multiple_choice_readers import NO_LABEL


def _examples_tensors(examples) -> dict:
    examples = list(examples)
    if not examples:
        raise ValueError("No multiple-choice examples to read")
    widths = {len(e.choices) for e in examples}
    if len(widths) != 1:
        raise ValueError(f"Every question needs the same number of choices, got {sorted(widths)}")
    return {"context": tf.constant([e.context for e in examples]),
            "choices": tf.constant([list(e.choices) for e in examples]),
            "label": tf.constant([e.label for e in examples], dtype=tf.int64)}


def make_multiple_choice_dataset(source, preprocessor, batch_size: int, shuffle: bool = False,
                                 repeat: bool = False, seed: Optional[int] = None,
                                 num_choices: Optional[int] = None,
                                 input_names: Optional[Sequence[str]] = None,
                                 drop_remainder: Optional[bool] = None) -> tf.data.Dataset:
    """``(packed inputs, label)`` batches; tokenization runs in the input pipeline.

    Args:
        source: a sequence of `MultipleChoiceExample` (e.g. a `MultipleChoiceSplit`), or a
            file pattern of GZIP TFRecords of `to_tf_example` records (then ``num_choices``
            is required: the ``choices`` feature is read as a fixed-length list).
        preprocessor: a `MultipleChoicePreprocessor`, or an architecture's own; one with
            ``record_features(num_choices)`` (KagNet's) reads those int64 features from the
            TFRecords too and packs with ``from_records``.
        input_names: keep only these packed inputs (the model's input names).
        drop_remainder: default: True when ``repeat``.
    """
    records = {}
    if isinstance(source, (str, os.PathLike)):
        if num_choices is None:
            raise ValueError("Reading TFRecords needs num_choices")
        files = tf.io.gfile.glob(os.fspath(source))
        if not files:
            raise FileNotFoundError(f"No multiple-choice records match {source!r}")
        spec = {"context": tf.io.FixedLenFeature([], tf.string),
                "choices": tf.io.FixedLenFeature([num_choices], tf.string),
                "label": tf.io.FixedLenFeature([], tf.int64)}
        # Features a knowledge stage computed offline for the preprocessor (KagNet's
        # schema graphs, components/concept_paths): read and handed to `from_records`.
        if hasattr(preprocessor, "record_features"):
            records = preprocessor.record_features(num_choices)
            spec.update({name: tf.io.FixedLenFeature([int(np.prod(shape))], tf.int64)
                         for name, shape in records.items()})
        dataset = tf.data.TFRecordDataset(sorted(files), compression_type="GZIP")
        parse = lambda serialized: tf.io.parse_example(serialized, spec)  # noqa: E731
    else:
        dataset = tf.data.Dataset.from_tensor_slices(_examples_tensors(source))
        parse = None

    def to_model_inputs(batch):
        if parse is not None:
            batch = parse(batch)
        if records:
            packed = preprocessor.from_records((batch["context"], batch["choices"]),
                                               {name: batch[name] for name in records})
        else:
            packed = preprocessor((batch["context"], batch["choices"]))
        if input_names is not None:
            packed = {name: packed[name] for name in input_names}
        return packed, batch["label"]

    if shuffle:
        dataset = dataset.shuffle(20_000, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    dataset = dataset.batch(batch_size, drop_remainder=repeat if drop_remainder is None
                            else drop_remainder)
    dataset = dataset.map(to_model_inputs, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.prefetch(tf.data.AUTOTUNE)


def choice_accuracy(model, dataset) -> dict:
    """Accuracy of ``model``'s arg-max choice over a finite ``dataset`` of ``(inputs,
    label)`` batches (every question counted once; questions without an answer are an
    error)."""
    correct = total = 0
    predict = tf.function(lambda inputs: tf.argmax(model(inputs, training=False), axis=-1))
    for inputs, labels in dataset:
        labels = labels.numpy()
        if (labels == NO_LABEL).any():
            raise ValueError("choice_accuracy needs the answer of every question; the data "
                             "hold unlabeled questions")
        correct += int((predict(inputs).numpy() == labels).sum())
        total += len(labels)
    if not total:
        raise ValueError("choice_accuracy: the dataset is empty")
    return {"accuracy": correct / total, "examples": total}
