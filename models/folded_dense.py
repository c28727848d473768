"""Transformer blocks whose feed-forward Dense layers and attention projections multiply
one [B * T, d] matrix instead of B [T, d] slices.

keras' `Dense` calls ``matmul(inputs, kernel)`` on the [B, T, d] hidden states; with the
TensorFlow backend that is a broadcasting batch matmul, whose gradient with respect to the
kernel is built as B partial [d, d_ff] products, written out as a [B, d, d_ff] tensor and
then summed over B (in bfloat16, by Eigen's scalar-converting reduction). Folding the
leading axes first, ``reshape(x, [-1, d]) @ kernel``, gives the same products and sums
(the same maths, the same weights) as one GEMM in each direction, with the batch sum
done inside the kernel gradient's GEMM. Profiled on BERT-small training (CPU,
`benchmarks/pretraining.py`), the summed intermediates were about 3% of the step in
float32 and 4% in bfloat16, and the B small GEMMs run below the large one's rate.

The attention projections of keras' `MultiHeadAttention` (Vaswani et al. 2017 §3.2.2:
Q = x W^Q, K = x W^K, V = x W^V per head, and the output projection W^O of the concatenated
heads) are `EinsumDense` layers with the equations "abc,cde->abde" (x [B, T, d] times the
[d, heads, head_dim] kernel) and "abcd,cde->abe" ([B, T, heads, head_dim] times the
[heads, head_dim, d] kernel). keras' TensorFlow einsum rewrites both as the same
broadcasting `matmul` on [B, T, .] inputs, with the same [B, ., .] kernel-gradient
intermediate summed over B (`FoldedEinsumDense` folds them as `FoldedDense` does).

keras-nlp's `TransformerEncoder` / `TransformerDecoder` build these layers in `build`; the
blocks here let them and then give the feed-forward layers the class `FoldedDense` and the
self-attention's projections the class `FoldedEinsumDense` (subclasses that override only
`call`, so weights, names, configs, checkpoint converters and saved files are unchanged).
The mechanism is the project's own: keras-nlp has no option for it.
"""

import keras
import keras_nlp
from keras import ops


class FoldedDense(keras.layers.Dense):
    """keras' `Dense` computing ``activation(x W + b)`` on inputs of rank > 2 as one
    [prod(leading axes), d] x [d, units] product (module docstring). Rank-2 inputs, LoRA
    and quantised kernels take `Dense.call` unchanged."""

    def call(self, inputs, training=None):
        if len(inputs.shape) <= 2 or self.lora_enabled or self.quantization_mode:
            return super().call(inputs, training=training)
        shape = ops.shape(inputs)
        x = ops.matmul(ops.reshape(inputs, (-1, shape[-1])), self.kernel)
        if self.bias is not None:
            x = ops.add(x, self.bias)
        if self.activation is not None:
            x = self.activation(x)
        return ops.reshape(x, tuple(shape[:-1]) + (self.units,))


def _fold_plan(equation: str):
    """(contracted axes, kernel output axes) of an `EinsumDense` equation of the form
    "FC,CO->FO" (the free axes F of the input, contracted axes C at the end of the input and
    the start of the kernel, output axes O after F), the form that folds to one GEMM; None
    for any other equation."""
    try:
        inputs, output = equation.split("->")
        source, kernel = inputs.split(",")
    except ValueError:
        return None
    if "." in equation:
        return None
    for split in range(1, len(source)):
        free, contracted = source[:split], source[split:]
        if (kernel.startswith(contracted) and output == free + kernel[len(contracted):]
                and len(set(source + kernel)) == len(source) + len(kernel) - len(contracted)):
            return len(contracted), len(kernel) - len(contracted)
    return None


class FoldedEinsumDense(keras.layers.EinsumDense):
    """keras' `EinsumDense` computing an equation "FC,CO->FO" (free input axes F, contracted
    axes C, kernel output axes O; the attention projections' "abc,cde->abde" and
    "abcd,cde->abe") as one [prod(F), prod(C)] x [prod(C), prod(O)] product (module
    docstring), the bias added to the 2-D product (one fused MatMul + BiasAdd) when it spans
    every output axis. Any other equation, LoRA and quantised kernels take
    `EinsumDense.call` unchanged."""

    def call(self, inputs, training=None):
        plan = _fold_plan(self.equation)
        if plan is None or self.lora_enabled or self.quantization_mode:
            return super().call(inputs, training=training)
        contracted, produced = plan
        kernel = self.kernel
        kernel_shape = tuple(kernel.shape)
        depth = 1
        for size in kernel_shape[:contracted]:
            depth *= size
        width = 1
        for size in kernel_shape[contracted:]:
            width *= size
        shape = ops.shape(inputs)
        x = ops.matmul(ops.reshape(inputs, (-1, depth)), ops.reshape(kernel, (depth, width)))
        bias = self.bias
        if bias is not None and tuple(bias.shape) == kernel_shape[contracted:]:
            x = ops.add(x, ops.reshape(bias, (width,)))
            bias = None
        x = ops.reshape(x, tuple(shape[:len(shape) - contracted]) + kernel_shape[contracted:])
        if bias is not None:
            x = ops.add(x, bias)
        if self.activation is not None:
            x = self.activation(x)
        return x


ATTENTION_PROJECTIONS = ("_query_dense", "_key_dense", "_value_dense", "_output_dense")


def fold_feedforward(block) -> None:
    """Gives the two feed-forward `Dense` layers of a built keras-nlp Transformer block the
    class `FoldedDense` and the projections of its self-attention layer the class
    `FoldedEinsumDense` (same objects, same weights and configuration)."""
    for name in ("_feedforward_intermediate_dense", "_feedforward_output_dense"):
        layer = getattr(block, name, None)
        if type(layer) is keras.layers.Dense:
            layer.__class__ = FoldedDense
    attention = getattr(block, "_self_attention_layer", None)
    for name in ATTENTION_PROJECTIONS:
        layer = getattr(attention, name, None)
        if type(layer) is keras.layers.EinsumDense and _fold_plan(layer.equation):
            layer.__class__ = FoldedEinsumDense


# Class names kept: a Keras weights file names the blocks of a backbone's list by their
# class, so weights saved with keras-nlp's blocks load into these and back.
@keras.saving.register_keras_serializable(package="lmfactory")
class TransformerEncoder(keras_nlp.layers.TransformerEncoder):
    """keras-nlp's `TransformerEncoder` (Vaswani et al. 2017 §3.1; same arguments, weights
    and outputs) with `FoldedDense` feed-forward layers and `FoldedEinsumDense` attention
    projections."""

    def build(self, inputs_shape):
        super().build(inputs_shape)
        fold_feedforward(self)


@keras.saving.register_keras_serializable(package="lmfactory")
class TransformerDecoder(keras_nlp.layers.TransformerDecoder):
    """keras-nlp's `TransformerDecoder` (Vaswani et al. 2017 §3.1; same arguments, weights,
    outputs and cached-decoding call) with `FoldedDense` feed-forward layers and
    `FoldedEinsumDense` self-attention projections (the cross-attention, when built, is
    keras-nlp's)."""

    def build(self, decoder_sequence_shape, encoder_sequence_shape=None):
        super().build(decoder_sequence_shape, encoder_sequence_shape)
        fold_feedforward(self)


__all__ = ["FoldedDense", "FoldedEinsumDense", "TransformerDecoder", "TransformerEncoder",
           "fold_feedforward"]
