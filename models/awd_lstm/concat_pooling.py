"""ULMFiT's concat pooling (Howard & Ruder 2018 §3.3).

"As input documents can consist of hundreds of words, information may get lost if we only
consider the last hidden state of the model. For this reason, we concatenate the hidden
state at the last time step h_T of the document with both the max-pooled and the
mean-pooled representation of the hidden states over as many time steps as fit in GPU
memory H = {h_1, ..., h_T}: h_c = [h_T, maxpool(H), meanpool(H)]."

Only real tokens count: h_T is the state at the last real position (so left or right
padding give the same vector), and the max and mean run over real positions. keras-nlp and
Keras have masked mean pooling but no masked max or last-real-state pooling, hence this
layer. A row without any real token pools to zeros.
"""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="lmfactory")
class ConcatPooling(keras.layers.Layer):
    """``layer(hidden [B, T, H], padding_mask [B, T])`` -> [B, 3 H]: [h_T, max, mean]."""

    def call(self, hidden, padding_mask):
        mask = ops.cast(padding_mask, hidden.dtype)
        length = ops.shape(hidden)[1]
        positions = ops.cast(ops.arange(length), hidden.dtype)[None, :]
        # The last real position (0 for a row of padding only, whose vector is zeroed).
        last = ops.cast(ops.argmax(mask * (positions + 1.0), axis=1), "int32")
        last_state = ops.take_along_axis(hidden, last[:, None, None], axis=1)[:, 0]
        any_real = ops.cast(ops.sum(mask, axis=1, keepdims=True) > 0, hidden.dtype)
        lowest = ops.cast(ops.min(hidden), hidden.dtype) - 1.0
        masked = ops.where(mask[..., None] > 0, hidden, lowest)
        max_pool = ops.max(masked, axis=1) * any_real
        mean_pool = ops.sum(hidden * mask[..., None], axis=1) / ops.maximum(
            ops.sum(mask, axis=1, keepdims=True), 1.0)
        return ops.concatenate([last_state * any_real, max_pool, mean_pool], axis=-1)

    def compute_output_shape(self, hidden_shape, padding_mask_shape=None):
        width = None if hidden_shape[-1] is None else 3 * hidden_shape[-1]
        return (hidden_shape[0], width)


__all__ = ["ConcatPooling"]
