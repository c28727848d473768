"""Masked-LM records of a whole shard at once: vectorised masking and serialisation.

The two-segment objectives (``bert_mlm_nsp``, ``albert_mlm_sop``, ``ernie_dea``) work out
their sentence-pair instances one by one in Python as token offsets (they depend on the
document's segments and on a sequential RNG), then hand all instances of a shard to
:func:`pair_records` (``mlm``'s FULL-SENTENCES blocks go to :func:`block_records`), which

1. shuffles them (the shard's record order, as ``random.shuffle`` did before),
2. masks them in batches with numpy (:func:`mask_batch`, the rule of ``masking.py``),
3. serializes them in batches (``example_encoder.serialize_examples``; the bytes of
   ``tf.train.Example.SerializeToString(deterministic=True)`` of the same features).

:func:`mask_batch` follows Devlin et al. 2019, "BERT" §3.1 Task #1 and App. C.2 exactly as
``masking.create_masked_lm_predictions`` does, for a ``[B, L]`` batch: the candidates are the
tokens other than ``cls``/``sep``, grouped into whole words with ``whole_word_masking``;
``round(n * masked_lm_prob)`` (at least 1, at most ``max_predictions_per_seq``) tokens are
chosen by visiting the groups in a uniformly random order (argsort of i.i.d. uniform keys)
and taking each group that still fits (a word that would exceed the count is skipped, a
shorter one may follow; without whole words that is the tokens with the smallest keys); each chosen group becomes the mask token with probability
``mask_token_rate``, random non-special tokens with ``random_token_rate`` (one random id per
position) and stays unchanged otherwise. Positions are reported in increasing order. Its
random numbers come from a numpy ``Generator`` seeded from the shard's seed scope, so the
records are a function of (documents, config, seed) like before, but not the same draws as
the per-instance path (whose distribution is the same). N-gram masking (ALBERT §4.1) keeps
the per-instance path (``masking.create_ngram_masked_lm_predictions``), then the same batched
serialisation.
"""

from __future__ import annotations

import functools
import hashlib
import random
from typing import NamedTuple, Sequence

import numpy as np

from lmfactory.components.pretraining_data.example_encoder import serialize_examples
from lmfactory.components.pretraining_data.masking import (
    BertVocabulary, count_masking, create_masked_lm_predictions)

BATCH = 4096  # instances masked and serialized per numpy pass


def seeded_generator(*scope) -> np.random.Generator:
    """A numpy ``Generator`` seeded from ``scope`` via SHA-256 (same in every process)."""
    digest = hashlib.sha256("/".join(str(part) for part in scope).encode("utf-8")).digest()
    return np.random.default_rng(int.from_bytes(digest[:16], "big"))


class MaskedBatch(NamedTuple):
    input_ids: np.ndarray  # [B, L] tokens after [MASK] / random / keep replacement
    positions: np.ndarray  # [B, P] increasing positions of the predictions, 0-padded
    labels: np.ndarray     # [B, P] original ids at those positions, 0-padded
    weights: np.ndarray    # [B, P] float32: 1.0 for a prediction, 0.0 for padding
    counts: dict           # masked_lm_predictions / _mask / _random / _kept, capped_instances


class VocabularyTables(NamedTuple):
    """``BertVocabulary`` as numpy lookups for :func:`mask_batch`."""

    continuation: np.ndarray  # [size] bool: the id continues the word before it
    replacement_ids: np.ndarray  # ids a random replacement may take

    @classmethod
    def of(cls, vocab: BertVocabulary) -> "VocabularyTables":
        continuation = np.zeros(vocab.size, bool)
        continuation[list(vocab.continuation_ids)] = True
        return cls(continuation, np.asarray(vocab.replacement_ids, np.int64))


