"""Quaternion Transformer blocks (Tay et al. 2019, "Quaternion Transformer"): keras-nlp's
`TransformerEncoder` / `TransformerDecoder` (their call: residuals, LayerNorm placement,
dropout, masks, the decoder's key/value caches) with every projection quaternion:

* self- and cross-attention: `QuaternionMultiHeadAttention` (quaternion Q, K, V and output
  projections, Hamilton-product scores);
* the position-wise feed-forward network: two `QuaternionDense` layers, the first with the
  split activation, "quaternion FFN".

LayerNorm and the residual connections stay real, as in the paper's released model
(tensor2tensor's layer pre/post-processing unchanged). Only ``build`` differs from
keras-nlp's: it makes the same sub-layers, under the same attribute names, quaternion.
"""

import keras
import keras_nlp

from lmfactory.models.quaternion_transformer.quaternion_algebra import check_quaternion_width
from lmfactory.models.quaternion_transformer.quaternion_attention import (
    QuaternionMultiHeadAttention)
from lmfactory.models.quaternion_transformer.quaternion_dense import QuaternionDense
from lmfactory.models.quaternion_transformer.quaternion_initializer import (
    QuaternionInitializer)


def check_quaternion_sizes(hidden_dim, num_heads, intermediate_dim) -> None:
    """The sizes a quaternion block needs: d_model, d_ff and every head width (d_model / h)
    whole numbers of quaternions (multiples of 4)."""
    check_quaternion_width("hidden_dim", hidden_dim)
    check_quaternion_width("intermediate_dim", intermediate_dim)
    if not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"num_heads must be a positive integer, got {num_heads!r}")
    if hidden_dim % num_heads:
        raise ValueError(f"hidden_dim ({hidden_dim}) must be divisible by num_heads "
                         f"({num_heads})")
    check_quaternion_width("hidden_dim / num_heads (the head width)", hidden_dim // num_heads)


def check_quaternion_config(config: dict) -> None:
    """`check_quaternion_sizes` on a backbone config (constructor kwargs) whose
    ``quaternion`` switch is on (the default); a real-valued config takes any sizes."""
    if config.get("quaternion", True) is True:
        check_quaternion_sizes(config.get("hidden_dim"), config.get("num_heads"),
                               config.get("intermediate_dim"))


def _clone(initializer):
    return initializer.__class__.from_config(initializer.get_config())


def _kernel_initializer(kwargs) -> dict:
    """The quaternion initialiser (Parcollet et al.'s, as the paper) unless the caller
    passes one of its own."""
    if kwargs.get("kernel_initializer") in (None, "glorot_uniform"):
        kwargs = dict(kwargs, kernel_initializer=QuaternionInitializer())
    return kwargs


def _attention(block, name, query_shape, value_shape, **extra):
    hidden_dim = query_shape[-1]
    layer = QuaternionMultiHeadAttention(
        num_heads=block.num_heads, key_dim=hidden_dim // block.num_heads,
        dropout=block.dropout, kernel_initializer=_clone(block.kernel_initializer),
        bias_initializer=_clone(block.bias_initializer), dtype=block.dtype_policy, name=name,
        **extra)
    layer.build(query_shape, value_shape)
    return layer


def _layer_norm(block, name, shape):
    layer = keras.layers.LayerNormalization(epsilon=block.layer_norm_epsilon,
                                            dtype=block.dtype_policy, name=name)
    layer.build(shape)
    return layer


def _dropout(block, name):
    return keras.layers.Dropout(rate=block.dropout, dtype=block.dtype_policy, name=name)


def _build_feedforward(block, shape) -> None:
    """The quaternion FFN: QuaternionDense(d_ff, split activation) then
    QuaternionDense(d_model), its LayerNorm and dropout."""
    block._feedforward_intermediate_dense = QuaternionDense(
        block.intermediate_dim, activation=block.activation,
        kernel_initializer=_clone(block.kernel_initializer),
        bias_initializer=_clone(block.bias_initializer), dtype=block.dtype_policy,
        name="feedforward_intermediate_dense")
    block._feedforward_intermediate_dense.build(shape)
    block._feedforward_output_dense = QuaternionDense(
        shape[-1], kernel_initializer=_clone(block.kernel_initializer),
        bias_initializer=_clone(block.bias_initializer), dtype=block.dtype_policy,
        name="feedforward_output_dense")
    block._feedforward_output_dense.build(tuple(shape[:-1]) + (block.intermediate_dim,))
    block._feedforward_layer_norm = _layer_norm(block, "feedforward_layer_norm", shape)
    block._feedforward_dropout = _dropout(block, "feedforward_dropout")


@keras.saving.register_keras_serializable(package="lmfactory")
class QuaternionTransformerEncoder(keras_nlp.layers.TransformerEncoder):
    """keras-nlp's `TransformerEncoder` with quaternion self-attention and feed-forward
    network (module docstring). Arguments: keras-nlp's; ``kernel_initializer`` defaults to
    `QuaternionInitializer`."""

    def __init__(self, intermediate_dim, num_heads, **kwargs):
        super().__init__(intermediate_dim, num_heads, **_kernel_initializer(kwargs))

    def build(self, inputs_shape):
        check_quaternion_sizes(inputs_shape[-1], self.num_heads, self.intermediate_dim)
        self._self_attention_layer = _attention(self, "self_attention_layer", inputs_shape,
                                                inputs_shape)
        self._self_attention_layer_norm = _layer_norm(self, "self_attention_layer_norm",
                                                      inputs_shape)
        self._self_attention_dropout = _dropout(self, "self_attention_dropout")
        _build_feedforward(self, inputs_shape)
        self.built = True


@keras.saving.register_keras_serializable(package="lmfactory")
class QuaternionTransformerDecoder(keras_nlp.layers.TransformerDecoder):
    """keras-nlp's `TransformerDecoder` with quaternion masked self-attention,
    cross-attention over the encoder output and feed-forward network (module docstring).
    Arguments: keras-nlp's; ``kernel_initializer`` defaults to `QuaternionInitializer`."""

    def __init__(self, intermediate_dim, num_heads, **kwargs):
        super().__init__(intermediate_dim, num_heads, **_kernel_initializer(kwargs))

    def build(self, decoder_sequence_shape, encoder_sequence_shape=None):
        self._decoder_sequence_shape = decoder_sequence_shape
        self._encoder_sequence_shape = encoder_sequence_shape
        check_quaternion_sizes(decoder_sequence_shape[-1], self.num_heads,
                               self.intermediate_dim)
        self._self_attention_layer = _attention(self, "self_attention", decoder_sequence_shape,
                                                decoder_sequence_shape)
        self._self_attention_layer_norm = _layer_norm(self, "self_attention_layer_norm",
                                                      decoder_sequence_shape)
        self._self_attention_dropout = _dropout(self, "self_attention_dropout")
        self._cross_attention_layer = None
        if encoder_sequence_shape:
            self._cross_attention_layer = _attention(
                self, "cross_attention", decoder_sequence_shape, encoder_sequence_shape,
                value_dim=decoder_sequence_shape[-1] // self.num_heads)
            self._cross_attention_layer_norm = _layer_norm(
                self, "cross_attention_layer_norm", decoder_sequence_shape)
            self._cross_attention_dropout = _dropout(self, "cross_attention_dropout")
        _build_feedforward(self, decoder_sequence_shape)
        self.built = True


__all__ = ["QuaternionTransformerDecoder", "QuaternionTransformerEncoder",
           "check_quaternion_config", "check_quaternion_sizes"]
