"""Reader of the official SQuAD JSON files (Rajpurkar et al. 2016, v1.1; Rajpurkar et al. 2018,
v2.0) into flat question records.

The files hold ``{"version": ..., "data": [{"title", "paragraphs": [{"context", "qas": [{"id",
"question", "answers": [{"text", "answer_start"}], "is_impossible" (v2.0), "plausible_answers"
(v2.0)}]}]}]}``. Each question becomes a :class:`SquadRecord`: its id, question, paragraph
context, the gold answer texts and their character starts in the context, and v2.0's
``is_impossible`` (an unanswerable question has no answers; its ``plausible_answers`` are
kept apart, they are not gold).

An entry that does not have this shape (a missing or non-string field, an answer whose
``answer_start`` does not point at its text in the context, an answerable question without
answers, duplicate ids) stops the reader with a message naming the file and the entry
(article title, paragraph number, question id); with ``skip_malformed=True`` the entry is
left out and counted by reason in :class:`SquadFile` ``malformed`` (``messages`` keeps the
first few messages).
"""

from __future__ import annotations

import collections
import dataclasses
import json
from typing import Iterator

MAX_MESSAGES = 20


@dataclasses.dataclass(frozen=True)
class SquadRecord:
    """One question. ``answer_starts[i]`` is the character index of ``answers[i]`` in
    ``context`` (``context[start:start + len(text)] == text``)."""
    id: str
    question: str
    context: str
    answers: tuple = ()
    answer_starts: tuple = ()
    is_impossible: bool = False
    plausible_answers: tuple = ()
    plausible_answer_starts: tuple = ()
    title: str = ""


@dataclasses.dataclass
class SquadFile:
    """What :func:`read_squad` read: the records, the file's ``version`` string, and the
    malformed entries left out (reason -> count, and the first messages)."""
    path: str
    version: str
    records: list
    malformed: dict = dataclasses.field(default_factory=dict)
    messages: list = dataclasses.field(default_factory=list)

    @property
    def num_malformed(self) -> int:
        return sum(self.malformed.values())

    @property
    def num_articles(self) -> int:
        return len({record.title for record in self.records})


