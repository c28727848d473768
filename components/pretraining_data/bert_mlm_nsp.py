"""BERT pretraining instances: masked LM + next-sentence prediction.

Follows Devlin et al. 2019, "BERT" §3.1 (Task #1 masked LM, Task #2 NSP) and Appendix A.2
(pretraining procedure), and the data recipe of google-research/bert
``create_pretraining_data.py`` (re-implemented here from its description, on token ids):

* Instances per document (App. A.2): segments (sentences) are accumulated until they reach a
  target length (``max_seq_length - 3``; with probability ``short_seq_prob`` a random length in
  ``[2, max_seq_length - 3]`` so the model also sees short inputs), the chunk is split at a
  random segment boundary into A and B, and B is replaced by text from a random *other*
  document 50% of the time (label 1 = "NotNext"); segments of the chunk not used then go back
  to be read again. The pair is truncated one token at a time from the longer side, at the
  front or back at random, to ``max_seq_length - 3`` tokens, and laid out as
  ``[CLS] A [SEP] B [SEP]`` with segment ids 0 for ``[CLS] A [SEP]`` and 1 for ``B [SEP]``.
* Masked LM (§3.1, App. C.2): ``round(n * masked_lm_prob)`` (at least 1, at most
  ``max_predictions_per_seq``) of the ``n`` tokens other than [CLS]/[SEP] are chosen; each
  chosen token becomes [MASK] 80% of the time, a random non-special token 10%, and stays
  unchanged 10%. Positions are reported in increasing order. With ``whole_word_masking``
  all pieces of a word (for WordPiece a piece and the ``##`` pieces that follow it) are
  chosen together and share one 80/10/10 decision; ``ngram_masking`` selects spans of whole
  words instead (ALBERT §4.1). The masking code is shared with the other MLM objectives and
  lives in ``masking.py``.

Adaptations, and why:

* Scale-out. The reference keeps every document of the corpus in memory and draws the random
  next segment from the whole corpus. Here the Beam pipeline hashes documents into shards
  (see ``executor.py``); one shard (about ``documents_per_shard`` documents) is processed at a
  time, its documents sorted by content hash so the result does not depend on Beam's element
  order, and the random other document is drawn from the same shard. Each (seed, split, shard,
  dupe round) gets its own RNG (:func:`seeded_rng`), so output is a function of the seed.
* ``n`` excludes [CLS]/[SEP] (the reference counts them), so exactly ``masked_lm_prob`` of the
  maskable tokens are predicted, as §3.1 describes ("15% of all WordPiece tokens").
* NSP balance. The reference always picks a random next segment when the chunk is a single
  segment, which pushes "NotNext" above the 50% of §3.1 on corpora with long sentences or
  short paragraphs. By default the coin is thrown first and a single-segment chunk that
  must be "IsNext" is split inside the segment (BERT's "sentences" are arbitrary spans of
  contiguous text, §3). ``reference_nsp_sampling=True`` restores the reference behaviour.
* Whole-word groups only join *adjacent* pieces (a ``##`` piece right after [SEP] does not
  join the last word of segment A).

Registered as objective ``bert_mlm_nsp`` (``OBJECTIVE``; the record reader, vocabulary state
and config check are the masked-LM ones of ``mlm_objective.py``, with the ``nsp`` task).
"""

from __future__ import annotations

import hashlib
import random
from typing import Iterable, NamedTuple, Sequence

import tensorflow as tf

from lmfactory.components.pretraining_data import registry
from lmfactory.components.pretraining_data.masked_records import pair_records
from lmfactory.components.pretraining_data.masking import (  # noqa: F401  (re-exported)
    BertVocabulary, MaskedLmPredictions, count_masking, create_masked_lm_predictions,
    int_feature, masked_lm_features, masking_stats, padded)
from lmfactory.components.pretraining_data.mlm_objective import (
    SentenceTask, masked_lm_objective)

NOT_NEXT = 1  # next_sentence_labels: 0 = IsNext (B follows A), 1 = random next
IS_NEXT = 0
NSP = SentenceTask("nsp", "next_sentence_labels")


class TrainingInstance(NamedTuple):
    """One ``[CLS] A [SEP] B [SEP]`` sequence before masking."""

    tokens: list
    segment_ids: list
    is_random_next: bool


