"""Whole words as tokens: the ``word`` kind.

``{"kind": "word", "vocabulary_file": "vocab.txt", "counts_file": "counts.txt",
"lowercase": bool, "special_tokens": {"unk": "<unk>", ...}}`` -> :class:`WordTokenizer`.
``vocab.txt`` holds one token a line (the line number is the id): the distinct special
tokens first, then the words by decreasing corpus count (ties by the word). ``counts.txt``
holds one integer a line, aligned with ``vocab.txt``: each word's corpus count, the ``unk``
line the count of every out-of-vocabulary occurrence (plus literal ``unk`` tokens), the
other special tokens their literal occurrences (0 unless the text spells them).

This is the vocabulary of the word-level LMs: the NNLM (Bengio et al. 2003, §4: words
occurring fewer than a threshold times merged into one symbol), word2vec (Mikolov et al.
2013, whose subsampling and unigram^(3/4) noise distribution need the counts:
:func:`word_counts`), ELMo's word inputs and AWD-LSTM (Merity et al. 2018) on the
WikiText / PTB vocabularies, whose text already spells ``<unk>``.
"""

from __future__ import annotations

import keras
import keras_nlp
import numpy as np
from keras_hub.src.utils.tensor_utils import convert_to_ragged_batch, preprocessing_function

from lmfactory.models.backend import tf
from lmfactory.models.tokenizers.config import (read_lines, read_tokenizer_config,
                                                unique_special_tokens, vocabulary_path)
from lmfactory.models.tokenizers.kinds import TokenizerKind, register_kind
from lmfactory.models.tokenizers.normalization import PYTHON_WHITESPACE, lowercase_characters

VOCABULARY_FILE = "vocab.txt"
COUNTS_FILE = "counts.txt"
DEFAULT_SPECIAL_TOKENS = {"unk": "<unk>"}


def split_words(inputs, lowercase: bool, special_tokens=()):
    """Words of a 1-D string batch -> ragged ``[batch, (words)]`` strings, in graph ops.

    Bytes that are not valid UTF-8 become U+FFFD (a defined result, as the vocabulary
    counter reads text with ``errors="replace"``), every Unicode whitespace character
    (what Python's ``str.split`` splits on) separates words, and words are lowercased
    character by character when ``lowercase`` is set, except a word that is a special token
    exactly as written (so "[CLS]" stays "[CLS]"). The tokenizer and VocabularyGen's
    counter both split with this function, so counts and lookups agree.
    """
    text = tf.strings.unicode_transcode(inputs, "UTF-8", "UTF-8", errors="replace",
                                        replacement_char=0xFFFD)
    text = tf.strings.regex_replace(text, f"[{PYTHON_WHITESPACE}]", " ")
    words = tf.strings.split(text, sep=None)
    if not lowercase:
        return words
    flat = words.flat_values
    lowered = lowercase_characters(flat)
    if special_tokens:
        specials = tf.constant(list(special_tokens), tf.string)
        is_special = tf.reduce_any(tf.equal(flat[:, None], specials[None, :]), axis=1)
        lowered = tf.where(is_special, flat, lowered)
    return words.with_flat_values(lowered)


def check_vocabulary(vocabulary, special_tokens) -> list[str]:
    """A list copy of a word vocabulary, or a ValueError naming what is wrong with it."""
    vocabulary = [str(token) for token in vocabulary]
    seen = set()
    for index, token in enumerate(vocabulary):
        if not token or token != "".join(token.split()):
            raise ValueError(f"word vocabulary: token {index} ({token!r}) must be a "
                             f"non-empty string without whitespace")
        if token in seen:
            raise ValueError(f"word vocabulary: token {token!r} appears twice")
        seen.add(token)
    if "unk" not in special_tokens:
        raise ValueError(f"word vocabulary: special_tokens need an 'unk' role (the id of "
                         f"unknown words), got {dict(special_tokens)}")
    missing = [token for token in special_tokens.values() if token not in seen]
    if missing:
        raise ValueError(f"word vocabulary: special token(s) {missing} are not in the "
                         f"vocabulary")
    return vocabulary


