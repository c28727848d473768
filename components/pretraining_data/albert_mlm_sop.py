"""ALBERT pretraining instances: masked LM + sentence-order prediction (SOP).

Follows Lan et al. 2020, "ALBERT" §3.2 ("Inter-sentence coherence loss"): NSP is replaced by
sentence-order prediction, whose positive examples are two consecutive segments of the same
document in their original order and whose negative examples are the same two segments with
their order swapped, 50% each. Unlike NSP there is never a segment from another document, so
the task is about discourse coherence and cannot be solved by topic prediction.

Segments are built the way google-research/bert ``create_pretraining_data.py`` builds A and B
(BERT App. A.2, and ``bert_mlm_nsp.py``): sentences of one document are accumulated until they
reach a target length (``max_seq_length - 3``, or with probability ``short_seq_prob`` a random
length in ``[2, max_seq_length - 3]``), the chunk is split at a random sentence boundary into
A (the first part) and B (the rest), both from the *same* document, and then A and B swap
places with probability 0.5 (label ``sentence_order_labels`` 1 = swapped, 0 = in order). The
pair is truncated from the longer side, one token at a time at a random end, and laid out as
``[CLS] A [SEP] B [SEP]`` with segment ids 0 / 1, as in BERT. Masking (ALBERT §4.1 uses
n-gram masking, ``ngram_masking: 3``) is the shared ``masking.py``.

Differences from the ALBERT reference script, and why: the reference still falls back to a
random other document when a chunk holds a single sentence (its NSP code path); here such a
chunk is split inside the sentence so that every instance is a same-document pair, as §3.2
describes. Chunks of a single token produce no instance. Documents are processed one shard at
a time in canonical order with one RNG per (seed, split, shard, dupe round), like BERT.

Registered as objective ``albert_mlm_sop`` (``OBJECTIVE``, built by
``mlm_objective.masked_lm_objective`` with the ``sop`` task).
"""

from __future__ import annotations

import random
from typing import Iterable, NamedTuple, Sequence

import tensorflow as tf

from lmfactory.components.pretraining_data import registry
from lmfactory.components.pretraining_data.bert_mlm_nsp import (
    pair_example, seeded_rng, truncate_seq_pair)
from lmfactory.components.pretraining_data.masking import (
    BertVocabulary, MaskedLmPredictions, count_masking, create_masked_lm_predictions,
    masking_stats)
from lmfactory.components.pretraining_data.mlm_objective import (
    SentenceTask, masked_lm_objective)

IN_ORDER = 0  # sentence_order_labels: 0 = A precedes B in the document
SWAPPED = 1   # 1 = the two segments were swapped (B precedes A in the document)
SOP = SentenceTask("sop", "sentence_order_labels")


class SopInstance(NamedTuple):
    """One ``[CLS] A [SEP] B [SEP]`` sequence before masking."""

    tokens: list
    segment_ids: list
    is_swapped: bool


def create_instances_from_document(document: Sequence[Sequence[int]], max_seq_length: int,
                                   short_seq_prob: float, rng: random.Random, cls_id: int,
                                   sep_id: int) -> list:
    """Sentence-order instances of one document (a list of token-id sentences)."""
    max_num_tokens = max_seq_length - 3
    target_length = max_num_tokens
    if rng.random() < short_seq_prob:
        target_length = rng.randint(2, max_num_tokens)
    instances, chunk, chunk_length = [], [], 0
    for i, segment in enumerate(document):
        chunk.append(segment)
        chunk_length += len(segment)
        if i == len(document) - 1 or chunk_length >= target_length:
            pair = split_chunk(chunk, rng)
            if pair is not None:
                instances.append(_layout(*pair, max_num_tokens, rng, cls_id, sep_id))
            chunk, chunk_length = [], 0
    return instances


def split_chunk(chunk: list, rng: random.Random):
    """Consecutive ``(A, B)`` of one chunk: at a random sentence boundary, or inside the
    sentence when the chunk holds only one; None for a one-token chunk."""
    if len(chunk) >= 2:
        a_end = rng.randint(1, len(chunk) - 1)
        return _concat(chunk[:a_end]), _concat(chunk[a_end:])
    sentence = list(chunk[0])
    if len(sentence) < 2:
        return None
    cut = rng.randint(1, len(sentence) - 1)
    return sentence[:cut], sentence[cut:]


def _concat(segments) -> list:
    return [token for segment in segments for token in segment]


def _layout(tokens_a, tokens_b, max_num_tokens, rng, cls_id, sep_id) -> SopInstance:
    is_swapped = rng.random() < 0.5
    if is_swapped:
        tokens_a, tokens_b = tokens_b, tokens_a
    truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
    tokens = [cls_id] + tokens_a + [sep_id] + tokens_b + [sep_id]
    segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
    return SopInstance(tokens, segment_ids, is_swapped)


def to_tf_example(instance: SopInstance, max_seq_length: int,
                  masked: MaskedLmPredictions | None, max_predictions_per_seq: int
                  ) -> tf.train.Example:
    """BERT's record layout with ``sentence_order_labels[1]`` instead of NSP (CONTRACTS §3)."""
    return pair_example(instance.tokens, instance.segment_ids, SOP.feature,
                        SWAPPED if instance.is_swapped else IN_ORDER, max_seq_length, masked,
                        max_predictions_per_seq)


def shard_examples(documents: Sequence, vocab: BertVocabulary, config: dict,
                   seed_scope: Iterable) -> tuple:
    """All serialized examples of one shard (documents in canonical order), shuffled, and
    their counts. Each dupe round re-draws segmentations, orders and masks."""
    seed_scope = tuple(seed_scope)
    max_seq_length = int(config["max_seq_length"])
    max_predictions = int(config["max_predictions_per_seq"])
    stats = {"instances": 0, "swapped": 0, "tokens": 0}
    stats.update(masking_stats(int(config["ngram_masking"])))
    serialized = []
    for dupe_round in range(int(config["dupe_factor"])):
        rng = seeded_rng(*seed_scope, "dupe", dupe_round)
        for document in documents:
            for instance in create_instances_from_document(
                    document, max_seq_length, config["short_seq_prob"], rng, vocab.cls_id,
                    vocab.sep_id):
                masked = None
                if not config["dynamic_masking"]:
                    masked = create_masked_lm_predictions(
                        instance.tokens, vocab, config["masked_lm_prob"], max_predictions,
                        config["whole_word_masking"], rng, config["mask_token_rate"],
                        config["random_token_rate"], int(config["ngram_masking"]))
                    count_masking(stats, masked)
                stats["instances"] += 1
                stats["swapped"] += int(instance.is_swapped)
                stats["tokens"] += len(instance.tokens) - 3
                example = to_tf_example(instance, max_seq_length, masked, max_predictions)
                serialized.append(example.SerializeToString(deterministic=True))
    seeded_rng(*seed_scope, "shuffle").shuffle(serialized)
    return serialized, stats


OBJECTIVE = registry.register(masked_lm_objective(
    "albert_mlm_sop", shard_examples, SOP,
    paper="Lan et al. 2020, ALBERT: A Lite BERT for Self-supervised Learning of Language "
          "Representations, §3.2 (sentence-order prediction), §4.1 (n-gram masking)"))
