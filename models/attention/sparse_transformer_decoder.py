"""A Transformer decoder block whose self-attention follows a sparse pattern."""

import keras

from lmfactory.models.attention import sparse_patterns
from lmfactory.models.attention.sparse_multi_head_attention import (
    IMPLEMENTATIONS,
    SparseMultiHeadAttention,
)


def _clone(initializer):
    """A fresh copy of a Keras initializer, so that no two kernels share one."""
    return keras.initializers.get(keras.initializers.serialize(initializer))


@keras.saving.register_keras_serializable(package="lmfactory")
class SparseTransformerDecoder(keras.layers.Layer):
    """Decoder-only Transformer block (self-attention + MLP, residual connections) with
    `SparseMultiHeadAttention`.

    The block is keras-nlp's `TransformerDecoder` without cross-attention: with
    ``normalize_first=True`` (the default) x + Attn(LN(x)) then x + MLP(LN(x)), the
    pre-activation residual block of GPT-2 (Radford et al. 2019 §2.3) and of the Sparse
    Transformer (Child et al. 2019 §5.2); otherwise LayerNorm after each residual (Vaswani
    et al. 2017). Its sublayers carry keras-nlp's names (`self_attention`,
    `self_attention_layer_norm`, `feedforward_intermediate_dense`,
    `feedforward_output_dense`, `feedforward_layer_norm`).

    keras-nlp's `TransformerDecoder` cannot be reused because it lacks two mechanisms:
    a sparse connectivity pattern in its self-attention (it only takes a dense mask), and a
    head size other than hidden_dim // num_heads (GPT-3 Table 2.1 lists d_head = 128 with
    24 heads for d_model = 2048, and d_model = 5140 with 40 heads of 128).

    Args:
        intermediate_dim: MLP inner size.
        num_heads: attention heads.
        head_dim: size of each head (default hidden_dim // num_heads); the attention output
            is projected back to hidden_dim.
        pattern, stride, summary, component, implementation: the attention pattern, see
            `SparseMultiHeadAttention`.
        dropout: dropout on attention probabilities and on both residual branches.
        activation: MLP activation.
        layer_norm_epsilon: LayerNorm epsilon.
        kernel_initializer, bias_initializer: for every dense and attention projection.
        normalize_first: pre-LN (True) or post-LN (False).

    Call arguments (named as keras-nlp's `TransformerDecoder`'s, so the block drops into a
    decoder-only stack written for it):
        decoder_sequence: [B, T, hidden_dim].
        decoder_padding_mask: optional [B, T] (1 on real tokens).
        self_attention_cache: optional [B, 2, S, num_heads, head_dim] key/value cache, with
            `self_attention_cache_update_index` (the position of decoder_sequence[:, 0]);
            the call then returns (output, updated cache).
        self_attention_cache_filled: True when the cache already holds the keys/values of
            these positions (see `call_with_filled_cache`).
    """

    def __init__(
        self,
        intermediate_dim,
        num_heads,
        head_dim=None,
        pattern="dense",
        stride=None,
        summary=1,
        component="union",
        implementation="sparse",
        dropout=0.0,
        activation="gelu",
        layer_norm_epsilon=1e-5,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        normalize_first=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.intermediate_dim = intermediate_dim
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.pattern = pattern
        self.stride = stride
        self.summary = summary
        self.component = component
        self.implementation = implementation
        self.dropout = dropout
        self.activation = keras.activations.get(activation)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.normalize_first = normalize_first
        self.supports_masking = True

        # Fail at construction on a bad pattern (the attention layer is made in build()).
        sparse_patterns.check_pattern(pattern, stride, summary, component)
        if implementation not in IMPLEMENTATIONS:
            raise ValueError(f"Unknown implementation {implementation!r}; known: "
                             f"{IMPLEMENTATIONS}")
        if component == "heads" and num_heads % 2:
            raise ValueError(f"component='heads' needs an even num_heads, got {num_heads}")
        if head_dim is not None and (not isinstance(head_dim, int) or head_dim < 1):
            raise ValueError(f"head_dim must be a positive integer or None, got {head_dim!r}")

    def build(self, input_shape):
        hidden_dim = input_shape[-1]
        head_dim = self.head_dim or hidden_dim // self.num_heads
        if head_dim < 1:
            raise ValueError(f"hidden_dim {hidden_dim} is smaller than num_heads "
                             f"{self.num_heads}; pass head_dim")
        self._self_attention_layer = SparseMultiHeadAttention(
            num_heads=self.num_heads,
            key_dim=head_dim,
            pattern=self.pattern,
            stride=self.stride,
            summary=self.summary,
            component=self.component,
            implementation=self.implementation,
            dropout=self.dropout,
            kernel_initializer=_clone(self.kernel_initializer),
            bias_initializer=_clone(self.bias_initializer),
            dtype=self.dtype_policy,
            name="self_attention",
        )
        self._self_attention_layer.build(input_shape, input_shape)

        def layer_norm(name):
            layer = keras.layers.LayerNormalization(
                epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name)
            layer.build(input_shape)
            return layer

        self._self_attention_layer_norm = layer_norm("self_attention_layer_norm")
        self._self_attention_dropout = keras.layers.Dropout(
            self.dropout, dtype=self.dtype_policy, name="self_attention_dropout")
        self._feedforward_layer_norm = layer_norm("feedforward_layer_norm")
        self._feedforward_intermediate_dense = keras.layers.Dense(
            self.intermediate_dim,
            activation=self.activation,
            kernel_initializer=_clone(self.kernel_initializer),
            bias_initializer=_clone(self.bias_initializer),
            dtype=self.dtype_policy,
            name="feedforward_intermediate_dense",
        )
        self._feedforward_intermediate_dense.build(input_shape)
        self._feedforward_output_dense = keras.layers.Dense(
            hidden_dim,
            kernel_initializer=_clone(self.kernel_initializer),
            bias_initializer=_clone(self.bias_initializer),
            dtype=self.dtype_policy,
            name="feedforward_output_dense",
        )
        self._feedforward_output_dense.build(tuple(input_shape[:-1]) + (self.intermediate_dim,))
        self._feedforward_dropout = keras.layers.Dropout(
            self.dropout, dtype=self.dtype_policy, name="feedforward_dropout")
        self.built = True

    def call_with_filled_cache(self, decoder_sequence, cache, index):
        """The block at positions ``index, ...`` over ``cache`` [B, 2, S, num_heads,
        head_dim], which already holds their keys and values (the hook of
        `decoder_cache.cached_block_call`): (output, cache)."""
        return self(decoder_sequence, self_attention_cache=cache,
                    self_attention_cache_update_index=index, self_attention_cache_filled=True)

    def call(self, decoder_sequence, decoder_padding_mask=None, self_attention_cache=None,
             self_attention_cache_update_index=None, self_attention_cache_filled=False,
             training=None):
        cache = self_attention_cache
        x = decoder_sequence
        residual = x
        if self.normalize_first:
            x = self._self_attention_layer_norm(x)
        attention = self._self_attention_layer(
            x, padding_mask=decoder_padding_mask, cache=cache,
            cache_update_index=self_attention_cache_update_index,
            cache_filled=self_attention_cache_filled, training=training)
        if cache is not None:
            attention, cache = attention
        x = residual + self._self_attention_dropout(attention, training=training)
        if not self.normalize_first:
            x = self._self_attention_layer_norm(x)

        residual = x
        if self.normalize_first:
            x = self._feedforward_layer_norm(x)
        x = self._feedforward_output_dense(self._feedforward_intermediate_dense(x))
        x = residual + self._feedforward_dropout(x, training=training)
        if not self.normalize_first:
            x = self._feedforward_layer_norm(x)
        return x if cache is None else (x, cache)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({
            "intermediate_dim": self.intermediate_dim,
            "num_heads": self.num_heads,
            "head_dim": self.head_dim,
            "pattern": self.pattern,
            "stride": self.stride,
            "summary": self.summary,
            "component": self.component,
            "implementation": self.implementation,
            "dropout": self.dropout,
            "activation": keras.activations.serialize(self.activation),
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            "normalize_first": self.normalize_first,
        })
        return config
