"""ELMo's task-specific combination of the biLM layers (Peters et al. 2018 §3.2, eq. 1)."""

from __future__ import annotations

import keras
from keras import ops

MIXES = ("all", "top")


@keras.saving.register_keras_serializable(package="lmfactory")
class ElmoScalarMix(keras.layers.Layer):
    """``ELMo_k^task = gamma * sum_j softmax(w)_j h_{k,j}`` over the L + 1 biLM layers
    (eq. 1): softmax-normalised scalar weights ``s = softmax(w)`` and a scalar ``gamma``
    "allows the task model to scale the entire ELMo vector", both learned by the task.
    ``mix="top"`` is §5.2's (Table 2) "last only" baseline: ``gamma * h_{k,L}``.

    §3.3: "we found it beneficial to add a moderate amount of dropout to ELMo ... and in
    some cases to regularize the ELMo weights by adding lambda ||w||_2^2 to the loss"
    (``dropout`` on the mixed vector, ``l2`` = lambda on the weights w; Table 2 compares
    lambda = 1 and 0.001).

    §3.2: "Considering that the activations of each biLM layer have a different
    distribution, in some cases it also helped to apply layer normalization (Ba et al.,
    2016) to each biLM layer before weighting" (``layer_norm``: each token's vector of each
    layer normalised to zero mean and unit variance over its features, Keras'
    LayerNormalization without gain or bias; a padded token's zero vector stays zero).

    Written here because Keras and keras-nlp have no scalar mix.

    Input: the layer stack [B, L + 1, T, D] (the backbone's ``layer_outputs``).
    Output: [B, T, D].

    Args:
        num_layers: L + 1, the number of layers mixed.
        mix: ``"all"`` (eq. 1) or ``"top"`` (the top layer only).
        dropout: dropout rate on the mixed vector.
        l2: lambda of the L2 penalty on w (0: none).
        layer_norm: normalise each layer before weighting.
    """

    def __init__(self, num_layers: int, mix: str = "all", dropout: float = 0.5,
                 l2: float = 0.001, layer_norm: bool = False, **kwargs):
        super().__init__(**kwargs)
        if mix not in MIXES:
            raise ValueError(f"mix must be one of {MIXES}, got {mix!r}")
        if int(num_layers) < 1:
            raise ValueError(f"num_layers must be positive, got {num_layers}")
        self.num_layers = int(num_layers)
        self.mix = mix
        self.dropout = float(dropout)
        self.l2 = float(l2)
        self.layer_norm = bool(layer_norm)
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        self.normalization = keras.layers.LayerNormalization(
            axis=-1, center=False, scale=False, dtype=self.dtype_policy,
            name="layer_normalization") if self.layer_norm else None

    def build(self, input_shape):
        if self.mix == "all":
            regularizer = keras.regularizers.L2(self.l2) if self.l2 > 0 else None
            self.layer_weights = self.add_weight(shape=(self.num_layers,), name="layer_weights",
                                                 initializer="zeros", regularizer=regularizer)
        self.gamma = self.add_weight(shape=(), name="gamma", initializer="ones")
        self.built = True

    def normalized_weights(self):
        """s = softmax(w) [L + 1] (one-hot on the top layer for ``mix="top"``)."""
        if self.mix == "top":
            return ops.one_hot(self.num_layers - 1, self.num_layers)
        return ops.softmax(self.layer_weights)

    def call(self, layer_outputs, training=False):
        if self.normalization is not None:
            layer_outputs = self.normalization(layer_outputs)
        if self.mix == "top":
            mixed = layer_outputs[:, -1]
        else:
            weights = ops.cast(self.normalized_weights(), layer_outputs.dtype)
            mixed = ops.einsum("l,bltd->btd", weights, layer_outputs)
        mixed = ops.cast(self.gamma, mixed.dtype) * mixed
        return self.dropout_layer(mixed, training=training)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[2], input_shape[3])

    def get_config(self):
        config = super().get_config()
        config.update({"num_layers": self.num_layers, "mix": self.mix,
                       "dropout": self.dropout, "l2": self.l2, "layer_norm": self.layer_norm})
        return config