def seeded_rng(*scope) -> random.Random:
    """A ``random.Random`` seeded from ``scope`` (e.g. seed, split, shard, dupe round).

    Uses SHA-256, not ``hash()``, so the seed is the same in every process and Python run.
    """
    digest = hashlib.sha256("/".join(str(part) for part in scope).encode("utf-8")).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


# --------------------------------------------------------------------------- instances


def create_instances_from_document(documents: Sequence[Sequence[Sequence[int]]],
                                   document_index: int, max_seq_length: int,
                                   short_seq_prob: float, rng: random.Random, cls_id: int,
                                   sep_id: int, reference_nsp_sampling: bool = False) -> list:
    """Sentence-pair instances of ``documents[document_index]`` (BERT App. A.2).

    ``documents`` is the list of documents available for random-next sampling (one shard),
    each a list of segments (token-id sequences).
    """
    document = documents[document_index]
    max_num_tokens = max_seq_length - 3
    target_length = max_num_tokens
    if rng.random() < short_seq_prob:
        target_length = rng.randint(2, max_num_tokens)
    instances, chunk, chunk_length, i = [], [], 0, 0
    while i < len(document):
        chunk.append(document[i])
        chunk_length += len(document[i])
        if i == len(document) - 1 or chunk_length >= target_length:
            pair, unused_segments = _make_pair(chunk, documents, document_index, target_length,
                                               rng, reference_nsp_sampling)
            i -= unused_segments
            if pair is not None:
                instances.append(_layout_pair(*pair, max_num_tokens, rng, cls_id, sep_id))
            chunk, chunk_length = [], 0
        i += 1
    return instances


def _make_pair(chunk, documents, document_index, target_length, rng, reference_nsp_sampling):
    """Splits a chunk into (A, B, is_random_next); returns the count of unused segments."""
    has_other_document = len(documents) > 1
    wants_random_next = rng.random() < 0.5
    if len(chunk) == 1 and reference_nsp_sampling:
        wants_random_next = True
    if wants_random_next and has_other_document:
        a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
        tokens_a = _concat(chunk[:a_end])
        tokens_b = _random_next_tokens(documents, document_index,
                                       target_length - len(tokens_a), rng)
        return (tokens_a, tokens_b, True), len(chunk) - a_end
    if len(chunk) >= 2:
        a_end = rng.randint(1, len(chunk) - 1)
        return (_concat(chunk[:a_end]), _concat(chunk[a_end:]), False), 0
    segment = list(chunk[0])
    if len(segment) >= 2:  # one segment: split inside it so B still follows A
        cut = rng.randint(1, len(segment) - 1)
        return (segment[:cut], segment[cut:], False), 0
    return None, 0  # a one-token document with no other document to pair with


def _concat(segments) -> list:
    tokens = []
    for segment in segments:
        tokens.extend(segment)
    return tokens


def _random_next_tokens(documents, document_index, target_b_length, rng) -> list:
    """Text from a random start segment of a random *other* document (BERT §3.1 Task #2)."""
    other_index = rng.randrange(len(documents) - 1)
    if other_index >= document_index:
        other_index += 1
    other = documents[other_index]
    tokens_b = []
    for segment in other[rng.randrange(len(other)):]:
        tokens_b.extend(segment)
        if len(tokens_b) >= target_b_length:
            break
    return tokens_b


def _layout_pair(tokens_a, tokens_b, is_random_next, max_num_tokens, rng, cls_id,
                 sep_id) -> TrainingInstance:
    truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
    tokens = [cls_id] + tokens_a + [sep_id] + tokens_b + [sep_id]
    segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
    return TrainingInstance(tokens, segment_ids, is_random_next)


