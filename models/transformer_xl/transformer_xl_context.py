"""The per-segment inputs every Transformer-XL layer shares (Dai et al. 2019, §3.3): the
sinusoidal relative encodings R and the attention mask."""

from __future__ import annotations

import keras
from keras import ops

from lmfactory.models.transformer_xl.transformer_xl_masks import (attention_mask,
                                                                  relative_positions)


class TransformerXLContext(keras.layers.Layer):
    """Computes R [M + T, hidden] and the mask [B, T, M + T] of one segment.

    R (§3.3): "a sinusoid encoding matrix without learnable parameters", row m the encoding
    of relative distance M + T - 1 - m: [sin(d w_k), cos(d w_k)] with
    w_k = 1 / 10000^(2k / hidden) (sines in the first half, cosines in the second, as the
    reference). keras-nlp's `SinePositionEncoding` encodes absolute positions with sines
    and cosines interleaved, so this layer writes its own. Distances are clamped to
    ``clamp_len`` (> 0). The mask is `transformer_xl_masks.attention_mask`.

    Call: ``(reference, padding_mask=None, memory_length=0, valid_memory_length=None)``
    with ``reference`` [B, T, ...] giving the segment length T (token ids or hidden states).
    Returns ``(R, mask)``.
    """

    def __init__(self, hidden_dim, clamp_len=0, mem_len=0, same_length=False, **kwargs):
        super().__init__(**kwargs)
        self.hidden_dim = int(hidden_dim)
        self.clamp_len = int(clamp_len)
        self.mem_len = int(mem_len)
        self.same_length = bool(same_length)
        self.built = True

    def call(self, reference, padding_mask=None, memory_length=0, valid_memory_length=None):
        query_length = ops.shape(reference)[1]
        positions = relative_positions(memory_length + query_length, self.clamp_len)
        inverse_frequency = 1.0 / ops.power(
            10000.0, ops.arange(0, self.hidden_dim, 2, dtype="float32") / self.hidden_dim)
        angles = positions[:, None] * inverse_frequency[None, :]
        encoding = ops.concatenate([ops.sin(angles), ops.cos(angles)], axis=-1)
        mask = attention_mask(query_length, memory_length, valid_memory_length, padding_mask,
                              self.mem_len, self.same_length)
        return ops.cast(encoding, self.compute_dtype), mask

    def compute_output_spec(self, reference, padding_mask=None, memory_length=0,
                            valid_memory_length=None):
        length = reference.shape[1]
        keys = None if length is None or not isinstance(memory_length, int) \
            else memory_length + length
        batch = reference.shape[0] if padding_mask is not None else 1
        return (keras.KerasTensor((keys, self.hidden_dim), dtype=self.compute_dtype),
                keras.KerasTensor((batch, length, keys), dtype="bool"))

    def get_config(self):
        config = super().get_config()
        config.update({"hidden_dim": self.hidden_dim, "clamp_len": self.clamp_len,
                       "mem_len": self.mem_len, "same_length": self.same_length})
        return config


__all__ = ["TransformerXLContext"]
