"""The per-kind learner registry of VocabularyGen: one `Learner` record per tokenizer kind
(``wordpiece``, ``bpe``, ``sentencepiece``, ``byte``, ``word``) saying how the Beam steps
pre-tokenize and count, how the learner writes the vocabulary folder, and what the kind asks of a
configuration. ``executor.py`` dispatches on ``LEARNERS[config.kind]``.

The registry, `LEARNERS`, is filled here on import (no lazy gaps), in the order of
``models.tokenizers.kind_names()``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Callable, Mapping, Optional

from lmfactory.components.vocabulary import (bpe, byte_level, counting, sentence_piece, word,
                                             wordpiece)
from lmfactory.models import tokenizers


@dataclasses.dataclass(frozen=True)
class Learner:
    """How VocabularyGen learns one tokenizer kind.

    Attributes:
        kind: the tokenizer kind (``tokenizer.json``'s ``kind``).
        special_tokens: the role -> token set used when a configuration gives none.
        count: ``count(lines, config)`` -> (word, count) pairs of a batch of lines,
            pre-tokenized the way the kind's tokenizer will split them.
        learn_and_write: ``learn_and_write(word_counts, output_dir, config, source)`` ->
            runs the learner once and writes its files (``source``: where the counts come
            from, which the ``byte`` kind records); returns the ``tokenizer.json`` content.
        vocabulary_size: ``vocabulary_size(output_dir, settings)`` -> the number of tokens
            of a written folder whose ``tokenizer.json`` content is ``settings``.
        needs_unk: a special-token set must have an ``unk`` role.
        check_special_tokens: raises a ValueError for a special-token set the kind cannot
            use (None: no further check).
        check_vocab_size: ``check_vocab_size(vocab_size, special_tokens)`` raises a
            ValueError for a size the kind cannot have (None: no further check).
        min_symbols: tokens every vocabulary holds besides the special tokens (at least 1).
    """

    kind: str
    special_tokens: Mapping[str, str]
    count: Callable
    learn_and_write: Callable
    vocabulary_size: Callable
    needs_unk: bool = False
    check_special_tokens: Optional[Callable] = None
    check_vocab_size: Optional[Callable] = None
    min_symbols: int = 1


def _file_size(output_dir: str, settings: dict, key: str, measure: Callable) -> int:
    import tensorflow as tf

    with tf.io.gfile.GFile(os.path.join(output_dir, settings[key])) as f:
        return measure(f)


# --- wordpiece ---------------------------------------------------------------------------
def _learn_wordpiece(word_counts, output_dir: str, config, source: str) -> dict:
    specials = config.resolved_special_tokens
    vocabulary = wordpiece.learn_vocabulary(word_counts, config.vocab_size,
                                            config.min_frequency,
                                            wordpiece.reserved_tokens(specials))
    wordpiece.write_files(output_dir, vocabulary)
    return wordpiece.tokenizer_config(config.lowercase, config.strip_accents, specials)


# --- sentencepiece -----------------------------------------------------------------------
def _learn_sentencepiece(word_counts, output_dir: str, config, source: str) -> dict:
    specials = config.resolved_special_tokens
    model = sentence_piece.learn_model(word_counts, config.vocab_size, specials)
    sentence_piece.write_files(output_dir, model)
    return sentence_piece.tokenizer_config(config.lowercase, config.strip_accents, specials)


def _sentencepiece_size(output_dir: str, settings: dict) -> int:
    import tensorflow as tf

    path = os.path.join(output_dir, settings.get("model_file", sentence_piece.MODEL_FILE))
    with tf.io.gfile.GFile(path, "rb") as f:
        return sentence_piece.vocabulary_size(f.read())


# --- bpe ---------------------------------------------------------------------------------
def _learn_bpe(word_counts, output_dir: str, config, source: str) -> dict:
    word_counts = list(word_counts)  # read twice: merges, then the word table
    specials = config.resolved_special_tokens
    special_tokens, first = bpe.special_token_layout(specials)
    tokens, merges = bpe.learn_merges(word_counts, config.vocab_size, config.min_frequency,
                                      special_tokens, specials_first=first)
    bpe.write_files(output_dir, tokens, merges, word_counts)
    return bpe.tokenizer_config(specials)


# --- byte --------------------------------------------------------------------------------
def _write_byte(word_counts, output_dir: str, config, source: str) -> dict:
    # Nothing to learn: the byte statistics are recorded.
    byte_level.write_files(output_dir, word_counts, source)
    return byte_level.tokenizer_config(config.resolved_special_tokens)


def _check_byte_vocab_size(vocab_size: int, special_tokens) -> None:
    size = byte_level.vocabulary_size(special_tokens)
    if vocab_size != size:
        raise ValueError(f"vocab_size for byte must be {size} (the 256 byte values "
                         f"+ {size - 256} special token(s)), got {vocab_size}")


# --- word --------------------------------------------------------------------------------
def _learn_word(word_counts, output_dir: str, config, source: str) -> dict:
    specials = config.resolved_special_tokens
    tokens, counts = word.learn_vocabulary(word_counts, config.vocab_size,
                                           config.min_frequency, specials)
    word.write_files(output_dir, tokens, counts)
    return word.tokenizer_config(config.lowercase, specials)


LEARNERS = {learner.kind: learner for learner in (
    Learner("wordpiece", wordpiece.SPECIAL_TOKENS, counting.count_wordpiece, _learn_wordpiece,
            lambda output_dir, settings: _file_size(output_dir, settings, "vocabulary_file",
                                                    lambda f: sum(1 for _ in f)),
            needs_unk=True),
    Learner("bpe", bpe.SPECIAL_TOKENS, counting.count_bpe, _learn_bpe,
            lambda output_dir, settings: _file_size(output_dir, settings, "vocabulary_file",
                                                    lambda f: len(json.load(f))),
            min_symbols=len(bpe.BYTE_SYMBOLS)),
    Learner("sentencepiece", sentence_piece.SPECIAL_TOKENS, counting.count_sentencepiece,
            _learn_sentencepiece, _sentencepiece_size, needs_unk=True),
    Learner("byte", byte_level.SPECIAL_TOKENS, counting.count_byte, _write_byte,
            lambda output_dir, settings: byte_level.vocabulary_size(
                settings.get("special_tokens", {})),
            check_special_tokens=tokenizers.check_byte_special_tokens,
            check_vocab_size=_check_byte_vocab_size),
    Learner("word", word.SPECIAL_TOKENS, counting.count_word, _learn_word,
            lambda output_dir, settings: _file_size(output_dir, settings, "vocabulary_file",
                                                    lambda f: sum(1 for _ in f)),
            needs_unk=True, check_special_tokens=word.check_special_tokens),
)}

__all__ = ["LEARNERS", "Learner"]
