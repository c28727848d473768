"""Raw strings -> packed model inputs for sentence (pair) classification.

BERT §3 / Fig. 2: ``[CLS] A [SEP]`` or ``[CLS] A [SEP] B [SEP]`` with segment ids 0 / 1.
The same layer runs inside tf.data during fine-tuning and inside the pushed SavedModel, so
training and serving tokenize identically.
"""

from __future__ import annotations

import keras
import keras_nlp
import tensorflow as tf


@keras.saving.register_keras_serializable(package="lmfactory")
class ClassifierPreprocessor(keras.layers.Layer):
    """Tokenizes one or two string segments and packs them with keras-nlp's MultiSegmentPacker.

    Segments over-length are trimmed with the "round_robin" strategy, as BERT's
    ``_truncate_seq_pair`` removes a token from the longer segment at a time.
    """

    def __init__(self, tokenizer, sequence_length: int = 128, **kwargs):
        super().__init__(**kwargs)
        self.tokenizer = tokenizer
        self.sequence_length = sequence_length
        self.packer = keras_nlp.layers.MultiSegmentPacker(
            start_value=tokenizer.token_to_id("[CLS]"),
            end_value=tokenizer.token_to_id("[SEP]"),
            pad_value=tokenizer.token_to_id("[PAD]"),
            truncate="round_robin",
            sequence_length=sequence_length,
        )

    def call(self, segments):
        if not isinstance(segments, (list, tuple)):
            segments = (segments,)
        token_ids, segment_ids = self.packer(tuple(self.tokenizer(s) for s in segments))
        return {
            "token_ids": tf.cast(token_ids, "int32"),
            "segment_ids": tf.cast(segment_ids, "int32"),
            "padding_mask": token_ids != self.packer.pad_value,
        }

    def get_config(self):
        config = super().get_config()
        config.update({"tokenizer": keras.saving.serialize_keras_object(self.tokenizer),
                       "sequence_length": self.sequence_length})
        return config

    @classmethod
    def from_config(cls, config):
        config["tokenizer"] = keras.saving.deserialize_keras_object(config["tokenizer"])
        return cls(**config)
