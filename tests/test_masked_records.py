"""The batched masked-LM record path (masked_records.py, example_encoder.py) against the
per-instance rules it replaces: identical bytes for the tf.train.Example encoder, identical
truncation, and the same masking distribution (BERT §3.1: 15% of the tokens other than
[CLS]/[SEP], 80% [MASK] / 10% random / 10% unchanged, whole words together)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import tensorflow as tf

from lmfactory.components.pretraining_data import bert_mlm_nsp, features, masked_records
from lmfactory.components.pretraining_data.example_encoder import serialize_examples
from lmfactory.components.pretraining_data.masking import (
    BertVocabulary, candidate_groups, create_masked_lm_predictions)

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
TOKENS = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]"]
          + [f"w{i}" for i in range(300)] + [f"##p{i}" for i in range(200)])
VOCAB = BertVocabulary.from_tokens(
    TOKENS, {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"})
WORDS, PIECES = range(6, 306), range(306, 506)


def _pairs(count: int, seed: int, max_length: int = 128) -> list:
    """``[CLS] A [SEP] B [SEP]`` token lists of words, a third of them followed by pieces."""
    rng = random.Random(seed)

    def segment(length):
        return [rng.choice(PIECES) if rng.random() < 0.3 else rng.choice(WORDS)
                for _ in range(length)]

    pairs = []
    for _ in range(count):
        total = rng.randint(4, max_length - 3)
        a = rng.randint(1, total - 1)
        pairs.append([CLS] + segment(a) + [SEP] + segment(total - a) + [SEP])
    return pairs


def _reference_truncation(tokens_a, tokens_b, max_num_tokens, rng):
    """The one-token-at-a-time loop of BERT App. A.2 that truncate_seq_pair replaces."""
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def test_truncate_seq_pair_equals_the_token_loop():
    draws = random.Random(0)
    for _ in range(3000):
        a, b = list(range(draws.randint(0, 90))), list(range(100, 100 + draws.randint(0, 90)))
        limit, seed = draws.randint(1, 120), draws.random()
        expected_a, expected_b, reference_rng = list(a), list(b), random.Random(seed)
        _reference_truncation(expected_a, expected_b, limit, reference_rng)
        rng = random.Random(seed)
        bert_mlm_nsp.truncate_seq_pair(a, b, limit, rng)
        assert (a, b) == (expected_a, expected_b)
        assert rng.random() == reference_rng.random()  # the same draws were used


def test_encoder_bytes_equal_tf_example_serialization():
    rng = np.random.default_rng(1)
    rows = 300
    ints = {"input_ids": rng.integers(0, 30000, (rows, 64)),
            "segment_ids": rng.integers(0, 2, (rows, 64)),
            "b": rng.integers(-2 ** 63, 2 ** 63 - 1, (rows, 3), dtype=np.int64),
            "a_long_name": rng.integers(0, 2 ** 40, (rows, 200)),  # > 127-byte lists
            "label": np.zeros((rows, 1), np.int64)}
    floats = {"masked_lm_weights": rng.random((rows, 20)).astype(np.float32),
              "B": rng.standard_normal((rows, 1))}
    ours = serialize_examples(ints, floats)
    for row in range(rows):
        feature = {name: tf.train.Feature(int64_list=tf.train.Int64List(
            value=values[row].tolist())) for name, values in ints.items()}
        feature.update({name: tf.train.Feature(float_list=tf.train.FloatList(
            value=values[row].tolist())) for name, values in floats.items()})
        expected = tf.train.Example(features=tf.train.Features(feature=feature))
        assert ours[row] == expected.SerializeToString(deterministic=True)
    with pytest.raises(ValueError, match="at least one value"):
        serialize_examples({"x": np.zeros((2, 0), np.int64)})


def _padded(sequences, width):
    lengths = np.array([len(sequence) for sequence in sequences])
    values = np.zeros((len(sequences), width), np.int64)
    for row, sequence in enumerate(sequences):
        values[row, :len(sequence)] = sequence
    return values, lengths


def _mask(pairs, whole_word, seed, predictions=20, prob=0.15):
    tokens, lengths = _padded(pairs, 128)
    return tokens, lengths, masked_records.mask_batch(
        tokens, lengths, VOCAB, masked_records.VocabularyTables.of(VOCAB), prob, predictions,
        whole_word, masked_records.seeded_generator(seed))


def test_batch_masking_follows_the_bert_rule():
    pairs = _pairs(3000, seed=1)
    tokens, lengths, masked = _mask(pairs, whole_word=False, seed=2)
    maskable = lengths - 3
    counts = masked.weights.sum(axis=1).astype(int)
    # Token masking: exactly min(P, max(1, round(0.15 n))) predictions per sequence.
    assert (counts == np.minimum(20, np.maximum(1, np.round(maskable * 0.15)))).all()
    shares = {"mask": 0, "random": 0, "kept": 0}
    for row, pair in enumerate(pairs):
        positions = masked.positions[row, :counts[row]].tolist()
        assert positions == sorted(set(positions))
        assert masked.positions[row, counts[row]:].tolist() == [0] * (20 - counts[row])
        assert masked.labels[row, :counts[row]].tolist() == [pair[p] for p in positions]
        assert all(pair[p] not in (CLS, SEP) and p < len(pair) for p in positions)
        output = masked.input_ids[row]
        untouched = np.setdiff1d(np.arange(128), positions)
        assert (output[untouched] == tokens[row, untouched]).all()
        for p in positions:
            shares["mask" if output[p] == MASK else "kept" if output[p] == pair[p]
                   else "random"] += 1
            assert output[p] not in (PAD, UNK, CLS, SEP, 5)  # never a special as random
    selected = counts.sum()
    assert masked.counts["masked_lm_predictions"] == selected
    assert masked.counts["masked_lm_mask"] == shares["mask"]
    # (a random id may equal the original: counted as random, observed as kept)
    assert masked.counts["masked_lm_random"] + masked.counts["masked_lm_kept"] == \
        shares["random"] + shares["kept"]
    # Random replacements can hit the original id (kept); compare with the rates it implies.
    assert abs(shares["mask"] / selected - 0.8) < 0.015
    assert abs(shares["random"] / selected - 0.1) < 0.015
    assert abs(shares["kept"] / selected - 0.1) < 0.015
    # Every candidate position is equally likely to be chosen (uniform without replacement):
    # chosen counts per position bin against their expectation, sum of count / n per row.
    chosen_at, expected_at = np.zeros(128), np.zeros(128)
    np.add.at(chosen_at, masked.positions[masked.weights > 0], 1)
    for row, pair in enumerate(pairs):
        candidates = [p for p, token in enumerate(pair) if token not in (CLS, SEP)]
        expected_at[candidates] += counts[row] / len(candidates)
    for start in range(0, 120, 20):
        observed, expected = chosen_at[start:start + 20].sum(), expected_at[start:start + 20].sum()
        assert abs(observed - expected) < 0.05 * expected
    capped = _mask(pairs, whole_word=False, seed=2, predictions=5)[2]
    assert capped.counts["capped_instances"] == int((np.round(maskable * 0.15) > 5).sum())
    assert (capped.weights.sum(axis=1) <= 5).all()


def test_batch_whole_word_masking_matches_the_per_instance_path():
    pairs = _pairs(3000, seed=3)
    _, _, masked = _mask(pairs, whole_word=True, seed=4)
    batch_counts = masked.weights.sum(axis=1)
    rng = random.Random(5)
    reference_counts, batch_words, reference_words = [], 0, 0
    for row, pair in enumerate(pairs):
        chosen = set(masked.positions[row, :int(batch_counts[row])].tolist())
        groups = candidate_groups(pair, VOCAB, True)
        hits = [sum(p in chosen for p in group) for group in groups]
        assert all(hit in (0, len(group)) for hit, group in zip(hits, groups))
        batch_words += sum(len(group) > 1 and hit > 0 for hit, group in zip(hits, groups))
        for group in groups:  # one 80/10/10 decision per word: [MASK] for all or none
            if len(group) > 1 and group[0] in chosen:
                is_mask = [masked.input_ids[row, p] == MASK for p in group]
                assert all(is_mask) or not any(is_mask)
        reference = create_masked_lm_predictions(pair, VOCAB, 0.15, 20, True, rng)
        reference_counts.append(len(reference.positions))
        reference_words += sum(len(group) > 1 and group[0] in reference.positions
                               for group in groups)
    # Same distribution as masking.create_masked_lm_predictions: predictions per sequence
    # and the share of multi-piece words among the chosen ones.
    assert abs(batch_counts.mean() - np.mean(reference_counts)) < 0.02 * np.mean(reference_counts)
    assert abs(batch_words - reference_words) < 0.06 * reference_words


def test_shard_examples_records_are_deterministic_and_parse():
    documents = [[pair[1:pair.index(SEP)], pair[pair.index(SEP) + 1:-1]] * 3
                 for pair in _pairs(60, seed=6, max_length=60)]
    config = features.resolve_config({"dupe_factor": 2, "max_seq_length": 64})
    records, stats = bert_mlm_nsp.shard_examples(documents, VOCAB, config, (7, "train", 0))
    again, _ = bert_mlm_nsp.shard_examples(documents, VOCAB, config, (7, "train", 0))
    other, _ = bert_mlm_nsp.shard_examples(documents, VOCAB, config, (8, "train", 0))
    assert records == again and records != other and len(records) == stats["instances"]
    parsed = tf.io.parse_example(records, features.feature_spec(config))
    weights = parsed["masked_lm_weights"].numpy()
    assert weights.sum() == stats["masked_lm_predictions"]
    assert parsed["next_sentence_labels"].numpy().sum() == stats["random_next"]
    lengths = parsed["input_mask"].numpy().sum(axis=1)
    assert lengths.sum() - 3 * len(records) == stats["tokens"]
    segments = parsed["segment_ids"].numpy()
    ids = parsed["input_ids"].numpy()
    for row, length in enumerate(lengths):
        first_b = int((segments[row] == 0).sum() - (64 - length))
        assert segments[row, first_b:length].all() and ids[row, first_b - 1] == SEP
        assert ids[row, 0] == CLS and ids[row, length - 1] == SEP
        assert (ids[row, length:] == 0).all()


def test_shard_spans_gather_the_instances_of_the_token_path():
    """The shard's records (dynamic masking: unmasked ids) hold exactly the instances that
    create_instances_from_document lays out from token lists with the same RNGs."""
    documents = [[pair[1:pair.index(SEP)], pair[pair.index(SEP) + 1:-1], [7, 8]]
                 for pair in _pairs(40, seed=8, max_length=50)]
    config = features.resolve_config({"dupe_factor": 2, "max_seq_length": 48,
                                      "dynamic_masking": True, "short_seq_prob": 0.3})
    records, _ = bert_mlm_nsp.shard_examples(documents, VOCAB, config, (9, "eval", 1))
    parsed = tf.io.parse_example(records, features.feature_spec(config))
    rows = sorted(
        (tuple(ids[:sum(mask)]), tuple(segments[:sum(mask)]), int(label[0]))
        for ids, mask, segments, label in zip(*(parsed[name].numpy().tolist() for name in (
            "input_ids", "input_mask", "segment_ids", "next_sentence_labels"))))
    expected = []
    for dupe_round in range(2):
        rng = bert_mlm_nsp.seeded_rng(9, "eval", 1, "dupe", dupe_round)
        for index in range(len(documents)):
            expected.extend(
                (tuple(instance.tokens), tuple(instance.segment_ids),
                 int(instance.is_random_next))
                for instance in bert_mlm_nsp.create_instances_from_document(
                    documents, index, 48, 0.3, rng, CLS, SEP))
    assert rows == sorted(expected) and len(rows) > 100
