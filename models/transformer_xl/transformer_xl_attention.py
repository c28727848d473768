"""Relative multi-head attention with memory (Dai et al. 2019, §3.3 and Appendix B)."""

from __future__ import annotations

import keras
from keras import ops

from lmfactory.models.transformer_xl.transformer_xl_masks import relative_shift


class TransformerXLAttention(keras.layers.Layer):
    """Multi-head attention over [memory; segment] with the relative score of §3.3.

    For query i and key j at relative distance i - j,

        A^rel_ij = (E W_q + u)^T W_k,E E_j  +  (E W_q + v)^T W_k,R R_{i-j}
                   \\____ (a) + (c) ______/     \\_______ (b) + (d) ________/

    (a) content, (b) content-dependent position, (c) the global content bias u,
    (d) the global position bias v; R is the sinusoid encoding (`TransformerXLContext`),
    projected by its own W_k,R (``position_kernel``). (b) + (d) is computed for every query
    against every row of R and moved in place by the relative shift (Appendix B,
    `relative_shift`), so no [T, K, hidden] tensor is built. Scores are scaled by
    1 / sqrt(head_dim), masked, soft-maxed, dropped (``attention_dropout``, the reference's
    dropatt), and the heads' values are projected back by ``output_kernel``, followed by
    dropout and the residual: post-norm ``LN(h + attn(h))`` (the default) or pre-norm
    ``h + attn(LN([m; h]))`` (the reference's ``pre_lnorm``: keys and values come from the
    normalised memory too). Memory enters keys and values only (§3.2: "SG(h_{tau-1}) o h_tau").
    Queries, keys and values are one bias-free projection (``qkv_kernel``), as the reference.

    keras-nlp has no relative-position attention with memory (its `CachedMultiHeadAttention`
    has absolute keys only), so this layer is written here.

    u and v are this layer's own weights (``content_bias``, ``position_bias``; the
    reference's ``untie_r``), or given at call time (``biases`` [2, heads, head_dim]) when the
    backbone shares one pair across layers, as §3.3 writes them.

    Call: ``(hidden [B, T, H], position_encoding [M + T, H], mask [B|1, T, M + T],
    memory [B, M, H] or None, biases=None, training=None)`` -> [B, T, H].
    """

    def __init__(self, num_heads, head_dim, hidden_dim, dropout=0.0, attention_dropout=0.0,
                 pre_norm=False, own_biases=True, layer_norm_epsilon=1e-5,
                 kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.num_heads, self.head_dim, self.hidden_dim = int(num_heads), int(head_dim), \
            int(hidden_dim)
        self.dropout, self.attention_dropout = float(dropout), float(attention_dropout)
        self.pre_norm, self.own_biases = bool(pre_norm), bool(own_biases)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm")
        self.attention_dropout_layer = keras.layers.Dropout(
            self.attention_dropout, dtype=self.dtype_policy, name="attention_dropout")
        self.output_dropout = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy,
                                                   name="output_dropout")

    def build(self, hidden_shape=None, *args, **kwargs):
        width = self.num_heads * self.head_dim
        init = self.kernel_initializer
        self.qkv_kernel = self.add_weight(name="qkv_kernel", shape=(self.hidden_dim, 3 * width),
                                          initializer=init)
        self.position_kernel = self.add_weight(name="position_kernel",
                                               shape=(self.hidden_dim, width), initializer=init)
        self.output_kernel = self.add_weight(name="output_kernel", shape=(width, self.hidden_dim),
                                             initializer=init)
        if self.own_biases:
            self.content_bias = self.add_weight(name="content_bias",
                                                shape=(self.num_heads, self.head_dim),
                                                initializer=init)
            self.position_bias = self.add_weight(name="position_bias",
                                                 shape=(self.num_heads, self.head_dim),
                                                 initializer=init)
        self.layer_norm.build((None, None, self.hidden_dim))
        self.built = True

    def call(self, hidden, position_encoding, mask, memory=None, biases=None, training=None):
        batch, length = ops.shape(hidden)[0], ops.shape(hidden)[1]
        keys_in = hidden if memory is None else ops.concatenate(
            [ops.cast(memory, hidden.dtype), hidden], axis=1)
        if self.pre_norm:
            keys_in = self.layer_norm(keys_in)
        heads = ops.matmul(keys_in, ops.cast(self.qkv_kernel, hidden.dtype))
        heads = ops.reshape(heads, (batch, -1, 3, self.num_heads, self.head_dim))
        query = heads[:, -length:, 0]
        key, value = heads[:, :, 1], heads[:, :, 2]
        relative = ops.matmul(position_encoding, ops.cast(self.position_kernel, hidden.dtype))
        relative = ops.reshape(relative, (-1, self.num_heads, self.head_dim))
        if biases is None:
            content_bias, position_bias = self.content_bias, self.position_bias
        else:
            content_bias, position_bias = biases[0], biases[1]
        content = ops.einsum("bind,bjnd->bnij", query + ops.cast(content_bias, query.dtype), key)
        position = ops.einsum("bind,jnd->bnij", query + ops.cast(position_bias, query.dtype),
                              relative)
        scores = (content + relative_shift(position)) * (1.0 / self.head_dim ** 0.5)
        scores = ops.cast(scores, "float32")
        scores = ops.where(ops.cast(mask, "bool")[:, None], scores, -1e30)
        probabilities = ops.cast(ops.softmax(scores, axis=-1), hidden.dtype)
        probabilities = self.attention_dropout_layer(probabilities, training=training)
        attended = ops.einsum("bnij,bjnd->bind", probabilities, value)
        attended = ops.reshape(attended, (batch, length, self.num_heads * self.head_dim))
        output = ops.matmul(attended, ops.cast(self.output_kernel, hidden.dtype))
        output = self.output_dropout(output, training=training)
        if self.pre_norm:
            return hidden + output
        return self.layer_norm(hidden + output)

    def compute_output_shape(self, hidden_shape, *args, **kwargs):
        return hidden_shape

    def get_config(self):
        config = super().get_config()
        config.update({"num_heads": self.num_heads, "head_dim": self.head_dim,
                       "hidden_dim": self.hidden_dim, "dropout": self.dropout,
                       "attention_dropout": self.attention_dropout,
                       "pre_norm": self.pre_norm, "own_biases": self.own_biases,
                       "layer_norm_epsilon": self.layer_norm_epsilon,
                       "kernel_initializer": keras.initializers.serialize(
                           self.kernel_initializer)})
        return config


__all__ = ["TransformerXLAttention"]
