"""Raw strings -> ERNIE inputs: WordPiece tokens packed as BERT's, plus the entities the
text mentions, each aligned to the first token of its mention (Zhang et al. 2019 §3.4,
§4.1)."""

from __future__ import annotations

import logging

import keras
import keras_nlp

from lmfactory.models.backend import tf
from lmfactory.models.classifier_preprocessor import BERT_SPECIAL_TOKENS


def align_entities(tokenizer, texts, starts, ends, entity_ids):
    """Tokenizes ``texts`` [B] and aligns the mentions (ragged [B, None] byte offsets
    ``starts`` / ``ends``, end exclusive, and KG indices ``entity_ids``) to the first token
    of each mention (§3.4 "we align each entity to the first token of its mention").

    The text is cut at every mention boundary and the pieces are tokenized on their own,
    which gives the tokens of the whole text whenever the tokenizer splits words at spaces
    and punctuation first (BERT's basic tokenizer does; mention boundaries are word
    boundaries of the linker). A mention whose piece tokenizes to nothing is dropped.

    Returns ``(token_ids, tags)`` ragged [B, None]: ``tags`` is entity index + 1 at the first
    token of a mention and 0 elsewhere. keras-nlp / tf-text have no offset-to-token aligner,
    so this is our own (graph ops only, it runs inside the SavedModel)."""
    texts = tf.convert_to_tensor(texts, tf.string)
    starts = tf.cast(starts, tf.int64)
    ends = tf.cast(ends, tf.int64)
    lengths = tf.cast(tf.strings.length(texts, unit="BYTE"), tf.int64)
    # Boundaries per row: 0, s1, e1, s2, e2, ..., len; piece p = [b_p, b_{p+1}).
    inner = tf.reshape(tf.stack([starts.flat_values, ends.flat_values], axis=1), [-1])
    inner = tf.RaggedTensor.from_row_splits(inner, starts.row_splits * 2)
    batch = tf.shape(texts, out_type=tf.int64)[0]
    zero = tf.zeros([batch, 1], tf.int64)
    piece_begins = tf.concat([zero, inner], axis=1)
    piece_ends = tf.concat([inner, lengths[:, None]], axis=1)
    rows = piece_begins.value_rowids()
    pieces = tf.strings.substr(tf.gather(texts, rows), piece_begins.flat_values,
                               piece_ends.flat_values - piece_begins.flat_values, unit="BYTE")
    tokens = tokenizer(pieces)
    if isinstance(tokens, list):  # keras-nlp tokenizers hand eager results back as lists
        tokens = tf.ragged.constant(tokens, dtype=tf.int32, ragged_rank=1)
    elif not isinstance(tokens, tf.RaggedTensor):
        tokens = tf.RaggedTensor.from_tensor(tokens)
    tokens = tf.cast(tokens, tf.int32)
    # The tag of each piece: entity + 1 for the mention pieces (odd positions in the row).
    position = tf.range(tf.size(rows, out_type=tf.int64)) - tf.gather(
        piece_begins.row_splits, rows)
    mention_index = (position - 1) // 2
    is_mention = tf.math.floormod(position, 2) == 1
    row_mentions = tf.gather(entity_ids.row_splits, rows) + tf.maximum(mention_index, 0)
    flat_ids = tf.cast(entity_ids.flat_values, tf.int32)
    piece_tag = tf.where(is_mention, tf.gather(tf.concat([flat_ids, [0]], 0),
                                               tf.where(is_mention, row_mentions,
                                                        tf.size(flat_ids, tf.int64))) + 1, 0)
    # Token level: the tag on the first token of its piece.
    first = tf.ragged.range(tokens.row_lengths()).flat_values == 0
    token_tags = tokens.with_flat_values(
        tf.where(first, tf.gather(piece_tag, tokens.value_rowids()), 0))
    regroup = lambda ragged: tf.RaggedTensor.from_row_splits(  # noqa: E731
        ragged, piece_begins.row_splits).merge_dims(1, 2)
    return regroup(tokens), regroup(token_tags)


