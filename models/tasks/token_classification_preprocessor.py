"""Words (and their tags) -> packed encoder inputs with labels on first sub-tokens.

BERT §4.3 (Devlin et al. 2019, CoNLL-2003 NER): "we use the representation of the first
sub-token as the input to the token-level classifier over the NER label set". A word that
WordPiece splits into several sub-tokens therefore carries its label on its first sub-token
only; the others get weight 0 in the loss and are ignored at prediction time.

Everything runs as TensorFlow graph ops, so the same layer featurizes inside ``tf.data``
during fine-tuning and inside the serving SavedModel:

1. the architecture's tokenizer runs on the flat list of words of the batch, so each word
   maps to its own span of sub-tokens (ragged [words, (sub-tokens)]); a word the tokenizer
   normalises away entirely (e.g. a lone zero-width space) gets no sub-token;
2. the spans are merged per sentence, truncated to ``sequence_length - 2`` sub-tokens and
   packed ``[CLS] ... [SEP]`` with keras-nlp's ``StartEndPacker``;
3. side by side with the ids, ``word_ids`` holds the index of the word within its sentence
   at each word's first sub-token and -1 elsewhere (``[CLS]``, ``[SEP]``, continuation
   sub-tokens, padding); labels are the tag ids at those positions, with ``sample_weight``
   1 there and 0 elsewhere.

`word_predictions` maps per-token predictions back to words through ``word_ids``; a word with
no first sub-token in the packed sequence (truncated away, or empty after normalisation) gets
``default_id`` (the ``O`` tag).
"""

from __future__ import annotations

import keras
import keras_nlp
from keras_hub.src.utils.tensor_utils import no_convert_scope

from lmfactory.models.backend import tf

BERT_SPECIAL_TOKENS = {"cls": "[CLS]", "sep": "[SEP]", "pad": "[PAD]"}
NO_WORD = -1


def as_ragged_words(words):
    """A rank-2 ragged string tensor [batch, (words)] from a ragged or dense batch (a dense
    [batch, max_words] tensor is right-padded with empty strings, which are dropped)."""
    if isinstance(words, tf.RaggedTensor):
        if words.shape.rank != 2:
            raise ValueError(f"words must be a [batch, (words)] ragged tensor, got rank "
                             f"{words.shape.rank}")
        return words.with_row_splits_dtype(tf.int64)
    words = tf.convert_to_tensor(words, tf.string)
    if words.shape.rank != 2:
        raise ValueError(f"words must be a [batch, words] tensor, got shape {words.shape}")
    return tf.RaggedTensor.from_tensor(words, padding="")


