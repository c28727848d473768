"""The highway layer of ELMo's token encoder (Srivastava et al. 2015, as used by Kim et al.
2016 §2.3 and Jozefowicz et al. 2016 §3.3 after the character CNN)."""

from __future__ import annotations

import keras


@keras.saving.register_keras_serializable(package="lmfactory")
class ElmoHighway(keras.layers.Layer):
    """One highway layer: ``y = t * relu(W_H x + b_H) + (1 - t) * x`` with the transform
    gate ``t = sigmoid(W_T x + b_T)`` (Srivastava et al. 2015 eq. 3; Kim et al. 2016 §2.3).
    The gate's bias starts at ``gate_bias`` (-2: Kim et al. "initialize b_T to a negative
    value", which the original biLM does too), so a fresh layer mostly carries its input.

    Written here because neither Keras nor keras-nlp has a highway layer.

    Args:
        gate_bias: the transform gate's initial bias.
    Input / output: [..., width].
    """

    def __init__(self, gate_bias: float = -2.0, **kwargs):
        super().__init__(**kwargs)
        self.gate_bias = float(gate_bias)

    def build(self, input_shape):
        width = int(input_shape[-1])
        self.transform = keras.layers.Dense(width, activation="relu", dtype=self.dtype_policy,
                                            name="transform")
        self.gate = keras.layers.Dense(
            width, activation="sigmoid", dtype=self.dtype_policy, name="gate",
            bias_initializer=keras.initializers.Constant(self.gate_bias))
        self.transform.build(input_shape)
        self.gate.build(input_shape)
        self.built = True

    def call(self, inputs):
        gate = self.gate(inputs)
        return gate * self.transform(inputs) + (1.0 - gate) * inputs

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"gate_bias": self.gate_bias})
        return config
