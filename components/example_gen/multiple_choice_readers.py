"""Readers of multiple-choice task files: CommonsenseQA (JSONL) and SWAG (CSV).

Both become `MultipleChoiceExample` records: the context, the candidate texts, and the index
of the correct candidate. They are what BERT's §4.4 multiple-choice fine-tuning packs, one
``[CLS] context [SEP] choice [SEP]`` sequence per candidate
(``models/tasks/multiple_choice_preprocessor.py``).

* CommonsenseQA (Talmor et al. 2019), one JSON object a line::

    {"answerKey": "A", "id": "...", "question": {"stem": "...",
     "choices": [{"label": "A", "text": "bank"}, ...]}}

  context = ``question.stem``, choices = the ``text`` of ``question.choices`` in file order,
  label = the position of the choice whose ``label`` is ``answerKey``. The released test
  split has no ``answerKey``.
* SWAG (Zellers et al. 2018), the released ``train.csv`` / ``val.csv`` with the header
  ``video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,
  label`` (the released files carry a leading unnamed index column, accepted too; the test
  file has no ``label``). BERT §4.4 gives the first sentence as segment A and the second
  sentence's start plus an ending as segment B: context = ``sent1``, choice i =
  ``sent2 + " " + ending<i>``.

A malformed line (bad JSON, a missing ``answerKey``, an answer label that names no choice,
a wrong number of choices or CSV columns, ...) is never dropped silently: it is counted,
logged and listed as ``path:line: reason`` in the split's `MalformedLine` list and
`MultipleChoiceSplit.report`, or raises at once with ``strict=True``. A file that is not of
the expected shape at all, or a test split read for training (no answers), raises a
`MultipleChoiceDataError` naming the file and the expected fields / columns.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import io
import json
import logging
import os
from typing import NamedTuple, Optional, Sequence

COMMONSENSEQA_FORMAT = "commonsenseqa"
SWAG_FORMAT = "swag"
FORMATS = (COMMONSENSEQA_FORMAT, SWAG_FORMAT)
COMMONSENSEQA_FIELDS = ("question.stem", "question.choices[{label, text}]", "answerKey")
SWAG_COLUMNS = ("video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source",
                "ending0", "ending1", "ending2", "ending3", "label")
SWAG_ENDINGS = ("ending0", "ending1", "ending2", "ending3")
NO_LABEL = -1
_LOGGED_MALFORMED = 5


class MultipleChoiceDataError(ValueError):
    """A multiple-choice file that cannot be read as asked (wrong shape, no answers, a
    malformed line under ``strict=True``)."""


class MultipleChoiceExample(NamedTuple):
    """One question: the context (CommonsenseQA's question stem, SWAG's first sentence =
    segment A), the candidate texts (segment B of each sequence) and the index of the
    correct one (`NO_LABEL` = -1 in a file without answers)."""

    id: str
    context: str
    choices: tuple
    label: int


class MalformedLine(NamedTuple):
    path: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


@dataclasses.dataclass
class MultipleChoiceSplit:
    """The examples of one file and the malformed lines left out of them."""

    path: str
    format: str
    examples: list
    malformed: list = dataclasses.field(default_factory=list)

    def __len__(self) -> int:
        return len(self.examples)

    def __iter__(self):
        return iter(self.examples)

    def __getitem__(self, index):
        return self.examples[index]

    @property
    def num_choices(self) -> int:
        return len(self.examples[0].choices) if self.examples else 0

    @property
    def has_labels(self) -> bool:
        return bool(self.examples) and all(e.label != NO_LABEL for e in self.examples)

    def report(self) -> dict:
        """Counts for an ingestion report: examples read, malformed lines (in total and by
        reason, the reason's text before any quoted detail) and every malformed line as
        ``path:line: reason``."""
        by_reason = collections.Counter(m.reason.split(":")[0] for m in self.malformed)
        return {"path": self.path, "format": self.format, "examples": len(self.examples),
                "num_choices": self.num_choices, "malformed": len(self.malformed),
                "malformed_by_reason": dict(sorted(by_reason.items())),
                "malformed_lines": [str(m) for m in self.malformed]}


class _Malformed:
    """Collects (or, strict, raises on) malformed lines of one file; logs the first few."""

    def __init__(self, path: str, strict: bool):
        self.path, self.strict, self.lines = path, strict, []

    def __call__(self, line: int, reason: str) -> None:
        entry = MalformedLine(self.path, line, reason)
        if self.strict:
            raise MultipleChoiceDataError(f"Malformed line {entry} (strict=False counts and "
                                          f"reports such lines instead)")
        if len(self.lines) < _LOGGED_MALFORMED:
            logging.warning("Malformed line %s", entry)
        self.lines.append(entry)

    def summarize(self, examples: int) -> None:
        if self.lines:
            logging.warning("%s: %d malformed line(s) left out, %d examples read",
                            self.path, len(self.lines), examples)


def read_text(path: str, error_cls=None, what: str = "Multiple-choice data file") -> str:
    """A whole UTF-8 file (any ``tf.io.gfile`` path) without its BOM. A missing file raises
    FileNotFoundError; invalid UTF-8 raises ``error_cls`` (default MultipleChoiceDataError)
    naming the file and line."""
    import tensorflow as tf

    path = os.fspath(path)
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"{what} {path!r} does not exist")
    with tf.io.gfile.GFile(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[:error.start].count(b"\n") + 1
        raise (error_cls or MultipleChoiceDataError)(
            f"{path}:{line}: invalid UTF-8 ({error.reason})") from None
    return text.removeprefix("\ufeff")


# ----------------------------------------------------------------------- CommonsenseQA


def _commonsenseqa_shape(record) -> Optional[str]:
    """None when ``record`` has CommonsenseQA's question fields, else what is wrong."""
    if not isinstance(record, dict):
        return f"not a JSON object: {type(record).__name__}"
    question = record.get("question")
    if not isinstance(question, dict):
        return "no 'question' object"
    if not isinstance(question.get("stem"), str):
        return "no 'question.stem' string"
    choices = question.get("choices")
    if not isinstance(choices, list) or not choices:
        return "no 'question.choices' list"
    for choice in choices:
        if not (isinstance(choice, dict) and isinstance(choice.get("label"), str)
                and isinstance(choice.get("text"), str)):
            return f"a choice is not a {{label, text}} object: {choice!r}"
    return None


def read_commonsenseqa(path: str, require_labels: bool = True,
                       num_choices: Optional[int] = None,
                       strict: bool = False,
                       varying_choices: bool = False) -> MultipleChoiceSplit:
    """Reads a CommonsenseQA JSONL file (see the module docstring).

    Args:
        path: the ``.jsonl`` file (local or any ``tf.io.gfile`` path).
        require_labels: every example must have its answer (training, evaluation). A file
            with no ``answerKey`` at all (the released test split) then raises; with False
            its examples get the label `NO_LABEL`.
        num_choices: the number of choices every question must have; None = that of the
            first well-formed question (5 in CommonsenseQA).
        strict: raise on the first malformed line instead of counting it.
        varying_choices: accept questions with different numbers of choices (in-context
            scoring, ``components/evaluator/few_shot``); ``num_choices`` is then not
            checked. Fine-tuning packs a fixed number per question and leaves it False.
    """
    text = read_text(path)
    malformed = _Malformed(os.fspath(path), strict)
    examples, numbers, unlabeled, shape_errors, objects = [], [], [], [], 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            malformed(number, f"invalid JSON: {error.msg} at column {error.colno}")
            continue
        objects += 1
        problem = _commonsenseqa_shape(record)
        if problem is not None:
            shape_errors.append((number, problem))
            continue
        question = record["question"]
        labels = [choice["label"] for choice in question["choices"]]
        texts = tuple(choice["text"] for choice in question["choices"])
        if len(set(labels)) != len(labels):
            malformed(number, f"duplicate choice labels: {labels}")
            continue
        expected = num_choices if num_choices is not None else (
            len(examples[0].choices) if examples else None)
        if not varying_choices and expected is not None and len(texts) != expected:
            malformed(number, f"wrong number of choices: {len(texts)}, expected {expected}")
            continue
        if "answerKey" not in record:
            if require_labels:
                unlabeled.append(number)
            label = NO_LABEL
        else:
            answer = record["answerKey"]
            if answer not in labels:
                malformed(number, f"unknown answer label: answerKey {answer!r} is not one "
                                  f"of the choice labels {labels}")
                continue
            label = labels.index(answer)
        examples.append(MultipleChoiceExample(str(record.get("id", number)),
                                              question["stem"], texts, label))
        numbers.append(number)
    if objects and not examples and shape_errors:
        raise MultipleChoiceDataError(
            f"{path} is not a CommonsenseQA file: expected one JSON object a line with the "
            f"fields {list(COMMONSENSEQA_FIELDS)}; line {shape_errors[0][0]}: "
            f"{shape_errors[0][1]}")
    for number, problem in shape_errors:
        malformed(number, f"not a CommonsenseQA question: {problem}")
    if unlabeled and len(unlabeled) == len(examples):
        raise MultipleChoiceDataError(
            f"{path} has no answers (no 'answerKey' in any of its {len(examples)} "
            f"questions): it is an unlabeled test split and cannot be used for training or "
            f"evaluation; read it with require_labels=False to get its questions with "
            f"label {NO_LABEL}")
    if unlabeled:
        keep = set(unlabeled)
        for number in unlabeled:
            malformed(number, "missing 'answerKey'")
        examples = [e for e, n in zip(examples, numbers) if n not in keep]
    malformed.lines.sort(key=lambda m: m.line)
    malformed.summarize(len(examples))
    if not examples:
        raise MultipleChoiceDataError(f"{path}: no CommonsenseQA questions read "
                                      f"({len(malformed.lines)} malformed lines)")
    return MultipleChoiceSplit(os.fspath(path), COMMONSENSEQA_FORMAT, examples,
                               malformed.lines)



# --------------------------------------------------------------------------------- SWAG


def _swag_header(path: str, header: Sequence[str], require_labels: bool) -> tuple:
    """(index of the first SWAG column, whether there is a ``label`` column) for a header
    row; raises when it is not SWAG's."""
    columns = [name.strip() for name in header]
    offset = 1 if columns and columns[0] in ("", "Unnamed: 0") else 0  # pandas' index
    named = columns[offset:]
    expected = list(SWAG_COLUMNS)
    if named == expected:
        return offset, True
    if named == expected[:-1]:  # the released test.csv: no answers
        if require_labels:
            raise MultipleChoiceDataError(
                f"{path} has no 'label' column: it is an unlabeled SWAG test split and "
                f"cannot be used for training or evaluation; read it with "
                f"require_labels=False to get its questions with label {NO_LABEL}")
        return offset, False
    raise MultipleChoiceDataError(
        f"{path} is not a SWAG CSV file: expected the header columns {','.join(expected)} "
        f"(optionally after an unnamed index column; without 'label' for a test split), "
        f"got {','.join(columns)}")


def read_swag(path: str, require_labels: bool = True,
              strict: bool = False) -> MultipleChoiceSplit:
    """Reads a SWAG CSV file (see the module docstring): context = ``sent1``, choice i =
    ``sent2 + " " + ending<i>``, label = ``label``.

    Args:
        path: the ``.csv`` file (local or any ``tf.io.gfile`` path).
        require_labels: the file must have a ``label`` column (training, evaluation);
            with False, a file without one gives the label `NO_LABEL`.
        strict: raise on the first malformed line instead of counting it.
    """
    text = read_text(path)
    malformed = _Malformed(os.fspath(path), strict)
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        raise MultipleChoiceDataError(f"{path} is empty: expected a SWAG CSV header "
                                      f"{','.join(SWAG_COLUMNS)}") from None
    except csv.Error as error:
        raise MultipleChoiceDataError(f"{path}:1: unreadable CSV header ({error})") from None
    offset, labeled = _swag_header(os.fspath(path), header, require_labels)
    width = offset + len(SWAG_COLUMNS) - (0 if labeled else 1)
    column = {name: offset + i for i, name in enumerate(SWAG_COLUMNS)}
    examples = []
    while True:
        number = reader.line_num + 1  # where the next record starts
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as error:
            malformed(number, f"unreadable CSV row: {error}")
            continue
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != width:
            malformed(number, f"wrong column count: {len(row)} columns, expected {width}")
            continue
        label = NO_LABEL
        if labeled:
            value = row[column["label"]].strip()
            if value not in {str(i) for i in range(len(SWAG_ENDINGS))}:
                malformed(number, f"unknown answer label: {value!r} is not one of 0.."
                                  f"{len(SWAG_ENDINGS) - 1}")
                continue
            label = int(value)
        sent2 = row[column["sent2"]].strip()
        choices = tuple(" ".join(part for part in (sent2, row[column[name]].strip()) if part)
                        for name in SWAG_ENDINGS)
        example_id = f"{row[column['video-id']]}/{row[column['fold-ind']]}"
        examples.append(MultipleChoiceExample(example_id, row[column["sent1"]].strip(),
                                              choices, label))
    malformed.summarize(len(examples))
    if not examples:
        raise MultipleChoiceDataError(f"{path}: no SWAG questions read "
                                      f"({len(malformed.lines)} malformed lines)")
    return MultipleChoiceSplit(os.fspath(path), SWAG_FORMAT, examples, malformed.lines)


# ----------------------------------------------------------------------------- dispatch


def detect_format(path: str) -> str:
    """`COMMONSENSEQA_FORMAT` for ``.jsonl`` / ``.json``, `SWAG_FORMAT` for ``.csv``."""
    name = os.fspath(path).lower()
    if name.endswith((".jsonl", ".json")):
        return COMMONSENSEQA_FORMAT
    if name.endswith(".csv"):
        return SWAG_FORMAT
    raise MultipleChoiceDataError(
        f"{path}: cannot tell the multiple-choice format from the file name; expected a "
        f"CommonsenseQA .jsonl file (fields {list(COMMONSENSEQA_FIELDS)}) or a SWAG .csv "
        f"file (columns {','.join(SWAG_COLUMNS)}), or pass format= one of {FORMATS}")


def read_multiple_choice(path: str, format: Optional[str] = None,
                         **kwargs) -> MultipleChoiceSplit:
    """Reads ``path`` with the reader of ``format`` (one of `FORMATS`; None = from the file
    name, `detect_format`). ``kwargs`` go to the reader (``require_labels``, ``strict``,
    CommonsenseQA's ``num_choices``)."""
    format = format or detect_format(path)
    if format == COMMONSENSEQA_FORMAT:
        return read_commonsenseqa(path, **kwargs)
    if format == SWAG_FORMAT:
        return read_swag(path, **kwargs)
    raise MultipleChoiceDataError(f"Unknown multiple-choice format {format!r}; "
                                  f"expected one of {FORMATS}")


def to_tf_example(example: MultipleChoiceExample):
    """The ``tf.train.Example`` of one question, as the fine-tuning input reads it
    (``components/tasks/multiple_choice_data.py``): ``context`` (bytes), ``choices`` (one
    bytes value per choice, in order), ``label`` (int64; -1 without an answer), ``id``."""
    import tensorflow as tf

    def as_bytes(values):
        return tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[v.encode("utf-8") for v in values]))

    return tf.train.Example(features=tf.train.Features(feature={
        "id": as_bytes([example.id]),
        "context": as_bytes([example.context]),
        "choices": as_bytes(example.choices),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[example.label])),
    }))


__all__ = ["COMMONSENSEQA_FORMAT", "FORMATS", "MalformedLine", "MultipleChoiceDataError",
           "MultipleChoiceExample", "MultipleChoiceSplit", "NO_LABEL", "SWAG_COLUMNS",
           "SWAG_FORMAT", "detect_format", "read_commonsenseqa", "read_multiple_choice",
           "read_swag", "to_tf_example"]
