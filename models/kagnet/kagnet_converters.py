"""Published BERT checkpoints as KagNet's text encoder (Lin et al. 2019 §4.2 fine-tune
KagNet on top of a pre-trained BERT statement encoder)."""

from __future__ import annotations

from lmfactory.models.bert import bert_converters
from lmfactory.models.kagnet.kagnet_backbone import KagNetTextEncoder


def _as_text_encoder(bert_backbone, dtype=None) -> KagNetTextEncoder:
    config = {key: value for key, value in bert_backbone.get_config().items()
              if key not in ("name", "trainable", "dtype")}
    encoder = KagNetTextEncoder(**config, dtype=dtype)
    encoder.set_weights(bert_backbone.get_weights())
    return encoder


def from_huggingface(path, dtype=None) -> KagNetTextEncoder:
    """A Hugging Face BERT folder (``config.json`` + ``model.safetensors``)."""
    return _as_text_encoder(bert_converters.from_huggingface(path, dtype=dtype), dtype)


def from_tf_checkpoint(path, dtype=None) -> KagNetTextEncoder:
    """An original google-research/bert TensorFlow checkpoint folder."""
    return _as_text_encoder(bert_converters.from_tf_checkpoint(path, dtype=dtype), dtype)


__all__ = ["from_huggingface", "from_tf_checkpoint"]