def mask_batch(tokens: np.ndarray, lengths: np.ndarray, vocab: BertVocabulary,
               tables: VocabularyTables, masked_lm_prob: float, max_predictions_per_seq: int,
               whole_word_masking: bool, generator: np.random.Generator,
               mask_token_rate: float = 0.8, random_token_rate: float = 0.1) -> MaskedBatch:
    """Masked-LM targets of a batch (BERT §3.1 Task #1); ``tokens [B, L]``, the first
    ``lengths[b]`` of row ``b`` in use (see the module docstring for the rule)."""
    rows, width = tokens.shape
    in_use = np.arange(width) < lengths[:, None]
    candidate = in_use & (tokens != vocab.cls_id) & (tokens != vocab.sep_id)
    wanted = np.maximum(1, np.round(candidate.sum(axis=1) * masked_lm_prob).astype(np.int64))
    to_predict = np.minimum(max_predictions_per_seq, wanted)
    if whole_word_masking:
        selected, group = _choose_words(tokens, candidate, to_predict, tables, generator)
        # One 80/10/10 decision per group (a whole word shares it).
        decision = np.take_along_axis(generator.random(group.shape), group, axis=1)
    else:  # every token a group of its own: the to_predict smallest of i.i.d. keys
        keys = generator.random((rows, width))
        keys[~candidate] = np.inf
        smallest = np.partition(keys, min(max_predictions_per_seq, width) - 1, axis=1)
        smallest = np.sort(smallest[:, :max_predictions_per_seq], axis=1)
        threshold = smallest[np.arange(rows), np.minimum(to_predict, smallest.shape[1]) - 1]
        selected = candidate & (keys <= threshold[:, None])
        selected &= np.cumsum(selected, axis=1) <= to_predict[:, None]  # (ties)
        decision = generator.random((rows, width))
    to_mask = selected & (decision < mask_token_rate)
    to_random = selected & ~to_mask & (decision < mask_token_rate + random_token_rate)
    output = tokens.copy()
    output[to_mask] = vocab.mask_id
    random_ids = generator.integers(len(tables.replacement_ids), size=int(to_random.sum()))
    output[to_random] = tables.replacement_ids[random_ids]
    positions, labels, weights = _prediction_slots(selected, tokens, max_predictions_per_seq)
    chosen = int(selected.sum())
    counts = {"masked_lm_predictions": chosen, "masked_lm_mask": int(to_mask.sum()),
              "masked_lm_random": int(to_random.sum()),
              "masked_lm_kept": chosen - int(to_mask.sum()) - int(to_random.sum()),
              "capped_instances": int((wanted > max_predictions_per_seq).sum())}
    return MaskedBatch(output, positions, labels, weights, counts)


def _choose_words(tokens, candidate, to_predict, tables, generator):
    """Whole-word choice: ``(selected [B, L], group index [B, L])``; the words are visited in
    a uniformly random order and each one that still fits is taken."""
    rows = len(tokens)
    starts = candidate.copy()  # a piece joins the word right before it (never across cls/sep)
    starts[:, 1:] &= ~(tables.continuation[tokens[:, 1:]] & candidate[:, :-1])
    group = np.cumsum(starts, axis=1) - 1  # group index of each candidate position
    groups = max(1, int(starts.sum(axis=1).max()) if rows else 1)
    sizes = np.bincount((np.arange(rows)[:, None] * groups + group)[candidate],
                        minlength=rows * groups).reshape(rows, groups)
    keys = generator.random((rows, groups))
    keys[sizes == 0] = 2.0  # absent groups last
    order = np.argsort(keys, axis=1, kind="stable")
    ordered_sizes = np.take_along_axis(sizes, order, axis=1)
    taken = np.zeros((rows, groups), bool)
    count = np.zeros(rows, np.int64)
    for j in range(groups):  # take each group that still fits, in the random order
        size = ordered_sizes[:, j]
        take = (size > 0) & (count + size <= to_predict)
        taken[:, j] = take
        count += np.where(take, size, 0)
        if (count >= to_predict).all():
            break
    chosen_group = np.zeros((rows, groups), bool)
    np.put_along_axis(chosen_group, order, taken, axis=1)
    group = np.maximum(group, 0)
    return candidate & np.take_along_axis(chosen_group, group, axis=1), group


