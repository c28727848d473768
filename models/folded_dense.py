"""Transformer blocks whose feed-forward Dense layers multiply one [B * T, d] matrix
instead of B [T, d] slices.

keras' `Dense` calls ``matmul(inputs, kernel)`` on the [B, T, d] hidden states; with the
TensorFlow backend that is a broadcasting batch matmul, whose gradient with respect to the
kernel is built as B partial [d, d_ff] products, written out as a [B, d, d_ff] tensor and
then summed over B (in bfloat16, by Eigen's scalar-converting reduction). Folding the
leading axes first, ``reshape(x, [-1, d]) @ kernel``, gives the same products and sums
(the same maths, the same weights) as one GEMM in each direction, with the batch sum
done inside the kernel gradient's GEMM. Profiled on BERT-small training (CPU,
`benchmarks/pretraining.py`), the summed intermediates were about 3% of the step in
float32 and 4% in bfloat16, and the B small GEMMs run below the large one's rate.

keras-nlp's `TransformerEncoder` builds its FFN layers in `build`; the block here lets
it and then gives those two layers the class `FoldedDense`
(a `Dense` that overrides only `call`, so weights, names, configs and saved files are
unchanged). The mechanism is the project's own: keras-nlp has no option for it.
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


def fold_feedforward(block) -> None:
    """Gives the two feed-forward `Dense` layers of a built keras-nlp Transformer block the
    class `FoldedDense` (same object, same weights and configuration)."""
    for name in ("_feedforward_intermediate_dense", "_feedforward_output_dense"):
        layer = getattr(block, name)
        if type(layer) is keras.layers.Dense:
            layer.__class__ = FoldedDense


# Class names kept: a Keras weights file names the blocks of a backbone's list by their
# class, so weights saved with keras-nlp's blocks load into these and back.
@keras.saving.register_keras_serializable(package="lmfactory")
class TransformerEncoder(keras_nlp.layers.TransformerEncoder):
    """keras-nlp's `TransformerEncoder` (Vaswani et al. 2017 §3.1; same arguments, weights
    and outputs) with `FoldedDense` feed-forward layers."""

    def build(self, inputs_shape):
        super().build(inputs_shape)
        fold_feedforward(self)


__all__ = ["FoldedDense", "TransformerEncoder", "fold_feedforward"]
