"""word2vec's window records, built with numpy (Mikolov et al. 2013a §3, 2013b §2.3).

Here so that a Beam worker that builds a shard imports numpy and the standard library only
(``word_windows.py`` registers the objectives, and the registry imports TensorFlow). What a
shard's pass does, for all its sentences at once:

1. Tokens that are not words of the vocabulary (``unk`` and the other special tokens) are
   dropped, as word2vec.c drops words under ``min_count`` before training.
2. Frequent-word subsampling (2013b §2.3): a word of corpus frequency f is kept with
   probability ``(sqrt(f / t) + 1) * t / f`` (word2vec.c's form of the paper's
   ``1 - sqrt(t / f)`` discard rule; t = ``subsample_threshold``, 1e-3 in word2vec.c;
   0 = off). Discarded words are removed before windows are taken, so a window reaches
   past them (word2vec.c).
3. Dynamic window (2013a §3.2: "we randomly select a number R in range <1; C>"): for each
   centre word, b ~ U{1..W}; the contexts are the kept words of its sentence at distance
   <= b, left ones first, both sides in sentence order.

One record per centre word with at least one context: ``centre_id[1]``, ``context_ids[2W]``
and ``context_mask[2W]`` (the contexts, then 0 / mask 0), serialized in batches by
``example_encoder`` (the bytes of ``tf.train.Example.SerializeToString(deterministic=True)``).

Deterministic: each pass draws from a generator seeded by ``(seed, split, shard, pass)``
(word2vec.c redraws the subsampling and the windows every epoch), and the shard's records
are then shuffled by a generator of the same scope.
"""

from __future__ import annotations

import hashlib
from typing import Iterable, Sequence

import numpy as np

from lmfactory.components.pretraining_data.example_encoder import serialize_examples

CHUNK_WORDS = 1 << 20  # words whose windows are built in one numpy pass (bounds memory)


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

    def words_of(self, ids: np.ndarray) -> np.ndarray:
        """``ids`` without the ids that are not words (special tokens, out of range)."""
        ids = np.asarray(ids, dtype=np.int64)
        ids = ids[(ids >= 0) & (ids < len(self.counts))]
        return ids[self.is_word[ids]]


def seeded_generator(*scope) -> np.random.Generator:
    """A numpy generator seeded by SHA-256 of ``scope`` (same in every process)."""
    digest = hashlib.sha256("/".join(str(part) for part in scope).encode("utf-8")).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "big"))


def subsample(ids: np.ndarray, keep: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The positions of ``ids`` that survive subsampling (one uniform draw per word)."""
    return rng.random(len(ids)) < keep[ids]


def windows(ids: np.ndarray, sentence_of: np.ndarray, window: int,
            rng: np.random.Generator) -> tuple:
    """The dynamic windows of words laid end to end (``sentence_of`` numbers each word's
    sentence, non-decreasing): b ~ U{1..window} per centre word, the contexts are the words
    of its sentence at distance 1..b. Returns ``(centres [M], contexts [M, 2 * window],
    counts [M])`` for the M words with at least one context, contexts packed to the left
    (left neighbours, then right ones, in sentence order) and padded with 0."""
    spans = rng.integers(1, window + 1, size=len(ids))
    offsets = np.concatenate([np.arange(-window, 0), np.arange(1, window + 1)])
    positions = np.arange(len(ids))[:, None] + offsets[None, :]
    inside = (positions >= 0) & (positions < len(ids))
    positions = np.clip(positions, 0, max(len(ids) - 1, 0))
    real = (inside & (sentence_of[positions] == sentence_of[:, None])
            & (np.abs(offsets)[None, :] <= spans[:, None]))
    # A stable sort of "not real" packs each row's contexts to the left, in offset order.
    order = np.argsort(~real, axis=1, kind="stable")
    contexts = np.take_along_axis(np.where(real, ids[positions], 0), order, axis=1)
    counts = real.sum(axis=1)
    has_context = counts > 0
    return ids[has_context], contexts[has_context], counts[has_context]


def _chunks(sentences: list, limit: int):
    """Consecutive groups of sentences of about ``limit`` words (at least one each)."""
    group, size = [], 0
    for sentence in sentences:
        group.append(sentence)
        size += len(sentence)
        if size >= limit:
            yield group
            group, size = [], 0
    if group:
        yield group


def pass_windows(sentences: list, keep: np.ndarray, window: int,
                 rng: np.random.Generator, chunk_words: int = CHUNK_WORDS) -> tuple:
    """One pass over word-id sentences: subsampling, then the dynamic windows. Returns
    ``(centres, contexts, counts, kept words)``."""
    parts, kept_words = [], 0
    for group in _chunks(sentences, chunk_words):
        ids = np.concatenate(group) if group else np.zeros(0, np.int64)
        sentence_of = np.repeat(np.arange(len(group)), [len(s) for s in group])
        kept = subsample(ids, keep, rng)
        kept_words += int(kept.sum())
        parts.append(windows(ids[kept], sentence_of[kept], window, rng))
    if not parts:
        return (np.zeros(0, np.int64), np.zeros((0, 2 * window), np.int64),
                np.zeros(0, np.int64), 0)
    centres, contexts, counts = (np.concatenate(part) for part in zip(*parts))
    return centres, contexts, counts, kept_words


def shard_examples(documents: Sequence, statistics: WordStatistics, config: dict,
                   seed_scope: Iterable) -> tuple:
    """The window records of one shard (documents in canonical order) and their counts."""
    seed_scope = tuple(seed_scope)
    window = int(config["window"])
    keep = statistics.keep_probabilities(float(config["subsample_threshold"]))
    sentences = [statistics.words_of(sentence) for sentences in documents
                 for sentence in sentences]
    sentences = [sentence for sentence in sentences if len(sentence)]
    stats = {"words": 0, "kept_words": 0, "windows": 0, "pairs": 0}
    passes = []
    for epoch in range(int(config["dupe_factor"])):
        rng = seeded_generator(*seed_scope, "pass", epoch)
        centres, contexts, counts, kept_words = pass_windows(sentences, keep, window, rng)
        stats["words"] += sum(len(sentence) for sentence in sentences)
        stats["kept_words"] += kept_words
        stats["pairs"] += int(counts.sum())
        passes.append((centres, contexts, counts))
    centres, contexts, counts = (np.concatenate(part) for part in zip(*passes))
    stats["windows"] = len(centres)
    order = seeded_generator(*seed_scope, "shuffle").permutation(len(centres))
    centres, contexts, counts = centres[order], contexts[order], counts[order]
    if not len(centres):
        return [], stats
    mask = np.arange(2 * window)[None, :] < counts[:, None]
    records = serialize_examples({"centre_id": centres[:, None], "context_ids": contexts,
                                  "context_mask": mask.astype(np.int64)})
    return records, stats
