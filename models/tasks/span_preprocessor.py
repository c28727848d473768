"""Question + context strings -> windows of packed model inputs for span extraction, with
each context token's character offsets in the ORIGINAL context (Devlin et al. 2019 §4.2).

BERT §4.2 packs ``[CLS] question [SEP] paragraph [SEP]`` (question segment 0, paragraph
segment 1). The released ``run_squad.py`` truncates the question to ``max_query_length`` (64)
tokens and, for a paragraph longer than what is left of ``max_seq_length`` (384), slides a
window over the paragraph tokens, ``doc_stride`` (128) tokens at a time; a token that falls
in several windows is scored only by the window where it has the most context
(``_check_is_max_context``: max over windows of ``min(left, right) + 0.01 * window
length``, the first window winning ties).

Everything here is TensorFlow ops (tf-text offsets ops), so the same layer featurizes the
training set (called eagerly on batches) and runs inside the serving SavedModel. Context
offsets: each character of the context is normalised on its own with BERT's normalisation
(:func:`lmfactory.models.tokenizers.bert_normalize`, which works character by character),
the normalised text is split into words with keras-nlp's pattern and into WordPiece pieces
with ``tf_text.FastWordpieceTokenizer.tokenize_with_offsets``, and the pieces' byte offsets
in the normalised text are mapped back through the per-character lengths to the original
context. A piece inside a character that normalisation expanded (e.g. a Hangul syllable
decomposed to jamo) maps to that whole character. The ids are those of the vocabulary's
``BertWordPieceTokenizer`` (tests/test_squad.py checks it on the SQuAD dev contexts).

Offsets are UTF-8 BYTE offsets (``tf.strings.substr(..., unit="BYTE")`` cuts the answer out
of the context in the graph; Python callers convert with ``context.encode()``).

Only WordPiece vocabularies are supported (the offsets come from tf-text's WordPiece op);
byte-level BPE and SentencePiece would need their own offset mapping.
"""

from __future__ import annotations

import keras
import keras_nlp
from keras_hub.src.tokenizers.word_piece_tokenizer import (
    PUNCTUATION_AND_CJK_REGEX, WHITESPACE_PUNCTUATION_AND_CJK_REGEX)

from lmfactory.models.backend import tf, tf_text
from lmfactory.models.tokenizers import BertWordPieceTokenizer

DEFAULT_SPECIAL_TOKENS = {"cls": "[CLS]", "sep": "[SEP]", "pad": "[PAD]"}
# Outputs that the model reads; the others describe the windows for decoding / labels.
MODEL_INPUTS = ("token_ids", "padding_mask", "segment_ids", "span_mask")


