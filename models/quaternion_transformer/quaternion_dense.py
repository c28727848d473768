"""The quaternion linear layer of Tay et al. 2019 (the Hamilton product W ⊗ x) with the
quaternion-compatible split activation (Parcollet et al. 2019). keras has no quaternion
layer; this one is written here."""

import keras
from keras import ops

from lmfactory.models.quaternion_transformer.quaternion_algebra import (
    check_quaternion_width, hamilton_matrix)
from lmfactory.models.quaternion_transformer.quaternion_initializer import (
    QuaternionInitializer)

# Activations that mix the coordinates of a vector: a split activation applies a function to
# each component separately, so only element-wise functions are quaternion-compatible.
_NOT_ELEMENTWISE = ("softmax", "log_softmax")


@keras.saving.register_keras_serializable(package="lmfactory")
class QuaternionDense(keras.layers.Layer):
    """A dense layer whose weight is a quaternion matrix: y = α(W ⊗ x + b).

    * Hamilton product: the weight W = W_r + W_x i + W_y j + W_z k is four real
      [n/4, m/4] matrices (`kernel`, [4, n/4, m/4]); the output is the Hamilton product
      W ⊗ x, computed as one matmul with the real [n, m] block matrix built from the four
      components with the Hamilton sign pattern (`quaternion_algebra.hamilton_matrix`).
      Inputs and outputs are laid out by component, ``[r | x | y | z]``. The kernel has
      n m / 4 numbers: 1/4 of a real Dense of the same size (the abstract's "75%
      reduction"). The bias is real and as wide as the output (m numbers, Parcollet et al.
      2019's quaternion layers).
    * Quaternion-compatible activation: the split activation
      α(Q) = α(r) + α(x) i + α(y) j + α(z) k. For an element-wise α that is α applied to
      every real coordinate of the ``[r | x | y | z]`` layout, which is how it is computed;
      activations that are not element-wise (softmax) are refused.
    * Initialisation: the kernel starts from `QuaternionInitializer` (Parcollet et al.'s
      polar form, chi(4) modulus, Glorot criterion) unless another initialiser of
      [4, n/4, m/4] kernels is given.

    Args:
        units: m, the real width of the output (a multiple of 4).
        activation: an element-wise activation (name or function), or None.
        use_bias: whether to add the real bias b.
        kernel_initializer: initialiser of the [4, n/4, m/4] kernel.
        bias_initializer: initialiser of the bias.
    """

    def __init__(self, units, activation=None, use_bias=True, kernel_initializer=None,
                 bias_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        check_quaternion_width("units", units)
        self.units = units
        self.activation = keras.activations.get(activation)
        name = getattr(self.activation, "__name__", "")
        if name in _NOT_ELEMENTWISE:
            raise ValueError(f"QuaternionDense takes an element-wise (split) activation, "
                             f"got {name!r}")
        self.use_bias = bool(use_bias)
        self.kernel_initializer = keras.initializers.get(
            kernel_initializer if kernel_initializer is not None else QuaternionInitializer())
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def build(self, input_shape):
        input_dim = input_shape[-1]
        check_quaternion_width("the input width", input_dim)
        self.kernel = self.add_weight(
            name="kernel", shape=(4, input_dim // 4, self.units // 4),
            initializer=self.kernel_initializer)
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(name="bias", shape=(self.units,),
                                        initializer=self.bias_initializer)

    def hamilton_kernel(self):
        """The real [n, m] block matrix of the quaternion weight (used in `call`)."""
        return hamilton_matrix(ops.convert_to_tensor(self.kernel))

    def call(self, inputs):
        outputs = ops.matmul(inputs, ops.cast(self.hamilton_kernel(), inputs.dtype))
        if self.bias is not None:
            outputs = outputs + ops.cast(self.bias, outputs.dtype)
        return self.activation(outputs)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.units,)

    def get_config(self):
        config = super().get_config()
        config.update({
            "units": self.units,
            "activation": keras.activations.serialize(self.activation),
            "use_bias": self.use_bias,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
        })
        return config


__all__ = ["QuaternionDense"]
