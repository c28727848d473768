"""XLNet's permutation language-model data (Yang et al. 2019 §2.3 partial prediction, §2.5
two segments, Appendix A.2 / the reference code's `data_utils.py`): objective
``permutation_lm``.

Built by Beam (`shard_examples`, deterministic in the seed scope), as the reference's
`create_tfrecords` does:

* Layout (§2.5, reference `create_tfrecords`): a shard's documents are read as one stream
  of sentences; each record takes the next ``max_seq_length - 3`` tokens, cut at a sentence
  end (else in the middle) into A and B, and lays them out as ``A <sep> B <sep> <cls>`` with
  segment ids 0 (A and its `<sep>`), 1 (B and its `<sep>`) and 2 (`<cls>`). With
  probability 1/2 B is replaced by a span of the same length from a random place of the
  shard's stream (the reference keeps this 50% random B, though XLNet has no next-sentence
  loss, §3.2 ablation).
* Prediction targets (§2.3 partial prediction with K = 6, the paper's setting, and the
  reference's span-based `_sample_mask`): about ``L / K`` tokens (at most
  ``max_predictions_per_seq``) are chosen in spans of 1..5 whole words, p(n) ∝ 1/n, each
  span preceded / followed by a random share of ``n * 6`` context tokens (`mask_alpha` 6,
  `mask_beta` 1), topped up with single tokens; `<sep>` / `<cls>` are never targets.
  Records: ``input_ids[L]``, ``input_mask[L]``, ``segment_ids[L]`` and ``target_weights[L]``
  (1.0 on the chosen targets).

Drawn in tf.data on every read (`converter`): the factorisation order, hence the
permutation mask and target mapping. The reference draws them in its input function
(`_local_perm` in the tf.data parser), so each epoch sees a fresh order of the same
targets; the targets themselves stay fixed as the reference's `is_masked`. As `_local_perm`:
the non-target tokens come first in the factorisation order (every position may see them),
the targets and the functional tokens follow in a random order, so the targets are the last
~1/K of the order (partial prediction). ``permutation_mask[i, j] = 1`` (i may not see j)
when j is a target or functional token at or after i in the order, strictly after i for a
non-target i (a content stream always sees itself; the query stream of a target does not).
``target_mapping[k]`` is the one-hot position of the k-th target (in position order), zero
rows past the last; y = the target ids [B, K], sample_weight = 1 on real targets.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import tensorflow as tf

from lmfactory.components.pretraining_data import registry
from lmfactory.components.pretraining_data.registry import MASK_SEED
from lmfactory.components.pretraining_data.bert_mlm_nsp import seeded_rng
from lmfactory.components.pretraining_data.masking import BertVocabulary, int_feature
from lmfactory.components.pretraining_data.mlm_objective import masking_vocabulary

OBJECTIVE_NAME = "permutation_lm"
PARTIAL_PREDICTION_K = 6  # §2.3 / §3.1: K = 6
MAX_GRAM = 5  # the reference's `max_gram`: spans of 1..5 words
MASK_ALPHA, MASK_BETA = 6, 1  # context of n * alpha / beta tokens around an n-word span
RANDOM_B_PROBABILITY = 0.5
SEGMENT_A, SEGMENT_B, SEGMENT_CLS = 0, 1, 2


def sample_spans(is_start: Sequence[bool], goal: int, rng, eligible=None) -> list:
    """The reference's `_sample_mask`: a list of booleans (True = target) over a sequence
    whose word starts are ``is_start``; about ``goal`` tokens in spans of 1..MAX_GRAM whole
    words (p(n) ∝ 1/n) with context between spans, then single tokens up to ``goal``. Only
    ``eligible`` positions (default all) are chosen; never more than ``goal``."""
    length = len(is_start)
    eligible = [True] * length if eligible is None else list(eligible)
    starts = [bool(s) and e for s, e in zip(is_start, eligible)]
    mask = [False] * length
    grams = list(range(1, MAX_GRAM + 1))
    weights = [1.0 / n for n in grams]
    chosen, cursor = 0, 0
    while cursor < length and chosen < goal:
        n = min(rng.choices(grams, weights)[0], goal - chosen)
        context = n * MASK_ALPHA // MASK_BETA
        left = rng.randrange(context) if context > 0 else 0
        begin = cursor + left
        while begin < length and not starts[begin]:
            begin += 1
        if begin >= length:
            break
        end, words = begin + 1, 1
        while end < length and eligible[end]:
            if starts[end]:
                words += 1
                if words > n:
                    break
            end += 1
        end = min(end, begin + goal - chosen)
        for position in range(begin, end):
            mask[position] = True
        chosen += end - begin
        cursor = end + context - left
    free = [i for i in range(length) if eligible[i] and not mask[i]]
    rng.shuffle(free)
    for position in free[:max(goal - chosen, 0)]:
        mask[position] = True
    return mask


def layout(a: Sequence[int], b: Sequence[int], vocab: BertVocabulary) -> tuple:
    """``A <sep> B <sep> <cls>`` and its segment ids (0, 1, 2 on `<cls>`)."""
    tokens = list(a) + [vocab.sep_id] + list(b) + [vocab.sep_id, vocab.cls_id]
    segments = ([SEGMENT_A] * (len(a) + 1) + [SEGMENT_B] * (len(b) + 1) + [SEGMENT_CLS])
    return tokens, segments


def _stream(documents) -> tuple:
    """The shard's tokens in order and, per token, whether a sentence ends after it."""
    tokens, ends = [], []
    for document in documents:
        for sentence in document:
            tokens.extend(int(t) for t in sentence)
            ends.extend([False] * (len(sentence) - 1) + [True])
    return tokens, ends


