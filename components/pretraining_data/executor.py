"""Beam pipeline and TFX executor of PretrainingExampleGen (raw corpus -> CONTRACTS §3 records).

Per split::

    GZIP TFRecords of tf.Example(text)            (CONTRACTS §1, one document each)
      -> document key = SHA-256 of the text      (stable, content-based)
      -> tokenize batches of documents           (beam.BatchElements + load_tokenizer, §2)
      -> shard = key mod num_shards; GroupByKey  (num_shards: fixed or ceil(docs / per_shard))
      -> per shard: sort documents by key, build the objective's records
         (``objectives.get(objective).shard_examples``: bert_mlm_nsp.py,
         albert_mlm_sop.py, full_sentences.py for ``mlm``, causal_lm.py)
         and write Split-<name>/data_tfrecord-<shard>-of-<num_shards>.gz

The objective's registry record (``registry.Objective``) decides how documents are tokenized
(a list of sentences or one token stream), the vocabulary state its builder needs and what
``pretraining_config.json`` records about the vocabulary; nothing here names an objective.

Each shard's file is a pure function of (documents in the shard, config, seed), so a re-run
with the same seed gives byte-identical files whatever the runner's element order, and a
retried bundle rewrites the same file (written to a temporary name, then renamed).
"""

from __future__ import annotations

import array
import functools
import hashlib
import json
import math
import os
import uuid
from typing import Callable

import apache_beam as beam
import tensorflow as tf
from apache_beam.options.pipeline_options import PipelineOptions
from tfx.dsl.components.base import base_beam_executor
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils
from tfx.components.util import examples_utils

from lmfactory.components import beam_options
from lmfactory.components.pretraining_data import linked_documents, objectives
from lmfactory.components.pretraining_data.features import (
    BOOL_KEYS, CONFIG_FILE, DEFAULT_CONFIG, VOCABULARY_DIR, resolve_config)
from lmfactory.models.tokenizers import load_tokenizer, read_tokenizer_config

EXAMPLES_KEY = "examples"
VOCABULARY_KEY = "vocabulary"
PRETRAINING_EXAMPLES_KEY = "pretraining_examples"
DATA_FILE_PREFIX = "data_tfrecord"
_STATS_DIR = "_pretraining_stats_tmp"


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


# Why a document or a sentence contributes nothing; each is counted in the split's stats.
DROPPED_EMPTY = "dropped_empty_documents"  # no text but whitespace
DROPPED_NO_TOKENS = "dropped_documents_without_tokens"  # every sentence tokenizes to nothing
DROPPED_SENTENCES = "dropped_sentences_without_tokens"  # within kept documents


def _keyed_document(serialized: bytes, linked: bool = False):
    """tf.Example with feature ``text`` -> ``(key, text)``; an empty document keeps its
    place (key ``""``) so that the shard that gets it counts it as dropped. ``linked``
    (``LINKED_SENTENCES`` objectives): ``(key, (text, mentions))`` with the EntityLinker's
    mentions (linked_documents.py)."""
    example = tf.train.Example.FromString(serialized)
    if "text" not in example.features.feature:
        raise ValueError("PretrainingExampleGen needs corpus Examples with a bytes feature "
                         "'text' (CONTRACTS §1)")
    if linked:
        text, mentions = linked_documents.read_linked_document(example)
        yield (document_key(text), (text, mentions)) if text.strip() else ("", (b"", []))
        return
    values = example.features.feature["text"].bytes_list.value
    text = values[0] if values else b""
    yield (document_key(text), text) if text.strip() else ("", b"")


def document_sentences(text: bytes) -> list:
    """A corpus document's sentences: its non-blank lines, stripped (CONTRACTS §1)."""
    lines = text.decode("utf-8").split("\n")
    return [line.strip() for line in lines if line.strip()]


