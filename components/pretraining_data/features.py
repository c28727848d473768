"""The pretraining record format (CONTRACTS.md §3) and the tf.data reader the trainer uses.

This module is the reading side of the contract and the home of the generation config:
``DEFAULT_CONFIG`` / :func:`resolve_config` (what the component accepts), :func:`feature_spec`
(what the records hold) and :func:`make_dataset` (records -> ``(x, y, sample_weight)`` batches
for Keras). It imports neither TFX nor Beam, so the trainer can use it on its own.

Objectives: the records of ``objectives.py`` (``objectives.names()``; importing this module
registers them all). Each says what its records hold (``feature_spec``), how they become Keras
batches (``converter``; static or dynamic masking for the masked-LM objectives,
``mlm_objective.py``; next-token targets for ``causal_lm``) and its own config checks; this
module only dispatches on the config's ``objective``.
"""

from __future__ import annotations

import json
import os

import tensorflow as tf

from lmfactory.components.pretraining_data import objectives
from lmfactory.components.pretraining_data.registry import MASK_SEED

CONFIG_FILE = "pretraining_config.json"
VOCABULARY_DIR = "vocabulary"

DEFAULT_CONFIG = {
    "objective": "bert_mlm_nsp",
    # Sequence shape (BERT App. A: 128 for 90% of steps, then 512; GPT-2 uses 1024).
    "max_seq_length": 128,
    # BERT instance creation (google-research/bert create_pretraining_data.py defaults).
    "short_seq_prob": 0.1,
    "dupe_factor": 5,
    # Masked LM (BERT §3.1): 15% of tokens, of which 80% [MASK] / 10% random / 10% kept.
    "masked_lm_prob": 0.15,
    "max_predictions_per_seq": 20,
    "mask_token_rate": 0.8,
    "random_token_rate": 0.1,
    "whole_word_masking": False,
    # N-gram masking (ALBERT §4.1, SpanBERT): spans of n whole words, p(n) ∝ 1/n for
    # n = 1..ngram_masking (ALBERT: 3); 0 = off. Static masking of the MLM objectives only.
    "ngram_masking": 0,
    "dynamic_masking": False,
    # True: a one-segment chunk always gets a random next segment, as the reference script
    # does (which biases NSP above 50%). False: it is split inside so IsNext stays at 50%.
    "reference_nsp_sampling": False,
    "random_seed": 12345,
    # Scale-out: documents are hashed into shards; 0 = ceil(documents / documents_per_shard).
    "num_shards": 0,
    "documents_per_shard": 1000,
    # Upper bound of the documents tokenized by one tokenizer call (beam.BatchElements).
    "tokenize_batch_size": 256,
    # word2vec windows (word_windows.py): the largest window W (word2vec.c -window 5) and the
    # subsampling threshold t (Mikolov et al. 2013b §2.3; word2vec.c -sample 1e-3; 0 = off).
    "window": 5,
    "subsample_threshold": 1e-3,
}

# Flags (TFX stores them as 0/1 ints: component.py, executor.config_from_exec_properties).
BOOL_KEYS = ("whole_word_masking", "dynamic_masking", "reference_nsp_sampling")
_FLOAT_KEYS = ("short_seq_prob", "masked_lm_prob", "mask_token_rate", "random_token_rate",
               "subsample_threshold")


def resolve_config(config: dict | None) -> dict:
    """Fills defaults, coerces types and checks ranges; raises ``ValueError`` on bad input."""
    unknown = set(config or {}) - set(DEFAULT_CONFIG)
    if unknown:
        raise ValueError(f"Unknown pretraining config keys: {sorted(unknown)}")
    resolved = dict(DEFAULT_CONFIG)
    resolved.update({k: v for k, v in (config or {}).items() if v is not None})
    for key in BOOL_KEYS:
        resolved[key] = bool(resolved[key])
    for key in _FLOAT_KEYS:
        resolved[key] = float(resolved[key])
    _check_config(resolved)
    return resolved


def _check_config(config: dict) -> None:
    """The shared checks, then the objective's own (``Objective.check_config``)."""
    objective = objectives.get(config["objective"])
    if config["max_seq_length"] < 5:
        raise ValueError("max_seq_length must be at least 5 ([CLS] A [SEP] B [SEP])")
    for key in ("short_seq_prob", "masked_lm_prob"):
        if not 0.0 <= config[key] <= 1.0:
            raise ValueError(f"{key} must lie in [0, 1]")
    if config["mask_token_rate"] + config["random_token_rate"] > 1.0:
        raise ValueError("mask_token_rate + random_token_rate must not exceed 1")
    for key in ("dupe_factor", "max_predictions_per_seq", "documents_per_shard",
                "tokenize_batch_size"):
        if int(config[key]) < 1:
            raise ValueError(f"{key} must be >= 1")
    if int(config["num_shards"]) < 0:
        raise ValueError("num_shards must be >= 0 (0 = automatic)")
    ngram = config["ngram_masking"]
    if isinstance(ngram, bool) or not isinstance(ngram, int) or ngram < 0:
        raise ValueError(f"ngram_masking must be an integer >= 0 (the longest n-gram, 0 = off), "
                         f"got {ngram!r}")
    objective.check_config(config)


def read_pretraining_config(examples_uri: str) -> dict:
    """Reads ``<examples_uri>/pretraining_config.json`` written by PretrainingExampleGen."""
    with tf.io.gfile.GFile(os.path.join(examples_uri, CONFIG_FILE), "r") as f:
        return json.load(f)


