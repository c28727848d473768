"""Chunked feed-forward sub-block of the Reformer (Kitaev et al. 2020 §3, "Chunking"): the
position-wise feed-forward layer is computed over the sequence in chunks of
`chunk_size_feed_forward` positions (tf.map_fn, one chunk after the other), so that its
[T, intermediate_dim] activations never exist at once. 0 = one pass over the whole sequence.

Order as the reference: LayerNorm, dense (intermediate_dim) with dropout before the
activation, dense back to the width, dropout. keras-nlp has no chunked feed-forward.
"""

import keras

from lmfactory.models.backend import tf
from lmfactory.models.reformer import reformer_attention_utils as utils


class ReformerChunkedFeedForward(keras.layers.Layer):
    """Args:
        hidden_dim: width of the input and output.
        intermediate_dim: inner width.
        chunk_size_feed_forward: positions per chunk (0: no chunking).
        activation: a Keras activation name.
        dropout: dropout after the first and second dense layers.
        layer_norm_epsilon: of the input LayerNorm.
        kernel_initializer: of the dense layers.
    """

    def __init__(self, hidden_dim, intermediate_dim, chunk_size_feed_forward=0,
                 activation="relu", dropout=0.0, layer_norm_epsilon=1e-12,
                 kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.hidden_dim, self.intermediate_dim = hidden_dim, intermediate_dim
        self.chunk_size_feed_forward = chunk_size_feed_forward
        self.activation = keras.activations.get(activation)
        self.dropout, self.layer_norm_epsilon = dropout, layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm")
        self.dense = keras.layers.Dense(intermediate_dim, name="dense",
                                        kernel_initializer=self.kernel_initializer,
                                        dtype=self.dtype_policy)
        self.output_dense = keras.layers.Dense(hidden_dim, name="output",
                                               kernel_initializer=self.kernel_initializer,
                                               dtype=self.dtype_policy)

    def build(self, input_shape):
        self.layer_norm.build(input_shape)
        self.dense.build(input_shape)
        self.output_dense.build(tuple(input_shape[:-1]) + (self.intermediate_dim,))
        self.built = True

    def _forward(self, x, seed, training):
        x = self.dense(self.layer_norm(x))
        x = self.activation(utils.seeded_dropout(x, self.dropout, utils.fold_seed(seed, 0),
                                                 training))
        x = self.output_dense(x)
        return utils.seeded_dropout(x, self.dropout, utils.fold_seed(seed, 1), training)

    def call(self, hidden, seed=None, training=False):
        """hidden [B, T, H] -> [B, T, H]; chunk i's dropout draws from fold(seed, i)."""
        training = bool(training)
        if seed is None:
            seed = tf.constant([0, 0], "int64")
        size = self.chunk_size_feed_forward
        if not size:
            return self._forward(hidden, seed, training)
        length = tf.shape(hidden)[1]
        padded = utils.pad_to_multiple(hidden, length, size, axis=1)
        batch, width = tf.shape(hidden)[0], tf.shape(hidden)[2]
        chunks = tf.transpose(tf.reshape(padded, [batch, -1, size, width]), [1, 0, 2, 3])
        count = tf.shape(chunks)[0]
        out = tf.map_fn(
            lambda item: self._forward(item[0], utils.fold_seed(seed, 10 + item[1]), training),
            (chunks, tf.range(count, dtype=tf.int64)),
            fn_output_signature=tf.TensorSpec([None, size, self.hidden_dim], hidden.dtype))
        out = tf.reshape(tf.transpose(out, [1, 0, 2, 3]), [batch, -1, self.hidden_dim])
        return out[:, :length]

    def get_config(self):
        config = super().get_config()
        config.update({
            "hidden_dim": self.hidden_dim, "intermediate_dim": self.intermediate_dim,
            "chunk_size_feed_forward": self.chunk_size_feed_forward,
            "activation": keras.activations.serialize(self.activation),
            "dropout": self.dropout, "layer_norm_epsilon": self.layer_norm_epsilon,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        })
        return config
