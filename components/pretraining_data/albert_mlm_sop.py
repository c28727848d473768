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
``[CLS] A [SEP] B [SEP]`` with segment ids 0 / 1, as in BERT. The instances are worked out
as offsets (:func:`sop_spans`) and gathered, shuffled, masked and serialized for a whole shard
in numpy batches (``masked_records.pair_records``, as ``bert_mlm_nsp``). Masking (ALBERT §4.1
uses n-gram masking, ``ngram_masking: 3``) is the shared ``masking.py`` rule.

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

import numpy as np
import tensorflow as tf

from lmfactory.components.pretraining_data import registry
from lmfactory.components.pretraining_data.bert_mlm_nsp import pair_example
from lmfactory.components.pretraining_data.masked_records import pair_records, token_stream
from lmfactory.components.pretraining_data.masking import (
    BertVocabulary, MaskedLmPredictions, masking_stats)
from lmfactory.components.pretraining_data.nsp_instances import (
    seeded_rng, segment_starts, truncation)
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
    """Sentence-order instances of one document (a list of token-id sentences):
    :func:`sop_spans` laid out as ``[CLS] A [SEP] B [SEP]``."""
    stream = [token for segment in document for token in segment]
    instances = []
    for a_start, a_end, b_start, b_end, is_swapped in sop_spans(
            segment_starts(document), max_seq_length, short_seq_prob, rng):
        tokens_a, tokens_b = stream[a_start:a_end], stream[b_start:b_end]
        tokens = [cls_id] + tokens_a + [sep_id] + tokens_b + [sep_id]
        segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
        instances.append(SopInstance(tokens, segment_ids, is_swapped))
    return instances


def sop_spans(offsets: Sequence[int], max_seq_length: int, short_seq_prob: float,
              rng: random.Random) -> list:
    """The instances of one document as ``(a_start, a_end, b_start, b_end, is_swapped)``
    offsets into its token stream (``offsets``: ``segment_starts`` of the document): chunks
    up to the target length, each split into consecutive A and B (:func:`split_chunk`'s
    rule), swapped with probability 0.5, then truncated (BERT App. A.2)."""
    max_num_tokens = max_seq_length - 3
    target_length = max_num_tokens
    if rng.random() < short_seq_prob:
        target_length = rng.randint(2, max_num_tokens)
    spans, first = [], 0
    count = len(offsets) - 1
    for i in range(count):
        if i == count - 1 or offsets[i + 1] - offsets[first] >= target_length:
            pair = _split_span(offsets, first, i + 1, rng)
            if pair is not None:
                spans.append(_swapped_and_truncated(*pair, max_num_tokens, rng))
            first = i + 1
    return spans


def _split_span(offsets, first: int, stop: int, rng):
    """:func:`split_chunk` on the offsets of segments ``[first, stop)``."""
    if stop - first >= 2:
        middle = offsets[first + rng.randint(1, stop - first - 1)]
        return offsets[first], middle, middle, offsets[stop]
    if offsets[stop] - offsets[first] < 2:
        return None
    middle = offsets[first] + rng.randint(1, offsets[stop] - offsets[first] - 1)
    return offsets[first], middle, middle, offsets[stop]


def _swapped_and_truncated(a_start, a_end, b_start, b_end, max_num_tokens, rng) -> tuple:
    is_swapped = rng.random() < 0.5
    if is_swapped:
        a_start, a_end, b_start, b_end = b_start, b_end, a_start, a_end
    a_front, a_back, b_front, b_back = truncation(a_end - a_start, b_end - b_start,
                                                  max_num_tokens, rng)
    return a_start + a_front, a_end - a_back, b_start + b_front, b_end - b_back, is_swapped


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
    their counts. Each dupe round re-draws segmentations and orders with its own RNG, as
    spans of the shard's token stream; the instances are then gathered, shuffled, masked and
    serialized in batches with numpy (``masked_records.pair_records``), as ``bert_mlm_nsp``'s."""
    seed_scope = tuple(seed_scope)
    stats = {"instances": 0, "swapped": 0, "tokens": 0}
    stats.update(masking_stats(int(config["ngram_masking"])))
    starts = [segment_starts(document) for document in documents]
    rows = []
    for dupe_round in range(int(config["dupe_factor"])):
        rng = seeded_rng(*seed_scope, "dupe", dupe_round)
        for index, offsets in enumerate(starts):
            rows.extend((index, *span) for span in sop_spans(
                offsets, int(config["max_seq_length"]), config["short_seq_prob"], rng))
    stream, document_offsets = token_stream(documents)
    table = np.array(rows, np.int64).reshape(-1, 6)
    bounds = table[:, 1:5] + document_offsets[table[:, 0]][:, None]
    swapped = table[:, 5]
    stats["instances"] = len(table)
    stats["swapped"] = int(swapped.sum())
    stats["tokens"] = int((bounds[:, 1] - bounds[:, 0] + bounds[:, 3] - bounds[:, 2]).sum())
    labels = np.where(swapped > 0, SWAPPED, IN_ORDER)
    serialized = pair_records(stream, bounds, labels, SOP.feature, vocab, config, seed_scope,
                              stats)
    return serialized, stats


OBJECTIVE = registry.register(masked_lm_objective(
    "albert_mlm_sop", shard_examples, SOP,
    paper="Lan et al. 2020, ALBERT: A Lite BERT for Self-supervised Learning of Language "
          "Representations, §3.2 (sentence-order prediction), §4.1 (n-gram masking)"))
