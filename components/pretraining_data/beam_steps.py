"""The worker side of PretrainingExampleGen's Beam pipeline (``executor.py`` builds the graph).

This module is what a Beam SDK worker unpickles, so it imports only the standard library,
numpy, Beam and protobuf (a worker that imports the executor imports TFX, TensorFlow,
Keras and every architecture, seconds per worker process before its first document). What
the steps need of the vocabulary and the objective is resolved in the launching process and
shipped inside the pickled steps:

* the tokenizer: for the ``wordpiece`` kind a :class:`plain_wordpiece.PlainWordPiece` holding
  the tokens (same ids as the keras-nlp layer, no TensorFlow); other kinds load the
  keras-nlp tokenizer in the worker, as before (``models/tokenizers``);
* the objective's vocabulary state (e.g. ``masking.BertVocabulary``), built once by
  ``executor.describe_vocabulary``, and its ``shard_examples`` function, pickled by
  reference: ``bert_mlm_nsp``'s lives in ``nsp_instances.py`` (numpy only); objectives whose
  module imports TensorFlow import it in the worker as before;
* records are framed as TFRecords (length, masked CRC-32C of the length, data, masked CRC-32C
  of the data: tensorflow/core/lib/io/record_writer.cc) and GZIP-compressed with zlib at
  level 1 here, written through Beam's ``FileSystems`` (local, GCS, ...).

Corpus Examples are parsed with the protobuf class of ``vocabulary/counting.py`` (the wire
schema of ``tf.train.Example``, no TensorFlow), except the EntityLinker's annotated Examples
(``LINKED_SENTENCES`` objectives), which ``linked_documents.py`` reads with TensorFlow.
"""

from __future__ import annotations

import array
import hashlib
import json
import math
import struct
import uuid
import zlib

import apache_beam as beam

# Values of registry.DOCUMENT_FORMATS (registry.py imports lmfactory.models, so not here).
SENTENCES, STREAM, LINKED_SENTENCES = "sentences", "stream", "linked_sentences"
DATA_FILE_PREFIX = "data_tfrecord"

# Why a document or a sentence contributes nothing; each is counted in the split's stats.
DROPPED_EMPTY = "dropped_empty_documents"  # no text but whitespace
DROPPED_NO_TOKENS = "dropped_documents_without_tokens"  # every sentence tokenizes to nothing
DROPPED_SENTENCES = "dropped_sentences_without_tokens"  # within kept documents


# --------------------------------------------------------------------------- documents


def document_key(text: bytes) -> str:
    """Content hash of a document: the shard it goes to and its order inside the shard."""
    return hashlib.sha256(text).hexdigest()


def shard_of(key: str, num_shards: int) -> int:
    """The shard of a document key; a dropped document (key ``""``) is counted in shard 0."""
    return int(key[:16], 16) % num_shards if key else 0


def resolve_num_shards(num_documents: int, config: dict) -> int:
    """``num_shards`` when set, else ``ceil(documents / documents_per_shard)`` (at least 1)."""
    if int(config["num_shards"]) > 0:
        return int(config["num_shards"])
    return max(1, math.ceil(num_documents / int(config["documents_per_shard"])))


def shard_file_name(shard: int, num_shards: int) -> str:
    return f"{DATA_FILE_PREFIX}-{shard:05d}-of-{num_shards:05d}.gz"


def keyed_document(serialized: bytes, linked: bool = False):
    """tf.Example with feature ``text`` -> ``(key, text)``; an empty document keeps its
    place (key ``""``) so that the shard that gets it counts it as dropped. ``linked``
    (``LINKED_SENTENCES`` objectives): ``(key, (text, mentions))`` with the EntityLinker's
    mentions (linked_documents.py)."""
    if linked:
        import tensorflow as tf

        from lmfactory.components.pretraining_data import linked_documents

        example = tf.train.Example.FromString(serialized)
        _check_text(example.features.feature)
        text, mentions = linked_documents.read_linked_document(example)
        yield (document_key(text), (text, mentions)) if text.strip() else ("", (b"", []))
        return
    from lmfactory.components.vocabulary.counting import _example_class

    features = _example_class().FromString(serialized).features.feature
    _check_text(features)
    values = features["text"].bytes_list.value
    text = values[0] if values else b""
    yield (document_key(text), text) if text.strip() else ("", b"")


