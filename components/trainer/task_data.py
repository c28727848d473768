"""tf.data input for fine-tuning on raw task records (CONTRACTS §1).

The label of a record is read as the task record (CONTRACTS §4 ``task``) says:

* ``kind: classification``: the int64 feature ``label_feature`` (default ``label``), or, with a
  ``label_vocabulary`` (GLUE's MNLI/QNLI/RTE words), the bytes feature ``label_feature``
  mapped to the word's index in the vocabulary (a word outside it fails the input pipeline
  with a message naming the feature and the vocabulary);
* ``kind: regression``: the float feature ``label_feature`` (STS-B's similarity score).
"""

from __future__ import annotations

import tensorflow as tf

from lmfactory.models.host_map import host_map

CLASSIFICATION = "classification"
REGRESSION = "regression"
TASK_KINDS = (CLASSIFICATION, REGRESSION)


def read_records(file_pattern: str) -> tf.data.Dataset:
    """The serialized records of the GZIP TFRecord files matching ``file_pattern``."""
    files = sorted(tf.io.gfile.glob(file_pattern))
    if not files:
        raise FileNotFoundError(f"No records match {file_pattern!r}")
    return tf.data.TFRecordDataset(files, compression_type="GZIP")


class LabelReader:
    """Parses the label of a batch of serialized task records: ``spec`` (the feature to
    parse) and ``__call__(parsed) -> labels`` (int64 class ids or float32 scores)."""

    def __init__(self, kind: str = CLASSIFICATION, label_feature: str = "label",
                 label_vocabulary=None):
        if kind not in TASK_KINDS:
            raise ValueError(f"task kind must be one of {TASK_KINDS}, got {kind!r}")
        if kind == REGRESSION and label_vocabulary:
            raise ValueError("a regression task has a float label, not a label_vocabulary")
        self.kind = kind
        self.label_feature = label_feature
        self.label_vocabulary = list(label_vocabulary or [])
        if self.label_vocabulary:
            dtype = tf.string
        else:
            dtype = tf.float32 if kind == REGRESSION else tf.int64
        self.spec = {label_feature: tf.io.FixedLenFeature([], dtype)}
        self._table = None
        if self.label_vocabulary:
            self._table = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(
                    tf.constant(self.label_vocabulary),
                    tf.range(len(self.label_vocabulary), dtype=tf.int64)),
                default_value=-1)

    @classmethod
    def for_task(cls, task: dict) -> "LabelReader":
        return cls(task.get("kind", CLASSIFICATION), task.get("label_feature", "label"),
                   task.get("label_vocabulary"))

    def __call__(self, parsed: dict):
        label = parsed[self.label_feature]
        if self._table is None:
            return label
        ids = self._table.lookup(tf.strings.strip(label))
        check = tf.debugging.assert_non_negative(
            ids, message=f"a {self.label_feature!r} value is not one of the label_vocabulary "
                         f"{self.label_vocabulary}")
        with tf.control_dependencies([check]):
            return tf.identity(ids)


def make_classification_dataset(file_pattern: str, preprocessor, text_features: list[str],
                                batch_size: int, shuffle: bool, repeat: bool,
                                seed: int | None = None, label_feature: str = "label",
                                input_names=None, label_reader: LabelReader | None = None
                                ) -> tf.data.Dataset:
    """Yields ``(packed inputs, label)`` batches; tokenization runs in the input pipeline.
    ``input_names``: keep only these packed inputs (the model's input names).
    ``label_reader``: how to read the label (default: the int64 feature ``label_feature``)."""
    files = tf.io.gfile.glob(file_pattern)
    if not files:
        raise FileNotFoundError(f"No task records match {file_pattern!r}")
    label_reader = label_reader or LabelReader(CLASSIFICATION, label_feature)
    spec = {name: tf.io.FixedLenFeature([], tf.string) for name in text_features}
    spec.update(label_reader.spec)

    def to_model_inputs(serialized):
        parsed = tf.io.parse_example(serialized, spec)
        segments = tuple(parsed[name] for name in text_features)
        packed = preprocessor(segments)
        if input_names is not None:
            packed = {name: packed[name] for name in input_names}
        return packed, label_reader(parsed)

    dataset = tf.data.TFRecordDataset(sorted(files), compression_type="GZIP")
    if shuffle:
        dataset = dataset.shuffle(20_000, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    dataset = dataset.batch(batch_size, drop_remainder=repeat)
    # host_map: tf.data's parallel map, its function instantiated without the per-epoch
    # multi-device (Grappler) pass (models/host_map.py)
    dataset = host_map(dataset, to_model_inputs, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.prefetch(tf.data.AUTOTUNE)
