"""GPT-1's byte-pair encoding (Radford et al. 2018 §4.1) as an in-graph keras-nlp tokenizer.

GPT-1 "used a bytepair encoding (BPE) vocabulary with 40,000 merges" (Sennrich et al. 2016).
Unlike GPT-2's byte-level BPE its symbols are Unicode characters, and the last symbol of each
word carries the end-of-word marker ``</w>`` (so ``"the</w>"`` is a whole word and ``"the"``
a word start). The published vocabulary (Hugging Face ``openai-gpt``: ``vocab.json`` +
``merges.txt``) is read with Hugging Face's pre-tokenization when ftfy and spaCy are absent,
which its fast tokenizer always uses: BERT's ``BasicTokenizer`` (drop control characters,
whitespace split, lower-case, strip accents, split off every punctuation and CJK character).
The original release cleaned text with ftfy and split it with spaCy; that pipeline cannot
run inside a TensorFlow graph and is not reproduced.

`Gpt1BpeTokenizer` reuses keras-nlp's ``BytePairTokenizer`` for the merges (rank lookup
table, the in-graph merge loop, the word cache, the id tables) and changes what differs:

* pre-tokenization instead of GPT-2's regex split: the text is lower-cased character by
  character, special tokens excepted (Hugging Face's ``do_lower_case`` pass, which runs
  before ``BasicTokenizer``: so "ΟΔΟΣ" gives a medial "σ", never the final-sigma form),
  then cleaned and accent-stripped (:func:`lmfactory.models.tokenizers.bert_normalize`)
  and split on whitespace, punctuation and CJK characters (keras-nlp's WordPiece
  ``pretokenize``);
* symbols: a word's characters, the last one suffixed with ``</w>``, instead of GPT-2's
  byte-to-unicode mapping;
* a symbol missing from the vocabulary becomes the unknown token (GPT-2 never has one);
* special tokens (e.g. ``<unk>``) found in the text after lower-casing are kept whole, as
  Hugging Face's tokenizers split them out before pre-tokenizing (so "<UNK>" is ``<unk>``
  too);
* ``detokenize`` joins the tokens and turns ``</w>`` into a space (Hugging Face's
  ``convert_tokens_to_string``).
"""

from __future__ import annotations

import re

import keras
import keras_nlp
from keras_hub.src.tokenizers.word_piece_tokenizer import pretokenize
from keras_hub.src.utils.tensor_utils import convert_to_ragged_batch, preprocessing_function

from lmfactory.models.backend import tf
from lmfactory.models.tokenizers.byte_level_bpe import register_word_end_tokenizer
from lmfactory.models.tokenizers.normalization import lowercase_characters
from lmfactory.models.tokenizers.wordpiece import bert_normalize

WORD_END = "</w>"


def _clean(text):
    """BERT's basic-tokenizer normalisation of lower-cased text: drop control characters,
    every space a " ", accents stripped (NFD, drop ``Mn``)."""
    return bert_normalize(text, lowercase=False, strip_accents=True)


