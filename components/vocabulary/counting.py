"""The worker side of VocabularyGen's Beam steps: serialized ``tf.train.Example`` records ->
text lines -> the kind's pre-tokenization -> word counts, summed over a whole bundle.

This module is what a Beam SDK worker unpickles, so it imports only the standard library,
Beam, protobuf and the light per-kind modules; TensorFlow (and, through
``lmfactory.models``, Keras and every architecture) is imported only by the kinds whose
pre-tokenization runs TensorFlow ops (SentencePiece, word), when they first count. A worker
that counts WordPiece or byte-level BPE words, or bytes, starts without TensorFlow (~3-4 s
less per worker process). WordPiece and BPE count each distinct space-separated
piece of a batch once (``wordpiece.count_lines_plain``, ``bpe.count_words``).

Counting per bundle (:class:`CountWordsFn`): the lines of a bundle are pre-tokenized in
batches and summed in one ``Counter``, emitted as (word, count) pairs when the bundle ends
(or when the Counter holds ``max_held_words`` words). The combiner after it
(``CombinePerKey(sum)``) then sees each distinct word of a bundle once, instead of once per
512-line batch, and no Beam step runs per line.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import apache_beam as beam
from apache_beam.transforms import window
from apache_beam.utils.windowed_value import WindowedValue

from lmfactory.components.vocabulary import bpe, word, wordpiece

LINES_PER_BATCH = 512
MAX_HELD_WORDS = 1_000_000  # a bundle's Counter is emitted early past this many words


@dataclasses.dataclass(frozen=True)
class CountSettings:
    """What the counting functions read of a configuration (picklable, no TensorFlow):
    the same attribute names as :class:`executor.VocabularyConfig`, which they also take."""

    kind: str
    lowercase: bool
    strip_accents: bool
    resolved_special_tokens: Mapping[str, str]


# --- tf.train.Example without TensorFlow -------------------------------------------------
_EXAMPLE_CLASS = None


def _example_class():
    """A protobuf class with the wire schema of ``tensorflow.Example``
    (tensorflow/core/example/example.proto and feature.proto: Example.features = 1,
    Features.feature = 1 (map<string, Feature>), Feature.bytes_list = 1, BytesList.value =
    1), built in a private descriptor pool. Only the bytes lists are declared: float and
    int64 lists (fields 2 and 3) are skipped as unknown fields, so such a feature reads as
    an empty bytes list, as ``feature.bytes_list.value`` does in TensorFlow's class."""
    global _EXAMPLE_CLASS
    if _EXAMPLE_CLASS is None:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

        field = descriptor_pb2.FieldDescriptorProto
        proto = descriptor_pb2.FileDescriptorProto(
            name="lmfactory_vocabulary_example.proto", package="lmfactory_example",
            syntax="proto3")

        def message(name, fields, parent=None):
            described = (parent.nested_type if parent else proto.message_type).add(name=name)
            for field_name, number, kind, label, type_name in fields:
                described.field.add(name=field_name, number=number, type=kind, label=label,
                                    type_name=type_name)
            return described

        message("BytesList", [("value", 1, field.TYPE_BYTES, field.LABEL_REPEATED, None)])
        message("Feature", [("bytes_list", 1, field.TYPE_MESSAGE, field.LABEL_OPTIONAL,
                             ".lmfactory_example.BytesList")])
        features = message("Features", [("feature", 1, field.TYPE_MESSAGE,
                                         field.LABEL_REPEATED,
                                         ".lmfactory_example.Features.FeatureEntry")])
        entry = message("FeatureEntry", [
            ("key", 1, field.TYPE_STRING, field.LABEL_OPTIONAL, None),
            ("value", 2, field.TYPE_MESSAGE, field.LABEL_OPTIONAL,
             ".lmfactory_example.Feature")], parent=features)
        entry.options.map_entry = True
        message("Example", [("features", 1, field.TYPE_MESSAGE, field.LABEL_OPTIONAL,
                             ".lmfactory_example.Features")])
        pool = descriptor_pool.DescriptorPool()
        pool.Add(proto)
        descriptor = pool.FindMessageTypeByName("lmfactory_example.Example")
        _EXAMPLE_CLASS = message_factory.MessageFactory(pool).GetPrototype(descriptor)
    return _EXAMPLE_CLASS


def text_lines(serialized_example: bytes, text_features: Sequence[str]) -> Iterator[str]:
    """Non-blank lines of the named bytes features of one serialized ``tf.train.Example``."""
    features = _example_class().FromString(serialized_example).features.feature
    for name in text_features:
        if name not in features:
            continue
        for value in features[name].bytes_list.value:
            for line in value.decode("utf-8", errors="replace").split("\n"):
                if line.strip():
                    yield line


