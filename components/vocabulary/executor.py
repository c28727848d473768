"""Beam executor of VocabularyGen: Examples -> word counts -> WordPiece, byte-level BPE or
SentencePiece files (or, for the ``byte`` kind, byte counts -> a fixed byte vocabulary).

The scalable part runs in Beam: read the GZIP TFRecords of the chosen splits, spread them
over the workers (batches of records through one shuffle: a GZIP file cannot be split, so a
single-file split would otherwise be counted by one worker), pull the text features,
pre-tokenize lines into words (in batches, with the tokenizer's own splitting rules) and
sum them per bundle (``counting.CountWordsFn``, on workers that import no TensorFlow unless
the kind's splitting needs it), count words with a combiner (``CombinePerKey(sum)``, lifted
before the shuffle on Dataflow / Flink / Spark), keep the ``max_unique_words`` most frequent
and write that (word, count) list to one file. The learner then runs once, in the process
that ran the pipeline (it has TensorFlow imported already; a worker would import it, and
Keras, for this one step: seconds), and writes the vocabulary folder (CONTRACTS
§2).
Each kind's counting, learner and checks are its record in the learner registry
(``learners.py``).

:func:`add_vocabulary_pipeline` adds these steps to any pipeline and :func:`learn_vocabulary`
runs them on the runner the Beam args name; the TFX :class:`Executor` only unpacks artifacts.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Iterator, Mapping, Sequence

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from tfx.dsl.components.base import base_beam_executor
from tfx.types import artifact_utils

from lmfactory.components import beam_options
from lmfactory.components.vocabulary.counting import (CountSettings, CountWordsFn,
                                                      frequency_rank, read_word_counts,
                                                      records_of, write_word_counts)
from lmfactory.components.vocabulary.learners import LEARNERS
from lmfactory.models import tokenizers
from lmfactory.models.tokenizers.config import is_special_role

EXAMPLES_KEY = "examples"
EXTRA_EXAMPLES_KEY = "extra_examples"  # optional: a second corpus counted with the first
VOCABULARY_KEY = "vocabulary"
RECORDS_PER_SHUFFLE_BATCH = 256  # records per element of the spreading shuffle
WORD_COUNTS_FILE = ".word_counts.json"  # in the output folder while the learner runs


@dataclasses.dataclass(frozen=True)
class VocabularyConfig:
    """What to learn and from which features; mirrors the component's exec properties."""

    kind: str
    vocab_size: int
    text_features: tuple[str, ...] = ("text",)
    splits: tuple[str, ...] = ("train",)
    lowercase: bool = True
    strip_accents: bool = True
    min_frequency: int = 2
    max_unique_words: int = 1_000_000
    special_tokens: Mapping[str, str] | None = None

    def __post_init__(self):
        if self.kind not in LEARNERS:
            raise ValueError(f"kind must be one of {tuple(LEARNERS)}, got {self.kind!r}")
        learner = LEARNERS[self.kind]
        if self.min_frequency < 1 or self.max_unique_words < 1:
            raise ValueError("min_frequency and max_unique_words must be positive, got "
                             f"{self.min_frequency} and {self.max_unique_words}")
        if self.special_tokens is not None:
            object.__setattr__(self, "special_tokens",
                               _check_special_tokens(self.kind, self.special_tokens))
        if learner.check_vocab_size is not None:
            learner.check_vocab_size(self.vocab_size, self.resolved_special_tokens)
        distinct = len(tokenizers.unique_special_tokens(self.resolved_special_tokens))
        smallest = distinct + learner.min_symbols
        if self.vocab_size < smallest:
            raise ValueError(f"vocab_size for {self.kind} must be at least {smallest}, "
                             f"got {self.vocab_size}")
        if not self.text_features or not self.splits:
            raise ValueError("text_features and splits must each name at least one entry")

    @property
    def count_settings(self) -> CountSettings:
        """What the Beam workers' counting reads (a light, TensorFlow-free copy)."""
        return CountSettings(self.kind, self.lowercase, self.strip_accents,
                             self.resolved_special_tokens)

    @property
    def resolved_special_tokens(self) -> dict:
        """Role -> token: the given set, or the kind's default (BERT's, GPT-2's, ALBERT's)."""
        return dict(LEARNERS[self.kind].special_tokens if self.special_tokens is None
                    else self.special_tokens)

    @classmethod
    def from_exec_properties(cls, properties: Mapping[str, Any]) -> "VocabularyConfig":
        """Reads TFX exec properties (lists as JSON strings, booleans as ints)."""
        def json_list(name, default):
            value = properties.get(name)
            if value is None or value == "":
                return default
            parsed = json.loads(value) if isinstance(value, str) else value
            return (parsed,) if isinstance(parsed, str) else tuple(parsed)

        def value_or(name, default):
            value = properties.get(name)
            return default if value is None else value

        special_tokens = properties.get("special_tokens")
        if isinstance(special_tokens, str):
            special_tokens = json.loads(special_tokens) if special_tokens else None
        return cls(kind=properties["kind"], vocab_size=int(properties["vocab_size"]),
                   text_features=json_list("text_features", ("text",)),
                   splits=json_list("splits", ("train",)),
                   lowercase=bool(value_or("lowercase", True)),
                   strip_accents=bool(value_or("strip_accents", True)),
                   min_frequency=int(value_or("min_frequency", 2)),
                   max_unique_words=int(value_or("max_unique_words", 1_000_000)),
                   special_tokens=special_tokens)