class _TokenizeDocuments(beam.DoFn):
    """Tokenizes a batch of ``(key, text)`` documents with one tokenizer call.

    In the objective's ``document`` format (``registry.DOCUMENT_FORMATS``): ``SENTENCES``, a
    document becomes a list of sentences (token-id arrays); ``STREAM``, one token-id array of
    the whole text (newlines are part of a byte-level BPE stream).
    """

    def __init__(self, vocab_dir: str, objective: str):
        self._vocab_dir = vocab_dir
        self._objective_name = objective

    def setup(self):
        document_format = objectives.get(self._objective_name).document
        self._documents = {objectives.SENTENCES: self._sentence_lists,
                           objectives.STREAM: self._streams,
                           objectives.LINKED_SENTENCES: self._linked_sentence_lists,
                           }[document_format]
        tokenizer = load_tokenizer(self._vocab_dir)
        # In a tf.function the keras-nlp tokenizer returns a RaggedTensor (eagerly it would
        # convert to Python lists); one trace serves every batch size.
        self._tokenize = tf.function(tokenizer, input_signature=[tf.TensorSpec([None], tf.string)])

    def _token_arrays(self, texts: list) -> list:
        if not texts:
            return []
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
            counts = _sum_counts([counts, more])
            if len(segments) < len(sentences):
                counts[DROPPED_SENTENCES] = len(sentences) - len(segments)
            yield key, ((segments, counts) if segments else
                        (None, {**counts, DROPPED_NO_TOKENS: 1}))


# --------------------------------------------------------------------------- shards


class _WriteShard(beam.DoFn):
    """Builds one shard's records in canonical order, writes its file, emits its counts."""

    def __init__(self, vocab_dir: str, config: dict, split: str, output_dir: str):
        self._vocab_dir = vocab_dir
        self._config = config
        self._split = split
        self._output_dir = output_dir

    def setup(self):
        self._objective = objectives.get(self._config["objective"])
        self._vocabulary_state = self._objective.vocabulary_state(
            load_tokenizer(self._vocab_dir), _state_config(self._vocab_dir))

    def process(self, shard_and_documents, num_shards):
        shard, keyed_documents = shard_and_documents
        ordered = sorted(keyed_documents, key=lambda kv: kv[0])
        documents = [doc for _, (doc, _) in ordered if doc is not None]
        dropped = _sum_counts(counts for _, (_, counts) in ordered)
        seed_scope = (self._config["random_seed"], self._split, shard)
        records, stats = self._objective.shard_examples(
            documents, self._vocabulary_state, self._config, seed_scope) if documents \
            else ([], {})
        stats.update(dropped, documents=len(documents), shards=int(bool(documents)))
        if records:
            _write_records(os.path.join(self._output_dir, shard_file_name(shard, num_shards)),
                           records)
        yield stats


# GZIP at zlib's fastest level: compressing at the default level 6 took about as long as
# building the records; level 1 makes files about 10% larger. Readers only need "GZIP".
_RECORD_OPTIONS = tf.io.TFRecordOptions(compression_type="GZIP", compression_level=1)


def _write_records(path: str, records: list) -> None:
    temporary = f"{path}.tmp-{uuid.uuid4().hex}"
    with tf.io.TFRecordWriter(temporary, options=_RECORD_OPTIONS) as writer:
        for record in records:
            writer.write(record)
    tf.io.gfile.rename(temporary, path, overwrite=True)


def _sum_counts(counts) -> dict:
    total = {}
    for one in counts:
        for name, value in one.items():
            total[name] = total.get(name, 0) + value
    return total


# --------------------------------------------------------------------------- pipeline


