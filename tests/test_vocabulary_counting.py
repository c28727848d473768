"""VocabularyGen's word counting by distinct line pieces: byte-level BPE
(``bpe.count_words``) and WordPiece (``wordpiece.count_lines_plain``, plain Python) give
the counts of splitting every line on its own with the tokenizer's steps."""

import collections
import random
import unicodedata

import pytest
import tensorflow as tf

from lmfactory.components.vocabulary import bpe, wordpiece

TRICKY = [
    "Crème brûlée à la café, naïve façade — São Paulo", "emoji 😀👍🏽 and flags 🇫🇷!",
    "東京タワー 北京大学 한국어", "multiple   spaces  and\ttabs\t\tand trailing  ",
    "\tleading tab", "  leading spaces, it's, we'll, they'd, I'M 'S ''re !'s 5's",
    "x\u00a0nbsp \u3000ideographic\u2009thin\u202fnarrow", "trailing odd \u00a0\u2009\u202f\u3000",
    " \u00a0\u2009\u202f\u3000", "ﬁnancial ǅ İstanbul ΣΑΣ straße", "", " ", "   ", "\t \t",
    "end of text<|endoftext|>next document", "<|endoftext|>", "a <|endoftext|>  b",
    "12 345 6.7e-8 ١٢٣ ½ 1,000,000 2nd", "marker ६ and ० digits ६६ 1६ 1६ x 12६  y ६",
    "combining e\u0301 and ZWJ 👨\u200d👩\u200d👧", "\u2028\x85\x0b\x0c odd \x1c spaces \r",
    "punct... --- !!! ?! (a) [b] {c} \"q\" 'q' @-@ @,@", "a" * 300, "don't", "'", "'s",
]


def _fuzz(count, seed=0):
    """Random strings over the characters where the splits have their cases."""
    pieces = list("ab Z1 2'''stmdrevl.,!-éÉ٣😀\u0301 xy東ΣΑ") + [
        "'s", "'re", "'ll", "'ve", "  ", "   ", "\t", "\r", "\f", "\v", "\x85", "\x1c",
        "\u2028", "\u00a0", "\u2009", "\u202f", "\u3000", "\u2003", "६", "०", "ĴA", "\u200d",
        "\ufffd", "\x00", "\u00ad", "ﬁ", "İ", "½", "Ａ", "ß", "ǅ", "\u0345", "\u0300\u0316",
        "<|endoftext|>", "\U0001F9E0", " \u00a0\u2009\u202f\u3000"]
    generator = random.Random(seed)
    return ["".join(generator.choice(pieces) for _ in range(generator.randint(0, 20)))
            for _ in range(count)]


@pytest.fixture(scope="module")
def valid_lines(shared_data):
    text = (shared_data / "wikitext-2" / "valid.txt").read_text(encoding="utf-8")
    return text.split("\n")  # blank lines and the leading space of every line kept


def _batched(count, lines, size=512):
    total = collections.Counter()
    for start in range(0, len(lines), size):
        total.update(dict(count(lines[start:start + size])))
    return total


def test_bpe_piece_counts_equal_per_line_split(valid_lines):
    fuzz = _fuzz(3000)
    for lines in (TRICKY, valid_lines, fuzz):
        expected = collections.Counter(bpe.pretokenize_lines(lines))
        assert _batched(bpe.count_words, lines) == expected
        assert collections.Counter(bpe.count_words(lines)) == expected  # cached pieces
    for line in TRICKY + fuzz[:300]:  # each line alone: no other line covers a mistake
        assert bpe.count_words([line]) == collections.Counter(bpe.pretokenize_lines([line])), \
            repr(line)
    # lines holding line breaks; other special tokens, one of them holding a line break
    broken = [a + "\n" + b for a, b in zip(fuzz[::2], fuzz[1::2])] + ["a\nb", "\n", " \n "]
    for specials in ([bpe.END_OF_TEXT], ["<s>", "[a b]", bpe.END_OF_TEXT], ["x\ny", "ab"]):
        for lines in (broken, fuzz + TRICKY + ["<s>a</s>", "[a b]c", "x\ny z"]):
            assert collections.Counter(bpe.count_words(lines, specials)) == \
                collections.Counter(bpe.pretokenize_lines(lines, specials)), specials


def test_wordpiece_plain_counts_equal_the_tensorflow_split(valid_lines):
    lines = [line for line in valid_lines if line.strip()]
    assert _batched(wordpiece.count_lines_plain, lines) == _batched(wordpiece.count_lines,
                                                                    lines)
    crafted = TRICKY + _fuzz(3000, seed=1)
    for lowercase in (True, False):
        for strip_accents in (True, False):
            plain = _batched(lambda batch: wordpiece.count_lines_plain(
                batch, lowercase, strip_accents), crafted)
            assert plain == _batched(lambda batch: wordpiece.count_lines(
                batch, lowercase, strip_accents), crafted), (lowercase, strip_accents)


# Code points whose category Python 3.10's Unicode 13 tables and TensorFlow's newer ones
# disagree on (Mn <-> Mc): accent stripping keeps or drops them differently.
_CATEGORY_CHANGED = {0x1734, 0x11938}


def test_plain_wordpiece_split_matches_tensorflow_on_every_assigned_character():
    """Every code point Python knows (not Cn) below plane 3 and in plane 14 (tags, variation
    selectors; planes 15-16 are private use, dropped by both), between letters and after a
    space."""
    from keras_hub.src.tokenizers.word_piece_tokenizer import pretokenize

    from lmfactory.components.pretraining_data import plain_wordpiece
    from lmfactory.models.tokenizers import bert_normalize

    points = [point for point in [*range(0x30000), *range(0xE0000, 0xE1000)]
              if not 0xD800 <= point <= 0xDFFF and unicodedata.category(chr(point)) != "Cn"]
    texts = [f"a{chr(point)}B {chr(point)}x" for point in points]
    words = pretokenize(bert_normalize(tf.constant(texts)), lowercase=False,
                        strip_accents=False, split=True, split_on_cjk=True).to_list()
    differing = {point for point, text, expected in zip(points, texts, words)
                 if plain_wordpiece.split_words(plain_wordpiece.bert_normalize(text))
                 != [word.decode("utf-8") for word in expected]}
    assert differing <= _CATEGORY_CHANGED
    assert len(points) > 140_000