def _check_special_tokens(kind: str, special_tokens) -> dict:
    """A clean copy of a role -> token map, or a ValueError naming what is wrong."""
    if not isinstance(special_tokens, Mapping) or not special_tokens:
        raise ValueError(f"special_tokens must be a non-empty mapping of role -> token, got "
                         f"{special_tokens!r}")
    unknown = sorted(role for role in special_tokens
                     if not is_special_role(role))
    if unknown:
        raise ValueError(f"special_tokens: unknown role(s) {unknown}; roles: "
                         f"{list(tokenizers.SPECIAL_ROLES)} and sentinel_<n>")
    for role, token in special_tokens.items():
        if not isinstance(token, str) or not token or token != token.strip():
            raise ValueError(f"special_tokens[{role!r}] must be a non-empty string without "
                             f"surrounding spaces, got {token!r}")
    learner = LEARNERS[kind]
    if learner.needs_unk and "unk" not in special_tokens:
        raise ValueError(f"special_tokens for {kind} need an 'unk' role (the token for "
                         f"out-of-vocabulary text), got roles {sorted(special_tokens)}")
    if learner.check_special_tokens is not None:
        learner.check_special_tokens(special_tokens)
    return dict(special_tokens)


# --- Pure steps (run on Beam workers) ----------------------------------------------------
def count_words(lines: Sequence[str], config: VocabularyConfig) -> list[tuple[str, int]]:
    """Pre-tokenizes a batch of lines the way the tokenizer of ``config.kind`` will, and
    counts the words within the batch (less data to shuffle than one record per word)."""
    return LEARNERS[config.kind].count(lines, config)


def learn_and_write(word_counts: list[tuple[str, int]], output_dir: str,
                    config: VocabularyConfig, source: str) -> str:
    """Runs the learner once on the counted words and writes the vocabulary folder."""
    if not word_counts:
        raise ValueError(f"No text to learn a vocabulary from: the text features "
                         f"{list(config.text_features)} of {source} hold no words")
    settings = LEARNERS[config.kind].learn_and_write(word_counts, output_dir, config,
                                                        source)
    tokenizers.write_tokenizer_config(output_dir, settings)
    return output_dir


# --- Pipeline ----------------------------------------------------------------------------
def _describe(file_patterns: Mapping[str, str]) -> str:
    return ", ".join(f"split {split!r} ({pattern})" for split, pattern in file_patterns.items())


def check_files_exist(file_patterns: Mapping[str, str]) -> None:
    """Raises a ValueError naming the split whose file pattern matches no file."""
    import tensorflow as tf

    for split, pattern in file_patterns.items():
        if not tf.io.gfile.glob(pattern):
            raise ValueError(f"Split {split!r} has no records: no file matches {pattern}")