def _add_split(pipeline, split: str, input_dir: str, output_dir: str, vocab_dir: str,
               config: dict, stats_path: str) -> None:
    """Adds the transforms of one split to ``pipeline`` (see the module docstring)."""
    documents = (
        pipeline
        | f"Read[{split}]" >> beam.io.ReadFromTFRecord(
            os.path.join(input_dir, "*.gz"), coder=beam.coders.BytesCoder(),
            compression_type=beam.io.filesystem.CompressionTypes.GZIP)
        | f"KeyDocuments[{split}]" >> beam.FlatMap(functools.partial(
            _keyed_document, linked=objectives.get(config["objective"]).document
            == objectives.LINKED_SENTENCES)))
    num_shards = (
        documents
        | f"NonEmpty[{split}]" >> beam.Filter(lambda keyed: bool(keyed[0]))
        | f"CountDocuments[{split}]" >> beam.combiners.Count.Globally()
        | f"NumShards[{split}]" >> beam.Map(resolve_num_shards, config))
    (documents
     | f"BatchDocuments[{split}]" >> beam.BatchElements(
         min_batch_size=1, max_batch_size=int(config["tokenize_batch_size"]))
     | f"Tokenize[{split}]" >> beam.ParDo(_TokenizeDocuments(vocab_dir, config["objective"]))
     | f"AssignShard[{split}]" >> beam.Map(
         lambda keyed, n: (shard_of(keyed[0], n), keyed), beam.pvalue.AsSingleton(num_shards))
     | f"GroupShards[{split}]" >> beam.GroupByKey()
     | f"WriteShards[{split}]" >> beam.ParDo(
         _WriteShard(vocab_dir, config, split, output_dir), beam.pvalue.AsSingleton(num_shards))
     | f"SumCounts[{split}]" >> beam.CombineGlobally(_sum_counts)
     | f"CountsToJson[{split}]" >> beam.Map(json.dumps, sort_keys=True)
     | f"WriteCounts[{split}]" >> beam.io.WriteToText(stats_path, shard_name_template=""))


def _default_pipeline_factory(beam_pipeline_args) -> Callable:
    return lambda: beam.Pipeline(options=PipelineOptions(list(beam_pipeline_args or [])))


def generate_pretraining_examples(input_uri_by_split: dict, vocab_dir: str, output_uri: str,
                                  config: dict | None = None, beam_pipeline_args=None,
                                  make_pipeline: Callable | None = None) -> dict:
    """Writes the pretraining Examples artifact content under ``output_uri`` (CONTRACTS §3).

    ``input_uri_by_split`` maps split name -> folder of GZIP TFRecords of corpus Examples.
    Writes ``<output_uri>/Split-<name>/data_tfrecord-*.gz``, ``pretraining_config.json`` and a
    copy of the vocabulary folder under ``<output_uri>/vocabulary/``. ``make_pipeline`` (e.g. a
    TFX executor's ``_make_beam_pipeline``) wins over ``beam_pipeline_args``. Returns the
    counts per split.
    """
    config = resolve_config(config)
    vocabulary = describe_vocabulary(vocab_dir, config["objective"])
    make_pipeline = make_pipeline or _default_pipeline_factory(beam_options.resolve_args(
        beam_pipeline_args, beam_options.input_size(input_uri_by_split.values()),
        "PretrainingExampleGen"))
    stats_dir = os.path.join(output_uri, _STATS_DIR)
    with make_pipeline() as pipeline:
        for split, input_dir in sorted(input_uri_by_split.items()):
            output_dir = os.path.join(output_uri, f"Split-{split}")
            tf.io.gfile.makedirs(output_dir)
            _add_split(pipeline, split, input_dir, output_dir, vocab_dir, config,
                       os.path.join(stats_dir, f"{split}.json"))
    counts = {split: _read_counts(os.path.join(stats_dir, f"{split}.json"))
              for split in sorted(input_uri_by_split)}
    tf.io.gfile.rmtree(stats_dir)
    copy_vocabulary(vocab_dir, os.path.join(output_uri, VOCABULARY_DIR))
    _write_json(os.path.join(output_uri, CONFIG_FILE),
                dict(config, **vocabulary, splits=sorted(input_uri_by_split), counts=counts))
    return counts