@keras.saving.register_keras_serializable(package="lmfactory")
class WordTokenizer(keras_nlp.tokenizers.Tokenizer):
    """Whitespace-separated words looked up in a fixed vocabulary; unknown words -> ``unk``.

    keras-nlp has no plain word-lookup tokenizer (its ``WordPieceTokenizer`` splits unknown
    words into pieces and splits on punctuation), so this one is written here from graph
    ops (:func:`split_words`, a ``tf.lookup.StaticHashTable``) and runs inside tf.data and a
    SavedModel. A special token written in the text (WikiText's literal ``<unk>``) maps to
    its id. Ragged output, or dense ``[batch, sequence_length]`` padded with the ``pad``
    role's id (0 without one) and truncated. ``detokenize`` joins tokens with single spaces.

    Args:
        vocabulary: the tokens by id (the special tokens among them).
        special_tokens: role -> token (roles as in ``SPECIAL_ROLES``; ``unk`` required).
            Each role is also an attribute ``<role>_token`` / ``<role>_token_id``
            (keras-nlp's special-token convention: ``pad_token_id``, ``start_token_id``,
            ``end_of_text_token_id``, ...).
        lowercase: lowercase words before the lookup (special tokens excepted).
        sequence_length: pad / truncate to this length (None: ragged).
    """

    def __init__(self, vocabulary, special_tokens=None, lowercase: bool = False,
                 sequence_length=None, dtype="int32", **kwargs):
        super().__init__(dtype=dtype, **kwargs)
        self._special_roles = dict(DEFAULT_SPECIAL_TOKENS if special_tokens is None
                                   else special_tokens)
        self._vocabulary = check_vocabulary(vocabulary, self._special_roles)
        self._ids = {token: index for index, token in enumerate(self._vocabulary)}
        self.lowercase = bool(lowercase)
        self.sequence_length = sequence_length
        self._reserved = tuple(unique_special_tokens(self._special_roles))
        self._unk_id = self._ids[self._special_roles["unk"]]
        self._pad_id = self._ids[self._special_roles["pad"]] if "pad" in self._special_roles \
            else 0
        self._table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(self._vocabulary, tf.string),
                tf.range(len(self._vocabulary), dtype=tf.int64)),
            default_value=self._unk_id)
        self._tokens = tf.constant(self._vocabulary, tf.string)
        for role, token in self._special_roles.items():
            self._add_special_token(token, f"{role}_token")

    def vocabulary_size(self):
        return len(self._vocabulary)

    def get_vocabulary(self):
        return list(self._vocabulary)

    def id_to_token(self, id):
        if not 0 <= int(id) < len(self._vocabulary):
            raise ValueError(f"id must lie in [0, {len(self._vocabulary)}), got {id}")
        return self._vocabulary[int(id)]

    def token_to_id(self, token):
        if token not in self._ids:
            raise ValueError(f"{token!r} is not in the word vocabulary")
        return self._ids[token]

    @preprocessing_function
    def tokenize(self, inputs):
        inputs = tf.convert_to_tensor(inputs, tf.string)
        unbatched = inputs.shape.rank == 0
        if unbatched:
            inputs = tf.expand_dims(inputs, 0)
        if inputs.shape.rank != 1:
            raise ValueError(f"WordTokenizer.tokenize takes a string or a 1-D batch of "
                             f"strings, got shape {inputs.shape}")
        words = split_words(inputs, self.lowercase, self._reserved)
        tokens = words.with_flat_values(
            tf.cast(self._table.lookup(words.flat_values), self.compute_dtype))
        if self.sequence_length:
            tokens = tokens.to_tensor(default_value=self._pad_id,
                                      shape=[None, self.sequence_length])
        if unbatched:
            tokens = tf.squeeze(tokens, 0)
        return tokens

    @preprocessing_function
    def detokenize(self, inputs):
        """Tokens joined by single spaces; an id outside the vocabulary reads as ``unk``."""
        inputs, unbatched, _ = convert_to_ragged_batch(inputs)
        ids = tf.cast(inputs, "int32")  # e.g. an empty Python list arrives as float
        inside = tf.logical_and(ids >= 0, ids < len(self._vocabulary))
        ids = tf.ragged.map_flat_values(
            lambda values, ok: tf.where(ok, values, self._unk_id), ids, inside)
        text = tf.strings.reduce_join(tf.gather(self._tokens, ids), axis=-1, separator=" ")
        if unbatched:
            text = tf.squeeze(text, 0)
        return text

    def get_config(self):
        config = super().get_config()
        config.update({"vocabulary": list(self._vocabulary),
                       "special_tokens": dict(self._special_roles),
                       "lowercase": self.lowercase,
                       "sequence_length": self.sequence_length})
        return config


def word_counts(vocab_dir: str) -> np.ndarray:
    """The corpus count of each id of a ``word`` vocabulary folder (``counts.txt``), as an
    int64 array aligned with the ids; the ``unk`` id holds the out-of-vocabulary total."""
    config = read_tokenizer_config(vocab_dir)
    if config["kind"] != "word":
        raise ValueError(f"Vocabulary folder {vocab_dir!r} is of kind {config['kind']!r}; "
                         f"word counts exist only for the 'word' kind")
    vocabulary = read_lines(vocabulary_path(vocab_dir, config, "vocabulary_file",
                                            VOCABULARY_FILE))
    lines = read_lines(vocabulary_path(vocab_dir, config, "counts_file", COUNTS_FILE))
    if len(lines) != len(vocabulary):
        raise ValueError(f"Vocabulary folder {vocab_dir!r}: {len(lines)} counts for "
                         f"{len(vocabulary)} tokens")
    try:
        return np.array([int(line) for line in lines], dtype=np.int64)
    except ValueError as error:
        raise ValueError(f"Vocabulary folder {vocab_dir!r}: counts file holds a line that "
                         f"is not an integer ({error})") from error


def load(vocab_dir: str, config: dict, sequence_length: int | None = None):
    """The `WordTokenizer` of a ``word`` vocabulary folder."""
    vocabulary = read_lines(vocabulary_path(vocab_dir, config, "vocabulary_file",
                                            VOCABULARY_FILE))
    try:
        return WordTokenizer(vocabulary=vocabulary,
                             special_tokens=config.get("special_tokens",
                                                       DEFAULT_SPECIAL_TOKENS),
                             lowercase=config.get("lowercase", False),
                             sequence_length=sequence_length)
    except ValueError as error:
        raise ValueError(f"Vocabulary folder {vocab_dir!r}: {error}") from error


KIND = register_kind(TokenizerKind("word", load, DEFAULT_SPECIAL_TOKENS))

__all__ = ["COUNTS_FILE", "KIND", "VOCABULARY_FILE", "WordTokenizer", "check_vocabulary",
           "load", "split_words", "word_counts"]
