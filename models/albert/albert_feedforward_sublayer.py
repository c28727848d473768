"""The feed-forward sub-layer of an ALBERT block, as a layer of its own so several blocks
can share it (Lan et al. 2020 §3.1 "Cross-layer parameter sharing")."""

import keras

from lmfactory.models.albert.albert_common import (
    albert_kernel_initializer,
    clone_initializer,
    gelu_approximate,
)


@keras.saving.register_keras_serializable(package="lmfactory")
class AlbertFeedForwardSublayer(keras.layers.Layer):
    """Post-LN position-wise feed-forward network:
    ``LayerNorm(x + Dropout(W2 · activation(W1 · x + b1) + b2))``.

    The second half of keras-nlp's `TransformerEncoder` (post-LN), split out because the
    partial sharing modes of §3.1 / Table 4 share it, or not, independently of the
    attention sub-layer, which `TransformerEncoder` cannot do. The output width is the
    input's (hidden_dim); the inner width is `intermediate_dim` (4H in the paper, §3.1).

    Args:
        intermediate_dim: inner feed-forward size.
        activation: activation of the inner layer (ALBERT: GELU, tanh approximation).
        dropout: dropout rate on the sub-layer output.
        layer_norm_epsilon: LayerNorm epsilon.
        kernel_initializer: initialiser of the two kernels.
    """

    def __init__(self, intermediate_dim, activation=gelu_approximate, dropout=0.0,
                 layer_norm_epsilon=1e-12, kernel_initializer=None, **kwargs):
        super().__init__(**kwargs)
        self.intermediate_dim = intermediate_dim
        self.activation = keras.activations.get(activation)
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(
            kernel_initializer or albert_kernel_initializer())
        self.supports_masking = True

    def build(self, inputs_shape):
        hidden_dim = inputs_shape[-1]
        self.intermediate_dense = keras.layers.Dense(
            self.intermediate_dim,
            activation=self.activation,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            dtype=self.dtype_policy,
            name="intermediate_dense",
        )
        self.intermediate_dense.build(inputs_shape)
        self.output_dense = keras.layers.Dense(
            hidden_dim,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            dtype=self.dtype_policy,
            name="output_dense",
        )
        self.output_dense.build(tuple(inputs_shape[:-1]) + (self.intermediate_dim,))
        self.output_dropout = keras.layers.Dropout(
            self.dropout, dtype=self.dtype_policy, name="output_dropout")
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm")
        self.layer_norm.build(inputs_shape)
        self.built = True

    def call(self, inputs, training=None):
        x = self.output_dense(self.intermediate_dense(inputs))
        return self.layer_norm(inputs + self.output_dropout(x, training=training))

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update({
            "intermediate_dim": self.intermediate_dim,
            "activation": keras.activations.serialize(self.activation),
            "dropout": self.dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        })
        return config
