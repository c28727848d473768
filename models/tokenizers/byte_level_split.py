"""GPT-2's pre-tokenisation split, vectorised over the characters of a batch (TF core ops).

GPT-2 (Radford et al. 2019, §2.2) splits text with the regex
``'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+`` before
byte-pair encoding, so merges never cross letter / digit / punctuation / whitespace
boundaries. keras-nlp's ``BytePairTokenizer`` runs an RE2 emulation of it
(``split_strings_for_bpe``: a marker before each space that starts a word, two
``tf_text.regex_split`` passes, marker removal); RE2 with capture groups runs at about
0.7 M words/s on this machine, which made the split most of the tokenizer's time.

:func:`split_words` finds the same words without a regex: every character of the batch
gets a class (space, letter, number, apostrophe, other) from a code-point table, and a word
starts where keras-nlp's passes would start one:

* at a run of letters, of numbers or of other characters (``' ?\\p{L}+'`` ...) that does not
  follow a space, and at the last space before a run (its optional leading space);
* at the first and at the last space of a run of spaces (``' '`` * (k-1), then the last
  space leads the next run or stands alone at the end, as keras-nlp's marker and second
  split leave it);
* at an apostrophe followed by ``s t m d re ve ll`` that starts a run (not after a space
  or other punctuation), and right after such a contraction.

It covers the text keras-nlp's emulation handles the same way for every input: a sentence
holding a character where its quirks live (tabs, line breaks, the four non-ASCII spaces it
lists, its marker ``६``, its special-token stand-in ``Ĵ``, invalid UTF-8, code points
unassigned in this Python's Unicode tables or above U+2FFFF) is flagged ``exact=False``,
and the tokenizer sends it through keras-nlp's own split. Letters and numbers are Unicode
``L*`` / ``N*`` (``unicodedata``, the same as RE2's ``\\p{L}`` / ``\\p{N}`` on every code
point assigned there: tests/test_byte_level_bpe.py checks it against RE2).
"""

from __future__ import annotations

import functools
import unicodedata

import numpy as np
import regex
from keras_hub.src.tokenizers.byte_pair_tokenizer import (SPECIAL_WHITESPACES, SPLIT_PATTERN_1,
                                                          SPLIT_PATTERN_2,
                                                          create_alts_for_unsplittable_tokens)

from lmfactory.models.backend import tf

SPACE, LETTER, NUMBER, OTHER, APOSTROPHE, UNSAFE = range(6)
# Code points from here on are all sent to keras-nlp's split (rare: CJK extensions G/H,
# tags, private use).
TABLE_SIZE = 0x30000
# Characters whose handling in keras-nlp's RE2 emulation is not the plain GPT-2 rule:
# whitespace other than " " (its `\s` runs and second split), the non-ASCII spaces it
# lists by hand, its marker "६" and its special-token stand-in prefix "Ĵ".
UNSAFE_CHARACTERS = "\t\n\v\f\r\u00a0\u2009\u202f\u3000\u096c\u0134"
# Invalid UTF-8 decodes to a lone surrogate, which is UNSAFE.
REPLACEMENT_CHARACTER = 0xDC00
_CONTRACTION_2 = "stmd"  # 's 't 'm 'd
_CONTRACTION_3 = ("re", "ve", "ll")


@functools.lru_cache(maxsize=1)
def character_classes() -> np.ndarray:
    """The class of every code point below ``TABLE_SIZE`` (int8), then one UNSAFE entry
    for all code points above; built once per process (~0.1 s)."""
    by_category = {}
    for category in ("Lu", "Ll", "Lt", "Lm", "Lo"):
        by_category[category] = LETTER
    for category in ("Nd", "Nl", "No"):
        by_category[category] = NUMBER
    by_category["Cn"] = by_category["Cs"] = UNSAFE  # unassigned here (maybe not in RE2)
    text = "".join(map(chr, range(TABLE_SIZE)))
    classes = np.fromiter((by_category.get(category, OTHER)
                           for category in map(unicodedata.category, text)),
                          np.int8, TABLE_SIZE)
    classes[ord(" ")] = SPACE
    classes[ord("'")] = APOSTROPHE
    for character in UNSAFE_CHARACTERS:
        classes[ord(character)] = UNSAFE
    return np.append(classes, np.int8(UNSAFE))


