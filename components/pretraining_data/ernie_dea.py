"""ERNIE pretraining records: BERT's masked LM + NSP plus the denoising entity auto-encoder
(dEA), Zhang et al. 2019 §3.4.

Instances are BERT's (``bert_mlm_nsp.create_instances_from_document``: sentence pairs,
50% random next, truncation, ``[CLS] A [SEP] B [SEP]``) over entity-linked sentences
(``registry.LINKED_SENTENCES``, linked_documents.py), each token carrying the entity aligned
to it (the first token of a mention). The tokens are masked as BERT's (§3.1 of Devlin et al.;
``masking.create_masked_lm_predictions``). The token-entity alignments are then corrupted as
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

import tensorflow as tf

from lmfactory.components.pretraining_data import mlm_objective, registry
from lmfactory.components.pretraining_data.bert_mlm_nsp import (
    NSP, create_instances_from_document, seeded_rng, to_tf_example)
from lmfactory.components.pretraining_data.masking import (
    count_masking, create_masked_lm_predictions, int_feature, masking_stats, padded)

NAME = "ernie_dea"
REPLACE_RATE = 0.05  # §3.4 (1): the entity replaced by another random entity
MASK_RATE = 0.15     # §3.4 (2): the alignment masked (the entity removed from the input)
ENTITY_FEATURES = ("entity_ids", "entity_mask", "entity_labels")


def corrupt_alignments(tags: Sequence[int], entity_pool: Sequence[int], rng,
                       replace_rate: float = REPLACE_RATE, mask_rate: float = MASK_RATE):
    """§3.4's corruption of one sequence's token-entity alignments.

    ``tags``: per token, entity index + 1 or 0. ``entity_pool``: the distinct entities a
    replacement is drawn from. Returns ``(input ids, input mask, labels, weights, counts)``,
    lists as long as ``tags``."""
    n = len(tags)
    ids, mask, labels, weights = [0] * n, [0] * n, [0] * n, [0.0] * n
    counts = {"aligned_entities": 0, "replaced_entities": 0, "masked_entities": 0}
    for position, tag in enumerate(tags):
        if tag <= 0:
            continue
        entity = tag - 1
        labels[position], weights[position] = entity, 1.0
        counts["aligned_entities"] += 1
        draw = rng.random()
        if draw < replace_rate and len(entity_pool) > 1:
            other = entity_pool[rng.randrange(len(entity_pool) - 1)]
            if other == entity:  # the pool's last entry stands in for this one
                other = entity_pool[-1]
            ids[position], mask[position] = other, 1
            counts["replaced_entities"] += 1
        elif draw < replace_rate + mask_rate:
            counts["masked_entities"] += 1
        else:
            ids[position], mask[position] = entity, 1
    return ids, mask, labels, weights, counts


def shard_examples(documents: Sequence, vocab, config: dict, seed_scope: Iterable) -> tuple:
    """All serialized examples of one shard of linked documents (lists of (token ids,
    entity tags) sentences), shuffled, and their counts."""
    if config["dynamic_masking"]:
        raise ValueError(f"{NAME} masks statically (its entity corruption is in the "
                         f"records); set dynamic_masking off")
    seed_scope = tuple(seed_scope)
    # Tokens as (id, tag) pairs, so BERT's instance builder carries each token's entity.
    paired = [[list(zip(tokens, tags)) for tokens, tags in document] for document in documents]
    pool = sorted({tag - 1 for document in documents for _, tags in document
                   for tag in tags if tag > 0})
    stats = {"instances": 0, "random_next": 0, "tokens": 0, "aligned_entities": 0,
             "replaced_entities": 0, "masked_entities": 0, **masking_stats(0)}
    length = int(config["max_seq_length"])
    predictions = int(config["max_predictions_per_seq"])
    serialized = []
    for dupe_round in range(int(config["dupe_factor"])):
        rng = seeded_rng(*seed_scope, "dupe", dupe_round)
        for index in range(len(paired)):
            for instance in create_instances_from_document(
                    paired, index, length, config["short_seq_prob"], rng, (vocab.cls_id, 0),
                    (vocab.sep_id, 0), config["reference_nsp_sampling"]):
                tokens = [token for token, _ in instance.tokens]
                tags = [tag for _, tag in instance.tokens]
                masked = create_masked_lm_predictions(
                    tokens, vocab, config["masked_lm_prob"], predictions,
                    config["whole_word_masking"], rng, config["mask_token_rate"],
                    config["random_token_rate"])
                count_masking(stats, masked)
                ids, mask, labels, weights, counts = corrupt_alignments(tags, pool, rng)
                for key, value in counts.items():
                    stats[key] += value
                stats["instances"] += 1
                stats["random_next"] += int(instance.is_random_next)
                stats["tokens"] += len(tokens) - 3
                example = to_tf_example(tokens, instance.segment_ids,
                                        instance.is_random_next, length, masked, predictions)
                feature = example.features.feature
                for name, values in (("entity_ids", ids), ("entity_mask", mask),
                                     ("entity_labels", labels)):
                    feature[name].CopyFrom(int_feature(padded(values, length)))
                feature["entity_label_weights"].CopyFrom(tf.train.Feature(
                    float_list=tf.train.FloatList(value=padded(weights, length, 0.0))))
                serialized.append(example.SerializeToString(deterministic=True))
    seeded_rng(*seed_scope, "shuffle").shuffle(serialized)
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
