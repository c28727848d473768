"""WordPiece vocabularies: BERT pre-tokenization, the learner, and file writing.

WordPiece (Schuster & Nakajima 2012, "Japanese and Korean Voice Search"; Wu et al. 2016,
"Google's Neural Machine Translation System", §4.1) splits words into pieces from a fixed
vocabulary, greedily longest-match-first at tokenize time, marking pieces inside a word
with ``##``. BERT (Devlin et al. 2019) first applies its "basic tokenizer": optional
lower-casing and accent stripping, then splitting on whitespace and punctuation, with each
CJK character its own word.

Words are split here with the very steps the tokenizer runs at tokenize time
(:class:`lmfactory.models.tokenizers.BertWordPieceTokenizer`: BERT's normalisation, then
keras-nlp's splitting), so the learned pieces fit what the tokenizer will see. The learner
is tensorflow-text's ``wordpiece_tokenizer_learner_lib.learn`` (the algorithm behind
``bert_vocab_from_dataset``), fed with word counts.
"""

from __future__ import annotations

import collections
import logging
import os
import time
from typing import Iterable, Mapping, Sequence

RESERVED_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
SPECIAL_TOKENS = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]",
                  "mask": "[MASK]"}
VOCABULARY_FILE = "vocab.txt"
JOINER = "##"
MAX_TOKEN_LENGTH = 50  # the learner's default: longer words are left out


def pretokenize_lines(lines: Sequence[str], lowercase: bool = True,
                      strip_accents: bool = True) -> list[str]:
    """Splits a batch of lines into words exactly as ``BertWordPieceTokenizer`` does.

    BERT's normalisation (:func:`lmfactory.models.tokenizers.bert_normalize`: control
    characters dropped, Unicode spaces, accents, lowercase), then keras-hub's split on
    whitespace / punctuation / CJK (tf-text ops), on the whole batch at once.
    """
    import tensorflow as tf
    from keras_hub.src.tokenizers.word_piece_tokenizer import pretokenize

    from lmfactory.models.tokenizers import bert_normalize

    if not lines:
        return []
    normalized = bert_normalize(tf.constant(list(lines)), lowercase=lowercase,
                                strip_accents=strip_accents)
    words = pretokenize(normalized, lowercase=False, strip_accents=False, split=True,
                        split_on_cjk=True)
    return [word.decode("utf-8") for word in words.flat_values.numpy() if word]


def learn_vocabulary(word_counts: Iterable[tuple[str, int]], vocab_size: int,
                     min_frequency: int = 2,
                     reserved_tokens: Sequence[str] = RESERVED_TOKENS) -> list[str]:
    """Learns a WordPiece vocabulary of at most ``vocab_size`` tokens from word counts.

    tensorflow-text's learner (the one ``bert_vocab_from_dataset`` uses) keeps every
    sub-word, at a word start or as a ``##`` continuation, seen at least ``threshold`` times,
    recounting with the current vocabulary's segmentation for a few iterations, and
    binary-searches the threshold (from ``min_frequency`` up) until the size is within 5% of
    the target. Reserved tokens come first, then all single characters, then pieces by count.
    """
    from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner

    word_counts = [(word, int(count)) for word, count in word_counts]
    if not word_counts:
        raise ValueError("No words to learn a WordPiece vocabulary from")
    if vocab_size <= len(reserved_tokens):
        raise ValueError(f"vocab_size {vocab_size} leaves no room after the "
                         f"{len(reserved_tokens)} reserved tokens")
    started = time.perf_counter()
    ceiling = _threshold_ceiling(word_counts, vocab_size - len(reserved_tokens))
    vocabulary = learner.learn(word_counts, vocab_size=vocab_size,
                               reserved_tokens=list(reserved_tokens),
                               lower_thresh=min_frequency,
                               upper_thresh=max(ceiling, min_frequency),
                               max_input_tokens=-1, max_token_length=MAX_TOKEN_LENGTH,
                               joiner=JOINER, include_joiner_token=True)
    seconds = time.perf_counter() - started
    logging.info("WordPiece learner: %d tokens from %d distinct words in %.2fs (%.0f words/s)",
                 len(vocabulary), len(word_counts), seconds,
                 len(word_counts) / max(seconds, 1e-9))
    return _fit_to_size(vocabulary, vocab_size, reserved_tokens)


