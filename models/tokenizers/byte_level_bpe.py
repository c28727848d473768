"""Byte-pair encoding: the ``bpe`` kind.

``{"kind": "bpe", "vocabulary_file": "vocab.json", "merges_file": "merges.txt",
"special_tokens": {"end_of_text": "<|endoftext|>", "pad": "<|endoftext|>"},
"word_pieces_file": "word_pieces.txt"}`` -> :class:`ByteLevelBpeTokenizer`, keras-nlp's
``BytePairTokenizer`` (GPT-2's byte-level scheme, Radford et al. 2019 §2.2; RoBERTa's
``<s> <pad> </s> <unk> <mask>`` set works the same way) with a faster split and a static
word table (``byte_level_fast.py``; the ids are keras-nlp's). Every special token is
unsplittable. ``word_pieces_file`` is optional (folders learned before it, imported ones).

``{"kind": "bpe", ..., "word_end_suffix": "</w>"}``: GPT-1's BPE (lower-cased, BERT-style
pre-split words whose last symbol carries ``</w>``), read by the tokenizer class
``models/gpt1/gpt1_tokenizer.py`` registers here (:func:`register_word_end_tokenizer`:
this package never imports an architecture).
"""

from __future__ import annotations

import json


from lmfactory.models.backend import tf
from lmfactory.models.tokenizers.byte_level_fast import (WORD_PIECES_FILE,
                                                         ByteLevelBpeTokenizer,
                                                         read_word_pieces)
from lmfactory.models.tokenizers.config import (read_lines, unique_special_tokens,
                                                vocabulary_path)
from lmfactory.models.tokenizers.kinds import TokenizerKind, register_kind

VOCABULARY_FILE = "vocab.json"
MERGES_FILE = "merges.txt"
DEFAULT_SPECIAL_TOKENS = {"end_of_text": "<|endoftext|>"}
# The class that reads a BPE with word-end suffixes (GPT-1's `Gpt1BpeTokenizer`).
_WORD_END_TOKENIZER = {}


def register_word_end_tokenizer(tokenizer_cls) -> None:
    """Makes ``tokenizer_cls`` the reader of ``bpe`` folders with a ``word_end_suffix``; it
    is called with ``vocabulary``, ``merges``, ``unk_token``, ``word_end_suffix``,
    ``unsplittable_tokens`` and ``sequence_length``."""
    _WORD_END_TOKENIZER["cls"] = tokenizer_cls


def load(vocab_dir: str, config: dict, sequence_length: int | None = None):
    """The BPE tokenizer of a ``bpe`` vocabulary folder: keras-nlp's byte-level
    ``BytePairTokenizer``, or with ``word_end_suffix`` the registered word-end tokenizer."""
    specials = config.get("special_tokens", {})
    with tf.io.gfile.GFile(vocabulary_path(vocab_dir, config, "vocabulary_file",
                                           VOCABULARY_FILE)) as f:
        vocabulary = json.load(f)
    merges = read_lines(vocabulary_path(vocab_dir, config, "merges_file", MERGES_FILE))
    merges = [m for m in merges if m and not m.startswith("#version")]
    word_end_suffix = config.get("word_end_suffix")
    unsplittable = unique_special_tokens(specials) or (
        [] if word_end_suffix else unique_special_tokens(DEFAULT_SPECIAL_TOKENS))
    missing = [token for token in unsplittable if token not in vocabulary]
    if missing:
        raise ValueError(f"Vocabulary folder {vocab_dir!r}: special token(s) {missing} are "
                         f"not in {config.get('vocabulary_file', VOCABULARY_FILE)}")
    if word_end_suffix:
        if "cls" not in _WORD_END_TOKENIZER:
            raise ValueError(f"Vocabulary folder {vocab_dir!r}: no tokenizer for BPE with "
                             f"word_end_suffix {word_end_suffix!r} is registered (importing "
                             f"lmfactory.models registers GPT-1's)")
        return _WORD_END_TOKENIZER["cls"](vocabulary=vocabulary, merges=merges,
                                          unk_token=specials.get("unk", "<unk>"),
                                          word_end_suffix=word_end_suffix,
                                          unsplittable_tokens=unsplittable,
                                          sequence_length=sequence_length)
    word_pieces = None
    if config.get("word_pieces_file"):
        path = vocabulary_path(vocab_dir, config, "word_pieces_file", WORD_PIECES_FILE)
        if tf.io.gfile.exists(path):
            word_pieces = read_word_pieces(path, merges)
    return ByteLevelBpeTokenizer(
        vocabulary=vocabulary,
        merges=merges,
        sequence_length=sequence_length,
        unsplittable_tokens=unsplittable,
        word_pieces=word_pieces,
    )


KIND = register_kind(TokenizerKind("bpe", load, DEFAULT_SPECIAL_TOKENS))

__all__ = ["ByteLevelBpeTokenizer", "KIND", "load", "register_word_end_tokenizer"]
