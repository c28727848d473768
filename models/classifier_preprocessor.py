"""Raw strings -> packed model inputs for sentence (pair) classification.

`classifier_preprocessor` picks the layer of an architecture: its own
(`Architecture.preprocessors`, e.g. GPT-1's §3.3 input transformations) or the
cls/sep packing below.

BERT §3 / Fig. 2: ``[CLS] A [SEP]`` or ``[CLS] A [SEP] B [SEP]`` with segment ids 0 / 1.
RoBERTa (fairseq's sentence-pair format): ``<s> A </s></s> B </s>``. Which tokens play the
``cls`` / ``sep`` / ``pad`` roles comes from the vocabulary folder (CONTRACTS §2), the layout
from the architecture's registry record. The same layer runs inside tf.data during
fine-tuning and inside the pushed SavedModel, so training and serving tokenize identically.
"""

from __future__ import annotations

import keras
import keras_nlp

from lmfactory.models.backend import tf
from lmfactory.models.registry import SEGMENT_LAYOUTS as LAYOUTS

BERT_SPECIAL_TOKENS = {"cls": "[CLS]", "sep": "[SEP]", "pad": "[PAD]"}


@keras.saving.register_keras_serializable(package="lmfactory")
class ClassifierPreprocessor(keras.layers.Layer):
    """Tokenizes one or two string segments and packs them with keras-nlp's MultiSegmentPacker.

    Segments over-length are trimmed with the "round_robin" strategy, as BERT's
    ``_truncate_seq_pair`` removes a token from the longer segment at a time.

    Args:
        tokenizer: a keras-nlp tokenizer (``models.tokenizers.load_tokenizer``).
        sequence_length: packed length, special tokens included.
        special_tokens: the tokens of the roles ``cls``, ``sep`` and ``pad``.
        layout: ``"bert"`` (one separator between segments) or ``"roberta"`` (two).
    """

    def __init__(self, tokenizer, sequence_length: int = 128, special_tokens=None,
                 layout: str = "bert", **kwargs):
        super().__init__(**kwargs)
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        self.tokenizer = tokenizer
        self.sequence_length = sequence_length
        self.special_tokens = dict(special_tokens or BERT_SPECIAL_TOKENS)
        self.layout = layout
        ids = {}
        for role in ("cls", "sep", "pad"):
            if role not in self.special_tokens:
                raise ValueError(f"special_tokens needs a {role!r} token, got "
                                 f"{self.special_tokens}")
            ids[role] = tokenizer.token_to_id(self.special_tokens[role])
            if ids[role] is None:
                raise ValueError(f"The {role} token {self.special_tokens[role]!r} is not in "
                                 f"the vocabulary")
        self.packer = keras_nlp.layers.MultiSegmentPacker(
            start_value=ids["cls"],
            end_value=ids["sep"],
            sep_value=[ids["sep"]] * (2 if layout == "roberta" else 1),
            pad_value=ids["pad"],
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
                       "sequence_length": self.sequence_length,
                       "special_tokens": self.special_tokens,
                       "layout": self.layout})
        return config

    @classmethod
    def from_config(cls, config):
        config["tokenizer"] = keras.saving.deserialize_keras_object(config["tokenizer"])
        return cls(**config)


def classifier_preprocessor(vocab_dir: str, architecture: str, sequence_length: int,
                            num_text_features: int = 1, task_args=None,
                            task_kind: str = "classification"):
    """The layer turning a tuple of ``num_text_features`` batches of raw strings into the
    inputs of ``architecture``'s ``task_kind`` head, over the vocabulary folder
    ``vocab_dir``.

    An architecture with its own input format for the kind registers a factory
    (`Architecture.preprocessors`, called as ``fn(vocab_dir, sequence_length,
    num_text_features, task_args)``; ``task_args`` are the head's arguments from the
    recipe's ``finetuning.task_args``); the others get `ClassifierPreprocessor` with their
    ``segment_layout``."""
    from lmfactory import models
    from lmfactory.models.tokenizers import load_tokenizer, read_tokenizer_config

    if num_text_features not in (1, 2):
        raise ValueError(f"A classifier reads one or two text features, got "
                         f"{num_text_features}")
    arch = models.get(architecture)
    own = arch.preprocessor(task_kind)
    if own is not None:
        return own(vocab_dir, sequence_length, num_text_features, dict(task_args or {}))
    specials = read_tokenizer_config(vocab_dir).get("special_tokens", {})
    return ClassifierPreprocessor(
        load_tokenizer(vocab_dir), sequence_length=sequence_length,
        special_tokens={role: specials[role] for role in ("cls", "sep", "pad")
                        if role in specials} or None,
        layout=arch.segment_layout)


def select_inputs(model, packed: dict) -> dict:
    """The entries of ``packed`` that ``model`` (a functional Keras model with dict inputs)
    takes: backbones without segment embeddings (RoBERTa, DistilBERT) take no
    ``segment_ids``."""
    names = model.input.keys() if isinstance(model.input, dict) else packed.keys()
    return {name: packed[name] for name in names}
