"""Words -> fixed-width character ids, the input of a character-level word encoder
(Jozefowicz et al. 2016 §3.3 "CNN Softmax"/char CNN inputs; Peters et al. 2018 §3.4, whose
biLM reads each token through a character CNN), as TensorFlow ops.

The scheme is the UTF-8 byte one of the original biLM: a word is its UTF-8 bytes, each byte b
becoming id ``b + 1`` (1..256), framed by a begin-of-word and an end-of-word id and padded to
``max_characters`` with a padding-character id; the sentence boundary tokens get one
character of their own each. Id 0 is reserved for the character ids of a padded token
(all zeros), so a model can tell "no token" from any word.

=====================  ======  =============================================
id                     value   meaning
=====================  ======  =============================================
``PADDED_TOKEN``       0       every character of a padded (absent) token
byte b                 b + 1   one UTF-8 byte of the word (1..256)
``BEGIN_SENTENCE``     257     the only character of the ``<S>`` token
``END_SENTENCE``       258     the only character of the ``</S>`` token
``BEGIN_WORD``         259     first character of every token
``END_WORD``           260     after the token's last byte
``PADDING_CHARACTER``  261     fills the rest of the ``max_characters``
=====================  ======  =============================================

Defined results for any input: every string has byte ids, so there is no unknown
character; an empty string is ``[BEGIN_WORD, END_WORD, padding...]``; a word longer than
``max_characters - 2`` bytes keeps its first ``max_characters - 2`` bytes and still ends with
``END_WORD`` (a multi-byte character may be cut in the middle, as the original did).
"""

from __future__ import annotations

from lmfactory.models.backend import tf


PADDED_TOKEN = 0
BEGIN_SENTENCE = 257
END_SENTENCE = 258
BEGIN_WORD = 259
END_WORD = 260
PADDING_CHARACTER = 261
CHARACTER_VOCABULARY_SIZE = 262
# The original biLM's width (options "max_characters_per_token": 50).
MAX_CHARACTERS_PER_TOKEN = 50
BEGIN_SENTENCE_TOKEN = "<S>"
END_SENTENCE_TOKEN = "</S>"


def _boundary_row(character: int, max_characters: int):
    """[BEGIN_WORD, character, END_WORD, padding...] of one boundary token."""
    row = [BEGIN_WORD, character, END_WORD]
    return tf.constant(row + [PADDING_CHARACTER] * (max_characters - len(row)), tf.int32)


def word_character_ids(words, max_characters: int = MAX_CHARACTERS_PER_TOKEN,
                       begin_sentence: str = BEGIN_SENTENCE_TOKEN,
                       end_sentence: str = END_SENTENCE_TOKEN):
    """Character ids int32 ``words.shape + [max_characters]`` of a string tensor of words
    (any shape), in the scheme of the module docstring. ``begin_sentence`` /
    ``end_sentence`` are the boundary tokens' strings."""
    if int(max_characters) < 3:
        raise ValueError(f"max_characters must be at least 3 (begin-of-word, one byte, "
                         f"end-of-word), got {max_characters}")
    words = tf.convert_to_tensor(words, tf.string)
    flat = tf.reshape(words, [-1])
    pieces = tf.strings.bytes_split(flat)  # ragged [N, bytes] of one-byte strings
    byte_values = tf.reshape(tf.io.decode_raw(pieces.flat_values, tf.uint8), [-1])
    ids = pieces.with_flat_values(tf.cast(byte_values, tf.int32) + 1)[:, :max_characters - 2]
    count = tf.shape(flat)[0]
    begin = tf.fill([count, 1], BEGIN_WORD)
    end = tf.fill([count, 1], END_WORD)
    framed = tf.concat([tf.RaggedTensor.from_tensor(begin), ids,
                        tf.RaggedTensor.from_tensor(end)], axis=1)
    rows = framed.to_tensor(default_value=PADDING_CHARACTER, shape=[None, max_characters])
    rows = tf.where(tf.equal(flat, begin_sentence)[:, None],
                    _boundary_row(BEGIN_SENTENCE, max_characters)[None, :], rows)
    rows = tf.where(tf.equal(flat, end_sentence)[:, None],
                    _boundary_row(END_SENTENCE, max_characters)[None, :], rows)
    return tf.reshape(rows, tf.concat([tf.shape(words), [max_characters]], axis=0))


def padded_character_ids(words, mask, max_characters: int = MAX_CHARACTERS_PER_TOKEN, **kwargs):
    """`word_character_ids` of ``words`` [B, T] with the rows of padded tokens (``mask``
    false) set to ``PADDED_TOKEN``."""
    ids = word_character_ids(words, max_characters, **kwargs)
    return tf.where(tf.cast(mask, tf.bool)[..., None], ids, PADDED_TOKEN)


__all__ = ["BEGIN_SENTENCE", "BEGIN_SENTENCE_TOKEN", "BEGIN_WORD", "CHARACTER_VOCABULARY_SIZE",
           "END_SENTENCE", "END_SENTENCE_TOKEN", "END_WORD", "MAX_CHARACTERS_PER_TOKEN",
           "PADDED_TOKEN", "PADDING_CHARACTER", "padded_character_ids", "word_character_ids"]