def describe_vocabulary(vocab_dir: str, objective: str) -> dict:
    """Tokenizer facts the trainer needs (ids for dynamic masking, sizes), plus what the
    objective records (``Objective.vocabulary_record``); raises ``ValueError`` when the
    vocabulary lacks a token the objective needs."""
    tokenizer = load_tokenizer(vocab_dir)
    tokenizer_config = read_tokenizer_config(vocab_dir)
    specials = tokenizer_config.get("special_tokens", {})
    special_ids = {role: int(tokenizer.token_to_id(token)) for role, token in specials.items()}
    described = {"tokenizer_kind": tokenizer_config["kind"],
                 "vocabulary_size": int(tokenizer.vocabulary_size()),
                 "special_token_ids": special_ids, "vocabulary_dir": VOCABULARY_DIR}
    record = objectives.get(objective)
    state = record.vocabulary_state(tokenizer, _state_config(vocab_dir))
    described.update(record.vocabulary_record(state))
    return described


def _state_config(vocab_dir: str) -> dict:
    """The tokenizer config an objective's ``vocabulary_state`` gets: ``tokenizer.json``
    plus the folder itself (``registry.VOCABULARY_FOLDER``, e.g. for the word kind's counts)."""
    return dict(read_tokenizer_config(vocab_dir), **{objectives.VOCABULARY_FOLDER: vocab_dir})


def copy_vocabulary(vocab_dir: str, destination: str) -> None:
    tf.io.gfile.makedirs(destination)
    for name in tf.io.gfile.listdir(vocab_dir):
        source = os.path.join(vocab_dir, name)
        if not tf.io.gfile.isdir(source):
            tf.io.gfile.copy(source, os.path.join(destination, name), overwrite=True)


def _read_counts(path: str) -> dict:
    if not tf.io.gfile.exists(path):
        return {}
    with tf.io.gfile.GFile(path, "r") as f:
        text = f.read().strip()
    return json.loads(text) if text else {}


def _write_json(path: str, value: dict) -> None:
    with tf.io.gfile.GFile(path, "w") as f:
        json.dump(value, f, indent=2, sort_keys=True)


# --------------------------------------------------------------------------- TFX


def config_from_exec_properties(exec_properties: dict) -> dict:
    """Execution properties -> generation config (0/1 ints become bools; unset -> default)."""
    config = {key: exec_properties[key] for key in DEFAULT_CONFIG
              if exec_properties.get(key) is not None}
    for key in BOOL_KEYS:
        if key in config:
            config[key] = bool(config[key])
    return resolve_config(config)


class Executor(base_beam_executor.BaseBeamExecutor):
    """Runs :func:`generate_pretraining_examples` with the component's Beam pipeline args."""

    def Do(self, input_dict, output_dict, exec_properties):
        self._log_startup(input_dict, output_dict, exec_properties)
        examples = artifact_utils.get_single_instance(input_dict[EXAMPLES_KEY])
        vocabulary = artifact_utils.get_single_instance(input_dict[VOCABULARY_KEY])
        output = artifact_utils.get_single_instance(output_dict[PRETRAINING_EXAMPLES_KEY])
        splits = artifact_utils.decode_split_names(examples.split_names)
        input_uris = {split: artifact_utils.get_split_uri([examples], split) for split in splits}
        config = config_from_exec_properties(exec_properties)
        make_pipeline = beam_options.executor_pipeline(
            self, beam_options.input_size(input_uris.values()))
        generate_pretraining_examples(input_uris, vocabulary.uri, output.uri, config,
                                      make_pipeline=make_pipeline)
        output.split_names = artifact_utils.encode_split_names(splits)
        examples_utils.set_payload_format(output, example_gen_pb2.PayloadFormat.FORMAT_TF_EXAMPLE)
        output.set_string_custom_property("objective", config["objective"])