@keras.saving.register_keras_serializable(package="lmfactory")
class ErniePreprocessor(keras.layers.Layer):
    """One or two batches of raw strings -> the inputs of an ERNIE head.

    Tokens are packed as BERT's ``[CLS] A [SEP] (B [SEP])`` (round-robin truncation, as
    `ClassifierPreprocessor`). When a linker is given (`EntityLinkingLayer` over the KG's
    labels, models/knowledge), the text's entity mentions are found in the graph, aligned to
    their first token (`align_entities`) and packed by a second packer with the same
    lengths, so they stay on their tokens after truncation: `entity_ids` (KG index, 0
    elsewhere) and `entity_mask` (1 at an aligned token). The same layer runs in tf.data
    during fine-tuning and inside the pushed SavedModel, so serving links raw text exactly as
    training did.

    Args:
        tokenizer: a WordPiece tokenizer (``models.tokenizers.load_tokenizer``).
        linker: an `EntityLinkingLayer` with ``offset_unit="BYTE"``, or None (no entities).
        sequence_length: packed length.
        special_tokens: the ``cls`` / ``sep`` / ``pad`` tokens.
    """

    def __init__(self, tokenizer, linker=None, sequence_length: int = 128,
                 special_tokens=None, **kwargs):
        super().__init__(**kwargs)
        self.tokenizer = tokenizer
        self.linker = linker
        self.sequence_length = int(sequence_length)
        self.special_tokens = dict(special_tokens or BERT_SPECIAL_TOKENS)
        ids = {role: tokenizer.token_to_id(self.special_tokens[role])
               for role in ("cls", "sep", "pad")}
        missing = [role for role, value in ids.items() if value is None]
        if missing:
            raise ValueError(f"The {missing} tokens {self.special_tokens} are not in the "
                             f"vocabulary")
        self.packer = keras_nlp.layers.MultiSegmentPacker(
            start_value=ids["cls"], end_value=ids["sep"], pad_value=ids["pad"],
            truncate="round_robin", sequence_length=self.sequence_length)
        self.tag_packer = keras_nlp.layers.MultiSegmentPacker(
            start_value=0, end_value=0, pad_value=0, truncate="round_robin",
            sequence_length=self.sequence_length)

    def _segment(self, texts):
        texts = tf.reshape(tf.convert_to_tensor(texts, tf.string), [-1])
        if self.linker is None:
            tokens = tf.cast(self.tokenizer(texts), tf.int32)
            return tokens, tf.zeros_like(tokens)
        starts, ends, entity_ids = self.linker(texts)
        return align_entities(self.tokenizer, texts, starts, ends, entity_ids)

    def call(self, segments):
        if not isinstance(segments, (list, tuple)):
            segments = (segments,)
        tokens, tags = zip(*(self._segment(s) for s in segments))
        token_ids, segment_ids = self.packer(tuple(tokens))
        packed_tags, _ = self.tag_packer(tuple(tags))
        packed_tags = tf.cast(packed_tags, tf.int32)
        return {
            "token_ids": tf.cast(token_ids, tf.int32),
            "segment_ids": tf.cast(segment_ids, tf.int32),
            "padding_mask": token_ids != self.packer.pad_value,
            "entity_ids": tf.maximum(packed_tags - 1, 0),
            "entity_mask": tf.cast(packed_tags > 0, tf.int32),
        }

    def get_config(self):
        config = super().get_config()
        config.update({
            "tokenizer": keras.saving.serialize_keras_object(self.tokenizer),
            "linker": (keras.saving.serialize_keras_object(self.linker)
                       if self.linker is not None else None),
            "sequence_length": self.sequence_length,
            "special_tokens": self.special_tokens})
        return config

    @classmethod
    def from_config(cls, config):
        config["tokenizer"] = keras.saving.deserialize_keras_object(config["tokenizer"])
        if config.get("linker") is not None:
            config["linker"] = keras.saving.deserialize_keras_object(config["linker"])
        return cls(**config)


def pipeline_preprocessor(vocab_dir: str, sequence_length: int, num_text_features: int,
                          task_args: dict):
    """`Architecture.preprocessors["classification"]`: the preprocessor over a model's
    vocabulary folder, linking with the KG labels the folder holds (written there by the
    KnowledgeTrainer: models/knowledge `read_linking_vocabulary`); without them the inputs
    carry no entities (a warning says so)."""
    del num_text_features, task_args
    from lmfactory.models.knowledge import EntityLinkingLayer, read_linking_vocabulary
    from lmfactory.models.tokenizers import load_tokenizer, read_tokenizer_config

    specials = read_tokenizer_config(vocab_dir).get("special_tokens", {})
    linking = read_linking_vocabulary(vocab_dir)
    linker = None
    if linking is None:
        logging.warning("%s has no entity labels (entities.tsv, linking.json): ERNIE's "
                        "inputs will carry no entities", vocab_dir)
    else:
        labels, max_ngram, lowercase = linking
        linker = EntityLinkingLayer(labels, max_ngram=max_ngram, lowercase=lowercase,
                                    offset_unit="BYTE")
    return ErniePreprocessor(
        load_tokenizer(vocab_dir), linker, sequence_length=sequence_length,
        special_tokens={role: specials[role] for role in ("cls", "sep", "pad")
                        if role in specials} or None)