@keras.saving.register_keras_serializable(package="lmfactory")
class TokenClassificationPreprocessor(keras.layers.Layer):
    """Featurizes word-tokenized sentences for a `TokenClassifier` (first-sub-token labels).

    Call: ``layer(words, tags=None)`` with ``words`` a ragged [batch, (words)] string tensor
    (or a dense one padded with ""), ``tags`` the matching tag strings. Returns a dict of
    [batch, sequence_length] tensors: ``token_ids``, ``segment_ids`` (zeros), ``padding_mask``
    (int32), ``word_ids`` (word index at each word's first sub-token, -1 elsewhere), and with
    ``tags``: ``labels`` (tag ids at first sub-tokens, 0 elsewhere) and ``sample_weight``
    (float32, 1 at first sub-tokens). A tag outside ``label_vocabulary`` fails with an
    InvalidArgumentError naming the layer.

    Args:
        tokenizer: the architecture's keras-nlp tokenizer (``models.tokenizers
            .load_tokenizer``); ids only, no ``sequence_length``.
        label_vocabulary: the tag strings; a tag's id is its index (``O`` first, see
            ``components/example_gen/conll.label_vocabulary``).
        sequence_length: packed length, ``[CLS]`` and ``[SEP]`` included.
        special_tokens: the tokens of the roles ``cls``, ``sep``, ``pad``.
    """

    def __init__(self, tokenizer, label_vocabulary, sequence_length: int = 128,
                 special_tokens=None, **kwargs):
        super().__init__(**kwargs)
        if sequence_length < 3:
            raise ValueError(f"sequence_length must be at least 3 ([CLS] word [SEP]), got "
                             f"{sequence_length}")
        label_vocabulary = [str(label) for label in label_vocabulary]
        if not label_vocabulary or len(set(label_vocabulary)) != len(label_vocabulary):
            raise ValueError(f"label_vocabulary must be non-empty without duplicates, got "
                             f"{label_vocabulary}")
        self.tokenizer = tokenizer
        self.label_vocabulary = label_vocabulary
        self.sequence_length = int(sequence_length)
        self.special_tokens = dict(special_tokens or BERT_SPECIAL_TOKENS)
        ids = {}
        for role in ("cls", "sep", "pad"):
            if role not in self.special_tokens:
                raise ValueError(f"special_tokens needs a {role!r} token, got "
                                 f"{self.special_tokens}")
            ids[role] = tokenizer.token_to_id(self.special_tokens[role])
            if ids[role] is None:
                raise ValueError(f"The {role} token {self.special_tokens[role]!r} is not in "
                                 f"the vocabulary")
        self.pad_id = int(ids["pad"])
        self.token_packer = keras_nlp.layers.StartEndPacker(
            sequence_length=self.sequence_length, start_value=int(ids["cls"]),
            end_value=int(ids["sep"]), pad_value=self.pad_id, return_padding_mask=True,
            name="token_packer")
        # Packs the per-token side channels (word ids, labels) in step with the ids: -1 at
        # [CLS], [SEP] and padding.
        self.side_packer = keras_nlp.layers.StartEndPacker(
            sequence_length=self.sequence_length, start_value=NO_WORD, end_value=NO_WORD,
            pad_value=NO_WORD, name="side_packer")

    def label_ids(self, tags):
        """Tag strings (any shape, ragged or not) -> int32 ids; unknown tags fail."""
        flat = tags.flat_values if isinstance(tags, tf.RaggedTensor) else tags
        vocabulary = tf.constant(self.label_vocabulary)
        matches = tf.equal(tf.expand_dims(flat, -1), vocabulary)
        known = tf.reduce_all(tf.reduce_any(matches, axis=-1))
        check = tf.debugging.Assert(known, [
            f"{self.name}: a tag is not in label_vocabulary {self.label_vocabulary}; tags:",
            tf.boolean_mask(flat, tf.logical_not(tf.reduce_any(matches, axis=-1)))],
            summarize=10)
        with tf.control_dependencies([check]):
            ids = tf.argmax(tf.cast(matches, tf.int32), axis=-1, output_type=tf.int32)
        return tags.with_flat_values(ids) if isinstance(tags, tf.RaggedTensor) else ids

    def call(self, words, tags=None):
        # keras-hub's preprocessing layers turn eager ragged outputs into Python lists
        # outside this scope; inside it they return tensors (as in tf.data / tf.function).
        with tf.device("cpu"), no_convert_scope():
            return self._featurize(words, tags)

    def _featurize(self, words, tags):
        words = as_ragged_words(words)
        # 1. Each word's own sub-tokens: ragged [all words, (sub-tokens)].
        pieces = tf.cast(self.tokenizer(words.flat_values), tf.int32)
        if not isinstance(pieces, tf.RaggedTensor):  # a tokenizer with fixed length
            raise ValueError("TokenClassificationPreprocessor needs a tokenizer without "
                             "sequence_length (ragged output)")
        first_in_word = tf.equal(tf.ragged.range(pieces.row_lengths()).flat_values, 0)
        # Index of each word within its sentence, then of each sub-token's word.
        word_in_sentence = tf.cast(tf.ragged.range(words.row_lengths()).flat_values, tf.int32)
        piece_word = tf.gather(word_in_sentence, pieces.value_rowids())
        word_ids = tf.where(first_in_word, piece_word, NO_WORD)

        # 2. Sub-tokens per sentence: ragged [batch, (sub-tokens)].
        def per_sentence(flat_values):
            return tf.RaggedTensor.from_row_splits(
                pieces.with_flat_values(flat_values), words.row_splits,
                validate=False).merge_dims(1, 2)

        token_ids, padding_mask = self.token_packer(per_sentence(pieces.flat_values))
        outputs = {
            "token_ids": tf.cast(token_ids, tf.int32),
            "segment_ids": tf.zeros_like(token_ids, tf.int32),
            "padding_mask": tf.cast(padding_mask, tf.int32),
            "word_ids": self.side_packer(per_sentence(word_ids)),
        }
        if tags is not None:
            tags = as_ragged_words(tags)
            check = tf.debugging.assert_equal(
                tags.row_lengths(), words.row_lengths(),
                message=f"{self.name}: every sentence needs one tag per word")
            with tf.control_dependencies([check]):
                word_labels = self.label_ids(tags.flat_values)
            piece_labels = tf.where(first_in_word,
                                    tf.gather(word_labels, pieces.value_rowids()), NO_WORD)
            labels = self.side_packer(per_sentence(piece_labels))
            outputs["labels"] = tf.maximum(labels, 0)
            outputs["sample_weight"] = tf.cast(labels >= 0, tf.float32)
        return outputs

    def get_config(self):
        config = super().get_config()
        config.update({"tokenizer": keras.saving.serialize_keras_object(self.tokenizer),
                       "label_vocabulary": list(self.label_vocabulary),
                       "sequence_length": self.sequence_length,
                       "special_tokens": self.special_tokens})
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["tokenizer"] = keras.saving.deserialize_keras_object(config["tokenizer"])
        return cls(**config)