def vocabulary_dir(examples_uri: str) -> str:
    """The copy of the vocabulary folder the records were tokenized with."""
    return os.path.join(examples_uri, VOCABULARY_DIR)


def feature_spec(config: dict) -> dict:
    """``tf.io.parse_example`` spec of the records described by ``config`` (CONTRACTS §3)."""
    return objectives.get(config["objective"]).feature_spec(config)


def make_dataset(file_pattern, pretraining_config: dict, batch_size: int, shuffle: bool,
                 repeat: bool, seed: int | None = None, drop_remainder: bool | None = None,
                 shuffle_buffer_size: int = 10_000, training: bool = False) -> tf.data.Dataset:
    """Pretraining records -> batches of ``(x, y, sample_weight)`` (CONTRACTS §3).

    ``file_pattern`` is a glob or a list of globs of GZIP TFRecord files. Records are batched
    first and parsed per batch with ``tf.io.parse_example``. ``drop_remainder`` defaults to
    ``shuffle or repeat`` (training), so training batches have a static batch dimension.
    Ids are int32, ``padding_mask`` is bool, weights are float32 (the dtypes keras-nlp
    preprocessors produce). ``training``: the training input (an objective with its own
    ``window_lengths``, e.g. AWD-LSTM's variable-length BPTT, samples them; otherwise unused).
    """
    objective = objectives.get(pretraining_config["objective"])
    if objective.ordered_streams:
        return _ordered_dataset(file_pattern, pretraining_config, objective, batch_size,
                                shuffle, repeat, seed, training)
    if drop_remainder is None:
        drop_remainder = bool(shuffle or repeat)
    # A seeded shuffle is reproduced exactly (a resumed training skips the batches it had
    # trained on, fit_loop.resume_input); an unseeded one may take records as they come.
    deterministic = seed is not None or not shuffle
    files = tf.data.Dataset.list_files(file_pattern, shuffle=shuffle, seed=seed)
    records = files.interleave(
        lambda path: tf.data.TFRecordDataset(path, compression_type="GZIP"),
        cycle_length=tf.data.AUTOTUNE, num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=deterministic)
    if shuffle:
        records = records.shuffle(shuffle_buffer_size, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        records = records.repeat()
    spec = feature_spec(pretraining_config)
    batches = records.batch(batch_size, drop_remainder=drop_remainder)
    if pretraining_config.get("dynamic_masking") or objective.draws_per_read:
        # What each batch draws (masks, factorisation orders) comes from (seed, its index in
        # this input): a resumed run, which skips the batches it had trained on, draws the
        # rest as the uninterrupted run did.
        base_seed = tf.constant(0 if seed is None else int(seed), tf.int64)

        def parse_indexed(index, serialized):
            parsed_batch = tf.io.parse_example(serialized, spec)
            parsed_batch[MASK_SEED] = tf.stack([base_seed, index])
            return parsed_batch

        parsed = batches.enumerate().map(parse_indexed, num_parallel_calls=tf.data.AUTOTUNE,
                                         deterministic=deterministic)
    else:
        parsed = batches.map(lambda serialized: tf.io.parse_example(serialized, spec),
                             num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    to_keras = objective.converter(pretraining_config)
    return parsed.map(to_keras, num_parallel_calls=tf.data.AUTOTUNE,
                      deterministic=deterministic).prefetch(tf.data.AUTOTUNE)


def _ordered_dataset(file_pattern, pretraining_config: dict, objective, batch_size: int,
                     shuffle: bool, repeat: bool, seed=None, training=False) -> tf.data.Dataset:
    """Records of an objective that declares ``ordered_streams``: files in name order,
    records in file order, cut into ``batch_size`` parallel streams (row b of batch k + 1
    continues row b of batch k; ``ordered_streams.parallel_streams``), never shuffled; the
    parsed features carry ``stream_position`` (the batch's index in this pass). A single
    pass (``repeat`` false, e.g. evaluation) over fewer segments than ``batch_size`` reads
    one stream per segment. An objective with ``window_lengths`` reads the token stream cut
    into ``batch_size`` rows (``ordered_streams.stream_rows``, the reference's batchify) in
    its own windows (``ordered_streams.stream_windows``, seeded by ``seed``)."""
    from lmfactory.components.pretraining_data.ordered_streams import (
        STREAM_POSITION, parallel_streams, stream_rows, stream_windows, window_features)

    if shuffle:
        raise ValueError(f"Objective {objective.name!r} keeps the records in stream order "
                         f"(ordered_streams): read it with shuffle=False")
    files = tf.data.Dataset.list_files(file_pattern, shuffle=False)
    records = files.flat_map(lambda path: tf.data.TFRecordDataset(path, compression_type="GZIP"))
    spec = feature_spec(pretraining_config)
    to_keras = objective.converter(pretraining_config)
    if objective.window_lengths is not None:
        rows = stream_rows(records, spec, int(batch_size))
        windows = stream_windows(rows, objective.window_lengths(pretraining_config, training),
                                 repeat, seed)
        return windows.map(window_features).map(to_keras).prefetch(tf.data.AUTOTUNE)
    batches = parallel_streams(records, int(batch_size), fewer_streams=not repeat)
    if repeat:
        batches = batches.repeat()

    def parse(position, serialized):
        features = tf.io.parse_example(serialized, spec)
        features[STREAM_POSITION] = tf.fill(tf.shape(serialized), position)
        return features

    return batches.map(parse).map(to_keras).prefetch(tf.data.AUTOTUNE)
