"""The pretraining record format (CONTRACTS.md §3) and the tf.data reader the trainer uses.

This module is the reading side of the contract and the home of the generation config:
``DEFAULT_CONFIG`` / :func:`resolve_config` (what the component accepts), :func:`feature_spec`
(what the records hold) and :func:`make_dataset` (records -> ``(x, y, sample_weight)`` batches
for Keras). It imports neither TFX nor Beam, so the trainer can use it on its own.

Objectives (``OBJECTIVES``): ``bert_mlm_nsp`` (BERT MLM + next-sentence prediction,
``bert_mlm_nsp.py``), ``albert_mlm_sop`` (ALBERT MLM + sentence-order prediction,
``albert_mlm_sop.py``), ``mlm`` (RoBERTa FULL-SENTENCES MLM, ``full_sentences.py``) and
``causal_lm`` (GPT-2 blocks, ``causal_lm.py``). ``ngram_masking`` (ALBERT §4.1) applies to the
static masking of the three MLM objectives (``masking.py``).

Dynamic masking (RoBERTa, Liu et al. 2019 §4.1): when ``dynamic_masking`` is true the records
of the MLM objectives keep unmasked ``input_ids`` and :func:`make_dataset` draws a fresh mask
every time the data are read, with ``keras_nlp.layers.MaskedLMMaskGenerator`` (BERT's 80/10/10 rule, Devlin et
al. 2019 §3.1 "Task #1"). Note one difference from the static path: the mask generator (via
``tf_text.RandomItemSelector``) selects ``ceil(rate * n)`` tokens per sequence, while the static
path rounds, so dynamic masking selects on average about half a token more per sequence.
"""

from __future__ import annotations

import json
import os

import tensorflow as tf

CONFIG_FILE = "pretraining_config.json"
VOCABULARY_DIR = "vocabulary"
OBJECTIVES = ("bert_mlm_nsp", "albert_mlm_sop", "mlm", "causal_lm")
# The objectives whose records carry masked-LM targets, and their sentence-level task as
# (y key, record feature), None for one-segment RoBERTa ``mlm``.
MLM_OBJECTIVES = ("bert_mlm_nsp", "albert_mlm_sop", "mlm")
SENTENCE_TASKS = {"bert_mlm_nsp": ("nsp", "next_sentence_labels"),
                  "albert_mlm_sop": ("sop", "sentence_order_labels"),
                  "mlm": None}

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
}

_BOOL_KEYS = ("whole_word_masking", "dynamic_masking", "reference_nsp_sampling")
_FLOAT_KEYS = ("short_seq_prob", "masked_lm_prob", "mask_token_rate", "random_token_rate")


def resolve_config(config: dict | None) -> dict:
    """Fills defaults, coerces types and checks ranges; raises ``ValueError`` on bad input."""
    unknown = set(config or {}) - set(DEFAULT_CONFIG)
    if unknown:
        raise ValueError(f"Unknown pretraining config keys: {sorted(unknown)}")
    resolved = dict(DEFAULT_CONFIG)
    resolved.update({k: v for k, v in (config or {}).items() if v is not None})
    for key in _BOOL_KEYS:
        resolved[key] = bool(resolved[key])
    for key in _FLOAT_KEYS:
        resolved[key] = float(resolved[key])
    _check_config(resolved)
    return resolved


def _check_config(config: dict) -> None:
    if config["objective"] not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {config['objective']!r}")
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
    if ngram > 0 and config["objective"] not in MLM_OBJECTIVES:
        raise ValueError(f"ngram_masking applies to the masked-LM objectives {MLM_OBJECTIVES}, "
                         f"not {config['objective']!r}; set it to 0")
    if ngram > 0 and config["dynamic_masking"]:
        raise ValueError("ngram_masking applies to static masking; dynamic_masking draws "
                         "token-level masks in tf.data. Set one of them off")


def read_pretraining_config(examples_uri: str) -> dict:
    """Reads ``<examples_uri>/pretraining_config.json`` written by PretrainingExampleGen."""
    with tf.io.gfile.GFile(os.path.join(examples_uri, CONFIG_FILE), "r") as f:
        return json.load(f)


def vocabulary_dir(examples_uri: str) -> str:
    """The copy of the vocabulary folder the records were tokenized with."""
    return os.path.join(examples_uri, VOCABULARY_DIR)