@keras.saving.register_keras_serializable(package="lmfactory")
class SpanPreprocessor(keras.layers.Layer):
    """Featurizes (question [B], context [B]) string batches into W >= B windows.

    Returns a dict of dense tensors:

    * ``token_ids``, ``segment_ids`` int32 [W, L]; ``padding_mask`` bool [W, L];
    * ``span_mask`` bool [W, L]: where an answer may start or end (``[CLS]`` at 0, the
      no-answer position of v2.0, and the window's context tokens);
    * ``example_index`` int32 [W]: the batch row each window came from (windows of one
      example are consecutive, in paragraph order);
    * ``token_start`` / ``token_end`` int32 [W, L]: byte offsets of each context token in its
      context (``end`` exclusive), -1 elsewhere;
    * ``token_doc_index`` int32 [W, L]: the context token's index in the whole paragraph,
      -1 elsewhere;
    * ``max_context`` bool [W, L]: the token is scored by this window (max-context rule).

    Args:
        tokenizer: a ``BertWordPieceTokenizer`` (``models.tokenizers.load_tokenizer`` of a
            WordPiece folder).
        sequence_length: L, ``max_seq_length`` (384 in ``run_squad.py``).
        doc_stride: paragraph tokens between window starts (128).
        max_query_length: question tokens kept (64).
        special_tokens: the ``cls``, ``sep`` and ``pad`` tokens.
    """

    def __init__(self, tokenizer, sequence_length: int = 384, doc_stride: int = 128,
                 max_query_length: int = 64, special_tokens=None, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(tokenizer, BertWordPieceTokenizer):
            raise ValueError(f"SpanPreprocessor needs a WordPiece vocabulary "
                             f"(BertWordPieceTokenizer) for character offsets; got "
                             f"{type(tokenizer).__name__}")
        if max_query_length < 1 or doc_stride < 1:
            raise ValueError(f"max_query_length and doc_stride must be positive, got "
                             f"{max_query_length} and {doc_stride}")
        if sequence_length < max_query_length + 4:
            raise ValueError(f"sequence_length {sequence_length} leaves no room for the "
                             f"paragraph after a {max_query_length}-token question and 3 "
                             f"special tokens")
        self.tokenizer = tokenizer
        self.sequence_length = int(sequence_length)
        self.doc_stride = int(doc_stride)
        self.max_query_length = int(max_query_length)
        self.special_tokens = dict(special_tokens or DEFAULT_SPECIAL_TOKENS)
        ids = {}
        for role in ("cls", "sep", "pad"):
            token = self.special_tokens.get(role)
            ids[role] = None if token is None else tokenizer.token_to_id(token)
            if ids[role] is None:
                raise ValueError(f"The {role} token {token!r} is not in the vocabulary")
        self.special_ids = ids
        self.word_piece = tf_text.FastWordpieceTokenizer(
            vocab=tokenizer.get_vocabulary(), token_out_type=tf.int32,
            suffix_indicator=tokenizer.suffix_indicator, unknown_token=tokenizer.oov_token,
            no_pretokenization=True, support_detokenization=False)
        self.packer = keras_nlp.layers.MultiSegmentPacker(
            start_value=ids["cls"], end_value=ids["sep"], pad_value=ids["pad"],
            truncate="waterfall", sequence_length=self.sequence_length)

    def tokenize(self, text):
        """Ragged [B, N] int32 ids, the same as the vocabulary's ``BertWordPieceTokenizer``
        (its normalisation and split, then the same WordPiece lookup)."""
        words = tf_text.regex_split(self.tokenizer.normalize(text),
                                    WHITESPACE_PUNCTUATION_AND_CJK_REGEX,
                                    PUNCTUATION_AND_CJK_REGEX)
        return self.word_piece.tokenize(words).merge_dims(1, 2)

    # --- context tokens with offsets ----------------------------------------------------
    def context_tokens(self, context):
        """(ids, start, end): ragged [B, N] int32 WordPiece ids of each context and the byte
        offsets of each piece in the ORIGINAL context string."""
        context = tf.convert_to_tensor(context, tf.string)
        chars, char_starts = tf.strings.unicode_split_with_offsets(
            context, "UTF-8", errors="replace")
        next_starts = tf.RaggedTensor.from_row_splits(
            tf.concat([char_starts.flat_values[1:], [0]], axis=0), char_starts.row_splits)
        # The end of a character is the start of the next one; a row's last character ends
        # at the string's length.
        # (An invalid byte sequence decodes to U+FFFD; its span is the original bytes'.)
        nonempty = chars.row_lengths() > 0
        flat_ends = tf.tensor_scatter_nd_update(
            next_starts.flat_values, (chars.row_splits[1:] - 1)[nonempty][:, None],
            tf.cast(tf.strings.length(context), tf.int64)[nonempty])
        normalized_chars = self.tokenizer.normalize(chars.flat_values)
        normalized_length = tf.cast(tf.strings.length(normalized_chars), tf.int64)
        normalized_text = tf.strings.reduce_join(chars.with_flat_values(normalized_chars),
                                                 axis=-1)
        # Global cumulative normalised lengths: character i covers normalised bytes
        # [cum_end[i] - len[i], cum_end[i]) of the concatenation of all rows.
        cum_end = tf.cumsum(normalized_length)
        row_base = tf.gather(tf.concat([tf.zeros([1], tf.int64), cum_end], axis=0),
                             chars.row_splits[:-1])

        words, word_begin, _ = tf_text.regex_split_with_offsets(
            normalized_text, WHITESPACE_PUNCTUATION_AND_CJK_REGEX, PUNCTUATION_AND_CJK_REGEX)
        pieces, piece_begin, piece_end = self.word_piece.tokenize_with_offsets(words)
        word_begin = tf.expand_dims(tf.cast(word_begin, tf.int64), -1)
        begin = (tf.cast(piece_begin, tf.int64) + word_begin).merge_dims(1, 2)
        end = (tf.cast(piece_end, tf.int64) + word_begin).merge_dims(1, 2)
        ids = pieces.merge_dims(1, 2)
        base = tf.gather(row_base, begin.value_rowids())
        first_char = tf.searchsorted(cum_end, base + begin.flat_values, side="right")
        last_char = tf.searchsorted(cum_end, base + end.flat_values - 1, side="right")
        start = tf.gather(char_starts.flat_values, first_char)
        stop = tf.gather(flat_ends, last_char)
        return (ids, begin.with_flat_values(tf.cast(start, tf.int32)),
                end.with_flat_values(tf.cast(stop, tf.int32)))

    # --- windows ------------------------------------------------------------------------
    def call(self, question, context):
        question = tf.convert_to_tensor(question, tf.string)
        context = tf.convert_to_tensor(context, tf.string)
        query = self.tokenize(question)[:, :self.max_query_length]
        doc_ids, doc_start, doc_end = self.context_tokens(context)

        num_doc = tf.cast(doc_ids.row_lengths(), tf.int32)               # N [B]
        room = self.sequence_length - 3 - tf.cast(query.row_lengths(), tf.int32)  # M [B]
        step = tf.minimum(room, self.doc_stride)
        extra = tf.maximum(num_doc - room, 0)
        num_windows = 1 + (extra + step - 1) // step                       # [B]
        example_index = tf.repeat(tf.range(tf.shape(num_doc)[0]), num_windows)   # [W]
        window_number = tf.ragged.range(num_windows).flat_values           # [W]
        window_begin = window_number * tf.gather(step, example_index)
        window_length = tf.minimum(tf.gather(room, example_index),
                                   tf.gather(num_doc, example_index) - window_begin)
        window_length = tf.maximum(window_length, 0)
        positions = tf.ragged.range(window_begin, window_begin + window_length)  # [W, n]
        flat = tf.gather(tf.cast(doc_ids.row_starts(), tf.int32),
                         tf.gather(example_index, positions.value_rowids())
                         ) + positions.flat_values
        take = lambda values: positions.with_flat_values(tf.gather(values, flat))  # noqa
        window_ids = take(doc_ids.flat_values)
        window_query = tf.gather(query, example_index)

        token_ids, segment_ids = self.packer((window_query, window_ids))
        length = self.sequence_length
        prefix = tf.cast(tf.gather(query.row_lengths(), example_index), tf.int32) + 2

        def place(values, fill):
            """Per-window ragged context values -> [W, L] at the context positions."""
            before = tf.RaggedTensor.from_row_lengths(
                tf.fill([tf.reduce_sum(prefix)], fill), tf.cast(prefix, tf.int64))
            values = values.with_row_splits_dtype(tf.int64)
            return tf.concat([before, values], axis=1).to_tensor(
                default_value=fill, shape=[None, length])

        max_context = self._max_context(positions, example_index, window_number,
                                        tf.gather(step, example_index),
                                        tf.gather(room, example_index),
                                        tf.gather(num_doc, example_index),
                                        tf.gather(num_windows, example_index))
        token_doc_index = place(positions, -1)
        span_mask = tf.logical_or(token_doc_index >= 0,
                                  tf.range(length)[None, :] == 0)
        return {
            "token_ids": tf.cast(token_ids, tf.int32),
            "segment_ids": tf.cast(segment_ids, tf.int32),
            "padding_mask": token_ids != self.special_ids["pad"],
            "span_mask": span_mask,
            "example_index": example_index,
            "token_start": place(take(doc_start.flat_values), -1),
            "token_end": place(take(doc_end.flat_values), -1),
            "token_doc_index": token_doc_index,
            "max_context": place(max_context, False),
        }

    @staticmethod
    def _max_context(positions, example_index, window_number, step, room, num_doc,
                     num_windows):
        """Ragged [W, n] bool: ``run_squad.py``'s ``_check_is_max_context`` for each token
        of each window (windows of an example start at ``j * step`` and hold
        ``min(room, N - start)`` tokens)."""
        rows = positions.value_rowids()
        p = tf.cast(positions.flat_values, tf.float64)[:, None]                    # [T, 1]
        k = tf.gather(window_number, rows)[:, None]                                # [T, 1]
        j = tf.range(tf.reduce_max(num_windows))[None, :]                          # [1, K]
        begin = tf.cast(j * tf.gather(step, rows)[:, None], tf.float64)            # [T, K]
        size = tf.cast(tf.minimum(tf.gather(room, rows)[:, None],
                                  tf.gather(num_doc, rows)[:, None] - j * tf.gather(
                                      step, rows)[:, None]), tf.float64)
        valid = ((j < tf.gather(num_windows, rows)[:, None]) & (begin <= p)
                 & (p <= begin + size - 1))
        score = tf.minimum(p - begin, begin + size - 1 - p) + 0.01 * size
        own = tf.reduce_sum(tf.where(j == k, score, 0.0), axis=1, keepdims=True)
        beaten_before = valid & (j < k) & (score >= own)
        beaten_after = valid & (j > k) & (score > own)
        best = ~tf.reduce_any(beaten_before | beaten_after, axis=1)
        return positions.with_flat_values(best)

    def get_config(self):
        config = super().get_config()
        config.update({"tokenizer": keras.saving.serialize_keras_object(self.tokenizer),
                       "sequence_length": self.sequence_length,
                       "doc_stride": self.doc_stride,
                       "max_query_length": self.max_query_length,
                       "special_tokens": self.special_tokens})
        return config

    @classmethod
    def from_config(cls, config):
        config["tokenizer"] = keras.saving.deserialize_keras_object(config["tokenizer"])
        return cls(**config)


def span_preprocessor(vocab_dir: str, sequence_length: int = 384, doc_stride: int = 128,
                      max_query_length: int = 64) -> SpanPreprocessor:
    """The `SpanPreprocessor` over the WordPiece vocabulary folder ``vocab_dir``."""
    from lmfactory.models.tokenizers import load_tokenizer, read_tokenizer_config

    specials = read_tokenizer_config(vocab_dir).get("special_tokens", {})
    return SpanPreprocessor(
        load_tokenizer(vocab_dir), sequence_length=sequence_length, doc_stride=doc_stride,
        max_query_length=max_query_length,
        special_tokens={role: specials.get(role, DEFAULT_SPECIAL_TOKENS[role])
                        for role in ("cls", "sep", "pad")})


def byte_offset(text: str, char_index: int) -> int:
    """The UTF-8 byte offset of character ``char_index`` of ``text``."""
    return len(text[:char_index].encode("utf-8"))


def answer_positions(features: dict, contexts: list, answer_starts: list,
                     answer_texts: list):
    """Training labels of each window (numpy [W] start / end positions).

    ``features``: the preprocessor's outputs as numpy; ``contexts`` / ``answer_starts``
    (character index) / ``answer_texts`` per example (``answer_texts[i] is None`` or ``""``:
    unanswerable, v2.0). The answer's tokens are the first context token ending after the
    answer's first byte through the last one starting before its end (the tightest token
    span, what ``_improve_answer_span`` looks for). A window that does not hold the whole
    answer, and an unanswerable question, points both positions at ``[CLS]`` (0), as
    ``run_squad.py`` does.
    """
    import numpy as np

    example = features["example_index"]
    doc_index = features["token_doc_index"]
    starts, ends = features["token_start"], features["token_end"]
    start_positions = np.zeros(len(example), np.int32)
    end_positions = np.zeros(len(example), np.int32)
    for e in np.unique(example):
        text = answer_texts[e]
        if not text:
            continue
        a0 = byte_offset(contexts[e], answer_starts[e])
        a1 = a0 + len(text.encode("utf-8"))
        rows = np.nonzero(example == e)[0]
        mask = doc_index[rows] >= 0
        # Paragraph-level first / last answer token, over all windows of the example.
        inside = mask & (ends[rows] > a0) & (starts[rows] < a1)
        if not inside.any():
            continue
        first, last = doc_index[rows][inside].min(), doc_index[rows][inside].max()
        for w in rows:
            positions = np.nonzero(doc_index[w] >= 0)[0]
            if not len(positions):
                continue
            lo, hi = doc_index[w, positions[0]], doc_index[w, positions[-1]]
            if lo <= first and last <= hi:
                start_positions[w] = positions[0] + first - lo
                end_positions[w] = positions[0] + last - lo
    return start_positions, end_positions


__all__ = ["MODEL_INPUTS", "SpanPreprocessor", "answer_positions", "byte_offset",
           "span_preprocessor"]