def _prediction_slots(selected: np.ndarray, tokens: np.ndarray, slots: int):
    """``[B, P]`` increasing positions of ``selected``, their original ids, their weights."""
    rows = selected.shape[0]
    row, column = np.nonzero(selected)  # row-major: increasing positions within a row
    per_row = selected.sum(axis=1)
    slot = np.arange(len(row)) - np.repeat(np.cumsum(per_row) - per_row, per_row)
    positions = np.zeros((rows, slots), np.int64)
    labels = np.zeros((rows, slots), np.int64)
    positions[row, slot] = column
    labels[row, slot] = tokens[row, column]
    weights = (np.arange(slots) < per_row[:, None]).astype(np.float32)
    return positions, labels, weights


# --------------------------------------------------------------------------- records


def token_stream(documents: Sequence[Sequence[Sequence[int]]]) -> tuple:
    """``(tokens, offsets)``: the documents' segments end to end as one int64 array, and
    where each document starts in it."""
    segments = [np.asarray(segment, np.int64) for document in documents for segment in document]
    lengths = np.fromiter((sum(map(len, document)) for document in documents), np.int64,
                          count=len(documents))
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return (np.concatenate(segments) if segments else np.zeros(0, np.int64)), offsets


def pair_records(stream: np.ndarray, spans: np.ndarray, labels: np.ndarray, label_name: str,
                 vocab: BertVocabulary, config: dict, seed_scope: tuple, stats: dict,
                 extra=None) -> list:
    """The shuffled, serialized records of a shard's two-segment instances.

    ``spans [N, 4]``: ``a_start, a_end, b_start, b_end`` of each instance in ``stream``
    (:func:`token_stream`), laid out as ``[CLS] A [SEP] B [SEP]`` (segment ids 0 for
    ``[CLS] A [SEP]``, 1 for ``B [SEP]``); ``labels [N]`` the sentence-level labels.
    Records: ``input_ids[L]``, ``input_mask[L]``, ``segment_ids[L]``, ``label_name[1]`` and,
    with static masking, ``masked_lm_positions/ids/weights[P]`` (CONTRACTS §3). Adds the
    masking counts to ``stats``. ``extra(spans [B, 4], generator, stats) -> (int64 features,
    float features)``: more ``[B, ...]`` features of a batch (e.g. ERNIE's entities), drawn
    after its masks.
    """
    order = seeded_generator(*seed_scope, "shuffle").permutation(len(spans))
    generator = seeded_generator(*seed_scope, "mask")
    tables = VocabularyTables.of(vocab) if not config["dynamic_masking"] else None
    length = int(config["max_seq_length"])
    records = []
    for start in range(0, len(spans), BATCH):
        chosen = order[start:start + BATCH]
        tokens, lengths, segment_ids = pair_layout(stream, spans[chosen], length, vocab.cls_id,
                                                   vocab.sep_id)
        features = {"segment_ids": segment_ids,
                    label_name: np.asarray(labels, np.int64)[chosen][:, None]}
        records.extend(_masked_batch(tokens, lengths, features, vocab, tables, config,
                                     generator, stats, extra and functools.partial(
                                         extra, spans[chosen])))
    return records


def block_records(blocks: list, repeats: int, vocab: BertVocabulary, config: dict,
                  seed_scope: tuple, stats: dict) -> list:
    """The shuffled, serialized records of one-segment blocks (token-id lists, ``cls`` ...
    ``sep`` included), each block ``repeats`` times with its own mask: ``input_ids[L]``,
    ``input_mask[L]`` and, with static masking, ``masked_lm_*[P]``. Adds the masking counts
    to ``stats``."""
    length = int(config["max_seq_length"])
    matrix = np.zeros((len(blocks), length), np.int64)
    lengths = np.fromiter(map(len, blocks), np.int64, count=len(blocks))
    if len(blocks):
        matrix[np.arange(length) < lengths[:, None]] = np.concatenate(blocks)
    order = seeded_generator(*seed_scope, "shuffle").permutation(len(blocks) * repeats)
    generator = seeded_generator(*seed_scope, "mask")
    tables = VocabularyTables.of(vocab) if not config["dynamic_masking"] else None
    records = []
    for start in range(0, len(order), BATCH):
        rows = order[start:start + BATCH] % max(1, len(blocks))
        records.extend(_masked_batch(matrix[rows], lengths[rows], {}, vocab, tables, config,
                                     generator, stats))
    return records


