"""Beam pipeline and TFX executor of PretrainingExampleGen (raw corpus -> CONTRACTS §3 records).

Per split::

    GZIP TFRecords of tf.Example(text)            (CONTRACTS §1, one document each)
      -> document key = SHA-256 of the text      (stable, content-based)
      -> tokenize batches of documents           (beam.BatchElements + the tokenizer, §2)
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

The steps' functions live in ``beam_steps.py``, which imports no TensorFlow, TFX or Keras:
this module resolves the objective, builds its vocabulary state and (``wordpiece`` kind) the
plain-Python tokenizer once, and ships them inside the pickled steps, so a worker that
tokenizes WordPiece and builds ``bert_mlm_nsp`` shards starts without TensorFlow.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Callable

import apache_beam as beam
import tensorflow as tf
from apache_beam.options.pipeline_options import PipelineOptions
from tfx.dsl.components.base import base_beam_executor
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils
from tfx.components.util import examples_utils

from lmfactory.components import beam_options
from lmfactory.components.pretraining_data import beam_steps, objectives, plain_wordpiece
from lmfactory.components.pretraining_data.features import (
    BOOL_KEYS, CONFIG_FILE, DEFAULT_CONFIG, VOCABULARY_DIR, resolve_config)
from lmfactory.models.tokenizers import load_tokenizer, read_tokenizer_config
from lmfactory.models.tokenizers.config import read_lines, vocabulary_path

EXAMPLES_KEY = "examples"
VOCABULARY_KEY = "vocabulary"
PRETRAINING_EXAMPLES_KEY = "pretraining_examples"
_STATS_DIR = "_pretraining_stats_tmp"


# The worker-side steps (no TensorFlow, TFX or Keras there: beam_steps.py); re-exported.
from lmfactory.components.pretraining_data.beam_steps import (  # noqa: E402,F401
    DATA_FILE_PREFIX, DROPPED_EMPTY, DROPPED_NO_TOKENS, DROPPED_SENTENCES, document_key,
    document_sentences, resolve_num_shards, shard_file_name, shard_of)


# --------------------------------------------------------------------------- pipeline


def _add_split(pipeline, split: str, input_dir: str, output_dir: str, vocab_dir: str,
               config: dict, stats_dir: str, vocabulary_state, plain_tokenizer) -> None:
    """Adds the transforms of one split to ``pipeline`` (see the module docstring); every
    step's function is beam_steps.py's, or Beam's own."""
    objective = objectives.get(config["objective"])
    documents = (
        pipeline
        | f"Read[{split}]" >> beam.io.ReadFromTFRecord(
            os.path.join(input_dir, "*.gz"), coder=beam.coders.BytesCoder(),
            compression_type=beam.io.filesystem.CompressionTypes.GZIP)
        | f"KeyDocuments[{split}]" >> beam.FlatMap(functools.partial(
            beam_steps.keyed_document,
            linked=objective.document == objectives.LINKED_SENTENCES)))
    num_shards = (
        documents
        | f"NonEmpty[{split}]" >> beam.Filter(beam_steps.is_kept)
        | f"CountDocuments[{split}]" >> beam.combiners.Count.Globally()
        | f"NumShards[{split}]" >> beam.Map(beam_steps.resolve_num_shards, config))
    (documents
     | f"BatchDocuments[{split}]" >> beam.BatchElements(
         min_batch_size=1, max_batch_size=int(config["tokenize_batch_size"]))
     | f"Tokenize[{split}]" >> beam.ParDo(beam_steps.TokenizeDocuments(
         vocab_dir, objective.document, plain_tokenizer))
     | f"AssignShard[{split}]" >> beam.Map(beam_steps.with_shard,
                                           beam.pvalue.AsSingleton(num_shards))
     | f"GroupShards[{split}]" >> beam.GroupByKey()
     | f"WriteShards[{split}]" >> beam.ParDo(
         beam_steps.WriteShard(objective.shard_examples, vocabulary_state, config, split,
                               output_dir, stats_dir), beam.pvalue.AsSingleton(num_shards)))


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
    vocabulary, state = describe_vocabulary(vocab_dir, config["objective"], with_state=True)
    plain_tokenizer = _plain_tokenizer(vocab_dir)
    make_pipeline = make_pipeline or _default_pipeline_factory(beam_options.resolve_args(
        beam_pipeline_args, beam_options.input_size(input_uri_by_split.values()),
        "PretrainingExampleGen"))
    stats_dir = os.path.join(output_uri, _STATS_DIR)
    with make_pipeline() as pipeline:
        for split, input_dir in sorted(input_uri_by_split.items()):
            output_dir = os.path.join(output_uri, f"Split-{split}")
            tf.io.gfile.makedirs(output_dir)
            tf.io.gfile.makedirs(os.path.join(stats_dir, split))
            _add_split(pipeline, split, input_dir, output_dir, vocab_dir, config,
                       os.path.join(stats_dir, split), state, plain_tokenizer)
    counts = {split: _read_counts(os.path.join(stats_dir, split))
              for split in sorted(input_uri_by_split)}
    tf.io.gfile.rmtree(stats_dir)
    copy_vocabulary(vocab_dir, os.path.join(output_uri, VOCABULARY_DIR))
    _write_json(os.path.join(output_uri, CONFIG_FILE),
                dict(config, **vocabulary, splits=sorted(input_uri_by_split), counts=counts))
    return counts


def _plain_tokenizer(vocab_dir: str):
    """The workers' tokenizer without TensorFlow (``wordpiece`` kind), or None."""
    config = read_tokenizer_config(vocab_dir)
    if config.get("kind") != "wordpiece":
        return None
    tokens = read_lines(vocabulary_path(vocab_dir, config, "vocabulary_file", "vocab.txt"))
    return plain_wordpiece.for_vocabulary(config, tokens)


def describe_vocabulary(vocab_dir: str, objective: str, with_state: bool = False):
    """Tokenizer facts the trainer needs (ids for dynamic masking, sizes), plus what the
    objective records (``Objective.vocabulary_record``); raises ``ValueError`` when the
    vocabulary lacks a token the objective needs. ``with_state``: ``(facts, the objective's
    vocabulary state)``, the state that the Beam workers get with the shard step."""
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
    return (described, state) if with_state else described


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


def _read_counts(folder: str) -> dict:
    """The sum of the per-shard counts ``beam_steps.WriteShard`` wrote under ``folder``
    (one JSON file per shard that got any document; summed here rather than by Beam steps,
    which cost a combine and a text sink per split)."""
    counts = []
    for path in sorted(tf.io.gfile.glob(os.path.join(folder, "*.json"))):
        with tf.io.gfile.GFile(path, "r") as f:
            counts.append(json.load(f))
    return beam_steps.sum_counts(counts)


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
