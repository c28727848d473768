"""Local (chunked) self-attention, the reference Reformer's "local" layers that alternate
with LSH layers (`attention_layers`, e.g. ["local", "lsh"]; Kitaev et al. 2020 §5 compares
against and mixes in such chunked attention). Not in keras-nlp, hence a layer of our own.

The sequence is cut into chunks of `chunk_length`; each chunk attends to itself and its
`num_chunks_before` previous (and `num_chunks_after` next) chunks, with separate query / key
/ value projections (keys scaled by 1/sqrt(head_dim)), causal masking and padding masking.
A sequence no longer than `chunk_length` is one chunk (full causal attention). Unlike LSH
attention a query may attend to itself.
"""

import keras
import numpy as np

from lmfactory.models.backend import tf
from lmfactory.models.reformer import reformer_attention_utils as utils


class ReformerLocalAttention(keras.layers.Layer):
    """The local attention sub-block: LayerNorm, chunked attention, output projection,
    dropout (the reference's ReformerAttention with LocalSelfAttention).

    Args:
        hidden_dim: width of the input and output.
        num_heads, head_dim: heads and their size.
        chunk_length: chunk size.
        num_chunks_before, num_chunks_after: neighbouring chunks each chunk attends to.
        attention_dropout: dropout on the attention probabilities.
        dropout: dropout on the output projection.
        layer_norm_epsilon: of the input LayerNorm.
        kernel_initializer: of the projections.
    """

    def __init__(self, hidden_dim, num_heads, head_dim, chunk_length, num_chunks_before=1,
                 num_chunks_after=0, attention_dropout=0.0, dropout=0.0,
                 layer_norm_epsilon=1e-12, kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.hidden_dim, self.num_heads, self.head_dim = hidden_dim, num_heads, head_dim
        self.chunk_length = chunk_length
        self.num_chunks_before, self.num_chunks_after = num_chunks_before, num_chunks_after
        self.attention_dropout, self.dropout = attention_dropout, dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        inner = num_heads * head_dim

        def dense(units, name):
            return keras.layers.Dense(units, use_bias=False, name=name,
                                      kernel_initializer=self.kernel_initializer,
                                      dtype=self.dtype_policy)

        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm")
        self.query, self.key, self.value = dense(inner, "query"), dense(inner, "key"), \
            dense(inner, "value")
        self.output_dense = dense(hidden_dim, "output")

    def build(self, input_shape):
        for layer in (self.layer_norm, self.query, self.key, self.value):
            layer.build(input_shape)
        self.output_dense.build((None,) * (len(input_shape) - 1)
                                + (self.num_heads * self.head_dim,))
        self.built = True

    def call(self, hidden, padding_mask, seed=None, rotations=None, training=False):
        """hidden [B, T, H], padding_mask [B, T] -> [B, T, H] (``rotations`` unused: the
        layer's signature is the LSH layer's)."""
        training = bool(training)
        if seed is None:
            seed = tf.constant([0, 0], "int64")
        x = self.layer_norm(hidden)
        heads = (self.num_heads, self.head_dim)
        query = utils.split_heads(self.query(x), *heads)
        key = utils.split_heads(self.key(x), *heads) / np.sqrt(self.head_dim)
        value = utils.split_heads(self.value(x), *heads)
        mask = tf.cast(padding_mask, "bool")
        static_length = hidden.shape[1]

        def standard():
            positions = tf.range(tf.shape(query)[2])
            causal = positions[:, None] >= positions[None, :]
            allowed = tf.logical_and(causal[None, None], mask[:, None, None, :])
            out, _ = utils.masked_softmax_attend(
                tf.matmul(query, key, transpose_b=True), allowed, value,
                dropout_rate=self.attention_dropout, seed=utils.fold_seed(seed, 1),
                training=training)
            return out

        def chunked():
            return self._attend_chunked(query, key, value, mask, seed, training)

        if static_length is not None:
            out = standard() if static_length <= self.chunk_length else chunked()
        else:
            out = tf.cond(tf.shape(hidden)[1] <= self.chunk_length, standard, chunked)
        out = self.output_dense(utils.merge_heads(out))
        return utils.seeded_dropout(out, self.dropout, utils.fold_seed(seed, 2), training)

    def _attend_chunked(self, query, key, value, mask, seed, training):
        length = tf.shape(query)[2]
        query, key, value = (utils.pad_to_multiple(t, length, self.chunk_length, axis=2)
                             for t in (query, key, value))
        mask = utils.pad_to_multiple(tf.cast(mask, "int32"), length, self.chunk_length, 1)
        padded = tf.shape(query)[2]
        adjacent = (self.num_chunks_before, self.num_chunks_after)
        queries = utils.chunk(query, self.chunk_length)
        keys = utils.look_adjacent(utils.chunk(key, self.chunk_length), *adjacent)
        values = utils.look_adjacent(utils.chunk(value, self.chunk_length), *adjacent)
        positions = tf.reshape(tf.range(padded), [1, 1, -1, self.chunk_length])
        key_positions = utils.look_adjacent(positions, *adjacent)  # [1, 1, C, K]
        key_real = utils.look_adjacent(
            tf.reshape(tf.cast(mask, "bool"), [tf.shape(mask)[0], 1, -1, self.chunk_length]),
            *adjacent)  # [B, 1, C, K]
        causal = positions[..., :, None] >= key_positions[..., None, :]
        allowed = tf.logical_and(causal, key_real[..., None, :])
        out, _ = utils.masked_softmax_attend(
            tf.matmul(queries, keys, transpose_b=True), allowed, values,
            dropout_rate=self.attention_dropout, seed=utils.fold_seed(seed, 1),
            training=training)
        return utils.unchunk(out)[:, :, :length]

    def get_config(self):
        config = super().get_config()
        config.update({
            "hidden_dim": self.hidden_dim, "num_heads": self.num_heads,
            "head_dim": self.head_dim, "chunk_length": self.chunk_length,
            "num_chunks_before": self.num_chunks_before,
            "num_chunks_after": self.num_chunks_after,
            "attention_dropout": self.attention_dropout, "dropout": self.dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        })
        return config