def split_words(texts: tf.Tensor, classes: tf.Tensor, inexact: tf.Tensor | None = None):
    """GPT-2's words of a batch of strings.

    Args:
      texts: 1-D string tensor.
      classes: :func:`character_classes` as an int8 tensor.
      inexact: optional [batch] bool, rows to leave to the caller as well (e.g. the rows
        holding a special token).

    Returns:
      ``(words, row_splits, exact)``: ``words`` 1-D strings (every word of every exact row,
      in order), ``row_splits`` [batch + 1] int64 (the words of row i are
      ``words[row_splits[i]:row_splits[i + 1]]``; an inexact row has none) and ``exact``
      [batch] bool (False: the row holds a character this split does not model).
    """
    codes, offsets = tf.strings.unicode_decode_with_offsets(
        texts, "UTF-8", errors="replace", replacement_char=REPLACEMENT_CHARACTER)
    chars = codes.flat_values
    byte_offsets = offsets.flat_values
    char_splits = codes.row_splits
    batch = tf.shape(texts, out_type=tf.int64)[0]
    count = tf.size(chars, out_type=tf.int64)
    position = tf.range(count)
    row_ids = _row_ids(char_splits, position)
    cls = tf.gather(classes, tf.minimum(chars, TABLE_SIZE))
    row_start = tf.gather(char_splits, row_ids)
    row_end = tf.gather(char_splits[1:], row_ids)
    first = tf.equal(position, row_start)
    last = tf.equal(position + 1, row_end)
    none = tf.constant(-1, tf.int8)
    # Neighbours by rotation: what wraps around lands on a row's first or last character
    # (masked below) or on a flag that needs room it does not have.
    previous = tf.where(first, none, tf.roll(cls, 1, 0))
    following = tf.where(last, none, tf.roll(cls, -1, 0))
    # Runs: an apostrophe is punctuation like any other.
    run = tf.where(tf.equal(cls, APOSTROPHE), tf.constant(OTHER, tf.int8), cls)
    previous_run = tf.where(first, none, tf.roll(run, 1, 0))
    space = tf.equal(cls, SPACE)
    after_space = tf.equal(previous, SPACE)
    starts = (first
              | (space & ~after_space)                                 # first space of a run
              | (space & tf.not_equal(following, SPACE))               # its last space
              | (~space & ~after_space & tf.not_equal(run, previous_run)))  # a new run
    # Contractions: an apostrophe starting a run (after a letter, a number or nothing).
    opens = tf.equal(cls, APOSTROPHE) & (first | tf.equal(previous, LETTER)
                                         | tf.equal(previous, NUMBER))
    next_1 = tf.roll(chars, -1, 0)
    next_2 = tf.roll(chars, -2, 0)
    two = opens & (position + 1 < row_end) & _any_equal(next_1, _CONTRACTION_2)
    three = opens & (position + 2 < row_end) & tf.reduce_any(
        [tf.equal(next_1, ord(a)) & tf.equal(next_2, ord(b)) for a, b in _CONTRACTION_3], 0)
    # No word starts inside a contraction; one starts right after it (if the row goes on).
    inside = tf.roll(two, 1, 0) | tf.roll(three, 1, 0) | tf.roll(three, 2, 0)
    starts = ((starts & ~inside) | (tf.roll(two, 2, 0) & (position >= row_start + 2))
              | (tf.roll(three, 3, 0) & (position >= row_start + 3)))
    unsafe = tf.math.unsorted_segment_max(tf.cast(tf.equal(cls, UNSAFE), tf.int32),
                                          row_ids, batch)
    exact = unsafe <= 0  # an empty row's maximum is the smallest int32
    if inexact is not None:
        exact = exact & ~inexact
    starts = starts & tf.gather(exact, row_ids)
    word_chars = tf.where(starts)[:, 0]
    word_rows = tf.gather(row_ids, word_chars)
    row_splits = tf.concat([[0], tf.cumsum(tf.math.bincount(
        word_rows, minlength=batch, maxlength=batch, dtype=tf.int64))], 0)
    lengths = tf.cast(tf.strings.length(texts), tf.int64)
    text_starts = tf.cumsum(lengths, exclusive=True)
    begin = tf.gather(byte_offsets, word_chars) + tf.gather(text_starts, word_rows)
    # A word ends where the next one begins, the last word of a row where the row ends.
    word_index = tf.range(tf.size(word_chars, out_type=tf.int64))
    last_word = tf.equal(word_index + 1, tf.gather(row_splits[1:], word_rows))
    end = tf.where(last_word, tf.gather(text_starts + lengths, word_rows),
                   tf.roll(begin, -1, 0))
    words = tf.strings.substr(tf.strings.reduce_join(texts), begin, end - begin)
    return words, row_splits, exact


