"""word2vec training windows (Mikolov et al. 2013a §3, 2013b §2.3): the ``skipgram`` and
``cbow`` objectives.

Both models read the same thing from the corpus: a centre word and the words around it. So
both objectives write the same record, one per kept centre word:

* ``centre_id[1]``, the centre word;
* ``context_ids[2W]`` and ``context_mask[2W]`` (W = ``window``), the words at distance
  1..b on either side inside the sentence, padded with 0 / mask 0.

and their converters turn it into what the task models train on (skip-gram: every real
(centre, context) pair predicts the context word from the centre, 2013a §3.2; CBOW: the
mean of the context vectors predicts the centre, §3.1). Building them:

1. Sentences are the corpus's lines (CONTRACTS §1). Tokens that are not words of the
   vocabulary (``unk`` and the other special tokens) are dropped, as word2vec.c drops words
   under ``min_count`` before training.
2. Frequent-word subsampling (2013b §2.3): a word of corpus frequency f is kept with
   probability ``(sqrt(f / t) + 1) * t / f`` (word2vec.c's form of the paper's
   ``1 - sqrt(t / f)`` discard rule; t = ``subsample_threshold``, 1e-3 in word2vec.c;
   0 = off). Discarded words are removed before windows are taken, so a window reaches
   past them (word2vec.c).
3. Dynamic window (2013a §3.2: "we randomly select a number R in range <1; C>"): for each
   centre word, b ~ U{1..W}; the contexts are the kept words at distance <= b.

Word counts come from the vocabulary (the ``word`` tokenizer kind saves per-word corpus
counts); ``pretraining_config.json`` records them as ``token_counts`` (by id), so the task
model's negative-sampling table (unigram^0.75, 2013b §2.2) is built from the same counts.
``dupe_factor`` passes are written, each with its own subsampling and windows (word2vec.c
redraws both every epoch). Negatives are drawn by the task model at train time.

Deterministic: each pass draws from a generator seeded by ``(seed, split, shard, pass)``,
and the shard's records are then shuffled by a generator of the same scope.
"""

from __future__ import annotations

import hashlib
from typing import Iterable, Sequence

import numpy as np
import tensorflow as tf

from lmfactory.components.pretraining_data import registry

SKIPGRAM = "skipgram"
CBOW = "cbow"
PAPERS = ("Mikolov, Chen, Corrado, Dean 2013, Efficient Estimation of Word Representations in "
          "Vector Space, §3 (CBOW, skip-gram); Mikolov, Sutskever, Chen, Corrado, Dean 2013, "
          "Distributed Representations of Words and Phrases and their Compositionality, §2.2 "
          "(negative sampling), §2.3 (subsampling)")


class WordStatistics:
    """What building windows needs from the vocabulary: the corpus count of each id (0 for
    special tokens) and the ids that are not words (dropped from sentences)."""

    def __init__(self, counts: Sequence[int], special_ids: Iterable[int] = ()):
        self.counts = np.asarray(counts, dtype=np.int64)
        if self.counts.ndim != 1 or (self.counts < 0).any():
            raise ValueError("word counts must be a 1-D list of non-negative integers")
        self.special_ids = sorted({int(i) for i in special_ids})
        self.is_word = self.counts > 0
        self.is_word[self.special_ids] = False
        self.total = int(self.counts[self.is_word].sum())
        if self.total == 0:
            raise ValueError("The vocabulary records no word counts: word2vec needs the "
                             "per-word corpus counts of the 'word' tokenizer kind")

    def keep_probabilities(self, threshold: float) -> np.ndarray:
        """P(keep) of each id under subsampling with threshold ``threshold`` (word2vec.c:
        ``(sqrt(f / t) + 1) * t / f``, capped at 1; 1 for every word when t = 0)."""
        keep = np.zeros(len(self.counts))
        if threshold <= 0:
            keep[self.is_word] = 1.0
            return keep
        frequency = self.counts[self.is_word] / self.total
        keep[self.is_word] = np.minimum(
            1.0, (np.sqrt(frequency / threshold) + 1.0) * threshold / frequency)
        return keep


def seeded_generator(*scope) -> np.random.Generator:
    """A numpy generator seeded by SHA-256 of ``scope`` (same in every process)."""
    digest = hashlib.sha256("/".join(str(part) for part in scope).encode("utf-8")).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "big"))


