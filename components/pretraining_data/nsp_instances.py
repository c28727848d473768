"""BERT's sentence-pair instances of one shard as token spans, and the shard's records
(``bert_mlm_nsp``; Devlin et al. 2019 §3.1 and App. A.2): the instance rules and the
adaptations are described in ``bert_mlm_nsp.py``, which registers the objective.

Here so that a Beam worker that builds a shard imports numpy and the standard library only
(``bert_mlm_nsp.py`` registers the objective, and the registry imports ``lmfactory.models``):
the pickled step refers to :func:`shard_examples` of this module.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from typing import Iterable, NamedTuple, Sequence

import numpy as np

from lmfactory.components.pretraining_data.masked_records import pair_records, token_stream
from lmfactory.components.pretraining_data.masking import BertVocabulary, masking_stats

NOT_NEXT = 1  # next_sentence_labels: 0 = IsNext (B follows A), 1 = random next
IS_NEXT = 0
NSP_FEATURE = "next_sentence_labels"

def seeded_rng(*scope) -> random.Random:
    """A ``random.Random`` seeded from ``scope`` (e.g. seed, split, shard, dupe round).

    Uses SHA-256, not ``hash()``, so the seed is the same in every process and Python run.
    """
    digest = hashlib.sha256("/".join(str(part) for part in scope).encode("utf-8")).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


# --------------------------------------------------------------------------- instances


class PairSpans(NamedTuple):
    """One instance before layout: A and B as ``[start, end)`` token offsets into the token
    streams of their documents (a document's segments end to end)."""

    a_document: int
    a_start: int
    a_end: int
    b_document: int
    b_start: int
    b_end: int
    is_random_next: bool


def segment_starts(document: Sequence[Sequence[int]]) -> list:
    """Offsets of a document's segments in its token stream, and its length at the end."""
    return list(itertools.accumulate(map(len, document), initial=0))


def create_pair_spans(starts: Sequence[Sequence[int]], document_index: int,
                      max_seq_length: int, short_seq_prob: float, rng: random.Random,
                      reference_nsp_sampling: bool = False) -> list:
    """Sentence-pair instances of document ``document_index`` (BERT App. A.2) as `PairSpans`.

    ``starts[d]`` is ``segment_starts`` of document ``d`` of the shard (the documents
    available for random-next sampling). Chunking, the A/B split, the random next segment
    and the truncation depend on the segment lengths only, so they are worked out on
    offsets; the tokens are gathered afterwards (``masked_records.pair_records`` for a whole
    shard, :func:`create_instances_from_document` for one document).
    """
    offsets = starts[document_index]
    count = len(offsets) - 1
    max_num_tokens = max_seq_length - 3
    target_length = max_num_tokens
    if rng.random() < short_seq_prob:
        target_length = rng.randint(2, max_num_tokens)
    spans, first, i = [], 0, 0
    while i < count:
        if i == count - 1 or offsets[i + 1] - offsets[first] >= target_length:
            pair, unused_segments = _make_pair(starts, document_index, first, i + 1,
                                               target_length, rng, reference_nsp_sampling)
            i -= unused_segments
            if pair is not None:
                spans.append(_truncated(pair, max_num_tokens, rng))
            first = i + 1
        i += 1
    return spans


def _make_pair(starts, document_index, first, stop, target_length, rng,
               reference_nsp_sampling):
    """Splits the chunk of segments ``[first, stop)`` into A and B (``PairSpans``); returns
    the count of unused segments (they go back to be read again)."""
    offsets, size = starts[document_index], stop - first
    wants_random_next = rng.random() < 0.5
    if size == 1 and reference_nsp_sampling:
        wants_random_next = True
    if wants_random_next and len(starts) > 1:
        a_end = rng.randint(1, size - 1) if size >= 2 else 1
        a_start, a_stop = offsets[first], offsets[first + a_end]
        other, b_start, b_end = _random_next(starts, document_index,
                                             target_length - (a_stop - a_start), rng)
        return PairSpans(document_index, a_start, a_stop, other, b_start, b_end,
                         True), size - a_end
    if size >= 2:
        middle = offsets[first + rng.randint(1, size - 1)]
        return PairSpans(document_index, offsets[first], middle, document_index, middle,
                         offsets[stop], False), 0
    if offsets[stop] - offsets[first] >= 2:  # one segment: split inside it, B follows A
        middle = offsets[first] + rng.randint(1, offsets[stop] - offsets[first] - 1)
        return PairSpans(document_index, offsets[first], middle, document_index, middle,
                         offsets[stop], False), 0
    return None, 0  # a one-token document with no other document to pair with


def _random_next(starts, document_index, target_b_length, rng) -> tuple:
    """Text from a random start segment of a random *other* document (BERT §3.1 Task #2),
    whole segments up to ``target_b_length`` tokens: ``(document, start, end)``."""
    other = rng.randrange(len(starts) - 1)
    if other >= document_index:
        other += 1
    offsets = starts[other]
    first = rng.randrange(len(offsets) - 1)
    stop = first + 1
    while stop < len(offsets) - 1 and offsets[stop] - offsets[first] < target_b_length:
        stop += 1
    return other, offsets[first], offsets[stop]


def _truncated(pair: PairSpans, max_num_tokens: int, rng) -> PairSpans:
    a_front, a_back, b_front, b_back = truncation(
        pair.a_end - pair.a_start, pair.b_end - pair.b_start, max_num_tokens, rng)
    return pair._replace(a_start=pair.a_start + a_front, a_end=pair.a_end - a_back,
                         b_start=pair.b_start + b_front, b_end=pair.b_end - b_back)




def truncation(length_a: int, length_b: int, max_num_tokens: int, rng: random.Random) -> tuple:
    """``(A front, A back, B front, B back)`` token counts that BERT's truncation (App. A.2)
    removes: the longer of A/B loses one token at a time, at the front or the back at random,
    until ``length_a + length_b <= max_num_tokens``.

    Which side loses each token depends only on the lengths (the longer one, B on a tie), so
    the sides are worked out first and one coin per token decides front or back; the coins
    are drawn in the order of the one-token-at-a-time loop, so the result is the same as
    that loop's for the same ``rng``.
    """
    excess = length_a + length_b - max_num_tokens
    if excess <= 0:
        return 0, 0, 0, 0
    fronts = [rng.random() < 0.5 for _ in range(excess)]
    difference = length_a - length_b
    first = min(abs(difference), excess)  # the longer side, until the lengths are equal
    # then B, A, B, A, ... (B is trimmed on a tie)
    if difference > 0:
        a_steps, b_steps = fronts[:first] + fronts[first + 1::2], fronts[first::2]
    else:
        a_steps, b_steps = fronts[first + 1::2], fronts[:first] + fronts[first::2]
    a_front, b_front = sum(a_steps), sum(b_steps)
    return a_front, len(a_steps) - a_front, b_front, len(b_steps) - b_front




# --------------------------------------------------------------------------- one shard


def shard_examples(documents: Sequence, vocab: BertVocabulary, config: dict,
                   seed_scope: Iterable) -> tuple:
    """All serialized examples of one shard, shuffled, and their counts.

    ``documents`` must already be in a canonical order (sorted by content hash). Each dupe
    round re-creates instances with its own RNG (different segmentations and NSP pairs, like
    ``dupe_factor`` in the reference), as spans of the shard's token stream; the instances
    are then gathered, shuffled, masked and serialized in batches with numpy
    (``masked_records.pair_records``), each step with its own seeded stream.
    """
    seed_scope = tuple(seed_scope)
    stats = _empty_stats(config)
    stream, bounds, is_random_next = shard_pairs(documents, config, seed_scope, stats)
    labels = np.where(is_random_next, NOT_NEXT, IS_NEXT)
    serialized = pair_records(stream, bounds, labels, NSP_FEATURE, vocab, config, seed_scope,
                              stats)
    return serialized, stats


def shard_pairs(documents: Sequence, config: dict, seed_scope: tuple, stats: dict) -> tuple:
    """``(stream, bounds [N, 4], is_random_next [N])``: the shard's instances over all dupe
    rounds as ``a_start, a_end, b_start, b_end`` in its token stream (``token_stream``);
    sets ``instances``, ``random_next`` and ``tokens`` in ``stats``."""
    starts = [segment_starts(document) for document in documents]
    spans = []
    for dupe_round in range(int(config["dupe_factor"])):
        rng = seeded_rng(*seed_scope, "dupe", dupe_round)
        for document_index in range(len(documents)):
            spans.extend(create_pair_spans(
                starts, document_index, int(config["max_seq_length"]),
                config["short_seq_prob"], rng, config["reference_nsp_sampling"]))
    stream, offsets = token_stream(documents)
    table = np.array(spans, np.int64).reshape(-1, len(PairSpans._fields))
    bounds = np.stack([table[:, 1], table[:, 2], table[:, 4], table[:, 5]], axis=1) \
        + offsets[table[:, [0, 0, 3, 3]]]
    is_random_next = table[:, 6].astype(bool)
    stats["instances"] = len(table)
    stats["random_next"] = int(is_random_next.sum())
    stats["tokens"] = int((bounds[:, 1] - bounds[:, 0] + bounds[:, 3] - bounds[:, 2]).sum())
    return stream, bounds, is_random_next


def _empty_stats(config: dict) -> dict:
    stats = {"instances": 0, "random_next": 0, "tokens": 0}
    stats.update(masking_stats(int(config.get("ngram_masking", 0))))
    return stats


