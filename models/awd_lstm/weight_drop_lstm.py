"""The weight-dropped LSTM of AWD-LSTM (Merity, Keskar & Socher 2018, §2).

§2 "Weight-dropped LSTM": DropConnect (Wan et al. 2013) on the hidden-to-hidden weight
matrices [U^i, U^f, U^o, U^c]. "As the same weights are reused over multiple timesteps, the
same individual dropped weights remain dropped for the entirety of the forward and
backward pass." One Bernoulli mask over the recurrent kernel is drawn per forward pass (per
`call` in training), shared by every timestep and every row of the batch, and the kept
weights are rescaled by 1 / (1 - p), as the reference WeightDrop does with ``F.dropout``
on the raw weight.

Keras lacks this mechanism: `keras.layers.LSTM(recurrent_dropout=p)` drops the *hidden
state* h_{t-1} (Gal & Ghahramani's variational dropout on the recurrent input), a mask over
activations per row, not over weights shared by the batch; the cuDNN path is also off
whenever a mask is applied. So this layer writes the LSTM recurrence itself.

The recurrence (gate order i, f, g, o of Hochreiter & Schmidhuber / PyTorch's LSTM, one
bias):
    z_t = x_t W + h_{t-1} U~ + b,    i, f, o = sigmoid(.), g = tanh(.)
    c_t = f * c_{t-1} + i * g,       h_t = o * tanh(c_t)
with U~ = U * mask / (1 - p) in training, U at evaluation. The input projection x W is one
matrix product over all timesteps; only h U~ runs in the loop (`tf.scan`).

Padding: at a padded position (``padding_mask`` 0) the state is carried over unchanged
(as Keras RNN masking does), so left padding leaves the zero initial state in place and
right padding cannot reach earlier positions.

Initialisation: PyTorch's LSTM default, U(-1/sqrt(units), 1/sqrt(units)) for every weight,
the reference implementation's.
"""

from __future__ import annotations

import math

import keras
from keras import ops

from lmfactory.models.backend import tf


@keras.saving.register_keras_serializable(package="lmfactory")
class WeightDropLSTM(keras.layers.Layer):
    """An LSTM layer with DropConnect on its hidden-to-hidden kernel (see module docstring).

    Call: ``layer(inputs, padding_mask=None, initial_state=None, training=None)`` with
    inputs [B, T, D] -> the hidden states h [B, T, units].
    `sequence_states` also returns the cell states (for the decoding state).

    Args:
        units: hidden size.
        weight_dropout: the DropConnect rate p on the recurrent kernel (AWD-LSTM: 0.5).
        seed: seed of the mask's generator.
    """

    def __init__(self, units: int, weight_dropout: float = 0.5, seed=None, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= weight_dropout < 1.0:
            raise ValueError(f"weight_dropout must lie in [0, 1), got {weight_dropout}")
        self.units = int(units)
        self.weight_dropout = float(weight_dropout)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def build(self, input_shape):
        bound = 1.0 / math.sqrt(self.units)
        init = keras.initializers.RandomUniform(-bound, bound)
        self.kernel = self.add_weight(name="kernel", shape=(input_shape[-1], 4 * self.units),
                                      initializer=init)
        self.recurrent_kernel = self.add_weight(
            name="recurrent_kernel", shape=(self.units, 4 * self.units), initializer=init)
        self.bias = self.add_weight(name="bias", shape=(4 * self.units,), initializer=init)
        self.built = True

    def dropped_recurrent_kernel(self, training=False):
        """The recurrent kernel this forward pass uses: DropConnect-masked and rescaled in
        training (a fresh mask per call), the kernel itself otherwise."""
        kernel = ops.convert_to_tensor(self.recurrent_kernel)
        if not training or self.weight_dropout == 0.0:
            return kernel
        return keras.random.dropout(kernel, self.weight_dropout, seed=self.seed_generator)

    def zero_state(self, batch_size):
        zeros = ops.zeros((batch_size, self.units), dtype=self.compute_dtype)
        return zeros, zeros

    def sequence_states(self, inputs, padding_mask=None, initial_state=None, training=False):
        """Runs the recurrence over ``inputs`` [B, T, D].

        Returns:
            (h, c), each [B, T, units]: the state after every position (carried over
            padded positions).
        """
        inputs = ops.convert_to_tensor(inputs, dtype=self.compute_dtype)
        if initial_state is None:
            initial_state = self.zero_state(ops.shape(inputs)[0])
        recurrent = ops.cast(self.dropped_recurrent_kernel(training), self.compute_dtype)
        projected = ops.matmul(inputs, ops.cast(self.kernel, self.compute_dtype)) + \
            ops.cast(self.bias, self.compute_dtype)
        if padding_mask is None:
            keep = ops.ones(ops.shape(inputs)[:2], dtype=self.compute_dtype)
        else:
            keep = ops.cast(padding_mask, self.compute_dtype)
        time_major = (tf.transpose(projected, [1, 0, 2]), tf.transpose(keep, [1, 0])[..., None])

        def step(state, elements):
            h, c = state
            z, real = elements
            z = z + tf.matmul(h, recurrent)
            i, f, g, o = tf.split(z, 4, axis=-1)
            c_new = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
            h_new = tf.sigmoid(o) * tf.tanh(c_new)
            return (real * h_new + (1.0 - real) * h, real * c_new + (1.0 - real) * c)

        h_all, c_all = tf.scan(step, time_major, initializer=tuple(initial_state))
        return tf.transpose(h_all, [1, 0, 2]), tf.transpose(c_all, [1, 0, 2])

    def call(self, inputs, padding_mask=None, initial_state=None, training=None):
        return self.sequence_states(inputs, padding_mask, initial_state, bool(training))[0]

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.units,)

    def get_config(self):
        config = super().get_config()
        config.update({"units": self.units, "weight_dropout": self.weight_dropout,
                       "seed": self.seed})
        return config


__all__ = ["WeightDropLSTM"]