def subsample(ids: np.ndarray, keep: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The words of a sentence that survive subsampling (one uniform draw per word)."""
    return ids[rng.random(len(ids)) < keep[ids]]


def sentence_windows(ids: np.ndarray, window: int, rng: np.random.Generator):
    """``(centre, contexts)`` for every word of a (subsampled) sentence: b ~ U{1..window}
    per centre word, the contexts are the words at distance 1..b (inside the sentence)."""
    spans = rng.integers(1, window + 1, size=len(ids))
    for position, (centre, span) in enumerate(zip(ids, spans)):
        left = ids[max(0, position - span):position]
        right = ids[position + 1:position + 1 + span]
        contexts = np.concatenate([left, right])
        if len(contexts):
            yield int(centre), contexts


class RecordEncoder:
    """Serializes window records, reusing one ``tf.train.Example`` whose value lists are
    overwritten (3x faster than building a proto per record; the same bytes)."""

    def __init__(self, window: int):
        self.length = 2 * window
        self._example = tf.train.Example()
        feature = self._example.features.feature
        self._centre = feature["centre_id"].int64_list.value
        self._contexts = feature["context_ids"].int64_list.value
        self._mask = feature["context_mask"].int64_list.value
        self._masks = [[1] * n + [0] * (self.length - n) for n in range(self.length + 1)]

    def encode(self, centre: int, contexts: np.ndarray) -> bytes:
        count = len(contexts)
        self._centre[:] = [int(centre)]
        self._contexts[:] = [int(i) for i in contexts] + [0] * (self.length - count)
        self._mask[:] = self._masks[count]
        return self._example.SerializeToString(deterministic=True)


def shard_examples(documents: Sequence, statistics: WordStatistics, config: dict,
                   seed_scope: Iterable) -> tuple:
    """The window records of one shard (documents in canonical order) and their counts."""
    seed_scope = tuple(seed_scope)
    window = int(config["window"])
    keep = statistics.keep_probabilities(float(config["subsample_threshold"]))
    encoder = RecordEncoder(window)
    records, stats = [], {"words": 0, "kept_words": 0, "windows": 0, "pairs": 0}
    for epoch in range(int(config["dupe_factor"])):
        rng = seeded_generator(*seed_scope, "pass", epoch)
        for sentences in documents:
            for sentence in sentences:
                ids = np.asarray(sentence, dtype=np.int64)
                ids = ids[(ids >= 0) & (ids < len(keep))]
                ids = ids[statistics.is_word[ids]]
                stats["words"] += len(ids)
                kept = subsample(ids, keep, rng)
                stats["kept_words"] += len(kept)
                for centre, contexts in sentence_windows(kept, window, rng):
                    records.append(encoder.encode(centre, contexts))
                    stats["pairs"] += len(contexts)
    stats["windows"] = len(records)
    order = seeded_generator(*seed_scope, "shuffle").permutation(len(records))
    return [records[i] for i in order], stats


# --------------------------------------------------------------------------- registry record


def word_statistics(tokenizer, tokenizer_config: dict) -> WordStatistics:
    """The per-id corpus counts the ``word`` tokenizer kind records (``counts.txt``); the
    special tokens (``unk`` counts every out-of-vocabulary word) are not words."""
    from lmfactory.models.tokenizers.word import word_counts

    if tokenizer_config.get("kind") != "word":
        raise ValueError(f"word2vec's objectives need per-word corpus counts: use the 'word' "
                         f"tokenizer kind, not {tokenizer_config.get('kind')!r}")
    counts = word_counts(tokenizer_config[registry.VOCABULARY_FOLDER])
    specials = tokenizer_config.get("special_tokens", {}).values()
    special_ids = [tokenizer.token_to_id(token) for token in specials]
    return WordStatistics(list(counts), special_ids)


def check_config(config: dict) -> None:
    window = config["window"]
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an integer >= 1, got {window!r}")
    if not 0.0 <= float(config["subsample_threshold"]) < 1.0:
        raise ValueError(f"subsample_threshold must lie in [0, 1) (0 = no subsampling), got "
                         f"{config['subsample_threshold']!r}")


def feature_spec(config: dict) -> dict:
    length = 2 * int(config["window"])
    return {"centre_id": tf.io.FixedLenFeature([1], tf.int64),
            "context_ids": tf.io.FixedLenFeature([length], tf.int64),
            "context_mask": tf.io.FixedLenFeature([length], tf.int64)}


def window_batch(features: dict):
    """Records -> x = ``{"centre_ids" [B], "context_ids" [B, 2W], "context_mask" [B, 2W]
    bool}``, y = the centre ids [B], sample_weight = the context mask as float [B, 2W]
    (the task models compute their loss from x)."""
    centre_ids = tf.cast(features["centre_id"][:, 0], tf.int32)
    context_mask = features["context_mask"] > 0
    x = {"centre_ids": centre_ids,
         "context_ids": tf.cast(features["context_ids"], tf.int32),
         "context_mask": context_mask}
    return x, centre_ids, tf.cast(context_mask, tf.float32)


def converter(config: dict):
    return window_batch


def vocabulary_record(statistics: WordStatistics) -> dict:
    """``token_counts``: the corpus count of every id, 0 for the special tokens (the noise
    distribution's source: ``unk`` and the others are never drawn as negatives)."""
    counts = np.where(statistics.is_word, statistics.counts, 0)
    return {"token_counts": [int(count) for count in counts]}


for _name in (SKIPGRAM, CBOW):
    registry.register(registry.Objective(
        name=_name, document=registry.SENTENCES, vocabulary_state=word_statistics,
        shard_examples=shard_examples, feature_spec=feature_spec, converter=converter,
        check_config=check_config, vocabulary_record=vocabulary_record, paper=PAPERS))
