"""Entity linking by label matching, in TF ops (`EntityLinkingLayer`) and its rules in Python
(`word_spans`, `label_key`, `label_table`), shared with the Beam `EntityMatcher`
(components/knowledge_graph/linking.py) so both find the same mentions.

ERNIE (Zhang et al. 2019, §4.1 "we ... align [entities] to the text" with label matching, the
way TAGME anchors are matched) and KagNet (Lin et al. 2019, §3.1 concept recognition: "we
match tokens in questions and answers to sets of mentioned concepts ... by n-gram matching")
both ground text in a knowledge graph by matching entity surface forms. The rules:

* words: a maximal run of Unicode letters, marks and digits is one word; any other character
  that is not a space (punctuation, symbols) is a word of its own; spaces (ASCII whitespace
  and Unicode ``Z*`` separators) separate words;
* an entity label is matched as its word sequence (lowercased per word when ``lowercase``),
  joined by single spaces, so "El Paso, Texas" matches "el paso , texas" in any spacing;
* the text is scanned left to right; at each word the longest label of at most ``max_ngram``
  words starting there is taken, and the scan continues after it (non-overlapping);
* a surface form shared by several entities links to the lowest entity index (the graph
  orders entities by their number of training triples, so the most connected one wins).

keras-nlp and tf-text have no dictionary (gazetteer) n-gram matcher, so the matching is our
own; the word split is tf-text's ``regex_split_with_offsets`` and the lookup a
``tf.lookup.StaticHashTable``, which TF Serving runs (no ``py_function``).
"""

from __future__ import annotations

import unicodedata
from typing import Iterable, Sequence

import keras
import tensorflow as tf

_ASCII_SPACES = "\t\n\v\f\r "
# RE2 (tf-text) equivalents of the Python rules below.
_NOT_WORD_OR_SPACE = r"[^\t\n\v\f\r \p{Z}\p{L}\p{M}\p{N}]"
_DELIMITERS = r"[\t\n\v\f\r \p{Z}]+|" + _NOT_WORD_OR_SPACE
OFFSET_UNITS = ("UTF8_CHAR", "BYTE")


def _is_space(char: str) -> bool:
    return char in _ASCII_SPACES or unicodedata.category(char).startswith("Z")


def _is_word(char: str) -> bool:
    return unicodedata.category(char)[0] in "LMN"


def word_spans(text: str) -> list[tuple[int, int]]:
    """The (start, end) character offsets of ``text``'s words (module docstring rules)."""
    spans, i, n = [], 0, len(text)
    while i < n:
        char = text[i]
        if _is_space(char):
            i += 1
        elif _is_word(char):
            j = i + 1
            while j < n and _is_word(text[j]):
                j += 1
            spans.append((i, j))
            i = j
        else:
            spans.append((i, i + 1))
            i += 1
    return spans


def label_key(label: str, lowercase: bool) -> tuple[str, int]:
    """The lookup key of a surface form (its words, lowercased when asked, joined by one
    space) and its number of words."""
    words = [label[start:end] for start, end in word_spans(label)]
    if lowercase:
        words = [word.lower() for word in words]
    return " ".join(words), len(words)


def label_table(labels: Sequence[Iterable[str]], max_ngram: int,
                lowercase: bool) -> dict[str, int]:
    """Lookup key -> entity index for every surface form of at most ``max_ngram`` words;
    the lowest entity index wins a key several entities share."""
    table: dict[str, int] = {}
    for index, forms in enumerate(labels):
        for form in forms:
            key, length = label_key(form, lowercase)
            if 0 < length <= max_ngram and key not in table:
                table[key] = index
    return table


def _shift_left(values, k: int, fill):
    """``values[:, k:]`` padded back to its width with ``fill``."""
    return tf.pad(values[:, k:], [[0, 0], [0, k]], constant_values=fill)


class EntityLinkingLayer(keras.layers.Layer):
    """Raw strings [B] -> knowledge-graph entity mentions, ragged [B, None] each:
    ``starts``, ``ends`` (offsets into the text in ``offset_unit``: code points, as Python
    ``str`` indices, or UTF-8 bytes, as the keras-nlp tokenizers' offsets; end exclusive) and
    ``entity_ids`` (int64 entity indices), with the same matches as
    `components.knowledge_graph.linking.EntityMatcher` (module docstring rules).

    Args:
        labels: per entity index, its surface forms (``KnowledgeGraph.labels``).
        max_ngram: longest surface form matched, in words.
        lowercase: match lowercased words.
        offset_unit: ``"UTF8_CHAR"`` (default) or ``"BYTE"``.
    """

    def __init__(self, labels: Sequence[Sequence[str]], max_ngram: int = 4,
                 lowercase: bool = True, offset_unit: str = "UTF8_CHAR", **kwargs):
        super().__init__(trainable=False, **kwargs)
        if max_ngram < 1:
            raise ValueError(f"max_ngram must be >= 1, got {max_ngram}")
        if offset_unit not in OFFSET_UNITS:
            raise ValueError(f"offset_unit must be one of {OFFSET_UNITS}, got {offset_unit!r}")
        self.labels = [list(forms) for forms in labels]
        self.max_ngram, self.lowercase, self.offset_unit = int(max_ngram), bool(lowercase), \
            offset_unit
        table = label_table(self.labels, self.max_ngram, self.lowercase)
        keys = list(table) or [""]  # an empty graph: a table that never matches
        values = [table[key] for key in table] or [-1]
        self._table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(keys, tf.string),
                                                tf.constant(values, tf.int64)),
            default_value=-1)

    def call(self, texts):
        raise NotImplementedError

    def compute_output_spec(self, texts):
        raise NotImplementedError

    def get_config(self) -> dict:
        return {**super().get_config(), "labels": self.labels, "max_ngram": self.max_ngram,
                "lowercase": self.lowercase, "offset_unit": self.offset_unit}
