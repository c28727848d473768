"""The ``wordpiece`` kind's tokenizer in plain Python, for Beam workers that import no
TensorFlow.

PretrainingExampleGen tokenizes its corpus in Beam SDK worker processes. With the project's
tokenizer (``models/tokenizers/wordpiece.py``: ``BertWordPieceTokenizer``, a keras-nlp
``WordPieceTokenizer`` after BERT's normalisation in TF ops) every worker process imports
TensorFlow, tf-text and keras-nlp before its first document, seconds of fixed cost per
process. keras-nlp and tf-text offer no tokenizer that runs without TensorFlow,
so this module writes the same steps with the standard library (the mechanism they lack is
"no TensorFlow"); the ids are the keras-nlp layer's (tests/test_plain_wordpiece.py compares
them on the WikiText-2 corpus and on crafted text), and the trained model and SavedModel keep
using the keras-nlp layer.

The steps (Devlin et al. 2019, BERT, and google-research/bert ``tokenization.py``; Wu et al.
2016 §4.1 for WordPiece):

1. ``bert_normalize``: drop "other" characters except ``\\t \\n \\r`` (Cc, Cf, Co, Cs: RE2's
   ``\\p{C}``, which the TF op uses; unassigned code points stay), and U+FFFD; turn every
   Python whitespace and ``Zs`` character into a space; with ``strip_accents``, NFD and
   drop ``Mn`` marks; with ``lowercase``, lowercase character by character (capital sigma
   mapped first, so no Final_Sigma rule).
2. keras-nlp's ``pretokenize`` (split=True, split_on_cjk=True): CJK ideographs and
   punctuation (ASCII non-alphanumerics ``!-/ :-@ [-` {-~`` and Unicode ``P*``) are words of
   their own; the rest splits on whitespace.
3. tf-text's ``FastWordpieceTokenizer`` on each word: greedy longest match first, pieces after
   the first prefixed ``##``; a word that cannot be covered, or longer than 100 UTF-8 bytes,
   is the unknown token.

Words repeat (Zipf), so the ids of each distinct word are cached per tokenizer object.
Known limit: Python's ``unicodedata`` and TensorFlow's RE2/ICU may be at different Unicode
versions, so characters assigned between the two versions can differ.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Sequence

SUFFIX = "##"
MAX_BYTES_PER_WORD = 100
_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
               (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))
_ASCII_PUNCTUATION = "".join(chr(c) for c in range(33, 127) if not chr(c).isalnum())
_SPLITTER = None  # built on first use (non-ASCII text)


def _ranges_class(code_points) -> str:
    """A regex character class body for a sorted iterable of code points."""
    parts, run = [], None
    for point in code_points:
        if run and point == run[1] + 1:
            run[1] = point
            continue
        if run:
            parts.append(run)
        run = [point, point]
    if run:
        parts.append(run)
    return "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}"
                   for a, b in parts)


# Unicode has punctuation (P*) in planes 0 and 1 only; CJK ideographs are listed above.
_PUNCTUATION_SCAN_END = 0x20000
_ASCII_BODY = _ranges_class(sorted(map(ord, _ASCII_PUNCTUATION)))
_ASCII_SPLITTER = re.compile(f"[{_ASCII_BODY}]|[^{_ASCII_BODY}\\s]+")


def _splitter():
    """The word regex of non-ASCII text: a punctuation or CJK character alone, or a run of
    anything else but spaces (built on first use: one scan of planes 0 and 1)."""
    global _SPLITTER
    if _SPLITTER is None:
        singles = set(map(ord, _ASCII_PUNCTUATION))
        singles.update(point for point in range(128, _PUNCTUATION_SCAN_END)
                       if unicodedata.category(chr(point)).startswith("P"))
        for low, high in _CJK_RANGES:
            singles.update(range(low, high + 1))
        body = _ranges_class(sorted(singles))
        _SPLITTER = re.compile(f"[{body}]|[^{body}\\s]+")
    return _SPLITTER


class _Normalization(dict):
    """``str.translate`` table of ``bert_normalize``'s first two steps, filled per character
    on first sight: "other" (C*) characters but \\t \\n \\r, and U+FFFD, are dropped first
    (as its first regex does); then whitespace and ``Zs`` become a space."""

    def __missing__(self, point: int):
        character = chr(point)
        category = unicodedata.category(character)
        # RE2's \p{C} (the TF op's class) is Cc, Cf, Co and Cs: unassigned (Cn) stays
        if (category in _DROPPED_CATEGORIES and character not in "\t\n\r") or point == 0xFFFD:
            value = None
        elif character.isspace() or category == "Zs":
            value = 0x20
        else:
            value = point
        self[point] = value
        return value


_DROPPED_CATEGORIES = ("Cc", "Cf", "Co", "Cs")
_NORMALIZATION = _Normalization()
_ASCII_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # Cc but \t \n \r
_ASCII_SPACES = re.compile(r"[\t\n\r]")


def bert_normalize(text: str, lowercase: bool = True, strip_accents: bool = True) -> str:
    """BERT's character normalisation (step 1 of the module docstring)."""
    if text.isascii():  # the common case
        text = _ASCII_CONTROLS.sub("", _ASCII_SPACES.sub(" ", text))
        return text.lower() if lowercase else text
    text = text.translate(_NORMALIZATION)
    if strip_accents:
        text = "".join(c for c in unicodedata.normalize("NFD", text)
                       if unicodedata.category(c) != "Mn")
    if lowercase:
        text = text.replace("\u03a3", "\u03c3").lower()
    return text


