"""The output layer tied to the input token embedding, computed over folded positions.

Every language-model and masked-LM head of the package whose vocabulary projection is the
transposed token embedding (weight tying: Press & Wolf 2017, "Using the Output Embedding
to Improve Language Models" §3; Inan et al. 2017; GPT-1 §3.1 P(u) = softmax(h_n W_e^T);
BERT's masked-LM output layer, Devlin et al. 2019 Appendix A.1) computes its logits here.

Why folding: keras-nlp's `ReversibleEmbedding(hidden, reverse=True)` multiplies ``hidden``
[B, T, H] by the [H, V] transposed table with a broadcasting `matmul`, whose gradient with
respect to the table is built as one [H, V] partial product per batch row and then summed:
a [B, H, V] intermediate (250 MB for 32 x 20 masked predictions over 30522 tokens, 1.2 GB
for 8 x 1024 positions over 50257 tokens) that made the output layer's backward pass two to
three times as slow as its forward product (docs/benchmarks/report.md, "Tied output
layer"). Folded to a [B * T, H] matrix, the same layer call (same variables, kernels,
dtypes and logits up to float rounding: tests/conformance/test_tied_output.py checks 1e-5)
contracts every position in one [H, V] GEMM, and its two gradients are plain GEMMs too
(a rank-2 `MatMul` whose transposes the graph optimiser folds into the kernel's flags;
the earlier [1, B * T, H] fold ran as a batch-of-one `BatchMatMulV2`, about a fifth slower
forward + backward at BERT-mini's masked-LM shape).
keras-nlp has no folded variant, so this module adds one around its layers:

* `tied_logits(token_embedding, hidden)`: the function;
* `TiedLogits`: a weightless layer calling it (the output layer of a functional model);
* `MaskedLMHead`: keras-nlp's masked-LM head (same weights, same logits) whose output
  projection goes through `tied_logits`.

A task model whose vocabulary logits come from its backbone's token embedding called in
reverse sets the class attribute ``ties_output_embedding = True`` (the conformance test
``tests/conformance/test_tied_output.py`` checks, for every registered pretraining
objective, that the attribute is true exactly when the model's forward pass projects onto
the embedding, and that every such projection is folded, equals the table product and has
the unfolded computation's gradients).
"""

import keras
import keras_nlp
from keras import ops

from lmfactory.models import backend
from lmfactory.models.backend import tf


def tied_logits(token_embedding, hidden, name=None):
    """``token_embedding(hidden, reverse=True)`` with the leading axes of ``hidden`` folded
    into one: logits = h W_e^T over the [V, H] table W_e of the input token embedding (or
    over its separate reverse matrix when the layer has ``tie_weights=False``).

    On a symbolic ``keras.KerasTensor`` (a functional model being built) it returns the
    output of a `TiedLogits` layer named ``name`` instead: a functional model replays the
    ops it recorded with the shapes they were traced with, and the unfolding reshape needs
    the batch's.

    Args:
        token_embedding: a keras-nlp `ReversibleEmbedding`.
        hidden: float [..., H].
        name: the `TiedLogits` layer's name on symbolic input (None = Keras's default).

    Returns:
        logits [..., V], equal to the unfolded call's.
    """
    if isinstance(hidden, keras.KerasTensor):
        return TiedLogits(token_embedding, name=name)(hidden)
    shape = ops.shape(hidden)
    folded = ops.reshape(hidden, (-1, shape[-1]))
    logits = token_embedding(folded, reverse=True)
    return ops.reshape(logits, tuple(shape[:-1]) + (ops.shape(logits)[-1],))


@keras.saving.register_keras_serializable(package="lmfactory")
class TiedLogits(keras.layers.Layer):
    """A language model's output layer: `tied_logits` of the hidden states [..., H] over
    ``token_embedding`` -> logits [..., V]. It has no weights of its own (the table is the
    backbone's), and neither casts its input nor opens an autocast scope
    (``autocast=False``), so the embedding layer computes in the dtypes it did when a model
    called it directly.

    Args:
        token_embedding: the backbone's `ReversibleEmbedding`.
    """

    def __init__(self, token_embedding, **kwargs):
        super().__init__(autocast=False, **kwargs)
        self.token_embedding = token_embedding

    def call(self, hidden):
        return tied_logits(self.token_embedding, hidden)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.token_embedding.input_dim,)

    def get_config(self):
        config = super().get_config()
        config["token_embedding"] = keras.layers.serialize(self.token_embedding)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("token_embedding"), dict):
            config["token_embedding"] = keras.layers.deserialize(config["token_embedding"])
        return cls(**config)


class MaskedLMHead(keras_nlp.layers.MaskedLMHead):
    """keras-nlp's `MaskedLMHead` (same constructor, weights, config and logits) whose
    output projection, tied to the token embedding, runs through `tied_logits`: the
    [B, P, E] transformed vectors at the masked positions are folded to [B * P, E]
    before the embedding layer's reverse call.

    The head is BERT's masked-LM output layer (Devlin et al. 2019 Appendix A.1 and the
    released ``get_masked_lm_output``): the encoder outputs gathered at ``mask_positions``
    go through Dense(E) + activation + LayerNorm, E being the tied embedding's width (the
    hidden size, or ALBERT's factorised embedding size, Lan et al. 2020 §3.1), then the
    transposed token embedding and an output bias. It keeps keras-nlp's class name: Keras
    weight files name a model's layers by it, so weights saved with either head load into
    the other. Without a ``token_embedding`` (an untied head with its own kernel) it is
    keras-nlp's head unchanged.
    """

    def call(self, inputs, mask_positions):
        if not self.token_embedding:
            return super().call(inputs, mask_positions)
        # The encoded tokens at the masked positions: [B, P, H] (keras-nlp's own gather on
        # the TensorFlow backend).
        if backend.is_tensorflow():
            x = tf.gather(inputs, mask_positions, batch_dims=1)
        else:
            x = ops.take_along_axis(inputs, ops.expand_dims(mask_positions, -1), axis=1)
        x = self._intermediate_layer_norm(self._intermediate_dense(x))
        outputs = ops.cast(tied_logits(self.token_embedding, x), self.compute_dtype)
        outputs = outputs + self._bias
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs


__all__ = ["MaskedLMHead", "TiedLogits", "tied_logits"]
