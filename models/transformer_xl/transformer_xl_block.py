"""One Transformer-XL layer (Dai et al. 2019, §3.3, the equations at its end): relative
attention over [memory; segment], then the position-wise feed-forward network."""

from __future__ import annotations

import keras

from lmfactory.models.transformer_xl.transformer_xl_attention import TransformerXLAttention


class TransformerXLBlock(keras.layers.Layer):
    """``h^n = PositionwiseFF(LayerNorm(Linear(a^n) + h^{n-1}))`` (§3.3): a
    `TransformerXLAttention` then the feed-forward network ReLU(x W1 + b1) W2 + b2 with
    dropout after the ReLU and after W2, and its residual: post-norm ``LN(x + ff(x))`` (the
    default) or pre-norm ``x + ff(LN(x))``, as the reference's ``PositionwiseFF``.

    Call: ``(hidden, position_encoding, mask, memory=None, biases=None, training=None)``,
    arguments as `TransformerXLAttention`'s; returns [B, T, H].
    """

    def __init__(self, num_heads, head_dim, hidden_dim, intermediate_dim, dropout=0.0,
                 attention_dropout=0.0, pre_norm=False, own_biases=True,
                 layer_norm_epsilon=1e-5, kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.num_heads, self.head_dim, self.hidden_dim = int(num_heads), int(head_dim), \
            int(hidden_dim)
        self.intermediate_dim = int(intermediate_dim)
        self.dropout, self.attention_dropout = float(dropout), float(attention_dropout)
        self.pre_norm, self.own_biases = bool(pre_norm), bool(own_biases)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        policy = self.dtype_policy
        self.attention = TransformerXLAttention(
            num_heads, head_dim, hidden_dim, dropout, attention_dropout, pre_norm, own_biases,
            layer_norm_epsilon, self.kernel_initializer, dtype=policy, name="attention")
        self.intermediate = keras.layers.Dense(intermediate_dim, activation="relu",
                                               kernel_initializer=self.kernel_initializer,
                                               dtype=policy, name="intermediate")
        self.intermediate_dropout = keras.layers.Dropout(dropout, dtype=policy,
                                                         name="intermediate_dropout")
        self.output_dense = keras.layers.Dense(hidden_dim,
                                               kernel_initializer=self.kernel_initializer,
                                               dtype=policy, name="output_dense")
        self.output_dropout = keras.layers.Dropout(dropout, dtype=policy, name="output_dropout")
        self.layer_norm = keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon,
                                                          dtype=policy, name="layer_norm")

    def build(self, hidden_shape=None, *args, **kwargs):
        self.attention.build((None, None, self.hidden_dim))
        self.intermediate.build((None, None, self.hidden_dim))
        self.output_dense.build((None, None, self.intermediate_dim))
        self.layer_norm.build((None, None, self.hidden_dim))
        self.built = True

    def call(self, hidden, position_encoding, mask, memory=None, biases=None, training=None):
        x = self.attention(hidden, position_encoding, mask, memory=memory, biases=biases,
                           training=training)
        inner = self.layer_norm(x) if self.pre_norm else x
        inner = self.intermediate_dropout(self.intermediate(inner), training=training)
        inner = self.output_dropout(self.output_dense(inner), training=training)
        return x + inner if self.pre_norm else self.layer_norm(x + inner)

    def compute_output_shape(self, hidden_shape, *args, **kwargs):
        return hidden_shape

    def get_config(self):
        config = super().get_config()
        config.update({"num_heads": self.num_heads, "head_dim": self.head_dim,
                       "hidden_dim": self.hidden_dim, "intermediate_dim": self.intermediate_dim,
                       "dropout": self.dropout, "attention_dropout": self.attention_dropout,
                       "pre_norm": self.pre_norm, "own_biases": self.own_biases,
                       "layer_norm_epsilon": self.layer_norm_epsilon,
                       "kernel_initializer": keras.initializers.serialize(
                           self.kernel_initializer)})
        return config


__all__ = ["TransformerXLBlock"]