def _row_ids(row_splits, index):
    """The row of each ``index`` (sorted or not) in a ragged partition ``row_splits``
    (one search op, where ``RaggedTensor.value_rowids`` builds about 70 nodes)."""
    return tf.searchsorted(row_splits, index, side="right", out_type=tf.int64) - 1


def merge_rows(words, row_splits, other, other_splits, rows):
    """The words of a batch from two splits: ``words`` / ``row_splits`` (a row of the
    batch per split) and ``other`` / ``other_splits`` (the words of the batch's rows
    ``rows``, which hold no ``words``) -> ``(words, row_splits)`` of the whole batch, each
    row's words in order."""
    batch = tf.size(row_splits, out_type=tf.int64) - 1
    other_counts = tf.scatter_nd(rows[:, None], other_splits[1:] - other_splits[:-1],
                                 batch[None])
    splits = tf.concat([[0], tf.cumsum(row_splits[1:] - row_splits[:-1] + other_counts)], 0)
    index = tf.range(tf.size(words, out_type=tf.int64))
    target = index + tf.gather(splits - row_splits, _row_ids(row_splits, index))
    other_index = tf.range(tf.size(other, out_type=tf.int64))
    other_target = other_index + tf.gather(tf.gather(splits, rows) - other_splits[:-1],
                                           _row_ids(other_splits, other_index))
    merged = tf.dynamic_stitch([tf.cast(target, tf.int32), tf.cast(other_target, tf.int32)],
                               [words, other])
    return merged, splits


def keras_nlp_split(texts: tf.Tensor, unsplittable_tokens=None):
    """keras-nlp's ``split_strings_for_bpe`` of a 1-D batch, as flat words and row splits.

    The same steps with the same patterns (its marker ``६`` before a space that starts a
    word and after trailing whitespace, each unsplittable token split out and replaced by
    its ``ĴA``-style stand-in, RE2 splits on ``SPLIT_PATTERN_1`` then ``SPLIT_PATTERN_2``,
    the stand-ins restored, the marker tokens dropped), on flat string vectors: each split
    is tf-text's ``RegexSplitWithOffsets`` op on the pieces so far, its row splits
    composed with the rows' (the words of a text stay in order, as ``merge_dims`` leaves
    them). keras-nlp builds a validated ``RaggedTensor`` after every split, rank 2 to 4:
    about 1,000 graph nodes and 70 assertion functions, which every function that may call
    this one carries in its library and which a tf.data iterator re-optimises each time it
    starts; this is about 40 nodes.

    Returns ``(words, row_splits)``: 1-D strings and [batch + 1] int64.
    """
    marker = "\u096c"
    pieces = tf.strings.regex_replace(texts, rf"( )([^\s{SPECIAL_WHITESPACES}])",
                                      marker + r"\1\2")
    pieces = tf.strings.regex_replace(pieces, rf"(\s{SPECIAL_WHITESPACES})$", r"\1" + marker)
    row_splits = tf.range(tf.size(pieces, out_type=tf.int64) + 1)
    tokens = list(unsplittable_tokens or [])  # escaped as keras-nlp does (`regex`)
    alts = create_alts_for_unsplittable_tokens(tokens)

    from tensorflow_text.python.ops.regex_split_ops import gen_regex_split_ops

    def split(pieces, row_splits, pattern):
        wrapped = f"({pattern})"
        words, _, _, splits = gen_regex_split_ops.regex_split_with_offsets(
            pieces, wrapped, wrapped)
        return words, tf.gather(splits, row_splits)

    for token, alt in zip(tokens, alts):
        pieces, row_splits = split(pieces, row_splits, regex.escape(token))
        pieces = tf.strings.regex_replace(pieces, regex.escape(token), alt)
    pieces, row_splits = split(pieces, row_splits, SPLIT_PATTERN_1)
    pieces, row_splits = split(pieces, row_splits, SPLIT_PATTERN_2)
    for token, alt in zip(tokens, alts):
        pieces = tf.strings.regex_replace(pieces, regex.escape(alt), token)
    kept = tf.not_equal(pieces, marker)
    before = tf.concat([[0], tf.cumsum(tf.cast(kept, tf.int64))], 0)
    return tf.boolean_mask(pieces, kept), tf.gather(before, row_splits)


def _any_equal(values, characters: str):
    return tf.reduce_any([tf.equal(values, ord(c)) for c in characters], 0)


__all__ = ["APOSTROPHE", "LETTER", "NUMBER", "OTHER", "SPACE", "UNSAFE",
           "UNSAFE_CHARACTERS", "character_classes", "keras_nlp_split", "merge_rows",
           "split_words"]
