"""XLNet's input layout for classification (Yang et al. 2019 §2.5 / §3.3; the reference's
`classifier_utils.convert_single_example`): ``A <sep> B <sep> <cls>``, padded on the LEFT,
segment ids 0 for A and its `<sep>`, 1 for B and its `<sep>`, 2 for `<cls>`."""

from __future__ import annotations

import keras

from lmfactory.models import masked_packing
from lmfactory.models.backend import tf

CLS_SEGMENT = 2  # the reference's SEG_ID_CLS
SPECIAL_ROLES = {"sep_token_id": "sep", "cls_token_id": "cls", "pad_token_id": "pad"}


@keras.saving.register_keras_serializable(package="lmfactory")
class XLNetPreprocessor(keras.layers.Layer):
    """Packs one or two texts as XLNet does with keras-nlp's `MultiSegmentPacker`
    (round-robin truncation, left padding): ``A <sep> <cls>`` or ``A <sep> B <sep> <cls>``.

    Inputs (`call`): a batch of strings (or a tuple of one or two batches), or token id
    sequences when the layer has no tokenizer.
    Outputs: dict of int32 [B, sequence_length] `token_ids`, `padding_mask` (1 on real
    tokens), `segment_ids` (0, 1, and 2 on `<cls>`; 0 on padding, which no token sees).

    Args:
        tokenizer: a keras-nlp tokenizer (None: inputs are ids).
        sequence_length: packed length, special tokens included.
        sep_token_id, cls_token_id, pad_token_id: ids of `<sep>`, `<cls>`, `<pad>`.
    """

    def __init__(self, tokenizer=None, sequence_length=128, sep_token_id=None,
                 cls_token_id=None, pad_token_id=0, **kwargs):
        super().__init__(**kwargs)
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True
        for name, value in (("sep_token_id", sep_token_id), ("cls_token_id", cls_token_id),
                            ("pad_token_id", pad_token_id)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a non-negative int, got {value!r}")
        if int(sequence_length) < 3:
            raise ValueError(f"sequence_length must hold <sep> <cls> and a token, got "
                             f"{sequence_length}")
        self.tokenizer = tokenizer
        self.sequence_length = int(sequence_length)
        self.sep_token_id = sep_token_id
        self.cls_token_id = cls_token_id
        self.pad_token_id = pad_token_id
        self.packer = masked_packing.shifted_packer(
            self.sequence_length, start_value=[], end_value=[sep_token_id, cls_token_id],
            sep_value=[sep_token_id], padding_side="left")

    @classmethod
    def from_vocabulary(cls, vocab_dir: str, sequence_length: int = 128) -> "XLNetPreprocessor":
        """Over a vocabulary folder whose special tokens include `sep`, `cls` and `pad`."""
        from lmfactory.models.tokenizers import load_tokenizer, read_tokenizer_config

        specials = read_tokenizer_config(vocab_dir).get("special_tokens", {})
        missing = sorted(role for role in SPECIAL_ROLES.values() if role not in specials)
        if missing:
            raise ValueError(f"Vocabulary folder {vocab_dir!r} has no {missing} special "
                             f"token(s); XLNet packing needs sep, cls and pad")
        tokenizer = load_tokenizer(vocab_dir)
        ids = {name: int(tokenizer.token_to_id(specials[role]))
               for name, role in SPECIAL_ROLES.items()}
        return cls(tokenizer=tokenizer, sequence_length=sequence_length, **ids)

    def _tokens(self, value):
        if self.tokenizer is not None:
            value = self.tokenizer(tf.convert_to_tensor(value))
        if isinstance(value, (list, tuple)):
            value = tf.ragged.constant(value)
        if not isinstance(value, tf.RaggedTensor):
            value = tf.RaggedTensor.from_tensor(tf.convert_to_tensor(value))
        return tf.cast(value, "int32")

    def call(self, inputs):
        if not isinstance(inputs, tuple):
            inputs = (inputs,)
        if len(inputs) not in (1, 2):
            raise ValueError(f"XLNetPreprocessor packs one or two texts, got {len(inputs)}")
        segments = tuple(self._tokens(value) for value in inputs)
        token_ids, padding_mask, segment_ids = masked_packing.pack(self.packer, segments,
                                                                    self.pad_token_id)
        last = tf.one_hot(self.sequence_length - 1, self.sequence_length, dtype="int32")
        segment_ids = segment_ids * (1 - last) + CLS_SEGMENT * last
        return {"token_ids": token_ids, "padding_mask": padding_mask,
                "segment_ids": segment_ids}

    def get_config(self):
        config = super().get_config()
        config.update({
            "tokenizer": (None if self.tokenizer is None
                          else keras.saving.serialize_keras_object(self.tokenizer)),
            "sequence_length": self.sequence_length, "sep_token_id": self.sep_token_id,
            "cls_token_id": self.cls_token_id, "pad_token_id": self.pad_token_id})
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("tokenizer"), dict):
            config["tokenizer"] = keras.saving.deserialize_keras_object(config["tokenizer"])
        return cls(**config)


def pipeline_preprocessor(vocab_dir: str, sequence_length: int, num_text_features: int,
                          task_args: dict) -> XLNetPreprocessor:
    """`Architecture.preprocessors["classification"]`: one or two raw-text features packed
    in XLNet's layout (no settings of its own)."""
    del num_text_features, task_args
    return XLNetPreprocessor.from_vocabulary(vocab_dir, sequence_length)
