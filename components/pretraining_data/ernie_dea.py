"""ERNIE pretraining records: BERT's masked LM + NSP plus the denoising entity auto-encoder
(dEA), Zhang et al. 2019 §3.4.

Instances are BERT's (``nsp_instances.create_pair_spans``: sentence pairs,
50% random next, truncation, ``[CLS] A [SEP] B [SEP]``) over entity-linked sentences
(``registry.LINKED_SENTENCES``, linked_documents.py), each token carrying the entity aligned
to it (the first token of a mention). The tokens are masked as BERT's (§3.1 of Devlin et al.;
``masked_records.mask_batch``, a shard's instances in numpy batches). The token-entity alignments are then corrupted as
§3.4 says: "(1) In 5% of the time, for a given token-entity alignment, we replace the entity
with another random entity ... (2) In 15% of the time, we mask token-entity alignments ...
(3) In the rest of the time, we keep token-entity alignments unchanged". The random entity
is drawn uniformly from the other entities linked in the same shard (the shard is this
pipeline's unit of sampling, as for the NSP random next sentence; the candidates the model
scores are the batch's entities, §3.4, so a replacement is an entity of the same kind of
text). A masked alignment removes the entity from the input (``entity_mask`` 0); every
original alignment stays a target.

Record (CONTRACTS §3 BERT features plus, each [max_seq_length]): ``entity_ids`` /
``entity_mask`` the corrupted input alignment, ``entity_labels`` the original entity of
each aligned token, ``entity_label_weights`` (float) 1 where a token had an entity. The
converter gives x = BERT's inputs + ``entity_ids`` / ``entity_mask``, y = ``{"mlm", "nsp",
"dea": entity_labels}``, sample_weight = ``{"mlm", "dea": entity_label_weights}``. Static
masking only. Counters: ``aligned_entities``, ``replaced_entities``, ``masked_entities``
and the linking counts of linked_documents.py.
"""

from __future__ import annotations

import functools
from typing import Iterable, Sequence

import numpy as np
import tensorflow as tf

from lmfactory.components.pretraining_data import mlm_objective, registry
from lmfactory.components.pretraining_data.bert_mlm_nsp import NSP
from lmfactory.components.pretraining_data.masked_records import (
    pair_layout, pair_records, token_stream)
from lmfactory.components.pretraining_data.masking import masking_stats
from lmfactory.components.pretraining_data.nsp_instances import IS_NEXT, NOT_NEXT, shard_pairs

NAME = "ernie_dea"
REPLACE_RATE = 0.05  # §3.4 (1): the entity replaced by another random entity
MASK_RATE = 0.15     # §3.4 (2): the alignment masked (the entity removed from the input)
ENTITY_FEATURES = ("entity_ids", "entity_mask", "entity_labels")


def entity_features(tag_stream: np.ndarray, pool: np.ndarray, width: int, spans: np.ndarray,
                    generator: np.random.Generator, stats: dict,
                    replace_rate: float = REPLACE_RATE, mask_rate: float = MASK_RATE) -> tuple:
    """§3.4's corruption of a batch's token-entity alignments, with numpy.

    ``tag_stream``: per token of the shard's stream, entity index + 1 or 0; ``spans [B, 4]``
    the batch's instances in it (laid out as their tokens, ``[CLS]``/``[SEP]`` untagged);
    ``pool``: the distinct entities a replacement is drawn from (uniformly among those other
    than the aligned one). Each alignment draws one uniform number: below ``replace_rate``
    (and with another entity to take) it is replaced, below ``replace_rate + mask_rate``
    masked, otherwise kept. Returns the int64 features ``entity_ids``, ``entity_mask``,
    ``entity_labels`` and the float ``entity_label_weights``, all ``[B, width]``, and adds
    the counts to ``stats``."""
    tags, _, _ = pair_layout(tag_stream, spans, width, 0, 0)
    aligned = tags > 0
    entity = np.where(aligned, tags - 1, 0)
    draw = generator.random(tags.shape)
    replace = aligned & (draw < replace_rate) & (len(pool) > 1)
    masked = aligned & ~replace & (draw < replace_rate + mask_rate)
    keep = aligned & ~replace & ~masked
    others = pool[generator.integers(max(1, len(pool) - 1), size=int(replace.sum()))] \
        if len(pool) > 1 else np.zeros(0, np.int64)
    others = np.where(others == entity[replace], pool[-1], others)  # the last stands in
    ids = np.where(keep, entity, 0)
    ids[replace] = others
    stats["aligned_entities"] += int(aligned.sum())
    stats["replaced_entities"] += int(replace.sum())
    stats["masked_entities"] += int(masked.sum())
    return ({"entity_ids": ids, "entity_mask": (keep | replace).astype(np.int64),
             "entity_labels": entity},
            {"entity_label_weights": aligned.astype(np.float32)})


