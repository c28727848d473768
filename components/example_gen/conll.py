"""CoNLL-style token tagging files (CoNLL-2003, WNUT-17) and their tf.train.Example records.

A file holds one token a line, ``token<TAB>tag`` (further tab-separated columns, as in
CoNLL-2003's POS / chunk columns, are allowed: the first is the token, the last the tag).
Sentences are separated by a line that is empty or only whitespace: WNUT-17's
``wnut17train.conll`` separates 2,394 of its sentences with a lone tab, not an empty line.
``-DOCSTART-`` lines (CoNLL-2003's document boundaries) are skipped. A malformed line (no
tab, an empty token, an empty tag) is never dropped silently: it is left out of its
sentence and reported with ``file:line`` in :attr:`ConllFile.malformed` (or raised, with
``on_malformed="raise"``).

Two entry points:

* :func:`read_conll` reads a whole file into sentences (for evaluation and fine-tuning
  scripts);
* :func:`split_sentences` + :func:`parse_conll_sentence` are the streaming pair TFX ingestion
  uses (``components/example_gen``): the first groups a file's lines into one raw record per
  sentence (the sentence's lines joined by ``\\n``), the second turns a record into a
  ``tf.train.Example`` with the features ``tokens`` and ``tags`` (bytes lists of equal
  length), or a ``formats.BadRecord`` naming the malformed line.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Iterator, List, Optional, Tuple

from lmfactory.components.example_gen import formats
# The tagging record's features, defined once with their reader (`tagging_dataset`).
from lmfactory.models.tasks.ner_training import TAGS_FEATURE, TOKENS_FEATURE

CONLL_FORMAT = formats.CONLL_FORMAT
DOCSTART = "-DOCSTART-"
ON_MALFORMED = ("skip", "raise")


@dataclasses.dataclass(frozen=True)
class MalformedLine:
    """One line that is neither a separator, a ``-DOCSTART-`` line nor ``token<TAB>tag``."""
    path: str
    line_number: int  # 1-based
    reason: str
    text: str

    def __str__(self):
        return f"{self.path}:{self.line_number}: {self.reason}: {self.text!r}"


@dataclasses.dataclass
class ConllFile:
    """The sentences of one file, each a list of (token, tag), and its malformed lines."""
    path: str
    sentences: List[List[Tuple[str, str]]]
    malformed: List[MalformedLine]

    @property
    def tokens(self) -> List[List[str]]:
        return [[token for token, _ in sentence] for sentence in self.sentences]

    @property
    def tags(self) -> List[List[str]]:
        return [[tag for _, tag in sentence] for sentence in self.sentences]

    def report(self) -> str:
        """One line of counts, then one line per malformed line."""
        lines = [f"{self.path}: {len(self.sentences)} sentences, "
                 f"{sum(len(s) for s in self.sentences)} tokens, "
                 f"{len(self.malformed)} malformed lines"]
        lines.extend(str(bad) for bad in self.malformed)
        return "\n".join(lines)


def is_separator(line: str) -> bool:
    """A sentence boundary: an empty line or one of only whitespace (e.g. a lone tab)."""
    return not line.strip()


def is_docstart(line: str) -> bool:
    return line.strip().split("\t")[0].split(" ")[0] == DOCSTART


def parse_line(line: str) -> Tuple[Optional[Tuple[str, str]], str]:
    """``(token, tag), ""`` for a token line, ``None, reason`` for a malformed one."""
    if "\t" not in line:
        return None, "no tab between token and tag"
    fields = line.split("\t")
    token, tag = fields[0], fields[-1].strip()
    if not token.strip():
        return None, "empty token"
    if not tag:
        return None, "empty tag"
    return (token, tag), ""


def read_conll(path: str, on_malformed: str = "skip") -> ConllFile:
    """Reads a CoNLL file into sentences of (token, tag).

    Args:
        path: a local path or any path ``tf.io.gfile`` opens.
        on_malformed: ``"skip"`` leaves a malformed line out of its sentence and records it
            in ``malformed``; ``"raise"`` raises a ValueError naming ``file:line``.
    """
    import tensorflow as tf

    if on_malformed not in ON_MALFORMED:
        raise ValueError(f"on_malformed must be one of {ON_MALFORMED}, got {on_malformed!r}")
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"CoNLL file {path!r} does not exist")
    sentences, malformed, current = [], [], []
    with tf.io.gfile.GFile(path, "rb") as f:
        data = f.read()
    if data.startswith(formats.UTF8_BOM):
        data = data[len(formats.UTF8_BOM):]
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError as error:
            pair, reason = None, f"invalid UTF-8 ({error.reason})"
            line = raw.decode("utf-8", errors="replace")
        else:
            if is_separator(line):
                if current:
                    sentences.append(current)
                    current = []
                continue
            if is_docstart(line):
                continue
            pair, reason = parse_line(line)
        if pair is None:
            bad = MalformedLine(path, number, reason, line)
            if on_malformed == "raise":
                raise ValueError(f"Malformed CoNLL line {bad}")
            malformed.append(bad)
            continue
        current.append(pair)
    if current:
        sentences.append(current)
    return ConllFile(path, sentences, malformed)


# ---------------------------------------------------------------------------------------------
# Streaming records for TFX ingestion (formats.py / transforms.py).


def split_sentences(lines: Iterable[Optional[bytes]]) -> Iterator[Optional[bytes]]:
    """Groups a file's lines (``formats.iter_file_lines``; None = an over-long line) into one
    raw record per sentence: its lines joined by ``b"\\n"``, separators and ``-DOCSTART-``
    lines left out. A sentence with an over-long line is yielded as None (a ``too_long``
    record), so one bad line spoils only its sentence."""
    current, overlong = [], False
    for line in lines:
        if line is None:
            overlong = True
            continue
        line = line[:-1] if line.endswith(b"\r") else line
        if not line.strip():
            if current or overlong:
                yield None if overlong else b"\n".join(current)
            current, overlong = [], False
            continue
        if line.strip().split(b"\t")[0].split(b" ")[0] == DOCSTART.encode():
            continue
        current.append(line)
    if current or overlong:
        yield None if overlong else b"\n".join(current)


def parse_conll_sentence(payload: Optional[bytes],
                         options: Optional[formats.FormatOptions] = None) -> formats.ParseResult:
    """One sentence record (lines ``token<TAB>tag`` joined by ``\\n``) -> a tf.train.Example
    with ``tokens`` and ``tags`` (bytes lists, one entry per token), or a BadRecord: an
    invalid-UTF-8 / over-long / empty sentence, or ``malformed`` naming the sentence's
    first bad line (its line number within the sentence)."""
    max_chars = options.max_record_chars if options else formats.DEFAULT_MAX_RECORD_CHARS
    text = formats.decode_record(payload, max_chars)
    if isinstance(text, formats.BadRecord):
        return text
    tokens, tags = [], []
    for number, line in enumerate(text.split("\n"), start=1):
        pair, reason = parse_line(line)
        if pair is None:
            return formats.BadRecord(formats.MALFORMED,
                                     f"sentence line {number}: {reason}: {line!r}")
        tokens.append(pair[0].encode("utf-8"))
        tags.append(pair[1].encode("utf-8"))
    if not tokens:
        return formats.BadRecord(formats.EMPTY, "sentence without tokens")
    return formats.make_example({TOKENS_FEATURE: formats.bytes_feature(tokens),
                                 TAGS_FEATURE: formats.bytes_feature(tags)})


def sentence_example(tokens, tags):
    """A tf.train.Example of one sentence given as lists of strings (tests, scripts)."""
    if len(tokens) != len(tags):
        raise ValueError(f"{len(tokens)} tokens but {len(tags)} tags")
    return formats.make_example({
        TOKENS_FEATURE: formats.bytes_feature([t.encode("utf-8") for t in tokens]),
        TAGS_FEATURE: formats.bytes_feature([t.encode("utf-8") for t in tags])})


def label_vocabulary(tag_lists: Iterable[Iterable[str]]) -> List[str]:
    """The label set of tagged sentences: ``O`` first, then the entity tags sorted by type and
    prefix (``B-location``, ``I-location``, ...), so ids do not depend on data order."""
    tags = {tag for sentence in tag_lists for tag in sentence}
    tags.discard("O")

    def key(tag):
        prefix, _, entity_type = tag.partition("-")
        return entity_type, prefix

    return ["O"] + sorted(tags, key=key)


__all__ = ["CONLL_FORMAT", "ConllFile", "MalformedLine", "TAGS_FEATURE", "TOKENS_FEATURE",
           "is_separator", "label_vocabulary", "parse_conll_sentence", "parse_line",
           "read_conll", "sentence_example", "split_sentences"]