def word_predictions(token_predictions, word_ids, num_words, default_id: int = 0):
    """Per-token predictions [batch, seq] -> per-word predictions, ragged [batch, (words)].

    The word at index ``w`` of sentence ``b`` takes the prediction at the position whose
    ``word_ids`` is ``w`` (its first sub-token); a word without one (truncated, or empty
    after normalisation) takes ``default_id``. ``num_words`` [batch]: words per sentence.
    """
    token_predictions = tf.convert_to_tensor(token_predictions)
    word_ids = tf.cast(word_ids, tf.int64)
    num_words = tf.cast(num_words, tf.int64)
    batch_size = tf.shape(word_ids, out_type=tf.int64)[0]
    max_words = tf.reduce_max(tf.concat([num_words, [0]], axis=0))
    positions = tf.where(word_ids >= 0)  # [K, 2]: (sentence, token position)
    targets = tf.stack([positions[:, 0], tf.gather_nd(word_ids, positions)], axis=1)
    dense = tf.tensor_scatter_nd_update(
        tf.fill(tf.stack([batch_size, max_words]),
                tf.cast(default_id, token_predictions.dtype)),
        targets, tf.gather_nd(token_predictions, positions))
    return tf.RaggedTensor.from_tensor(dense, lengths=num_words)


def token_classification_preprocessor(vocab_dir: str, label_vocabulary, sequence_length: int):
    """The preprocessor over the vocabulary folder ``vocab_dir`` (CONTRACTS §2): its
    tokenizer and its ``cls`` / ``sep`` / ``pad`` tokens."""
    from lmfactory.models.tokenizers import load_tokenizer, read_tokenizer_config

    specials = read_tokenizer_config(vocab_dir).get("special_tokens", {})
    return TokenClassificationPreprocessor(
        load_tokenizer(vocab_dir), label_vocabulary, sequence_length=sequence_length,
        special_tokens={role: specials[role] for role in ("cls", "sep", "pad")
                        if role in specials} or None)


__all__ = ["TokenClassificationPreprocessor", "as_ragged_words",
           "token_classification_preprocessor", "word_predictions"]
