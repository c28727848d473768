"""The global biases u and v of Transformer-XL's relative attention (Dai et al. 2019, §3.3),
one pair shared by every layer."""

from __future__ import annotations

import keras
from keras import ops


class SharedRelativeBiases(keras.layers.Layer):
    """Holds u (``content_bias``) and v (``position_bias``), each [heads, head_dim], and
    returns them stacked [2, heads, head_dim] for `TransformerXLAttention`'s ``biases``.

    §3.3 writes u and v as single trainable vectors "the same regardless of the query
    position"; the reference shares one pair across layers unless ``untie_r`` is set (its
    published WikiText-103 model sets it, which the backbone's ``untie_biases`` follows).

    Call: ``(reference)``, any tensor (it only anchors the layer in the functional graph).
    """

    def __init__(self, num_heads, head_dim, initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.num_heads, self.head_dim = int(num_heads), int(head_dim)
        self.initializer = keras.initializers.get(initializer)

    def build(self, input_shape=None):
        shape = (self.num_heads, self.head_dim)
        self.content_bias = self.add_weight(name="content_bias", shape=shape,
                                            initializer=self.initializer)
        self.position_bias = self.add_weight(name="position_bias", shape=shape,
                                             initializer=self.initializer)
        self.built = True

    def call(self, reference):
        del reference
        pair = ops.concatenate([self.content_bias[None], self.position_bias[None]], axis=0)
        return ops.cast(pair, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return (2, self.num_heads, self.head_dim)

    def get_config(self):
        config = super().get_config()
        config.update({"num_heads": self.num_heads, "head_dim": self.head_dim,
                       "initializer": keras.initializers.serialize(self.initializer)})
        return config


__all__ = ["SharedRelativeBiases"]