def truncate_seq_pair(tokens_a: list, tokens_b: list, max_num_tokens: int,
                      rng: random.Random) -> None:
    """Trims the longer of A/B, one token at a time from a random end, in place (App. A.2).

    Which side loses each token depends only on the lengths (the longer one, B on a tie), so
    the sides are worked out first and one coin per token decides front or back; the coins
    are drawn in the order of the one-token-at-a-time loop, so the result is the same as
    that loop's for the same ``rng``, with two slices instead of one list edit per token.
    """
    excess = len(tokens_a) + len(tokens_b) - max_num_tokens
    if excess <= 0:
        return
    fronts = [rng.random() < 0.5 for _ in range(excess)]
    difference = len(tokens_a) - len(tokens_b)
    first = min(abs(difference), excess)  # the longer side, until the lengths are equal
    # then B, A, B, A, ... (B is trimmed on a tie)
    if difference > 0:
        a_steps, b_steps = fronts[:first] + fronts[first + 1::2], fronts[first::2]
    else:
        a_steps, b_steps = fronts[first + 1::2], fronts[:first] + fronts[first::2]
    for tokens, steps in ((tokens_a, a_steps), (tokens_b, b_steps)):
        front = sum(steps)
        del tokens[len(tokens) - (len(steps) - front):]
        del tokens[:front]


# --------------------------------------------------------------------------- records


def to_tf_example(tokens, segment_ids, is_random_next: bool, max_seq_length: int,
                  masked: MaskedLmPredictions | None, max_predictions_per_seq: int
                  ) -> tf.train.Example:
    """The google-research/bert feature layout (CONTRACTS §3); no ``masked_lm_*`` when
    ``masked`` is None (dynamic masking)."""
    return pair_example(tokens, segment_ids, NSP.feature,
                        NOT_NEXT if is_random_next else IS_NEXT, max_seq_length, masked,
                        max_predictions_per_seq)


def pair_example(tokens, segment_ids, label_name: str, label: int, max_seq_length: int,
                 masked: MaskedLmPredictions | None, max_predictions_per_seq: int
                 ) -> tf.train.Example:
    """A two-segment record with one sentence-level label (NSP here, SOP in ALBERT)."""
    input_ids = masked.output_tokens if masked is not None else tokens
    features = {
        "input_ids": int_feature(padded(input_ids, max_seq_length)),
        "input_mask": int_feature(padded([1] * len(tokens), max_seq_length)),
        "segment_ids": int_feature(padded(segment_ids, max_seq_length)),
        label_name: int_feature([label]),
    }
    if masked is not None:
        features.update(masked_lm_features(masked, max_predictions_per_seq))
    return tf.train.Example(features=tf.train.Features(feature=features))


# --------------------------------------------------------------------------- one shard


def shard_examples(documents: Sequence, vocab: BertVocabulary, config: dict,
                   seed_scope: Iterable) -> tuple:
    """All serialized examples of one shard, shuffled, and their counts.

    ``documents`` must already be in a canonical order (sorted by content hash). Each dupe
    round re-creates instances with its own RNG (different segmentations and NSP pairs, like
    ``dupe_factor`` in the reference); the shard's instances are then shuffled, masked and
    serialized in batches (``masked_records.pair_records``: vectorised masking, records
    encoded with numpy), each with its own seeded stream.
    """
    seed_scope = tuple(seed_scope)
    stats = _empty_stats(config)
    instances = []
    for dupe_round in range(int(config["dupe_factor"])):
        rng = seeded_rng(*seed_scope, "dupe", dupe_round)
        for document_index in range(len(documents)):
            instances.extend(create_instances_from_document(
                documents, document_index, int(config["max_seq_length"]),
                config["short_seq_prob"], rng, vocab.cls_id, vocab.sep_id,
                config["reference_nsp_sampling"]))
    labels = [NOT_NEXT if instance.is_random_next else IS_NEXT for instance in instances]
    stats["instances"] = len(instances)
    stats["random_next"] = sum(int(instance.is_random_next) for instance in instances)
    stats["tokens"] = sum(len(instance.tokens) for instance in instances) - 3 * len(instances)
    serialized = pair_records(instances, labels, NSP.feature, vocab, config, seed_scope, stats)
    return serialized, stats


def _empty_stats(config: dict) -> dict:
    stats = {"instances": 0, "random_next": 0, "tokens": 0}
    stats.update(masking_stats(int(config.get("ngram_masking", 0))))
    return stats


OBJECTIVE = registry.register(masked_lm_objective(
    "bert_mlm_nsp", shard_examples, NSP,
    paper="Devlin et al. 2019, BERT: Pre-training of Deep Bidirectional Transformers for "
          "Language Understanding, §3.1 (masked LM, next-sentence prediction)"))