def add_vocabulary_pipeline(pipeline: beam.Pipeline, file_patterns: Mapping[str, str],
                            output_dir: str, config: VocabularyConfig) -> beam.PCollection:
    """Adds read -> spread -> pre-tokenize -> count -> top-k -> write the counts to
    ``pipeline``; once it has run, :func:`finish_vocabulary` learns and writes the folder.

    Args:
      pipeline: the Beam pipeline (any runner).
      file_patterns: split name -> glob of its GZIP TFRecord files of ``tf.train.Example``.
      output_dir: the vocabulary folder to write (the counts file goes there first).
      config: what to learn.

    Returns:
      A PCollection holding the counts file's path once it is written.
    """
    check_files_exist(file_patterns)
    records = [pipeline | f"Read[{split}]" >> beam.io.ReadFromTFRecord(
                   pattern, compression_type=CompressionTypes.GZIP)
               for split, pattern in file_patterns.items()]
    word_counts = (
        records | "Flatten" >> beam.Flatten()
        | "Batch" >> beam.BatchElements(min_batch_size=RECORDS_PER_SHUFFLE_BATCH,
                                        max_batch_size=RECORDS_PER_SHUFFLE_BATCH)
        | "Spread" >> beam.Reshuffle()
        | "Unbatch" >> beam.FlatMap(records_of)
        | "CountInBundle" >> beam.ParDo(CountWordsFn(LEARNERS[config.kind].count,
                                                     config.count_settings,
                                                     config.text_features))
        | "CountWords" >> beam.CombinePerKey(sum))
    return (word_counts
            | "MostFrequent" >> beam.combiners.Top.Of(config.max_unique_words,
                                                      key=frequency_rank)
            | "WriteCounts" >> beam.Map(write_word_counts,
                                        os.path.join(output_dir, WORD_COUNTS_FILE)))


def finish_vocabulary(output_dir: str, config: VocabularyConfig, source: str) -> None:
    """Learns from the counts file the pipeline wrote in ``output_dir`` and writes the
    vocabulary folder there (the counts file is removed)."""
    import tensorflow as tf

    path = os.path.join(output_dir, WORD_COUNTS_FILE)
    if not tf.io.gfile.exists(path):
        raise ValueError(f"No word counts at {path}: the vocabulary pipeline of {source} "
                         "did not run to its end")
    try:
        learn_and_write(read_word_counts(path), output_dir, config, source)
    finally:
        tf.io.gfile.remove(path)


def learn_vocabulary(file_patterns: Mapping[str, str], output_dir: str,
                     config: VocabularyConfig,
                     beam_pipeline_args: Sequence[str] | None = None) -> dict:
    """Runs the vocabulary pipeline (DirectRunner unless ``beam_pipeline_args`` say otherwise)
    and the learner, and returns the written ``tokenizer.json`` content."""
    args = beam_options.resolve_args(beam_pipeline_args,
                                     beam_options.input_size(file_patterns.values()),
                                     "VocabularyGen")
    with beam.Pipeline(argv=args) as pipeline:
        add_vocabulary_pipeline(pipeline, file_patterns, output_dir, config)
    finish_vocabulary(output_dir, config, _describe(file_patterns))
    return tokenizers.read_tokenizer_config(output_dir)


def split_file_patterns(examples, splits: Sequence[str]) -> dict[str, str]:
    """Split name -> ``<uri>/Split-<name>/*.gz`` for a standard TFX Examples artifact."""
    available = artifact_utils.decode_split_names(examples.split_names)
    missing = [split for split in splits if split not in available]
    if missing:
        raise ValueError(f"Split(s) {missing} not in Examples artifact {examples.uri} "
                         f"(it has {available})")
    return {split: os.path.join(artifact_utils.get_split_uri([examples], split), "*.gz")
            for split in splits}


def vocabulary_size(output_dir: str) -> int:
    """Number of tokens in a written vocabulary folder."""
    settings = tokenizers.read_tokenizer_config(output_dir)
    return LEARNERS[settings["kind"]].vocabulary_size(output_dir, settings)


# --- TFX executor ------------------------------------------------------------------------
class Executor(base_beam_executor.BaseBeamExecutor):
    """TFX executor: ``examples`` (Examples) -> ``vocabulary`` (lmfactory.Vocabulary)."""

    def Do(self, input_dict: dict[str, list], output_dict: dict[str, list],
           exec_properties: dict[str, Any]) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        examples = artifact_utils.get_single_instance(input_dict[EXAMPLES_KEY])
        vocabulary = artifact_utils.get_single_instance(output_dict[VOCABULARY_KEY])
        config = VocabularyConfig.from_exec_properties(exec_properties)
        file_patterns = split_file_patterns(examples, config.splits)
        for extra in input_dict.get(EXTRA_EXAMPLES_KEY) or []:
            file_patterns.update({f"extra {split}": pattern for split, pattern in
                                  split_file_patterns(extra, config.splits).items()})
        make_pipeline = beam_options.executor_pipeline(
            self, beam_options.input_size(file_patterns.values()))
        with make_pipeline() as pipeline:
            add_vocabulary_pipeline(pipeline, file_patterns, vocabulary.uri, config)
        finish_vocabulary(vocabulary.uri, config, _describe(file_patterns))
        vocabulary.set_string_custom_property("kind", config.kind)
        vocabulary.set_int_custom_property("vocabulary_size", vocabulary_size(vocabulary.uri))