def split_words(normalized: str) -> list[str]:
    """keras-nlp's ``pretokenize`` split (step 2 of the module docstring) of normalised
    text: punctuation and CJK characters alone, the rest split on whitespace."""
    return (_ASCII_SPLITTER if normalized.isascii() else _splitter()).findall(normalized)


class PlainWordPiece:
    """``tokenize(texts) -> list of id lists`` with the ids of ``BertWordPieceTokenizer``.

    Picklable: it holds the vocabulary itself (the tokens in id order), so a Beam worker
    reads no file and imports no TensorFlow.
    """

    def __init__(self, vocabulary: Sequence[str], lowercase: bool = True,
                 strip_accents: bool = True, unknown_token: str = "[UNK]"):
        self.vocabulary = list(vocabulary)
        self.lowercase = bool(lowercase)
        self.strip_accents = bool(strip_accents)
        self.unknown_token = unknown_token
        self._ids = None
        self._cache = {}

    def __getstate__(self):
        return {"vocabulary": self.vocabulary, "lowercase": self.lowercase,
                "strip_accents": self.strip_accents, "unknown_token": self.unknown_token}

    def __setstate__(self, state):
        self.__init__(**state)

    def _word_ids(self, word: str) -> tuple:
        if self._ids is None:
            self._ids = {token: index for index, token in enumerate(self.vocabulary)}
        ids = self._ids
        unknown = (ids[self.unknown_token],)
        if len(word.encode("utf-8")) > MAX_BYTES_PER_WORD:
            return unknown
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else SUFFIX + word[start:end]
                if piece in ids:
                    pieces.append(ids[piece])
                    break
                end -= 1
            if end == start:
                return unknown
            start = end
        return tuple(pieces)

    def tokenize_one(self, text: str) -> list:
        """The ids of one text."""
        cache = self._cache
        ids = []
        text = bert_normalize(text, self.lowercase, self.strip_accents)
        splitter = _ASCII_SPLITTER if text.isascii() else _splitter()
        for word in splitter.findall(text):
            found = cache.get(word)
            if found is None:
                found = cache[word] = self._word_ids(word)
            ids.extend(found)
        return ids

    def tokenize(self, texts: Sequence[str]) -> list:
        return [self.tokenize_one(text) for text in texts]


def for_vocabulary(tokenizer_config: dict, vocabulary: Sequence[str]):
    """A :class:`PlainWordPiece` for a ``wordpiece`` vocabulary folder's ``tokenizer.json``
    and tokens; None for any other kind (their workers use the keras-nlp layer)."""
    if tokenizer_config.get("kind") != "wordpiece":
        return None
    specials = tokenizer_config.get("special_tokens", {})
    return PlainWordPiece(vocabulary, tokenizer_config.get("lowercase", True),
                          tokenizer_config.get("strip_accents", True),
                          specials.get("unk", "[UNK]"))


__all__ = ["PlainWordPiece", "bert_normalize", "for_vocabulary", "split_words"]