class MalformedSquadEntry(ValueError):
    """A SQuAD entry that does not have the official file's shape."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def _answers(qa: dict, key: str, context: str, where: str) -> tuple[tuple, tuple]:
    answers = qa.get(key, [])
    if not isinstance(answers, list):
        raise MalformedSquadEntry("answers_not_a_list",
                                  f"{where}: {key!r} must be a list, got "
                                  f"{type(answers).__name__}")
    texts, starts = [], []
    for number, answer in enumerate(answers):
        if not isinstance(answer, dict) or not isinstance(answer.get("text"), str):
            raise MalformedSquadEntry("answer_without_text",
                                      f"{where}: {key}[{number}] has no string 'text'")
        start = answer.get("answer_start")
        if isinstance(start, bool) or not isinstance(start, int):
            raise MalformedSquadEntry("answer_start_not_int",
                                      f"{where}: {key}[{number}] 'answer_start' must be an "
                                      f"integer, got {start!r}")
        text = answer["text"]
        if start < 0 or context[start:start + len(text)] != text:
            raise MalformedSquadEntry(
                "answer_not_at_start",
                f"{where}: {key}[{number}] text {text!r} is not at answer_start {start} of "
                f"the context (found {context[max(start, 0):max(start, 0) + len(text)]!r})")
        texts.append(text)
        starts.append(start)
    return tuple(texts), tuple(starts)


def _record(qa, context: str, title: str, where: str, version_2: bool) -> SquadRecord:
    if not isinstance(qa, dict):
        raise MalformedSquadEntry("question_not_an_object",
                                  f"{where}: a question entry must be an object, got "
                                  f"{type(qa).__name__}")
    for field in ("id", "question"):
        if not isinstance(qa.get(field), str) or not qa[field]:
            raise MalformedSquadEntry(f"missing_{field}",
                                      f"{where}: no non-empty string {field!r}")
    where = f"{where} (question id {qa['id']!r})"
    impossible = qa.get("is_impossible", False)
    if not isinstance(impossible, bool):
        raise MalformedSquadEntry("is_impossible_not_bool",
                                  f"{where}: 'is_impossible' must be true or false, got "
                                  f"{impossible!r}")
    answers, starts = _answers(qa, "answers", context, where)
    plausible, plausible_starts = _answers(qa, "plausible_answers", context, where)
    if impossible and answers:
        raise MalformedSquadEntry("impossible_with_answers",
                                  f"{where}: is_impossible is true but it has answers")
    if not impossible and not answers:
        raise MalformedSquadEntry(
            "no_answers", f"{where}: an answerable question needs at least one answer"
            + ("" if version_2 else " (SQuAD v1.1 has no unanswerable questions)"))
    return SquadRecord(id=qa["id"], question=qa["question"], context=context,
                       answers=answers, answer_starts=starts, is_impossible=impossible,
                       plausible_answers=plausible, plausible_answer_starts=plausible_starts,
                       title=title)


def _entries(dataset: dict, path: str, version_2: bool) -> Iterator:
    """Yields a record or a MalformedSquadEntry per question (or per broken article /
    paragraph)."""
    for article_number, article in enumerate(dataset["data"]):
        if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
            yield MalformedSquadEntry("article_without_paragraphs",
                                      f"{path}: data[{article_number}] has no 'paragraphs' "
                                      f"list")
            continue
        title = article.get("title")
        title = title if isinstance(title, str) else f"data[{article_number}]"
        for paragraph_number, paragraph in enumerate(article["paragraphs"]):
            where = f"{path}: article {title!r}, paragraph {paragraph_number}"
            if not isinstance(paragraph, dict) or not isinstance(paragraph.get("context"), str):
                yield MalformedSquadEntry("paragraph_without_context",
                                          f"{where}: no string 'context'")
                continue
            if not isinstance(paragraph.get("qas"), list):
                yield MalformedSquadEntry("paragraph_without_qas", f"{where}: no 'qas' list")
                continue
            for qa_number, qa in enumerate(paragraph["qas"]):
                try:
                    yield _record(qa, paragraph["context"], title,
                                  f"{where}, qas[{qa_number}]", version_2)
                except MalformedSquadEntry as error:
                    yield error


def _load_dataset(path: str) -> dict:
    import tensorflow as tf

    with tf.io.gfile.GFile(path, "rb") as f:
        raw = f.read()
    try:
        dataset = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not a SQuAD JSON file ({error})") from error
    if not isinstance(dataset, dict) or not isinstance(dataset.get("data"), list):
        raise ValueError(f"{path}: a SQuAD file is an object with a 'data' list of articles")
    return dataset


def _is_version_2(dataset: dict) -> bool:
    version = str(dataset.get("version", ""))
    return version.startswith("v2") or version.startswith("2")


def iter_questions(path: str) -> Iterator:
    """Yields, in file order, a :class:`SquadRecord` per well-formed question and a
    :class:`MalformedSquadEntry` per malformed entry (a repeated question id included).
    A file that is not SQuAD JSON at all raises ValueError naming it."""
    return _questions(_load_dataset(path), path)


def _questions(dataset: dict, path: str) -> Iterator:
    seen = set()
    for entry in _entries(dataset, path, _is_version_2(dataset)):
        if isinstance(entry, SquadRecord):
            if entry.id in seen:
                entry = MalformedSquadEntry("duplicate_id", f"{path}: question id "
                                            f"{entry.id!r} appears more than once")
            else:
                seen.add(entry.id)
        yield entry


def read_squad(path: str, skip_malformed: bool = False) -> SquadFile:
    """Reads a SQuAD v1.1 or v2.0 JSON file into question records (file order).

    Raises ``MalformedSquadEntry`` (a ValueError) naming the file and entry at the first
    malformed entry, unless ``skip_malformed``: then such entries are counted and left out.
    """
    dataset = _load_dataset(path)
    records, malformed, messages = [], collections.Counter(), []
    for entry in _questions(dataset, path):
        if isinstance(entry, MalformedSquadEntry):
            if not skip_malformed:
                raise entry
            malformed[entry.reason] += 1
            if len(messages) < MAX_MESSAGES:
                messages.append(str(entry))
            continue
        records.append(entry)
    return SquadFile(path=path, version=str(dataset.get("version", "")), records=records, malformed=dict(malformed),
                     messages=messages)


# tf.train.Example features of one question (TFX ingestion, components/example_gen).
EXAMPLE_FEATURES = ("id", "title", "question", "context", "answers", "answer_starts",
                    "is_impossible")


def to_tf_example(record: SquadRecord):
    """The ``tf.train.Example`` of one question: ``id``, ``title``, ``question``, ``context``
    (bytes), ``answers`` (bytes list), ``answer_starts`` (int64 list, character indexes),
    ``is_impossible`` (int64 0/1)."""
    import tensorflow as tf

    def text(values):
        return tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[value.encode("utf-8") for value in values]))

    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

    return tf.train.Example(features=tf.train.Features(feature={
        "id": text([record.id]), "title": text([record.title]),
        "question": text([record.question]), "context": text([record.context]),
        "answers": text(record.answers), "answer_starts": ints(record.answer_starts),
        "is_impossible": ints([int(record.is_impossible)])}))


def from_tf_example(serialized: bytes) -> SquadRecord:
    """The :class:`SquadRecord` of a :func:`to_tf_example` record (serialized)."""
    import tensorflow as tf

    feature = tf.train.Example.FromString(serialized).features.feature

    def texts(name):
        return tuple(value.decode("utf-8") for value in feature[name].bytes_list.value)

    return SquadRecord(id=texts("id")[0], question=texts("question")[0],
                       context=texts("context")[0], answers=texts("answers"),
                       answer_starts=tuple(feature["answer_starts"].int64_list.value),
                       is_impossible=bool(feature["is_impossible"].int64_list.value[0]),
                       title=texts("title")[0])


def read_examples(file_pattern: str) -> list:
    """The :class:`SquadRecord` of every ingested question in the GZIP TFRecord files
    matching ``file_pattern`` (sorted file order)."""
    import tensorflow as tf

    files = sorted(tf.io.gfile.glob(file_pattern))
    if not files:
        raise FileNotFoundError(f"No SQuAD records match {file_pattern!r}")
    return [from_tf_example(serialized.numpy()) for serialized in
            tf.data.TFRecordDataset(files, compression_type="GZIP")]


def split_by_article(records: list, train_fraction: float) -> tuple[list, list]:
    """The records of the first ``train_fraction`` of the articles (file order) and those of
    the rest: articles never straddle the split."""
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction}")
    titles = list(dict.fromkeys(record.title for record in records))
    cut = max(1, min(len(titles) - 1, round(len(titles) * train_fraction)))
    train_titles = set(titles[:cut])
    return ([r for r in records if r.title in train_titles],
            [r for r in records if r.title not in train_titles])


def make_unanswerable(records: list, fraction: float, seed: int = 0) -> list:
    """A v2.0-style copy of ``records``: a ``fraction`` of the questions (chosen with
    ``seed``) are paired with a paragraph of ANOTHER article and become unanswerable
    (``is_impossible``, no answers) -- an approximation of v2.0's adversarial questions
    (Rajpurkar et al. 2018 wrote them by hand) used where the v2.0 files are not available."""
    import random

    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    rng = random.Random(seed)
    paragraphs = collections.defaultdict(list)
    for record in records:
        if record.context not in paragraphs[record.title]:
            paragraphs[record.title].append(record.context)
    titles = sorted(paragraphs)
    if len(titles) < 2 and fraction > 0:
        raise ValueError("make_unanswerable needs records of at least two articles")
    out = []
    for record in records:
        if rng.random() >= fraction:
            out.append(record)
            continue
        other = rng.choice([t for t in titles if t != record.title])
        out.append(dataclasses.replace(record, id=record.id + "_unanswerable",
                                       context=rng.choice(paragraphs[other]), answers=(),
                                       answer_starts=(), is_impossible=True, title=other))
    return out


def to_json(records: list, version: str = "v2.0") -> dict:
    """The records as an official-format SQuAD dict (paragraphs grouped by article and
    context, in first-seen order)."""
    articles: dict = {}
    for record in records:
        paragraphs = articles.setdefault(record.title, {})
        qas = paragraphs.setdefault(record.context, [])
        qa = {"id": record.id, "question": record.question,
              "answers": [{"text": t, "answer_start": s}
                          for t, s in zip(record.answers, record.answer_starts)]}
        if version.startswith("v2"):
            qa["is_impossible"] = record.is_impossible
            if record.plausible_answers:
                qa["plausible_answers"] = [
                    {"text": t, "answer_start": s}
                    for t, s in zip(record.plausible_answers, record.plausible_answer_starts)]
        qas.append(qa)
    return {"version": version, "data": [
        {"title": title, "paragraphs": [{"context": c, "qas": q} for c, q in paras.items()]}
        for title, paras in articles.items()]}


def gold_answers(records: list) -> dict:
    """question id -> gold texts (empty for unanswerable), what
    ``components/evaluator/squad_metrics.evaluate`` takes."""
    return {record.id: list(record.answers) for record in records}


__all__ = ["EXAMPLE_FEATURES", "MalformedSquadEntry", "SquadFile", "SquadRecord",
           "from_tf_example", "gold_answers", "iter_questions", "make_unanswerable",
           "read_examples", "read_squad", "split_by_article", "to_json", "to_tf_example"]
