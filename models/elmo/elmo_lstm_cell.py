"""The LSTM cell of ELMo's biLM: an LSTM with a projection layer (LSTMP, Sak et al. 2014) and
cell clipping, as in Jozefowicz et al. 2016 §3 and Peters et al. 2018 §3.4."""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="lmfactory")
class ElmoLstmCell(keras.layers.Layer):
    """One step of an LSTM with a projected output, clipped memory cell and clipped
    projection, for `keras.layers.RNN`.

    ::

        i, f, g, o = split(W [x_t; r_{t-1}] + b)
        c_t = clip(sigmoid(f + forget_bias) * c_{t-1} + sigmoid(i) * tanh(g), ±cell_clip)
        r_t = clip(P (sigmoid(o) * tanh(c_t)), ±projection_clip)

    The state is ``(r_t, c_t)``; the recurrent input and the output are the projection
    ``r_t`` [projection_dim] (Sak et al. 2014 §2, LSTMP). §3.4: "4096 units with 512
    dimension projections", and the released biLM options clip the cell and the projection
    at 3 (``cell_clip``, ``proj_clip``). ``forget_bias`` = 1 is added to the forget gate's
    pre-activation, as TensorFlow's LSTMCell that the original used does.

    Written here because Keras' LSTMCell has neither a projection nor cell clipping (and
    keras-nlp has no recurrent layers).

    Args:
        units: memory cells (4096 in §3.4).
        projection_dim: width of the projection r_t (512).
        cell_clip: |c_t| bound, None for none.
        projection_clip: |r_t| bound, None for none.
        forget_bias: constant added to the forget gate's pre-activation.
    """

    def __init__(self, units: int, projection_dim: int, cell_clip=3.0, projection_clip=3.0,
                 forget_bias: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        self.units = int(units)
        self.projection_dim = int(projection_dim)
        self.cell_clip = None if cell_clip is None else float(cell_clip)
        self.projection_clip = None if projection_clip is None else float(projection_clip)
        self.forget_bias = float(forget_bias)
        self.state_size = [self.projection_dim, self.units]
        self.output_size = self.projection_dim

    def build(self, input_shape):
        input_dim = int(input_shape[-1])
        self.kernel = self.add_weight(
            shape=(input_dim + self.projection_dim, 4 * self.units), name="kernel",
            initializer="glorot_uniform")
        self.bias = self.add_weight(shape=(4 * self.units,), name="bias", initializer="zeros")
        self.projection_kernel = self.add_weight(
            shape=(self.units, self.projection_dim), name="projection_kernel",
            initializer="glorot_uniform")
        self.built = True

    def call(self, inputs, states, training=False):
        previous_output, previous_cell = states[0], states[1]
        gates = ops.matmul(ops.concatenate([inputs, previous_output], axis=-1),
                           self.kernel) + self.bias
        input_gate, forget_gate, candidate, output_gate = ops.split(gates, 4, axis=-1)
        cell = (ops.sigmoid(forget_gate + self.forget_bias) * previous_cell
                + ops.sigmoid(input_gate) * ops.tanh(candidate))
        if self.cell_clip is not None:
            cell = ops.clip(cell, -self.cell_clip, self.cell_clip)
        output = ops.matmul(ops.sigmoid(output_gate) * ops.tanh(cell), self.projection_kernel)
        if self.projection_clip is not None:
            output = ops.clip(output, -self.projection_clip, self.projection_clip)
        return output, [output, cell]

    def get_initial_state(self, batch_size=None):
        return [ops.zeros((batch_size, self.projection_dim), dtype=self.compute_dtype),
                ops.zeros((batch_size, self.units), dtype=self.compute_dtype)]

    def get_config(self):
        config = super().get_config()
        config.update({"units": self.units, "projection_dim": self.projection_dim,
                       "cell_clip": self.cell_clip, "projection_clip": self.projection_clip,
                       "forget_bias": self.forget_bias})
        return config