def build_instances(documents, vocab: BertVocabulary, max_seq_length: int,
                    max_predictions: int, rng) -> tuple:
    """(instances, stats): each instance ``(tokens, segments, targets)``."""
    tokens, ends = _stream(documents)
    capacity = max_seq_length - 3
    instances, stats = [], {"instances": 0, "random_b": 0, "targets": 0, "tokens": len(tokens)}
    start = 0
    while start + 2 <= len(tokens):
        chunk = tokens[start:start + capacity]
        cuts = [i + 1 for i in range(len(chunk) - 1) if ends[start + i]]
        cut = rng.choice(cuts) if cuts else max(1, len(chunk) // 2)
        a, b = chunk[:cut], chunk[cut:]
        if rng.random() < RANDOM_B_PROBABILITY and len(tokens) > len(b):
            offset = rng.randrange(len(tokens) - len(b) + 1)
            b = tokens[offset:offset + len(b)]
            stats["random_b"] += 1
        sequence, segments = layout(a, b, vocab)
        special = (vocab.sep_id, vocab.cls_id)
        eligible = [t not in special for t in sequence]
        is_start = [t not in vocab.continuation_ids for t in sequence]
        goal = min(max_predictions,
                   max(1, round(len(sequence) / PARTIAL_PREDICTION_K)))
        targets = sample_spans(is_start, goal, rng, eligible)
        instances.append((sequence, segments, targets))
        stats["instances"] += 1
        stats["targets"] += sum(targets)
        start += capacity
    return instances, stats


def to_tf_example(tokens, segments, targets, max_seq_length: int, pad_id: int):
    """Records padded on the left (XLNet's side; relative attention does not care)."""
    pad = max_seq_length - len(tokens)
    feature = {
        "input_ids": int_feature([pad_id] * pad + list(tokens)),
        "input_mask": int_feature([0] * pad + [1] * len(tokens)),
        "segment_ids": int_feature([0] * pad + list(segments)),
        "target_weights": tf.train.Feature(float_list=tf.train.FloatList(
            value=[0.0] * pad + [float(t) for t in targets])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature))


def shard_examples(documents: Sequence, vocab: BertVocabulary, config: dict,
                   seed_scope: Iterable = ()) -> tuple:
    """Serialized records of one shard (documents in canonical order), shuffled, and counts."""
    seed_scope = tuple(seed_scope)
    length = int(config["max_seq_length"])
    instances, stats = build_instances(documents, vocab, length,
                                       int(config["max_predictions_per_seq"]),
                                       seeded_rng(*seed_scope, "instances"))
    serialized = [to_tf_example(*instance, length, vocab.pad_id).SerializeToString(
        deterministic=True) for instance in instances]
    seeded_rng(*seed_scope, "shuffle").shuffle(serialized)
    return serialized, stats


# --------------------------------------------------------------------------- tf.data side


def feature_spec(config: dict) -> dict:
    length = int(config["max_seq_length"])
    spec = {name: tf.io.FixedLenFeature([length], tf.int64)
            for name in ("input_ids", "input_mask", "segment_ids")}
    spec["target_weights"] = tf.io.FixedLenFeature([length], tf.float32)
    return spec


def permutation_inputs(token_ids, padding_mask, is_target, functional, num_predict,
                       seed=None) -> dict:
    """Draws a factorisation order per row (the reference's `_local_perm`) and returns
    ``permutation_mask`` [B, T, T] (float, 1: i may not see j), ``target_mapping``
    [B, K, T], ``target_ids`` [B, K] and ``target_weights`` [B, K]. ``seed``: the stateless
    seed (int [2]) the orders are drawn from; None draws from TensorFlow's global state."""
    real = tf.cast(padding_mask, tf.bool)
    is_target = tf.logical_and(tf.logical_and(is_target, real), tf.logical_not(functional))
    ordered = tf.logical_or(is_target, tf.logical_and(functional, real))
    # Rank in the factorisation order: non-target tokens first (-1), then a random order.
    order = (tf.random.uniform(tf.shape(token_ids)) if seed is None else
             tf.random.stateless_uniform(tf.shape(token_ids), tf.cast(seed, tf.int64)))
    rank = tf.where(ordered, order, -tf.ones_like(order))
    at_or_after = rank[:, :, None] <= rank[:, None, :]
    after = rank[:, :, None] < rank[:, None, :]
    hidden = tf.where(is_target[:, :, None], at_or_after, after)
    permutation_mask = tf.cast(tf.logical_and(hidden, ordered[:, None, :]), tf.float32)
    # The targets in position order, the first num_predict of them.
    length = tf.shape(token_ids)[1]
    key = tf.where(is_target, 0, 1) * length + tf.range(length)[None, :]
    positions = tf.argsort(key, axis=1)[:, :num_predict]
    count = tf.reduce_sum(tf.cast(is_target, tf.int32), axis=1)
    valid = tf.range(num_predict)[None, :] < count[:, None]
    weights = tf.cast(valid, tf.float32)
    target_mapping = tf.one_hot(positions, length) * weights[:, :, None]
    target_ids = tf.gather(token_ids, positions, batch_dims=1) * tf.cast(valid, tf.int32)
    return {"permutation_mask": permutation_mask, "target_mapping": target_mapping,
            "target_ids": target_ids, "target_weights": weights}


def converter(config: dict):
    """Parsed records -> x (`token_ids`, `padding_mask`, `segment_ids`, `permutation_mask`,
    `target_mapping`), y = target ids [B, K], sample_weight [B, K]; K =
    ``max_predictions_per_seq``. The order is redrawn on every read, from the batch's
    ``MASK_SEED`` (the objective ``draws_per_read``)."""
    ids = config.get("special_token_ids", {})
    functional_ids = [int(config[f"{role}_id"]) if f"{role}_id" in config else
                      int(ids[role]) if role in ids else None for role in ("sep", "cls")]
    if None in functional_ids:
        raise ValueError(f"{OBJECTIVE_NAME}: the pretraining config names no <sep> / <cls> "
                         f"ids (sep_id, cls_id or special_token_ids)")
    num_predict = int(config["max_predictions_per_seq"])

    def to_keras(features):
        token_ids = tf.cast(features["input_ids"], tf.int32)
        padding_mask = tf.cast(features["input_mask"], tf.bool)
        functional = tf.zeros_like(padding_mask)
        for value in functional_ids:
            functional = tf.logical_or(functional, tf.equal(token_ids, value))
        drawn = permutation_inputs(token_ids, padding_mask, features["target_weights"] > 0,
                                   functional, num_predict, seed=features[MASK_SEED])
        x = {"token_ids": token_ids, "padding_mask": padding_mask,
             "segment_ids": tf.cast(features["segment_ids"], tf.int32),
             "permutation_mask": drawn["permutation_mask"],
             "target_mapping": drawn["target_mapping"]}
        return x, drawn["target_ids"], drawn["target_weights"]

    return to_keras


def check_config(config: dict) -> None:
    """The targets are chosen by span sampling here, so the masked-LM options do not apply."""
    if config["ngram_masking"] > 0 or config["dynamic_masking"]:
        raise ValueError(f"{OBJECTIVE_NAME} chooses its targets by span sampling (§2.3); "
                         f"ngram_masking and dynamic_masking must be off")
    if int(config["max_seq_length"]) < 6:
        raise ValueError(f"{OBJECTIVE_NAME} needs max_seq_length >= 6 (A <sep> B <sep> <cls>)")


def vocabulary_state(tokenizer, tokenizer_config: dict) -> BertVocabulary:
    return masking_vocabulary(tokenizer, tokenizer_config, objective=OBJECTIVE_NAME)


def vocabulary_record(vocab: BertVocabulary) -> dict:
    return {"sep_id": vocab.sep_id, "cls_id": vocab.cls_id}


OBJECTIVE = registry.register(registry.Objective(
    name=OBJECTIVE_NAME,
    document=registry.SENTENCES,
    vocabulary_state=vocabulary_state,
    shard_examples=shard_examples,
    feature_spec=feature_spec,
    converter=converter,
    causal=False,
    draws_per_read=True,
    check_config=check_config,
    vocabulary_record=vocabulary_record,
    paper="Yang et al. 2019, XLNet (NeurIPS), §2.3 permutation LM with partial prediction "
          "(K = 6), span-based prediction and two segments (§2.5, Appendix A.2)"))