def feature_spec(config: dict) -> dict:
    """``tf.io.parse_example`` spec of the records described by ``config`` (CONTRACTS §3)."""
    length = int(config["max_seq_length"])
    objective = config["objective"]
    if objective == "causal_lm":
        return {"input_ids": tf.io.FixedLenFeature([length + 1], tf.int64)}
    if objective not in MLM_OBJECTIVES:
        raise ValueError(f"Unknown pretraining objective {objective!r}; records of "
                         f"{OBJECTIVES} can be read")
    spec = {
        "input_ids": tf.io.FixedLenFeature([length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([length], tf.int64),
    }
    if SENTENCE_TASKS[objective] is not None:  # two-segment layouts (BERT, ALBERT)
        spec["segment_ids"] = tf.io.FixedLenFeature([length], tf.int64)
        spec[SENTENCE_TASKS[objective][1]] = tf.io.FixedLenFeature([1], tf.int64)
    if not config.get("dynamic_masking", False):
        predictions = int(config["max_predictions_per_seq"])
        spec.update({
            "masked_lm_positions": tf.io.FixedLenFeature([predictions], tf.int64),
            "masked_lm_ids": tf.io.FixedLenFeature([predictions], tf.int64),
            "masked_lm_weights": tf.io.FixedLenFeature([predictions], tf.float32),
        })
    return spec


def make_dataset(file_pattern, pretraining_config: dict, batch_size: int, shuffle: bool,
                 repeat: bool, seed: int | None = None, drop_remainder: bool | None = None,
                 shuffle_buffer_size: int = 10_000) -> tf.data.Dataset:
    """Pretraining records -> batches of ``(x, y, sample_weight)`` (CONTRACTS §3).

    ``file_pattern`` is a glob or a list of globs of GZIP TFRecord files. Records are batched
    first and parsed per batch with ``tf.io.parse_example``. ``drop_remainder`` defaults to
    ``shuffle or repeat`` (training), so training batches have a static batch dimension.
    Ids are int32, ``padding_mask`` is bool, weights are float32 (the dtypes keras-nlp
    preprocessors produce).
    """
    if drop_remainder is None:
        drop_remainder = bool(shuffle or repeat)
    files = tf.data.Dataset.list_files(file_pattern, shuffle=shuffle, seed=seed)
    records = files.interleave(
        lambda path: tf.data.TFRecordDataset(path, compression_type="GZIP"),
        cycle_length=tf.data.AUTOTUNE, num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=not shuffle)
    if shuffle:
        records = records.shuffle(shuffle_buffer_size, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        records = records.repeat()
    spec = feature_spec(pretraining_config)
    batches = records.batch(batch_size, drop_remainder=drop_remainder)
    parsed = batches.map(lambda serialized: tf.io.parse_example(serialized, spec),
                         num_parallel_calls=tf.data.AUTOTUNE, deterministic=not shuffle)
    to_keras = _keras_converter(pretraining_config)
    return parsed.map(to_keras, num_parallel_calls=tf.data.AUTOTUNE,
                      deterministic=not shuffle).prefetch(tf.data.AUTOTUNE)


def _keras_converter(config: dict):
    if config["objective"] == "causal_lm":
        return _causal_lm_batch
    sentence_task = SENTENCE_TASKS[config["objective"]]
    if config.get("dynamic_masking", False):
        return _dynamic_masking_converter(config, sentence_task)
    return _static_mlm_converter(sentence_task)


def _causal_lm_batch(features: dict):
    """Block of L+1 ids -> model reads ``[:-1]`` and predicts ``[1:]`` (GPT-2 §2)."""
    ids = tf.cast(features["input_ids"], tf.int32)
    token_ids, next_ids = ids[:, :-1], ids[:, 1:]
    # Packed blocks hold no padding: every position is a real token.
    padding_mask = tf.ones_like(token_ids, dtype=tf.bool)
    x = {"token_ids": token_ids, "padding_mask": padding_mask}
    return x, next_ids, tf.cast(padding_mask, tf.float32)


def _bert_inputs(features: dict, token_ids) -> dict:
    """``segment_ids`` from the record, or all zeros for one-segment records (``mlm``)."""
    if "segment_ids" in features:
        segment_ids = tf.cast(features["segment_ids"], tf.int32)
    else:
        segment_ids = tf.zeros_like(features["input_mask"], dtype=tf.int32)
    return {
        "token_ids": tf.cast(token_ids, tf.int32),
        "padding_mask": tf.cast(features["input_mask"], tf.bool),
        "segment_ids": segment_ids,
    }


def _bert_targets(features: dict, positions, ids, weights, sentence_task):
    """``y = {"mlm": ids}`` plus ``"nsp"`` / ``"sop"`` labels [B] when the objective has one."""
    x_positions = tf.cast(positions, tf.int32)
    y = {"mlm": tf.cast(ids, tf.int32)}
    if sentence_task is not None:
        key, feature = sentence_task
        y[key] = tf.cast(tf.squeeze(features[feature], axis=-1), tf.int32)
    return x_positions, y, {"mlm": tf.cast(weights, tf.float32)}


def _static_mlm_converter(sentence_task):
    def static_mlm_batch(features: dict):
        x = _bert_inputs(features, features["input_ids"])
        positions, y, sample_weight = _bert_targets(
            features, features["masked_lm_positions"], features["masked_lm_ids"],
            features["masked_lm_weights"], sentence_task)
        x["mask_positions"] = positions
        return x, y, sample_weight

    return static_mlm_batch


def _dynamic_masking_converter(config: dict, sentence_task):
    """A fresh BERT mask on every read of the data (RoBERTa §4.1 dynamic masking)."""
    import keras_nlp

    specials = config["special_token_ids"]
    masker = keras_nlp.layers.MaskedLMMaskGenerator(
        vocabulary_size=int(config["vocabulary_size"]),
        mask_selection_rate=float(config["masked_lm_prob"]),
        mask_token_id=int(specials["mask"]),
        mask_selection_length=int(config["max_predictions_per_seq"]),
        unselectable_token_ids=[int(specials["cls"]), int(specials["sep"]),
                                int(specials["pad"])],
        mask_token_rate=float(config["mask_token_rate"]),
        random_token_rate=float(config["random_token_rate"]),
    )

    def mask_batch(features: dict):
        input_ids = tf.cast(features["input_ids"], tf.int32)
        masked = masker(input_ids)
        # The generator goes through ragged tensors; restore the static [B, L] shape.
        token_ids = tf.ensure_shape(tf.reshape(masked["token_ids"], tf.shape(input_ids)),
                                    input_ids.shape)
        x = _bert_inputs(features, token_ids)
        positions, y, sample_weight = _bert_targets(
            features, masked["mask_positions"], masked["mask_ids"], masked["mask_weights"],
            sentence_task)
        x["mask_positions"] = positions
        return x, y, sample_weight

    return mask_batch