def pair_layout(stream: np.ndarray, spans: np.ndarray, width: int, cls_id: int, sep_id: int):
    """``(tokens [B, width], lengths [B], segment_ids [B, width])`` of ``[CLS] A [SEP] B
    [SEP]`` gathered from ``stream``, 0-padded."""
    a_start, a_end, b_start, b_end = (spans[:, i:i + 1] for i in range(4))
    column = np.arange(width)[None, :]
    b_first = a_end - a_start + 2  # column of B's first token
    lengths = b_first + b_end - b_start + 1
    in_a = (column >= 1) & (column < b_first - 1)
    in_b = (column >= b_first) & (column < lengths - 1)
    source = np.where(in_a, a_start + column - 1, b_start + column - b_first)
    tokens = np.where(in_a | in_b, stream[np.clip(source, 0, max(len(stream) - 1, 0))], 0)
    rows = np.arange(len(spans))
    tokens[:, 0] = cls_id
    tokens[rows, b_first[:, 0] - 1] = sep_id
    tokens[rows, lengths[:, 0] - 1] = sep_id
    segment_ids = ((column >= b_first) & (column < lengths)).astype(np.int64)
    return tokens, lengths[:, 0], segment_ids


def _masked_batch(tokens, lengths, features, vocab, tables, config, generator, stats,
                  extra=None) -> list:
    """Serialized records of one batch: ``features`` plus ``input_mask``, ``input_ids`` and
    (static masking) the masked-LM slots, masked with ``generator``."""
    length = tokens.shape[1]
    predictions = int(config["max_predictions_per_seq"])
    features = dict(features, input_mask=(np.arange(length) < lengths[:, None]).astype(np.int64))
    if config["dynamic_masking"]:
        features["input_ids"] = tokens
        return serialize_examples(features)
    if int(config.get("ngram_masking", 0)) > 0:
        masked = _ngram_batch(tokens, lengths, vocab, config, generator, predictions, stats)
    else:
        masked = mask_batch(tokens, lengths, vocab, tables, config["masked_lm_prob"],
                            predictions, config["whole_word_masking"], generator,
                            config["mask_token_rate"], config["random_token_rate"])
        for name, value in masked.counts.items():
            stats[name] += value
    features.update(input_ids=masked.input_ids, masked_lm_positions=masked.positions,
                    masked_lm_ids=masked.labels)
    floats = {"masked_lm_weights": masked.weights}
    if extra is not None:
        more_ints, more_floats = extra(generator, stats)
        features.update(more_ints)
        floats.update(more_floats)
    return serialize_examples(features, floats)


def _ngram_batch(tokens, lengths, vocab, config, generator, predictions, stats) -> MaskedBatch:
    """N-gram masking (ALBERT §4.1) sequence by sequence (``masking.py``), as matrices."""
    rng = random.Random(int(generator.integers(1 << 62)))
    output = tokens.copy()
    positions = np.zeros((len(tokens), predictions), np.int64)
    labels = np.zeros((len(tokens), predictions), np.int64)
    weights = np.zeros((len(tokens), predictions), np.float32)
    for row, length in enumerate(lengths.tolist()):
        masked = create_masked_lm_predictions(
            tokens[row, :length].tolist(), vocab, config["masked_lm_prob"], predictions,
            config["whole_word_masking"], rng, config["mask_token_rate"],
            config["random_token_rate"], int(config["ngram_masking"]))
        count_masking(stats, masked)
        output[row, :length] = masked.output_tokens
        count = len(masked.positions)
        positions[row, :count] = masked.positions
        labels[row, :count] = masked.labels
        weights[row, :count] = 1.0
    return MaskedBatch(output, positions, labels, weights, {})