# --- Per-kind counting of a batch of lines -----------------------------------------------
def count_wordpiece(lines: Sequence[str], config) -> list[tuple[str, int]]:
    # plain Python: the counts of the TF ops' split (wordpiece.count_lines), no TensorFlow
    return wordpiece.count_lines_plain(lines, config.lowercase, config.strip_accents)


def count_sentencepiece(lines: Sequence[str], config) -> list[tuple[str, int]]:
    from lmfactory.components.vocabulary import sentence_piece

    return list(collections.Counter(sentence_piece.pretokenize_lines(
        lines, config.lowercase, config.strip_accents)).items())


def count_bpe(lines: Sequence[str], config) -> list[tuple[str, int]]:
    # Counted before spelling in bytes: each distinct word is converted once.
    special_tokens, _ = bpe.special_token_layout(config.resolved_special_tokens)
    return list(bpe.count_words(lines, special_tokens).items())


def count_byte(lines: Iterable[str], config) -> list[tuple[str, int]]:
    """(byte, count) pairs over the UTF-8 bytes of ``lines``, each byte spelled as its
    token (``chr(value)``, see ``Utf8ByteTokenizer.get_vocabulary``)."""
    del config  # the "words" are bytes: their counts are the statistics
    counts = collections.Counter()
    for line in lines:
        counts.update(line.encode("utf-8"))
    return [(chr(value), count) for value, count in counts.items()]


def count_word(lines: Sequence[str], config) -> list[tuple[str, int]]:
    return word.count_lines(lines, config.lowercase, config.resolved_special_tokens)


def frequency_rank(word_count: tuple[str, int]) -> tuple[int, str]:
    """The key of the top-k step (here, so that the workers running it stay light)."""
    word, count = word_count
    return count, word  # ties cut by the word, so the kept set does not depend on the runner


def records_of(batch: Sequence[bytes]) -> Sequence[bytes]:
    """The records of a batch (the vocabulary pipeline batches records to spread them over
    the workers in few shuffle elements, and takes them apart again here)."""
    return batch


# --- The counted words, handed from the workers to the learner --------------------------
def write_word_counts(word_counts: Sequence[tuple[str, int]], path: str) -> str:
    """Writes the (word, count) list (the top-k step's output) as one JSON file at ``path``
    (any Beam file system, no TensorFlow on the worker) and returns ``path``."""
    from apache_beam.io.filesystems import FileSystems

    with FileSystems.create(path) as f:
        f.write(json.dumps(list(word_counts), ensure_ascii=False).encode("utf-8"))
    return path


def read_word_counts(path: str) -> list[tuple[str, int]]:
    """The (word, count) list :func:`write_word_counts` wrote, in its order."""
    from apache_beam.io.filesystems import FileSystems

    with FileSystems.open(path) as f:
        return [(word, count) for word, count in json.loads(f.read().decode("utf-8"))]


# --- The Beam step ------------------------------------------------------------------------
class CountWordsFn(beam.DoFn):
    """Serialized Examples -> (word, count) pairs of a whole bundle.

    Lines are pre-tokenized ``lines_per_batch`` at a time by ``count`` (a kind's counting
    function above) and summed in one Counter per bundle, emitted at the end of the bundle
    (in the global window: the vocabulary pipeline reads bounded files).
    """

    def __init__(self, count: Callable, settings: CountSettings,
                 text_features: Sequence[str], lines_per_batch: int = LINES_PER_BATCH,
                 max_held_words: int = MAX_HELD_WORDS):
        self._count = count
        self._settings = settings
        self._text_features = tuple(text_features)
        self._lines_per_batch = lines_per_batch
        self._max_held_words = max_held_words
        self._lines: list[str] = []
        self._counts: collections.Counter = collections.Counter()

    def start_bundle(self):
        self._lines = []
        self._counts = collections.Counter()

    def _count_lines(self) -> None:
        if self._lines:
            for token, count in self._count(self._lines, self._settings):
                self._counts[token] += count
            self._lines = []

    def _drain(self) -> Iterator[WindowedValue]:
        counts, self._counts = self._counts, collections.Counter()
        for pair in counts.items():
            yield WindowedValue(pair, window.MIN_TIMESTAMP, (window.GlobalWindow(),))

    def process(self, serialized_example: bytes):
        self._lines.extend(text_lines(serialized_example, self._text_features))
        if len(self._lines) >= self._lines_per_batch:
            self._count_lines()
            if len(self._counts) >= self._max_held_words:
                # a plain output inside process(): windowed as its input (global)
                for value in self._drain():
                    yield value.value

    def finish_bundle(self):
        self._count_lines()
        yield from self._drain()


__all__ = ["CountSettings", "CountWordsFn", "LINES_PER_BATCH", "count_bpe", "count_byte",
           "count_sentencepiece", "count_word", "count_wordpiece", "frequency_rank",
           "read_word_counts", "records_of", "text_lines", "write_word_counts"]