def _check_text(features) -> None:
    if "text" not in features:
        raise ValueError("PretrainingExampleGen needs corpus Examples with a bytes feature "
                         "'text' (CONTRACTS §1)")


def is_kept(keyed) -> bool:
    """A document that is not empty (its key is not ``""``)."""
    return bool(keyed[0])


def with_shard(keyed, num_shards: int):
    return shard_of(keyed[0], num_shards), keyed


def document_sentences(text: bytes) -> list:
    """A corpus document's sentences: its non-blank lines, stripped (CONTRACTS §1)."""
    lines = text.decode("utf-8").split("\n")
    return [line.strip() for line in lines if line.strip()]


def sum_counts(counts) -> dict:
    total = {}
    for one in counts:
        for name, value in one.items():
            total[name] = total.get(name, 0) + value
    return total


# --------------------------------------------------------------------------- tokenize


class TokenizeDocuments(beam.DoFn):
    """Tokenizes a batch of ``(key, text)`` documents with one tokenizer call.

    In the objective's ``document`` format (``registry.DOCUMENT_FORMATS``): ``SENTENCES``, a
    document becomes a list of sentences (token-id arrays); ``STREAM``, one token-id array of
    the whole text (newlines are part of a byte-level BPE stream). ``plain_tokenizer``: a
    tokenizer that runs without TensorFlow (``plain_wordpiece.for_vocabulary``), or None to
    load the keras-nlp one from ``vocab_dir`` in the worker.
    """

    def __init__(self, vocab_dir: str, document_format: str, plain_tokenizer=None):
        self._vocab_dir = vocab_dir
        self._document_format = document_format
        self._plain = plain_tokenizer

    def setup(self):
        self._documents = {SENTENCES: self._sentence_lists, STREAM: self._streams,
                           LINKED_SENTENCES: self._linked_sentence_lists,
                           }[self._document_format]
        if self._plain is None:
            import tensorflow as tf

            from lmfactory.models.tokenizers import load_tokenizer

            # In a tf.function the keras-nlp tokenizer returns a RaggedTensor (eagerly it
            # would convert to Python lists); one trace serves every batch size.
            self._tokenize = tf.function(load_tokenizer(self._vocab_dir),
                                         input_signature=[tf.TensorSpec([None], tf.string)])

    def _token_arrays(self, texts: list) -> list:
        if not texts:
            return []
        if self._plain is not None:
            texts = [t.decode("utf-8") if isinstance(t, bytes) else t for t in texts]
            return [array.array("i", ids) for ids in self._plain.tokenize(texts)]
        import tensorflow as tf

        ragged = self._tokenize(tf.constant(texts))
        values = ragged.flat_values.numpy().astype("int32")
        splits = ragged.row_splits.numpy()
        return [array.array("i", values[splits[i]:splits[i + 1]].tobytes())
                for i in range(len(texts))]

    def process(self, batch):
        """``(key, (document or None, drop counts))``: None for a dropped document."""
        empty = [item for item in batch if not item[0]]
        for _ in empty:
            yield "", (None, {DROPPED_EMPTY: 1})
        yield from self._documents([item for item in batch if item[0]])

    def _streams(self, batch):
        for (key, _), ids in zip(batch, self._token_arrays([t for _, t in batch])):
            yield key, ((ids, {}) if len(ids) else (None, {DROPPED_NO_TOKENS: 1}))

    def _sentence_lists(self, batch):
        sentences = [document_sentences(text) for _, text in batch]
        flat = self._token_arrays([s for doc in sentences for s in doc])
        start = 0
        for (key, _), doc in zip(batch, sentences):
            segments = [ids for ids in flat[start:start + len(doc)] if len(ids)]
            start += len(doc)
            dropped = {DROPPED_SENTENCES: len(doc) - len(segments)} \
                if len(segments) < len(doc) else {}
            yield key, ((segments, dropped) if segments else
                        (None, {**dropped, DROPPED_NO_TOKENS: 1}))

    def _linked_sentence_lists(self, batch):
        """Sentences of (token ids, entity tags): each sentence cut at its mentions, every
        piece of the batch tokenized in one call (linked_documents.py)."""
        from lmfactory.components.pretraining_data import linked_documents

        split = [linked_documents.sentence_pieces(text, mentions)
                 for _, (text, mentions) in batch]
        pieces = [piece for sentences, _ in split for pieces_, _ in sentences
                  for piece in pieces_]
        flat = self._token_arrays(pieces)
        start = 0
        for (key, _), (sentences, counts) in zip(batch, split):
            size = sum(len(pieces_) for pieces_, _ in sentences)
            segments, more = linked_documents.assemble(sentences, flat[start:start + size])
            start += size
            counts = sum_counts([counts, more])
            if len(segments) < len(sentences):
                counts[DROPPED_SENTENCES] = len(sentences) - len(segments)
            yield key, ((segments, counts) if segments else
                        (None, {**counts, DROPPED_NO_TOKENS: 1}))


