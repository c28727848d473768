"""The ``bpe`` kind's tokenizer: keras-nlp's byte-level ``BytePairTokenizer`` made faster,
with the same ids.

Byte-level BPE (GPT-2, Radford et al. 2019 §2.2): text is split into words by GPT-2's regex,
each word's UTF-8 bytes are spelled in a printable byte alphabet, and merges are applied
lowest rank first. keras-nlp's layer does all three in graph; this subclass keeps its
vocabulary, merges, word cache, merge loop, detokenizer and config, and changes two things
(mechanisms keras-nlp lacks):

1. **The split.** :func:`byte_level_split.split_words` finds GPT-2's words with vectorised
   TF core ops over the batch's code points instead of two RE2 ``regex_split`` passes;
   rows it does not model (tabs, line breaks, special tokens, ... see that module) go
   through keras-nlp's split (the same patterns and steps, on flat vectors:
   :func:`byte_level_split.keras_nlp_split`), so every row's ids are keras-nlp's.
2. **A static word table.** The vocabulary learner knows every word of the corpus and
   writes the merged pieces of the most frequent ones (``word_pieces.txt``, merges applied
   in keras-nlp's order: :func:`merge_symbols`). They become a ``StaticHashTable`` word ->
   row of a constant ragged id table, looked up once per batch; the other words go through
   keras-nlp's word cache and merge loop, once per distinct word of the batch. A table
   written for other merges is refused (its header holds a digest of the merges).

The graph is kept small on purpose: a ``tf.data`` iterator re-instantiates its map function
each time it starts, i.e. every epoch, and through ``Dataset.map`` that includes placement
and Grappler on the whole graph (benchmarks/tokenization.py's fixed-cost table;
``lmfactory.models.host_map`` instantiates it without them). The rare paths (keras-nlp's
split, the merge loop) sit in ``tf.cond`` branches of the same graph, run only when a batch
needs them: as separate non-inlined functions they would be instantiated as multi-device
functions (Grappler included) at their first call in every iterator, ~0.1 s or more a pass
over text with words outside the word table.

Every op is TF core (``UnicodeDecodeWithOffsets``, ``Substr``, ``LookupTableFindV2``,
``RaggedGather`` ...) or keras-nlp's (TF core + tf_text), so the layer exports into a
SavedModel that takes raw strings and TF Serving can run.
"""

from __future__ import annotations

import hashlib
import logging
import re

import keras
import keras_nlp
from keras_hub.src.utils.tensor_utils import preprocessing_function

from lmfactory.models.backend import tf
from lmfactory.models.tokenizers.byte_level_split import (character_classes, keras_nlp_split,
                                                          merge_rows, split_words)

WORD_PIECES_FILE = "word_pieces.txt"
_HEADER = "#word_pieces merges_sha256="


# --- The word table file ------------------------------------------------------------------
def merges_digest(merges) -> str:
    """SHA-256 of the merge rules (``"a b"`` lines, in rank order)."""
    return hashlib.sha256("\n".join(merges).encode("utf-8")).hexdigest()


def merge_symbols(symbols: list[str], ranks: dict[tuple[str, str], int]) -> list[str]:
    """Merges one word's byte symbols in keras-nlp's order: the adjacent pair of lowest
    rank, its leftmost occurrence, one merge a step, until no pair has a rank (what
    ``BytePairTokenizer._bpe_merge_one_step`` does in graph, and ``tokenizers``' BPE)."""
    symbols = list(symbols)
    while len(symbols) > 1:
        rank, position = min((ranks.get(pair, len(ranks)), index)
                             for index, pair in enumerate(zip(symbols, symbols[1:])))
        if rank == len(ranks):
            break
        symbols[position:position + 2] = [symbols[position] + symbols[position + 1]]
    return symbols


def write_word_pieces(path: str, pieces: list[list[str]], merges) -> None:
    """Writes the word table: a header with :func:`merges_digest`, then one word a line,
    its pieces (byte-alphabet spelling, never holding a space) separated by spaces."""
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(_HEADER + merges_digest(merges) + "\n")
        f.write("".join(" ".join(word) + "\n" for word in pieces))


