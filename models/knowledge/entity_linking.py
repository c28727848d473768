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

import json
import os
import unicodedata
from typing import Iterable, Sequence

import keras

from lmfactory.models.backend import tf

_ASCII_SPACES = "\t\n\v\f\r "
# RE2 (tf-text) equivalents of the Python rules below.
_NOT_WORD_OR_SPACE = r"[^\t\n\v\f\r \p{Z}\p{L}\p{M}\p{N}]"
_DELIMITERS = r"[\t\n\v\f\r \p{Z}]+|" + _NOT_WORD_OR_SPACE
OFFSET_UNITS = ("UTF8_CHAR", "BYTE")
# A vocabulary folder of a model trained with a knowledge graph holds the graph's entities
# (KnowledgeGraph artifact format: index<TAB>id<TAB>forms joined by "|") and the linker's
# settings, so the model's preprocessing links raw text the way its training data was.
ENTITIES_FILE = "entities.tsv"
LINKING_FILE = "linking.json"


def read_entities_file(path: str) -> tuple[list[str], list[list[str]]]:
    """``(entity ids, surface forms per entity)`` of an ``entities.tsv`` file."""
    entities, labels = [], []
    with tf.io.gfile.GFile(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip():
                continue
            _, entity, forms = line.split("\t")
            entities.append(entity)
            labels.append(forms.split("|") if forms else [])
    return entities, labels


def read_linking_vocabulary(vocab_dir: str):
    """``(labels, max_ngram, lowercase)`` from a vocabulary folder's `ENTITIES_FILE` and
    `LINKING_FILE`, or None when the folder has none (a model trained without a graph)."""
    entities_path = os.path.join(vocab_dir, ENTITIES_FILE)
    linking_path = os.path.join(vocab_dir, LINKING_FILE)
    if not (tf.io.gfile.exists(entities_path) and tf.io.gfile.exists(linking_path)):
        return None
    with tf.io.gfile.GFile(linking_path) as f:
        linking = json.load(f)
    return (read_entities_file(entities_path)[1], int(linking["max_ngram"]),
            bool(linking["lowercase"]))


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


def _pad_column(values, fill):
    """[B, T] -> [B, T + 1] with ``fill`` in the new last column."""
    return tf.pad(values, [[0, 0], [0, 1]], constant_values=fill)


def _shift_left(values, k: int, fill):
    """``values[:, k:]`` padded back to its width with ``fill``."""
    return tf.pad(values, [[0, 0], [0, k]], constant_values=fill)[:, k:]


@keras.saving.register_keras_serializable(package="lmfactory")
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
        kwargs["trainable"] = False  # nothing to train: a lookup table
        super().__init__(**kwargs)
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
        import tensorflow_text as tf_text

        texts = tf.convert_to_tensor(texts, tf.string)
        words, begins, ends = tf_text.regex_split_with_offsets(
            texts, _DELIMITERS, _NOT_WORD_OR_SPACE)
        if self.lowercase:
            words = tf.ragged.map_flat_values(tf.strings.lower, words, encoding="utf-8")
        lengths = words.row_lengths()
        # One padding column more, so a batch of texts without words still scans one step.
        words = _pad_column(words.to_tensor(""), "")
        begins = _pad_column(begins.to_tensor(0), 0)
        ends = _pad_column(ends.to_tensor(0), 0)
        positions = tf.range(tf.shape(words, out_type=tf.int64)[1])[tf.newaxis, :]
        # best[b, i] / entity[b, i]: the longest label starting at word i and its entity.
        best = tf.zeros_like(begins)
        entity = tf.fill(tf.shape(begins), tf.constant(-1, tf.int64))
        for n in range(self.max_ngram, 0, -1):
            ngrams = tf.strings.join([_shift_left(words, k, "") for k in range(n)],
                                     separator=" ")
            found = self._table.lookup(ngrams)
            hit = (found >= 0) & (positions + n <= lengths[:, tf.newaxis]) & (best == 0)
            best = tf.where(hit, tf.constant(n, tf.int64), best)
            entity = tf.where(hit, found, entity)

        def scan_step(state, best_at_i):  # left to right: a match starts after the last one
            next_free, i = state[0], state[2]
            take = (i >= next_free) & (best_at_i > 0)
            return tf.where(take, i + best_at_i, next_free), take, i + 1

        # The state's static shape is that of a column of ``best`` (a static batch of one
        # text would otherwise enter the scan as (1,) and leave it as (None,)).
        column = tf.zeros_like(best[:, 0])
        _, taken, _ = tf.scan(scan_step, tf.transpose(best),
                              initializer=(column, tf.cast(column, tf.bool),
                                           tf.constant(0, tf.int64)))
        taken = tf.transpose(taken)
        last_word = tf.maximum(positions + best - 1, 0)
        mention_ends = tf.gather(ends, last_word, batch_dims=1)
        if self.offset_unit == "UTF8_CHAR":
            begins, mention_ends = self._char_offsets(texts, begins, mention_ends)
        return (tf.ragged.boolean_mask(begins, taken),
                tf.ragged.boolean_mask(mention_ends, taken),
                tf.ragged.boolean_mask(entity, taken))

    @staticmethod
    def _char_offsets(texts, *byte_offsets):
        """Byte offsets [B, T] -> code point offsets: the number of characters that start
        before each offset."""
        _, char_starts = tf.strings.unicode_decode_with_offsets(
            texts, "UTF-8", errors="replace")
        char_starts = _pad_column(char_starts.to_tensor(tf.int64.max), tf.int64.max)
        return tuple(tf.searchsorted(char_starts, offsets, side="left", out_type=tf.int64)
                     for offsets in byte_offsets)

    def get_config(self) -> dict:
        return {**super().get_config(), "labels": self.labels, "max_ngram": self.max_ngram,
                "lowercase": self.lowercase, "offset_unit": self.offset_unit}
