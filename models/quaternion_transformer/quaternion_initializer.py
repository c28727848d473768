"""The quaternion weight initialisation of the Quaternion Transformer: Tay et al. 2019 use
the scheme of Parcollet et al. 2019 ("Quaternion Recurrent Neural Networks", ICLR,
"Parameter initialization").

Each quaternion weight is drawn in polar form

    w = phi * (cos(theta) + u sin(theta)),   u = u_x i + u_y j + u_z k, |u| = 1,

with the modulus phi ~ sigma * chi(4) (a chi distribution with four degrees of freedom, the
norm of a 4-D Gaussian), the phase theta ~ U(-pi, pi) and the pure unit quaternion u drawn
uniformly on the sphere (normalised 3-D Gaussian; Parcollet et al. normalise a uniform
draw). Then E|w|^2 = 4 sigma^2 and the Glorot criterion Var(W) = 2 / (n_in + n_out) (n
counted in quaternions) gives sigma = 1 / sqrt(2 (n_in + n_out)); He's 2 / n_in gives
sigma = 1 / sqrt(2 n_in). With it the real block matrix of the layer keeps the variance of
a Glorot (He) initialised real layer of the same size (each real output sums 4 n_in terms of
variance E|w|^2 / 4).

The paper's released code initialised with a plain normal (tensor2tensor's stddev
d^-0.5) and left this scheme commented out; we follow the paper's text. keras has no
quaternion initialiser; this one is written here.
"""

import math
import random as python_random

import keras
from keras import ops

CRITERIA = ("glorot", "he")


@keras.saving.register_keras_serializable(package="lmfactory")
class QuaternionInitializer(keras.initializers.Initializer):
    """Initial values of a quaternion kernel of shape [4, n_in, n_out] (the r, x, y, z real
    component matrices of `QuaternionDense`), drawn in the polar form of the module
    docstring.

    Args:
        criterion: "glorot" (sigma = 1 / sqrt(2 (n_in + n_out))) or "he"
            (sigma = 1 / sqrt(2 n_in)); n_in, n_out in quaternions.
        seed: an int for reproducible draws; None draws a fresh seed from Python's `random`
            (seeded by `keras.utils.set_random_seed`) at every call, so one initialiser
            shared by several kernels gives each its own values.
    """

    def __init__(self, criterion="glorot", seed=None):
        if criterion not in CRITERIA:
            raise ValueError(f"criterion must be one of {CRITERIA}, got {criterion!r}")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise ValueError(f"seed must be an int or None, got {seed!r}")
        self.criterion = criterion
        self.seed = seed

    def sigma(self, n_in, n_out):
        """The scale of the chi(4) modulus for a kernel of n_in x n_out quaternions."""
        if self.criterion == "glorot":
            return 1.0 / math.sqrt(2.0 * (n_in + n_out))
        return 1.0 / math.sqrt(2.0 * n_in)

    def __call__(self, shape, dtype=None):
        shape = tuple(int(d) for d in shape)
        if len(shape) != 3 or shape[0] != 4:
            raise ValueError(f"QuaternionInitializer makes [4, n_in, n_out] kernels (r, x, y, "
                             f"z), got shape {shape}")
        dtype = dtype or keras.backend.floatx()
        seed = self.seed if self.seed is not None else python_random.randint(1, 10 ** 9)
        units = shape[1:]
        sigma = self.sigma(*units)
        gaussian4 = keras.random.normal((4,) + units, seed=seed, dtype=dtype)
        modulus = sigma * ops.sqrt(ops.sum(ops.square(gaussian4), axis=0))  # sigma * chi(4)
        phase = keras.random.uniform(units, minval=-math.pi, maxval=math.pi, seed=seed + 1,
                                     dtype=dtype)
        direction = keras.random.normal((3,) + units, seed=seed + 2, dtype=dtype)
        direction = direction / ops.sqrt(ops.sum(ops.square(direction), axis=0, keepdims=True))
        real = modulus * ops.cos(phase)
        imaginary = modulus[None] * direction * ops.sin(phase)[None]
        return ops.concatenate([real[None], imaginary], axis=0)

    def get_config(self):
        return {"criterion": self.criterion, "seed": self.seed}


__all__ = ["CRITERIA", "QuaternionInitializer"]
