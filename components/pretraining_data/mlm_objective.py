"""What the three masked-LM objectives share beyond target selection (``masking.py``).

``bert_mlm_nsp`` (BERT, Devlin et al. 2019 §3.1), ``albert_mlm_sop`` (ALBERT, Lan et al. 2020
§3.2) and ``mlm`` (RoBERTa FULL-SENTENCES, Liu et al. 2019 §4.2) differ in how they build
sequences and in their sentence-level task, and share the rest, built here by
:func:`masked_lm_objective` into their registry record (``registry.Objective``):

* the vocabulary state: the masking ids with the word-boundary rule of the vocabulary's
  ``kind`` (:func:`masking_vocabulary`, ``masking.BertVocabulary``);
* the config check: ``ngram_masking`` (ALBERT §4.1) is a static-masking option;
* the record spec (CONTRACTS §3): ``input_ids[L]``, ``input_mask[L]``, ``segment_ids[L]`` and
  the sentence label ``[1]`` for the two-segment layouts, and with static masking
  ``masked_lm_positions/ids/weights[P]``;
* the tf.data converter to Keras ``(x, y, sample_weight)``: x = ``{"token_ids",
  "padding_mask", "segment_ids", "mask_positions"}`` (``segment_ids`` all zeros for one-segment
  records), y = ``{"mlm": ids [B,P]}`` plus the sentence task's labels [B], sample_weight =
  ``{"mlm": weights [B,P]}``.

Dynamic masking (RoBERTa, Liu et al. 2019 §4.1): when ``dynamic_masking`` is true the records
keep unmasked ``input_ids`` and the converter draws a fresh mask every time the data are read
(BERT's 80/10/10 rule, Devlin et al. 2019 §3.1 "Task #1"), seeded by the training seed and the
batch's index in the input (``seeded_masking.py``: a resumed run repeats the masks). Note one
difference from the static path: dynamic masking selects ``ceil(rate * n)`` tokens per
sequence, as keras-nlp's ``MaskedLMMaskGenerator`` does, while the static path rounds, so it
selects on average about half a token more per sequence.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple, Optional

import tensorflow as tf

from lmfactory.components.pretraining_data.masking import BertVocabulary
from lmfactory.components.pretraining_data.registry import MASK_SEED, SENTENCES, Objective


class SentenceTask(NamedTuple):
    """A sentence-level task of a two-segment layout: its ``y`` key and record feature."""

    key: str      # e.g. "nsp"
    feature: str  # e.g. "next_sentence_labels" (int64 [1])


# --------------------------------------------------------------------------- vocabulary


def vocabulary_tokens(tokenizer) -> list:
    """The tokenizer's vocabulary as a list indexed by id (a BPE vocabulary is a dict whose
    key order need not be the id order)."""
    vocabulary = getattr(tokenizer, "vocabulary", None)
    if isinstance(vocabulary, dict):
        tokens = [None] * (max(vocabulary.values()) + 1)
        for token, index in vocabulary.items():
            tokens[index] = token
        return ["" if token is None else token for token in tokens]
    return list(tokenizer.get_vocabulary())


def masking_vocabulary(tokenizer, tokenizer_config: dict, objective: str) -> BertVocabulary:
    """Masking ids of the vocabulary, with the word-boundary rule of its ``kind`` (§2)."""
    return BertVocabulary.from_tokens(vocabulary_tokens(tokenizer),
                                      tokenizer_config.get("special_tokens", {}),
                                      kind=tokenizer_config["kind"], objective=objective)


# --------------------------------------------------------------------------- config


def check_masking_config(config: dict) -> None:
    """``ngram_masking`` selects spans at generation time, so it needs static masking."""
    if config["ngram_masking"] > 0 and config["dynamic_masking"]:
        raise ValueError("ngram_masking applies to static masking; dynamic_masking draws "
                         "token-level masks in tf.data. Set one of them off")


# --------------------------------------------------------------------------- records


def feature_spec(config: dict, sentence_task: Optional[SentenceTask]) -> dict:
    """``tf.io.parse_example`` spec of masked-LM records (CONTRACTS §3)."""
    length = int(config["max_seq_length"])
    spec = {
        "input_ids": tf.io.FixedLenFeature([length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([length], tf.int64),
    }
    if sentence_task is not None:  # two-segment layouts (BERT, ALBERT)
        spec["segment_ids"] = tf.io.FixedLenFeature([length], tf.int64)
        spec[sentence_task.feature] = tf.io.FixedLenFeature([1], tf.int64)
    if not config.get("dynamic_masking", False):
        predictions = int(config["max_predictions_per_seq"])
        spec.update({
            "masked_lm_positions": tf.io.FixedLenFeature([predictions], tf.int64),
            "masked_lm_ids": tf.io.FixedLenFeature([predictions], tf.int64),
            "masked_lm_weights": tf.io.FixedLenFeature([predictions], tf.float32),
        })
    return spec


# --------------------------------------------------------------------------- tf.data


def converter(config: dict, sentence_task: Optional[SentenceTask]) -> Callable:
    """Parsed batch -> ``(x, y, sample_weight)``: static masks from the records, or a fresh
    mask per read with ``dynamic_masking``."""
    if config.get("dynamic_masking", False):
        return _dynamic_masking_converter(config, sentence_task)
    return _static_mlm_converter(sentence_task)


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
        y[sentence_task.key] = tf.cast(
            tf.squeeze(features[sentence_task.feature], axis=-1), tf.int32)
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
    """A fresh BERT mask on every read of the data (RoBERTa §4.1 dynamic masking), drawn
    from the batch's `MASK_SEED` feature (`seeded_masking.seeded_bert_mask`), so that a
    resumed training masks each batch as the uninterrupted run did."""
    from lmfactory.components.pretraining_data.seeded_masking import seeded_bert_mask

    specials = config["special_token_ids"]
    settings = dict(
        vocabulary_size=int(config["vocabulary_size"]),
        selection_rate=float(config["masked_lm_prob"]),
        max_selections=int(config["max_predictions_per_seq"]),
        mask_token_id=int(specials["mask"]),
        unselectable_ids=[int(specials["cls"]), int(specials["sep"]), int(specials["pad"])],
        mask_token_rate=float(config["mask_token_rate"]),
        random_token_rate=float(config["random_token_rate"]),
    )

    def mask_batch(features: dict):
        input_ids = tf.cast(features["input_ids"], tf.int32)
        masked = seeded_bert_mask(input_ids, features[MASK_SEED], **settings)
        x = _bert_inputs(features, masked["token_ids"])
        positions, y, sample_weight = _bert_targets(
            features, masked["mask_positions"], masked["mask_ids"], masked["mask_weights"],
            sentence_task)
        x["mask_positions"] = positions
        return x, y, sample_weight

    return mask_batch


# --------------------------------------------------------------------------- record


def masked_lm_objective(name: str, shard_examples: Callable,
                        sentence_task: Optional[SentenceTask], paper: str) -> Objective:
    """The registry record of a masked-LM objective whose documents are lists of sentences.

    ``shard_examples(documents, vocab: BertVocabulary, config, seed_scope)`` is the
    objective's own instance builder; ``sentence_task`` its sentence-level task (None for a
    one-segment layout).
    """
    return Objective(
        name=name,
        document=SENTENCES,
        vocabulary_state=functools.partial(masking_vocabulary, objective=name),
        shard_examples=shard_examples,
        feature_spec=functools.partial(feature_spec, sentence_task=sentence_task),
        converter=functools.partial(converter, sentence_task=sentence_task),
        causal=False,
        check_config=check_masking_config,
        paper=paper,
    )