# --------------------------------------------------------------------------- shards


class WriteShard(beam.DoFn):
    """Builds one shard's records in canonical order, writes its file and its counts
    (``stats_dir/shard-<shard>.json``, summed by the launching process), emits the counts.

    ``shard_examples`` and ``vocabulary_state`` are the objective's (``registry.Objective``;
    the state built in the launching process)."""

    def __init__(self, shard_examples, vocabulary_state, config: dict, split: str,
                 output_dir: str, stats_dir: str):
        self._shard_examples = shard_examples
        self._vocabulary_state = vocabulary_state
        self._config = config
        self._split = split
        self._output_dir = output_dir
        self._stats_dir = stats_dir

    def process(self, shard_and_documents, num_shards):
        shard, keyed_documents = shard_and_documents
        ordered = sorted(keyed_documents, key=lambda kv: kv[0])
        documents = [doc for _, (doc, _) in ordered if doc is not None]
        dropped = sum_counts(counts for _, (_, counts) in ordered)
        seed_scope = (self._config["random_seed"], self._split, shard)
        records, stats = self._shard_examples(
            documents, self._vocabulary_state, self._config, seed_scope) if documents \
            else ([], {})
        stats.update(dropped, documents=len(documents), shards=int(bool(documents)))
        if records:
            write_records(join(self._output_dir, shard_file_name(shard, num_shards)), records)
        _write_bytes(join(self._stats_dir, f"shard-{shard:05d}.json"),
                     json.dumps(stats, sort_keys=True).encode("utf-8"))
        yield stats


def join(folder: str, name: str) -> str:
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.join(folder, name)


# --------------------------------------------------------------------------- TFRecords

_MASK_DELTA = 0xA282EAD8
# GZIP at zlib's fastest level: compressing at the default level 6 took about as long as
# building the records; level 1 makes files about 10% larger. Readers only need "GZIP".
# wbits 31: a gzip wrapper; memLevel 9 as TensorFlow's ZlibCompressionOptions.
_GZIP_LEVEL, _GZIP_WBITS, _GZIP_MEM_LEVEL = 1, 31, 9


def _crc32c_function():
    try:
        import google_crc32c

        return google_crc32c.value
    except ImportError:  # Beam's own choice (crcmod, or python-snappy's)
        from apache_beam.io.tfrecordio import _default_crc32c_fn

        return _default_crc32c_fn


def masked_crc32c(data: bytes, crc32c=None) -> int:
    """TFRecord's checksum: CRC-32C rotated right by 15 bits plus a constant."""
    crc = (crc32c or _crc32c_function())(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame_records(records) -> bytes:
    """The records in TFRecord framing, end to end (uncompressed)."""
    crc32c = _crc32c_function()
    parts = []
    for record in records:
        length = struct.pack("<Q", len(record))
        parts += [length, struct.pack("<I", masked_crc32c(length, crc32c)), record,
                  struct.pack("<I", masked_crc32c(record, crc32c))]
    return b"".join(parts)


def write_records(path: str, records: list) -> None:
    """GZIP TFRecord file of ``records``, written under a temporary name and then renamed
    (a retried bundle rewrites the same file)."""
    compressor = zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, _GZIP_WBITS, _GZIP_MEM_LEVEL)
    _write_bytes(path, compressor.compress(frame_records(records)) + compressor.flush())


def _write_bytes(path: str, data: bytes) -> None:
    """``data`` to ``path``, through a temporary name (readers never see a partial file)."""
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    temporary = f"{path}.tmp-{uuid.uuid4().hex}"
    with FileSystems.create(temporary, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        f.write(data)
    if FileSystems.exists(path):
        FileSystems.delete([path])
    FileSystems.rename([temporary], [path])
