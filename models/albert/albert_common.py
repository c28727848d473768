"""Initialiser and activation shared by the ALBERT layers (Lan et al. 2020).

ALBERT keeps BERT's choices (§3.1 "follow the BERT notation"): weights drawn from a
truncated normal with stddev 0.02 (the released code's `initializer_range`), and GELU
non-linearities. The released ALBERT code computes GELU with the tanh approximation
(Hendrycks & Gimpel 2016, eq. in §2: 0.5x(1 + tanh[sqrt(2/pi)(x + 0.044715x^3)])), which
Hugging Face calls `gelu_new`; Keras' "gelu" string is the exact erf form, so the
approximate one is registered here as its own serialisable activation.
"""

import keras

# Activation names `AlbertBackbone(activation=...)` accepts; "gelu_approximate" is ALBERT's.
ACTIVATIONS = ("gelu_approximate", "gelu")


def albert_kernel_initializer(stddev=0.02):
    """Truncated normal, stddev 0.02 (the released code's `initializer_range`)."""
    return keras.initializers.TruncatedNormal(stddev=stddev)


def clone_initializer(initializer):
    """A fresh copy of ``initializer`` (an unseeded Keras 3 initializer fixes its seed when
    created, so every layer needs its own instance to get different values)."""
    if isinstance(initializer, keras.initializers.Initializer):
        return initializer.__class__.from_config(initializer.get_config())
    return initializer


@keras.saving.register_keras_serializable(package="lmfactory", name="albert_gelu_approximate")
def gelu_approximate(x):
    """GELU, tanh approximation (the released ALBERT's `gelu`; Hugging Face `gelu_new`)."""
    return keras.activations.gelu(x, approximate=True)


def get_activation(name):
    """The activation function for a name of `ACTIVATIONS`."""
    if name == "gelu_approximate":
        return gelu_approximate
    if name == "gelu":
        return keras.activations.gelu  # exact erf form
    raise ValueError(f"ALBERT activation must be one of {ACTIVATIONS}, got {name!r}")