def read_word_pieces(path: str, merges) -> list[list[str]] | None:
    """The word table at ``path`` (lists of pieces), or None (logged) when it was written
    for other merges."""
    with tf.io.gfile.GFile(path) as f:
        lines = f.read().splitlines()
    if not lines or lines[0] != _HEADER + merges_digest(merges):
        logging.warning("%s was written for other merges; the tokenizer ignores it", path)
        return None
    return [line.split(" ") for line in lines[1:] if line]


# --- The tokenizer ----------------------------------------------------------------------
@keras.saving.register_keras_serializable(package="lmfactory")
class ByteLevelBpeTokenizer(keras_nlp.tokenizers.BytePairTokenizer):
    """keras-nlp's ``BytePairTokenizer`` with a vectorised split and a static word table
    (see the module docstring); the ids, config and assets are the parent's, plus the
    optional word table.

    Args:
      word_pieces: the word table (lists of pieces in the byte alphabet, e.g. from
        :func:`read_word_pieces`), or None. Words whose pieces are not all in the
        vocabulary are left to the cache.
      The rest: as ``keras_nlp.tokenizers.BytePairTokenizer``.
    """

    def __init__(self, vocabulary=None, merges=None, word_pieces=None, **kwargs):
        self._word_pieces = word_pieces
        super().__init__(vocabulary=vocabulary, merges=merges, **kwargs)

    def set_vocabulary_and_merges(self, vocabulary, merges):
        super().set_vocabulary_and_merges(vocabulary, merges)
        self._classes = tf.constant(character_classes())
        self._word_table = None
        self._special_pattern = None
        if self.vocabulary is None:
            return
        tokens = self.unsplittable_tokens or []
        self._special_pattern = ("(?s).*(?:" + "|".join(re.escape(t) for t in tokens) + ").*"
                                 if tokens else None)
        self._build_word_table(self._word_pieces or [])
        self._build_merge_table()
        # The rare paths: traced into the caller's graph (a tf.cond branch, run only when a
        # batch needs it) and, for eager calls, compiled once.
        words = tf.TensorSpec([None], tf.string)
        self._merge_words_compiled = tf.function(self._merge_words, input_signature=[words],
                                                 autograph=False)
        self._keras_nlp_words_compiled = tf.function(
            self._keras_nlp_words, input_signature=[words], autograph=False)

    def _merge_words_once(self, words):
        """:meth:`_merge_words`, in the caller's graph or (eager) compiled."""
        if tf.executing_eagerly():
            return self._merge_words_compiled(words)
        return self._merge_words(words)

    def _keras_nlp_words_once(self, texts):
        """:meth:`_keras_nlp_words`, in the caller's graph or (eager) compiled."""
        if tf.executing_eagerly():
            return self._keras_nlp_words_compiled(texts)
        return self._keras_nlp_words(texts)

    def _build_word_table(self, word_pieces) -> None:
        """word -> row of a constant ragged id table: the words whose pieces are all in
        the vocabulary (keys are the words' raw UTF-8 bytes), and each special token as
        one id (keras-nlp seeds its word cache with them)."""
        byte_of = {symbol: value for value, symbol in zip(*_byte_table())}
        rows = {}
        for pieces in word_pieces:
            if all(piece in self.vocabulary for piece in pieces):
                word = b"".join(byte_of[symbol] for piece in pieces for symbol in piece)
                rows[word] = [self.vocabulary[piece] for piece in pieces]
        for token in self.unsplittable_tokens or []:
            rows[token.encode("utf-8")] = [self.vocabulary.get(token, -1)]
        keys, splits, ids = [], [0], []
        for word, word_ids in rows.items():
            keys.append(word)
            ids.extend(word_ids)
            splits.append(len(ids))
        if not keys:
            return
        self._word_table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(keys), tf.range(len(keys), dtype=tf.int64)), default_value=-1)
        self._table_ids = tf.constant(ids, tf.int32)
        self._table_splits = tf.constant(splits, tf.int64)

    def save_assets(self, dir_path):
        super().save_assets(dir_path)
        if self._word_pieces:
            write_word_pieces(f"{dir_path}/{WORD_PIECES_FILE}", self._word_pieces,
                              self.merges)

    def load_assets(self, dir_path):
        path = f"{dir_path}/{WORD_PIECES_FILE}"
        if tf.io.gfile.exists(path):
            with tf.io.gfile.GFile(f"{dir_path}/merges.txt") as f:
                merges = [line.rstrip() for line in f]
            self._word_pieces = read_word_pieces(path, merges)
        super().load_assets(dir_path)

    @preprocessing_function
    def tokenize(self, inputs):
        if self.compute_dtype == tf.string:  # string pieces out: keras-nlp's own path
            return super().tokenize(inputs)
        self._check_vocabulary()
        if self.add_prefix_space:
            inputs = tf.strings.join([" ", inputs])
        inputs = tf.convert_to_tensor(inputs)
        unbatched = inputs.shape.rank == 0
        if unbatched:
            inputs = tf.expand_dims(inputs, 0)
        if inputs.shape.rank > 1:
            raise ValueError("`tokenize()` inputs should be a string, list of strings, or "
                             f"string tensor with rank < 2. Received: {inputs}")
        tokens = self._tokenize_batch(inputs)
        if self.sequence_length:
            output_shape = tokens.shape.as_list()
            output_shape[-1] = self.sequence_length
            tokens = tokens.to_tensor(shape=output_shape)
        if unbatched:
            tokens = tf.squeeze(tokens, 0)
            tf.ensure_shape(tokens, shape=[self.sequence_length])
        return tokens

    def _tokenize_batch(self, texts):
        """Ragged ids of a 1-D batch: the words of most rows from :func:`split_words`,
        the others' from keras-nlp's split (merged in row order), then the ids of all
        words at once."""
        inexact = (tf.strings.regex_full_match(texts, self._special_pattern)
                   if self._special_pattern else None)
        words, row_splits, exact = split_words(texts, self._classes, inexact)

        def with_other_rows():
            rows = tf.where(~exact)[:, 0]
            other, other_splits = self._keras_nlp_words_once(tf.gather(texts, rows))
            return merge_rows(words, row_splits, other, other_splits, rows)

        words, row_splits = tf.cond(tf.reduce_all(exact), lambda: (words, row_splits),
                                    with_other_rows)
        ids = self._word_ids(words)
        return tf.RaggedTensor.from_row_splits(
            ids.flat_values, tf.gather(ids.row_splits, row_splits), validate=False)

    def _word_ids(self, words):
        """Ragged [word, id]: the static table's rows, and :meth:`_merge_words` for the
        rest (once per distinct word of the batch)."""
        if self._word_table is None:
            unique, position = tf.unique(words, out_idx=tf.int64)
            return tf.gather(self._merge_words_once(unique), position)
        table = tf.RaggedTensor.from_row_splits(self._table_ids, self._table_splits,
                                                validate=False)
        index = self._word_table.lookup(words)

        def with_misses():
            missing = tf.where(index < 0)[:, 0]
            unique, position = tf.unique(tf.gather(words, missing), out_idx=tf.int64)
            rows = tf.tensor_scatter_nd_update(index, missing[:, None],
                                               table.nrows() + position)
            merged = self._merge_words_once(unique)  # rows appended to the table's
            both = tf.RaggedTensor.from_row_splits(
                tf.concat([self._table_ids, merged.flat_values], 0),
                tf.concat([self._table_splits, merged.row_splits[1:] + self._table_splits[-1]],
                          0), validate=False)
            found = tf.gather(both, rows)
            return found.flat_values, found.row_splits

        def all_found():
            found = tf.gather(table, index)
            return found.flat_values, found.row_splits

        values, splits = tf.cond(tf.reduce_all(index >= 0), all_found, with_misses)
        return tf.RaggedTensor.from_row_splits(values, splits, validate=False)

    def _build_merge_table(self) -> None:
        """Symbols as integers for :meth:`_merge_words`: every vocabulary token keeps its
        id, merge results and byte symbols outside the vocabulary get ids above it (they
        come out as -1, as keras-nlp's vocabulary lookup gives them); a pair of symbol ids
        ``(a, b)`` -> ``rank * size + merged id``."""
        ids = dict(self.vocabulary)
        limit = max(ids.values(), default=-1)
        self._largest_id = limit

        def symbol(text):
            if text not in ids:
                ids[text] = max(limit, len(ids) and max(ids.values())) + 1
            return ids[text]

        byte_list, unicode_list = _byte_table()
        byte_ids = [0] * 256
        for value, text in zip(byte_list, unicode_list):
            byte_ids[value[0]] = symbol(text)
        pairs = [merge.split(" ") for merge in self.merges]
        triples = [(symbol(a), symbol(b), symbol(a + b)) for a, b in pairs]
        size = max(ids.values()) + 1
        self._symbol_count = size
        self._byte_ids = tf.constant(byte_ids, tf.int64)
        keys = [a * size + b for a, b, _ in triples]
        values = [rank * size + merged for rank, (_, _, merged) in enumerate(triples)]
        self._pair_table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(keys, tf.int64),
                                                tf.constant(values, tf.int64)),
            default_value=-1)

    def _merge_words(self, words):
        """The byte-pair merge of 1-D ``words`` -> ragged [word, id], in keras-nlp's order
        (per word, the leftmost pair of lowest merge rank, one merge a step; all words at
        once, one ``tf.while_loop`` step a merge, symbols as integer ids in a dense
        [word, symbol] matrix, -1 past a word's end)."""
        size = self._symbol_count
        byte_values = tf.io.decode_raw(tf.strings.bytes_split(words).flat_values,
                                       tf.uint8)[:, 0]
        symbols = tf.RaggedTensor.from_row_splits(
            tf.gather(self._byte_ids, tf.cast(byte_values, tf.int32)),
            tf.strings.bytes_split(words).row_splits, validate=False)
        matrix = symbols.to_tensor(default_value=-1)
        matrix = tf.pad(matrix, [[0, 0], [0, 2]], constant_values=-1)  # >= 2 columns
        width = tf.shape(matrix, out_type=tf.int64)[1]
        column = tf.range(width)[None, :]
        no_rank = tf.constant(2 ** 62, tf.int64)

        def step(matrix, _):
            left, right = matrix[:, :-1], matrix[:, 1:]
            packed = self._pair_table.lookup(left * size + right)
            packed = tf.where((left >= 0) & (right >= 0), packed, -1)
            rank = tf.where(packed >= 0, packed // size, no_rank)
            best = tf.argmin(rank, axis=1, output_type=tf.int64)
            active = tf.reduce_min(rank, axis=1) < no_rank
            merged = tf.gather(packed, best, batch_dims=1) % size
            at = tf.where(active, best, width)[:, None]
            source = tf.minimum(tf.where(column > at, column + 1, column), width - 1)
            shifted = tf.gather(matrix, source, batch_dims=1)
            shifted = tf.where(column == width - 1, tf.constant(-1, tf.int64), shifted)
            matrix = tf.where(column == at, merged[:, None], shifted)
            return matrix, tf.reduce_any(active)

        matrix, _ = tf.while_loop(lambda _, going: going, step,
                                  [matrix, tf.constant(True)])
        ids = tf.RaggedTensor.from_tensor(matrix, padding=-1)
        values = tf.where(ids.flat_values > self._largest_id, tf.constant(-1, tf.int64),
                          ids.flat_values)
        return tf.RaggedTensor.from_row_splits(tf.cast(values, tf.int32), ids.row_splits,
                                               validate=False)

    def _keras_nlp_words(self, texts):
        """keras-nlp's split of a 1-D batch -> (1-D words, row_splits)."""
        return keras_nlp_split(texts, self.unsplittable_tokens)

    def get_config(self):
        return super().get_config()  # the word table is an asset, like the vocabulary


def _byte_table():
    from keras_hub.src.tokenizers.byte_pair_tokenizer import bytes_to_unicode

    return bytes_to_unicode()


__all__ = ["ByteLevelBpeTokenizer", "WORD_PIECES_FILE", "merge_symbols", "merges_digest",
           "read_word_pieces", "write_word_pieces"]