@keras.saving.register_keras_serializable(package="lmfactory")
class Gpt1BpeTokenizer(keras_nlp.tokenizers.BytePairTokenizer):
    """GPT-1's ``</w>`` BPE over lower-cased, BERT-style pre-split words.

    Args:
        vocabulary: dict token -> id (``vocab.json``), or its path.
        merges: list of ``"a b"`` merge rules in rank order (``merges.txt`` without its
            ``#version`` header), or its path.
        unk_token: the token of symbols missing from the vocabulary (``<unk>``); must be in
            the vocabulary.
        word_end_suffix: the end-of-word marker (``</w>``).
        unsplittable_tokens: special tokens kept whole when they occur in the text (default:
            ``[unk_token]``).
        sequence_length, dtype: as in keras-nlp's ``BytePairTokenizer``.
    """

    def __init__(self, vocabulary=None, merges=None, unk_token="<unk>",
                 word_end_suffix=WORD_END, unsplittable_tokens=None, sequence_length=None,
                 dtype="int32", **kwargs):
        kwargs.pop("add_prefix_space", None)  # GPT-1's words carry no space
        if not isinstance(word_end_suffix, str) or not word_end_suffix:
            raise ValueError(f"word_end_suffix must be a non-empty string, got "
                             f"{word_end_suffix!r}")
        self.word_end_suffix = word_end_suffix
        self._add_special_token(unk_token, "unk_token")
        specials = [unk_token] if unsplittable_tokens is None else list(unsplittable_tokens)
        # Specials are matched in the raw text and mapped by id, never through the word
        # cache: keras-nlp would seed the cache with them, where a lower-cased word could
        # hit them; its list stays empty and this class keeps its own.
        self.special_words = tuple(specials)
        super().__init__(vocabulary=vocabulary, merges=merges, sequence_length=sequence_length,
                         add_prefix_space=False, unsplittable_tokens=[], dtype=dtype,
                         **kwargs)

    def set_vocabulary_and_merges(self, vocabulary, merges):
        super().set_vocabulary_and_merges(vocabulary, merges)
        if self.vocabulary is None:
            return
        missing = [token for token in (self.unk_token,) + tuple(self.special_words)
                   if token not in self.vocabulary]
        if missing:
            raise ValueError(f"Gpt1BpeTokenizer: token(s) {missing} are not in the vocabulary")

    # ------------------------------------------------------------------ pre-tokenization

    def _special_pattern(self):
        if not self.special_words:
            return None
        # Longest first, so a special token that contains another wins.
        ordered = sorted(self.special_words, key=len, reverse=True)
        return "|".join(re.escape(token) for token in ordered)

    def _split_specials(self, inputs, pattern):
        """[batch] strings -> (pieces [batch, (pieces)], is_special [pieces]): the text cut
        around the special tokens it holds."""
        if pattern is None:
            pieces = tf.RaggedTensor.from_tensor(inputs[:, None])
            return pieces, tf.zeros_like(pieces.flat_values, dtype=tf.bool)
        pieces = tf_text_regex_split(inputs, pattern)
        return pieces, tf.strings.regex_full_match(pieces.flat_values, f"(?:{pattern})")

    def split_words(self, inputs):
        """A [batch] string tensor -> (words [batch, (words)], is_special [batch, (words)]):
        the normalised, pre-split words, special tokens kept whole."""
        pattern = self._special_pattern()
        # Lower-case all but the special tokens, then cut around the special tokens of the
        # lower-cased text.
        pieces, special = self._split_specials(inputs, pattern)
        flat = pieces.flat_values
        lowered = tf.strings.reduce_join(
            pieces.with_flat_values(tf.where(special, flat, lowercase_characters(flat))), axis=-1)
        pieces, special = self._split_specials(lowered, pattern)
        flat = pieces.flat_values
        count = tf.shape(flat, out_type=tf.int64)[0]
        words = pretokenize(_clean(flat), lowercase=False, strip_accents=False,
                            split=True, split_on_cjk=True)
        whole = tf.RaggedTensor.from_row_lengths(flat, tf.ones([count], tf.int64))
        # Row i of the table: piece i's words, or the piece itself when it is special.
        table = tf.concat([words, whole], axis=0)
        flags = tf.concat([tf.zeros_like(words, dtype=tf.bool),
                           tf.ones_like(whole, dtype=tf.bool)], axis=0)
        index = tf.where(special, count + tf.range(count), tf.range(count))
        per_piece = tf.gather(table, index)
        per_piece_flags = tf.gather(flags, index)
        return (pieces.with_flat_values(per_piece).merge_dims(1, 2),
                pieces.with_flat_values(per_piece_flags).merge_dims(1, 2))

    # ------------------------------------------------------------------ BPE

    def _transform_bytes(self, tokens):
        """Words -> their symbols [words, (characters)], the last one with ``</w>``
        (replaces keras-nlp's byte-to-unicode mapping)."""
        characters = tf.strings.unicode_split(tokens, "UTF-8")
        last = characters.row_splits[1:] - 1
        flat = characters.flat_values
        flat = tf.tensor_scatter_nd_update(
            flat, last[:, None],
            tf.strings.join([tf.gather(flat, last), self.word_end_suffix]))
        return characters.with_flat_values(flat)

    @preprocessing_function
    def tokenize(self, inputs):
        self._check_vocabulary()
        inputs = tf.convert_to_tensor(inputs)
        unbatched = inputs.shape.rank == 0
        if unbatched:
            inputs = tf.expand_dims(inputs, 0)
        if inputs.shape.rank != 1:
            raise ValueError(f"Gpt1BpeTokenizer.tokenize takes a string or a 1-D batch of "
                             f"strings, got shape {inputs.shape}")
        words, is_special = self.split_words(inputs)
        flat_words, flat_special = words.flat_values, is_special.flat_values
        cached = self.cache.lookup(flat_words)
        unseen = (cached == "") & tf.logical_not(flat_special)

        def merge_unseen():
            self._bpe_merge_and_update_cache(tf.boolean_mask(flat_words, unseen))
            return self.cache.lookup(flat_words)

        merged = tf.cond(tf.reduce_any(unseen), merge_unseen, lambda: cached)
        merged = tf.where(flat_special, flat_words, merged)
        tokens = tf.strings.split(merged, sep=" ")  # [words, (tokens)]
        if self.compute_dtype != tf.string:
            ids = self.token_to_id_map.lookup(tokens.flat_values)
            ids = tf.where(ids < 0, tf.cast(self.unk_token_id, ids.dtype), ids)
            tokens = tokens.with_flat_values(tf.cast(ids, self.compute_dtype))
        tokens = tf.RaggedTensor.from_row_splits(
            tokens.flat_values, tf.gather(tokens.row_splits, words.row_splits))
        if self.sequence_length:
            tokens = tokens.to_tensor(shape=[None, self.sequence_length])
        if unbatched:
            tokens = tf.squeeze(tokens, 0)
        return tokens

    @preprocessing_function
    def detokenize(self, inputs):
        """Token ids -> text: the tokens joined, each ``</w>`` a space, the ends stripped
        (Hugging Face's ``convert_tokens_to_string``)."""
        self._check_vocabulary()
        inputs, unbatched, _ = convert_to_ragged_batch(inputs)
        text = tf.strings.reduce_join(
            self.id_to_token_map.lookup(tf.cast(inputs, tf.int32)), axis=-1)
        text = tf.strings.regex_replace(text, re.escape(self.word_end_suffix), " ")
        text = tf.strings.strip(text)
        if unbatched:
            text = tf.squeeze(text, 0)
        return text

    def get_config(self):
        config = super().get_config()
        config.pop("add_prefix_space", None)
        config.update({"unk_token": self.unk_token, "word_end_suffix": self.word_end_suffix,
                       "unsplittable_tokens": list(self.special_words)})
        return config


def tf_text_regex_split(inputs, pattern):
    """Cuts each string at the matches of ``pattern``, keeping the matches as pieces.

    tf-text's ``regex_split`` stops reading a string at a NUL character; NUL becomes U+0001
    first, which the normalisation drops as it drops NUL (both are control characters) and
    which, like NUL, can complete no special token.
    """
    import tensorflow_text as tf_text

    inputs = tf.strings.regex_replace(inputs, "\\x00", "\x01")
    return tf_text.regex_split(inputs, delim_regex_pattern=pattern,
                               keep_delim_regex_pattern=pattern)


# `bpe` vocabulary folders with a `word_end_suffix` are read by this class.
register_word_end_tokenizer(Gpt1BpeTokenizer)

__all__ = ["Gpt1BpeTokenizer", "WORD_END"]