def _threshold_ceiling(word_counts: list[tuple[str, int]], room: int) -> int:
    """A sub-word frequency threshold at which the learned vocabulary surely fits ``room``.

    Every piece the learner keeps at threshold t is a word-initial or ``##`` sub-word whose
    raw count over the corpus is at least t (its counts are raw counts less prefix
    corrections, or counts along one segmentation). So ranking raw sub-word counts once
    bounds the vocabulary size at every threshold; starting the learner's binary search there
    instead of at the largest word count saves about half of its full passes.
    """
    characters = {character for word, _ in word_counts for character in word}
    room -= 3 * len(characters)  # characters, their ## forms and the character list
    if room <= 0:
        return max(count for _, count in word_counts)
    sub_word_counts = collections.Counter()
    for word, count in word_counts:
        if len(word) > MAX_TOKEN_LENGTH:
            continue
        for start in range(len(word)):
            prefix = JOINER if start else ""
            for end in range(start + 1, len(word) + 1):
                sub_word_counts[prefix + word[start:end]] += count
    if len(sub_word_counts) <= room:
        return 1
    return sorted(sub_word_counts.values(), reverse=True)[room] + 1


def _fit_to_size(vocabulary: list[str], vocab_size: int,
                 reserved_tokens: Sequence[str]) -> list[str]:
    """Reserved tokens in order at the top; cut the least frequent pieces off the end when
    the learner's threshold search could not get under ``vocab_size``."""
    rest = [token for token in vocabulary if token not in reserved_tokens]
    if len(reserved_tokens) + len(rest) > vocab_size:
        logging.warning("WordPiece learner gave %d tokens; keeping the first %d",
                        len(reserved_tokens) + len(rest), vocab_size)
    return (list(reserved_tokens) + rest)[:vocab_size]


def reserved_tokens(special_tokens: Mapping[str, str] | None) -> list[str]:
    """The distinct special tokens, in the given order: they take the first ids."""
    tokens = []
    for token in (SPECIAL_TOKENS if special_tokens is None else special_tokens).values():
        if token not in tokens:
            tokens.append(token)
    return tokens


def tokenizer_config(lowercase: bool, strip_accents: bool,
                     special_tokens: Mapping[str, str] | None = None) -> dict:
    """The ``tokenizer.json`` content for a WordPiece folder (CONTRACTS §2)."""
    return {"kind": "wordpiece", "vocabulary_file": VOCABULARY_FILE,
            "lowercase": bool(lowercase), "strip_accents": bool(strip_accents),
            "special_tokens": dict(SPECIAL_TOKENS if special_tokens is None
                                   else special_tokens)}


def write_files(output_dir: str, vocabulary: Sequence[str]) -> None:
    """Writes ``vocab.txt``: one token a line, the line number is the id."""
    import tensorflow as tf

    tf.io.gfile.makedirs(output_dir)
    with tf.io.gfile.GFile(os.path.join(output_dir, VOCABULARY_FILE), "w") as f:
        f.write("".join(token + "\n" for token in vocabulary))


def learn_vocabulary_folder(texts: Iterable[str], vocab_dir: str, vocab_size: int,
                            lowercase: bool = True, strip_accents: bool | None = None,
                            min_frequency: int = 2, chunk_lines: int = 4096) -> str:
    """Learns a WordPiece vocabulary from raw ``texts`` in this process (no Beam) and writes
    its folder (CONTRACTS §2: ``vocab.txt`` + ``tokenizer.json``); returns ``vocab_dir``.

    The same normalisation and learner as VocabularyGen, for task libraries and scripts that
    fine-tune outside the DAG. ``strip_accents`` defaults to ``lowercase`` (BERT's uncased /
    cased conventions)."""
    from lmfactory.models.tokenizers import write_tokenizer_config

    if strip_accents is None:
        strip_accents = lowercase
    counts = collections.Counter()
    texts = list(texts)
    for start in range(0, len(texts), chunk_lines):
        counts.update(pretokenize_lines(texts[start:start + chunk_lines], lowercase=lowercase,
                                        strip_accents=strip_accents))
    vocabulary = learn_vocabulary(sorted(counts.items()), vocab_size,
                                  min_frequency=min_frequency)
    write_files(vocab_dir, vocabulary)
    write_tokenizer_config(vocab_dir, tokenizer_config(lowercase, strip_accents))
    return vocab_dir
