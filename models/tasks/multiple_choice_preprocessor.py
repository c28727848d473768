"""Raw (context, choices) strings -> packed multiple-choice inputs [batch, choices, length]."""

from __future__ import annotations

import keras

from lmfactory.models.backend import tf


@keras.saving.register_keras_serializable(package="lmfactory")
class MultipleChoicePreprocessor(keras.layers.Layer):
    """Packs one sequence per (context, choice) pair with an architecture's pair layout.

    BERT §4.4: for a question with C choices, C sequences ``[CLS] context [SEP] choice
    [SEP]``, the context as segment A (segment id 0) and the choice as segment B (1);
    RoBERTa's layout puts two separators between them (``<s> A </s></s> B </s>``). The
    packing itself is a sentence-pair layer of `models/classifier_preprocessor.py`
    (`ClassifierPreprocessor`: the architecture's tokenizer and keras-nlp's
    ``MultiSegmentPacker`` with round-robin truncation), applied to the B*C pairs at once
    (example b's choice c is row ``b * C + c``) and reshaped to [B, C, length]. It runs in
    tf.data during fine-tuning and inside the exported SavedModel alike.

    Inputs (`call`): a tuple ``(context, choices)``: ``context`` strings [B],
        ``choices`` strings [B, C].
    Outputs: dict of int32 [B, C, sequence_length]: ``token_ids``, ``segment_ids``,
        ``padding_mask`` (1 on real tokens, special tokens included).

    Args:
        pair_packer: a layer mapping a tuple of two string batches [N] to a dict of
            ``token_ids`` / ``segment_ids`` / ``padding_mask`` [N, length]
            (`from_vocabulary` builds the architecture's).
    """

    def __init__(self, pair_packer, **kwargs):
        super().__init__(**kwargs)
        self.pair_packer = pair_packer

    @classmethod
    def from_vocabulary(cls, vocab_dir: str, architecture: str, sequence_length: int,
                        **kwargs) -> "MultipleChoicePreprocessor":
        """The preprocessor of ``architecture`` (a registry name) over the vocabulary
        folder ``vocab_dir`` (CONTRACTS §2): its sentence-pair packing
        (`classifier_preprocessor` with two text features)."""
        from lmfactory import models
        from lmfactory.models.classifier_preprocessor import classifier_preprocessor

        arch = models.get(architecture)
        if arch.preprocessor("multiple_choice") is not None:
            raise ValueError(f"Architecture {architecture!r} packs its inputs its own way "
                             f"({arch.preprocessor('multiple_choice').__name__}); "
                             f"MultipleChoicePreprocessor packs [CLS] context [SEP] choice "
                             f"[SEP] pairs for encoders")
        packer = classifier_preprocessor(vocab_dir, architecture, sequence_length,
                                         num_text_features=2)
        return cls(packer, **kwargs)

    @property
    def sequence_length(self) -> int:
        return self.pair_packer.sequence_length

    def call(self, inputs):
        if not isinstance(inputs, (tuple, list)) or len(inputs) != 2:
            raise ValueError("MultipleChoicePreprocessor takes a tuple (context [batch], "
                             "choices [batch, num_choices]) of strings")
        context = tf.convert_to_tensor(inputs[0])
        choices = tf.convert_to_tensor(inputs[1])
        if context.shape.rank != 1 or choices.shape.rank != 2:
            raise ValueError(f"MultipleChoicePreprocessor: context must be [batch] and "
                             f"choices [batch, num_choices] strings, got shapes "
                             f"{context.shape} and {choices.shape}")
        num_choices = choices.shape[1] if choices.shape[1] is not None else tf.shape(choices)[1]
        flat_context = tf.repeat(context, num_choices)  # [B*C]: context b, C times
        flat_choices = tf.reshape(choices, [-1])  # [B*C]: row b*C + c
        packed = self.pair_packer((flat_context, flat_choices))
        length = self.sequence_length
        return {name: tf.reshape(tf.cast(packed[name], tf.int32), [-1, num_choices, length])
                for name in ("token_ids", "segment_ids", "padding_mask")}

    def get_config(self):
        config = super().get_config()
        config["pair_packer"] = keras.saving.serialize_keras_object(self.pair_packer)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["pair_packer"] = keras.saving.deserialize_keras_object(config["pair_packer"])
        return cls(**config)
