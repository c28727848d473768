"""Quaternion multi-head attention (Tay et al. 2019, "Quaternion Attention" and the
self-attention of the "Quaternion Transformer"): quaternion Q, K, V and output projections
and attention scores computed with the Hamilton product. keras-nlp has no quaternion
attention; the layer here subclasses its `CachedMultiHeadAttention` so that it keeps the
key/value cache protocol the Transformer decoders decode with."""

import keras
from keras import ops
from keras_hub.layers import CachedMultiHeadAttention

from lmfactory.models.quaternion_transformer.quaternion_algebra import (
    check_quaternion_width, hamilton_scores)
from lmfactory.models.quaternion_transformer.quaternion_dense import QuaternionDense
from lmfactory.models.quaternion_transformer.quaternion_initializer import (
    QuaternionInitializer)


def _large_negative(dtype):
    """The score given to masked positions (as keras' masked softmax: -1e9, or -3e4 where
    float16 cannot hold it)."""
    return -3e4 if keras.backend.standardize_dtype(dtype) == "float16" else -1e9


@keras.saving.register_keras_serializable(package="lmfactory")
class QuaternionHeadsProjection(keras.layers.Layer):
    """A quaternion projection (`QuaternionDense`, Hamilton product) split into attention heads:
    [B, T, n] -> [B, T, N, head_dim].

    The projection's output is laid out by component, [r | x | y | z] with N * head_dim / 4
    units each; head h takes units h * head_dim / 4 ... of every component, so each head's
    vector is itself a quaternion vector laid out [r | x | y | z] (head_dim / 4 quaternions).

    Args:
        num_heads: N.
        head_dim: the real width of a head (a multiple of 4).
        use_bias, kernel_initializer, bias_initializer: as `QuaternionDense`.
    """

    def __init__(self, num_heads, head_dim, use_bias=True, kernel_initializer=None,
                 bias_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        check_quaternion_width("head_dim", head_dim)
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.use_bias = use_bias
        self.projection = QuaternionDense(
            num_heads * head_dim, use_bias=use_bias, kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer, dtype=self.dtype_policy, name="quaternion")

    def build(self, input_shape):
        self.projection.build(input_shape)

    def call(self, inputs):
        x = self.projection(inputs)
        shape = ops.shape(x)
        x = ops.reshape(x, (shape[0], shape[1], 4, self.num_heads, self.head_dim // 4))
        x = ops.transpose(x, (0, 1, 3, 2, 4))  # [B, T, N, 4, head_dim / 4]
        return ops.reshape(x, (shape[0], shape[1], self.num_heads, self.head_dim))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.num_heads, self.head_dim)

    def get_config(self):
        config = super().get_config()
        config.update({
            "num_heads": self.num_heads, "head_dim": self.head_dim, "use_bias": self.use_bias,
            "kernel_initializer": keras.initializers.serialize(
                self.projection.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.projection.bias_initializer),
        })
        return config


@keras.saving.register_keras_serializable(package="lmfactory")
class QuaternionHeadsOutput(keras.layers.Layer):
    """The output projection of quaternion attention: the heads [B, T, N, head_dim] (each a
    quaternion vector [r | x | y | z]) merged back into one quaternion vector laid out by
    component (the inverse of `QuaternionHeadsProjection`'s split), then a `QuaternionDense`
    to ``units`` (every projection of the block is quaternion).

    Args:
        units: the real output width (a multiple of 4).
        use_bias, kernel_initializer, bias_initializer: as `QuaternionDense`.
    """

    def __init__(self, units, use_bias=True, kernel_initializer=None, bias_initializer="zeros",
                 **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.use_bias = use_bias
        self.projection = QuaternionDense(
            units, use_bias=use_bias, kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer, dtype=self.dtype_policy, name="quaternion")

    def build(self, input_shape):
        self.projection.build(tuple(input_shape[:-2]) + (input_shape[-2] * input_shape[-1],))

    def call(self, inputs):
        shape = ops.shape(inputs)
        num_heads, head_dim = inputs.shape[-2], inputs.shape[-1]
        x = ops.reshape(inputs, (shape[0], shape[1], num_heads, 4, head_dim // 4))
        x = ops.transpose(x, (0, 1, 3, 2, 4))  # [B, T, 4, N, head_dim / 4]
        return self.projection(ops.reshape(x, (shape[0], shape[1], num_heads * head_dim)))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-2]) + (self.units,)

    def get_config(self):
        config = super().get_config()
        config.update({
            "units": self.units, "use_bias": self.use_bias,
            "kernel_initializer": keras.initializers.serialize(
                self.projection.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.projection.bias_initializer),
        })
        return config


@keras.saving.register_keras_serializable(package="lmfactory")
class QuaternionMultiHeadAttention(CachedMultiHeadAttention):
    """Multi-head attention over quaternion vectors (Tay et al. 2019, "Quaternion Attention",
    "Quaternion Transformer").

    * Projections: Q = W_q ⊗ X, K = W_k ⊗ X, V = W_v ⊗ X and the output projection are
      quaternion linear layers (`QuaternionHeadsProjection`, `QuaternionHeadsOutput`; 1/4
      of the real layers' weights, real biases as keras' `MultiHeadAttention`).
    * Scores: the attention score of query t and key s is the Hamilton product of their
      quaternion vectors (`quaternion_algebra.hamilton_scores`), scaled by 1 / sqrt(d_k)
      (d_k = head_dim, the real width of a head, as the real Transformer): four real score
      matrices S_r, S_i, S_j, S_k per head. Following the paper and its released code, each
      component is normalised by its own softmax (the mask applied to each) and weights
      its own component of the values: out_c = softmax(S_c) V_c, c in r, i, j, k, the four
      results laid out again as a quaternion vector [r | x | y | z] per head.
    * Dropout on the four attention distributions, as keras' layer does on its one.
    * The key/value cache (keras-nlp `CachedMultiHeadAttention.call`, [B, 2, S, N,
      head_dim]) works unchanged: the cached keys and values are the projected quaternion
      vectors.

    ``return_attention_scores=True`` (no cache) also returns the mean of the four
    distributions, [B, N, T, S] (each row still sums to 1).

    Arguments: those of keras' `MultiHeadAttention`; ``key_dim`` and ``value_dim`` must be
    multiples of 4 (whole quaternions per head). ``kernel_initializer`` initialises the
    [4, n/4, m/4] quaternion kernels (default: `QuaternionInitializer`, the paper's
    initialisation).
    """

    def __init__(self, num_heads, key_dim, kernel_initializer=None, **kwargs):
        # keras' layer resolves its initialiser argument eagerly ("glorot_uniform" when
        # absent); the quaternion kernels need the quaternion one.
        if kernel_initializer is None:
            kernel_initializer = QuaternionInitializer()
        super().__init__(num_heads=num_heads, key_dim=key_dim,
                         kernel_initializer=kernel_initializer, **kwargs)

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        check_quaternion_width("key_dim", self._key_dim)
        check_quaternion_width("value_dim", self._value_dim)
        common = dict(use_bias=self._use_bias, dtype=self.dtype_policy)

        def initializers():
            return dict(kernel_initializer=self._clone(self._kernel_initializer),
                        bias_initializer=self._clone(self._bias_initializer))

        self._query_dense = QuaternionHeadsProjection(
            self._num_heads, self._key_dim, name="query", **common, **initializers())
        self._query_dense.build(query_shape)
        self._key_dense = QuaternionHeadsProjection(
            self._num_heads, self._key_dim, name="key", **common, **initializers())
        self._key_dense.build(key_shape)
        self._value_dense = QuaternionHeadsProjection(
            self._num_heads, self._value_dim, name="value", **common, **initializers())
        self._value_dense.build(value_shape)
        self._build_attention(len(query_shape) + 1)  # the attention dropout layer
        units = self._output_shape if self._output_shape else query_shape[-1]
        self._output_dense = QuaternionHeadsOutput(
            units, name="attention_output", **common, **initializers())
        self._output_dense.build(tuple(query_shape[:-1]) + (self._num_heads, self._value_dim))
        self.built = True

    @staticmethod
    def _clone(initializer):
        return initializer.__class__.from_config(initializer.get_config())

    def _compute_attention(self, query, key, value, attention_mask=None, training=None,
                           return_attention_scores=False):
        def quaternions(x):  # [B, L, N, d] -> [B, L, N, 4, d / 4]
            shape = ops.shape(x)
            return ops.reshape(x, (shape[0], shape[1], shape[2], 4, x.shape[-1] // 4))

        query = ops.multiply(query, ops.cast(self._inverse_sqrt_key_dim, query.dtype))
        scores = hamilton_scores(quaternions(query), quaternions(key))  # [B, N, 4, T, S]
        if attention_mask is not None:  # [B, T, S], 1 = may attend; every component
            mask = ops.cast(attention_mask, scores.dtype)[:, None, None]
            scores = scores + (1.0 - mask) * _large_negative(scores.dtype)
        distributions = ops.softmax(scores, axis=-1)  # one softmax per component
        weights = self._dropout_layer(distributions, training=training)
        # Component c of the output: softmax(S_c) V_c.
        output = ops.einsum("bncts,bsncd->btncd", weights, quaternions(value))
        shape = ops.shape(output)
        output = ops.reshape(output, (shape[0], shape[1], shape[2], value.shape[-1]))
        return output, ops.mean(distributions, axis=2)

    def call(self, query, value, key=None, attention_mask=None, cache=None,
             cache_update_index=None, training=None, return_attention_scores=False):
        if not return_attention_scores:
            return super().call(query, value, key=key, attention_mask=attention_mask,
                                cache=cache, cache_update_index=cache_update_index,
                                training=training)
        if cache is not None:
            raise ValueError("return_attention_scores is not supported with a cache")
        key = value if key is None else key
        output, scores = self._compute_attention(
            self._query_dense(query), self._key_dense(key), self._value_dense(value),
            attention_mask=attention_mask, training=training)
        return self._output_dense(output), scores


__all__ = ["QuaternionHeadsOutput", "QuaternionHeadsProjection",
           "QuaternionMultiHeadAttention"]