def shard_examples(documents: Sequence, vocab, config: dict, seed_scope: Iterable) -> tuple:
    """All serialized examples of one shard of linked documents (lists of (token ids,
    entity tags) sentences), shuffled, and their counts: BERT's instances as spans of the
    shard's token stream (``nsp_instances.shard_pairs``), masked and serialized in batches
    (``masked_records.pair_records``) with the entity features of each batch
    (:func:`entity_features`)."""
    if config["dynamic_masking"]:
        raise ValueError(f"{NAME} masks statically (its entity corruption is in the "
                         f"records); set dynamic_masking off")
    seed_scope = tuple(seed_scope)
    tokens = [[sentence_tokens for sentence_tokens, _ in document] for document in documents]
    tags = [[sentence_tags for _, sentence_tags in document] for document in documents]
    pool = np.array(sorted({tag - 1 for document in tags for sentence in document
                            for tag in sentence if tag > 0}), np.int64)
    stats = {"instances": 0, "random_next": 0, "tokens": 0, "aligned_entities": 0,
             "replaced_entities": 0, "masked_entities": 0, **masking_stats(0)}
    stream, bounds, is_random_next = shard_pairs(tokens, config, seed_scope, stats)
    tag_stream, _ = token_stream(tags)
    extra = functools.partial(entity_features, tag_stream, pool, int(config["max_seq_length"]))
    serialized = pair_records(stream, bounds, np.where(is_random_next, NOT_NEXT, IS_NEXT),
                              NSP.feature, vocab, config, seed_scope, stats, extra)
    return serialized, stats


def feature_spec(config: dict) -> dict:
    """BERT's MLM + NSP record spec plus the entity features (module docstring)."""
    spec = mlm_objective.feature_spec(dict(config, dynamic_masking=False), NSP)
    length = int(config["max_seq_length"])
    spec.update({name: tf.io.FixedLenFeature([length], tf.int64) for name in ENTITY_FEATURES})
    spec["entity_label_weights"] = tf.io.FixedLenFeature([length], tf.float32)
    return spec


def converter(config: dict):
    """Parsed batch -> ``(x, y, sample_weight)``: BERT's static-masking batch plus the
    entity inputs, the dEA targets and their weights."""
    bert_batch = mlm_objective.converter(dict(config, dynamic_masking=False), NSP)

    def ernie_batch(features: dict):
        x, y, sample_weight = bert_batch(features)
        real = tf.cast(features["input_mask"], tf.int32)
        x["entity_ids"] = tf.cast(features["entity_ids"], tf.int32)
        x["entity_mask"] = tf.cast(features["entity_mask"] > 0, tf.int32) * real
        y["dea"] = tf.cast(features["entity_labels"], tf.int32)
        sample_weight["dea"] = tf.cast(features["entity_label_weights"], tf.float32) * \
            tf.cast(real, tf.float32)
        return x, y, sample_weight

    return ernie_batch


def check_config(config: dict) -> None:
    if config["dynamic_masking"]:
        raise ValueError(f"{NAME} masks statically; set objective.dynamic_masking false")
    if config["ngram_masking"]:
        raise ValueError(f"{NAME} masks single tokens or whole words (BERT's); set "
                         f"objective.ngram_masking 0")


OBJECTIVE = registry.register(registry.Objective(
    name=NAME,
    document=registry.LINKED_SENTENCES,
    vocabulary_state=functools.partial(mlm_objective.masking_vocabulary, objective=NAME),
    shard_examples=shard_examples,
    feature_spec=feature_spec,
    converter=converter,
    causal=False,
    check_config=check_config,
    paper="Zhang et al. 2019, ERNIE: Enhanced Language Representation with Informative "
          "Entities, §3.4 (denoising entity auto-encoder with MLM and NSP)"))
