"""GLUE task presets (Wang et al. 2019, "GLUE: A Multi-Task Benchmark and Analysis Platform
for Natural Language Understanding", Table 1): which files of a task folder hold the train and
dev splits, their columns, the label and the text features, and the task's official metrics.

A recipe names the task instead of its columns::

    data:
      task: {glue: CoLA, dir: ../shared/data/glue/CoLA}

and :func:`input_config` turns that into TextExampleGen's TSV ``input_config`` (CONTRACTS §1),
while :func:`finetuning_defaults` gives the fine-tuning fields (text features, number of
classes, task kind) and the evaluation metric. The files' quirks, as distributed by GLUE's
``download_glue_data.py``:

* CoLA has no header row: ``source \\t label \\t original judgement \\t sentence`` (the dev file
  has no final newline; the reader keeps a last line without one);
* MRPC starts with a UTF-8 byte-order mark (the reader drops it) and its header names the
  columns ``Quality``, ``#1 ID``, ``#2 ID``, ``#1 String``, ``#2 String``; they are renamed
  ``label``, ``id1``, ``id2``, ``sentence1``, ``sentence2``;
* STS-B's label is the ``score`` column, a similarity in [0, 5] (a float label: regression);
* MNLI, QNLI and RTE label their examples with words (``entailment``, ...): the label column
  stays a bytes feature and the task record carries its ``label_vocabulary`` (word -> index).
  MNLI's train and dev files have different numbers of label columns; their headers are read
  per file.

:func:`check_files` reads each split file's first line and fails with a message naming the file
and the columns it expected when the file does not have the task's shape.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Optional, Tuple

from lmfactory.components.example_gen import formats

CLASSIFICATION = "classification"
REGRESSION = "regression"


@dataclasses.dataclass(frozen=True)
class GlueTask:
    """One GLUE task's files and fields.

    ``header``: the exact header row of the split files (None: no exact header, see
    ``required_columns``; ``has_header=False``: the files have none). ``column_names``: the
    names the columns get (a header-less file, or renamed columns). ``label_column`` names the
    label in those names; an int/float label becomes the int64/float ``label`` feature, a word
    label stays a bytes feature read through ``label_vocabulary``.
    """
    name: str
    splits: Tuple[Tuple[str, str], ...]
    text_features: Tuple[str, ...]
    label_column: str
    metrics: Tuple[str, ...]
    kind: str = CLASSIFICATION
    num_classes: int = 2
    has_header: bool = True
    header: Optional[Tuple[str, ...]] = None
    column_names: Optional[Tuple[str, ...]] = None
    label_type: str = "int"  # int | float | string
    label_vocabulary: Optional[Tuple[str, ...]] = None

    @property
    def required_columns(self) -> Tuple[str, ...]:
        """The columns (in the file's own names) a headed split file must have."""
        return self.text_features + (self.label_column,)

    @property
    def expected_columns(self) -> Tuple[str, ...]:
        """What an error message says the file should hold."""
        return self.header or self.column_names or self.required_columns

    @property
    def label_feature(self) -> str:
        """The Example feature that holds the label."""
        return self.label_column if self.label_type == "string" else formats.LABEL_FEATURE

    @property
    def metric(self) -> str:
        """The metric blessing uses by default: the task's first official metric."""
        return self.metrics[0]


_NLI = ("entailment", "not_entailment")
_MNLI = ("contradiction", "entailment", "neutral")
_PAIR = ("sentence1", "sentence2")

TASKS: Dict[str, GlueTask] = {task.name: task for task in (
    GlueTask("CoLA", (("train", "train.tsv"), ("eval", "dev.tsv")), ("sentence",), "label",
             ("matthews_corrcoef", "accuracy"), has_header=False,
             column_names=("source", "label", "star", "sentence")),
    GlueTask("SST-2", (("train", "train.tsv"), ("eval", "dev.tsv")), ("sentence",), "label",
             ("accuracy",), header=("sentence", "label")),
    GlueTask("MRPC", (("train", "train.tsv"), ("eval", "dev.tsv")), _PAIR, "label",
             ("f1", "accuracy"),
             header=("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"),
             column_names=("label", "id1", "id2", "sentence1", "sentence2")),
    GlueTask("STS-B", (("train", "train.tsv"), ("eval", "dev.tsv")), _PAIR, "score",
             ("pearson", "spearman"), kind=REGRESSION, num_classes=1, label_type="float",
             header=("index", "genre", "filename", "year", "old_index", "source1", "source2",
                     "sentence1", "sentence2", "score")),
    GlueTask("QQP", (("train", "train.tsv"), ("eval", "dev.tsv")), ("question1", "question2"),
             "is_duplicate", ("f1", "accuracy"),
             header=("id", "qid1", "qid2", "question1", "question2", "is_duplicate")),
    GlueTask("MNLI", (("train", "train.tsv"), ("eval", "dev_matched.tsv")), _PAIR,
             "gold_label", ("accuracy",), num_classes=3, label_type="string",
             label_vocabulary=_MNLI),
    GlueTask("MNLI-mm", (("train", "train.tsv"), ("eval", "dev_mismatched.tsv")), _PAIR,
             "gold_label", ("accuracy",), num_classes=3, label_type="string",
             label_vocabulary=_MNLI),
    GlueTask("QNLI", (("train", "train.tsv"), ("eval", "dev.tsv")), ("question", "sentence"),
             "label", ("accuracy",), label_type="string", label_vocabulary=_NLI,
             header=("index", "question", "sentence", "label")),
    GlueTask("RTE", (("train", "train.tsv"), ("eval", "dev.tsv")), _PAIR, "label",
             ("accuracy",), label_type="string", label_vocabulary=_NLI,
             header=("index", "sentence1", "sentence2", "label")),
    GlueTask("WNLI", (("train", "train.tsv"), ("eval", "dev.tsv")), _PAIR, "label",
             ("accuracy",), header=("index", "sentence1", "sentence2", "label")),
)}


def get(name: str) -> GlueTask:
    if name not in TASKS:
        raise ValueError(f"unknown GLUE task {name!r}; expected one of {', '.join(TASKS)}")
    return TASKS[name]


def split_paths(task: GlueTask, directory: str) -> Dict[str, str]:
    return {split: f"{directory.rstrip('/')}/{file_name}" for split, file_name in task.splits}


def input_config(name: str, directory: str) -> dict:
    """TextExampleGen's ``input_config`` for the train and dev files of GLUE task ``name`` in
    ``directory``."""
    task = get(name)
    config = {"format": formats.TSV_FORMAT, "splits": split_paths(task, directory),
              "has_header": task.has_header}
    if task.column_names:
        config["column_names"] = list(task.column_names)
    if task.label_type != "string":  # word labels stay bytes features (label_vocabulary)
        config["label_column"] = task.label_column
        config["label_type"] = task.label_type
    return config


def task_record(name: str) -> dict:
    """The label fields of the fine-tuning task record (CONTRACTS §4 ``task``)."""
    task = get(name)
    record = {"glue_task": task.name, "label_feature": task.label_feature,
              "official_metrics": list(task.metrics)}
    if task.label_vocabulary:
        record["label_vocabulary"] = list(task.label_vocabulary)
    return record


def finetuning_defaults(name: str) -> dict:
    """Recipe defaults of a GLUE task: ``finetuning`` fields and the evaluation metric."""
    task = get(name)
    return {"finetuning": {"task": task.kind, "text_features": list(task.text_features),
                           "num_classes": task.num_classes},
            "evaluation": {"metric": task.metric}}


def _first_line(path: str, read_bytes: int = 1 << 16) -> bytes:
    import tensorflow as tf

    with tf.io.gfile.GFile(path, "rb") as f:
        head = f.read(read_bytes)
    head = head[len(formats.UTF8_BOM):] if head.startswith(formats.UTF8_BOM) else head
    return head.split(b"\n", 1)[0].rstrip(b"\r")


def check_file(task: GlueTask, path: str) -> None:
    """Fails with a ValueError naming ``path`` and the expected columns when the file's first
    line is not what the task's files start with (FileNotFoundError when it is missing)."""
    import tensorflow as tf

    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"{path}: GLUE {task.name} file not found (expected columns "
                                f"{list(task.expected_columns)})")
    line = _first_line(path)
    try:
        fields = line.decode("utf-8").split("\t")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: first line is not UTF-8 ({error}); expected GLUE "
                         f"{task.name} columns {list(task.expected_columns)}") from error
    if not task.has_header:
        expected = list(task.column_names)
        label = fields[expected.index(task.label_column)].strip() if (
            len(fields) == len(expected)) else None
        if label is None or not label.lstrip("-").isdigit():
            raise ValueError(f"{path}: not a GLUE {task.name} file: expected {len(expected)} "
                             f"tab-separated columns {expected} with an integer "
                             f"{task.label_column!r} and no header row; the first line has "
                             f"{len(fields)} fields {fields[:len(expected) + 1]}")
        return
    fields = [field.strip() for field in fields]
    if task.header is not None and tuple(fields) != task.header:
        raise ValueError(f"{path}: not a GLUE {task.name} file: expected the header columns "
                         f"{list(task.header)}, got {fields}")
    missing = [column for column in task.required_columns if column not in fields]
    if task.header is None and missing:
        raise ValueError(f"{path}: not a GLUE {task.name} file: expected a header with the "
                         f"columns {list(task.required_columns)}, got {fields} "
                         f"(missing {missing})")


def check_files(name: str, directory: str) -> None:
    """Checks the first line of each split file of task ``name`` in ``directory``."""
    task = get(name)
    for path in split_paths(task, directory).values():
        check_file(task, path)
