"""A T5 encoder or decoder stack (Raffel et al. 2020, §2.1): dropout on the embedded
input, the blocks (`T5TransformerLayer`), a final RMS norm and dropout ("Dropout is
applied ... at the input and output of the entire stack").

The relative position bias (`T5RelativePositionBias`) is computed once per stack (the
reference computes it in the stack's first layer and hands it on) and the same bias is
added in every layer's self-attention: one set of weights per stack, shared across
layers (§2.1). Bidirectional buckets in the encoder, unidirectional in the decoder, none
in cross-attention.
"""

import keras
from keras import ops

from lmfactory.models import decoder_cache
from lmfactory.models.t5.t5_relative_position_bias import T5RelativePositionBias
from lmfactory.models.t5.t5_transformer_layer import T5TransformerLayer


class T5Stack(keras.layers.Layer):
    """The blocks of the encoder, or of the decoder (``is_decoder``: causal self-attention
    with unidirectional buckets, plus cross-attention).

    Args:
        num_layers, hidden_dim, intermediate_dim, num_heads, head_dim, feed_forward,
            dropout, layer_norm_epsilon: as `T5TransformerLayer`.
        num_buckets, max_distance: the relative position buckets (32, 128).
        is_decoder: the decoder stack.
    """

    def __init__(self, num_layers, hidden_dim, intermediate_dim, num_heads, head_dim,
                 feed_forward="relu", dropout=0.1, layer_norm_epsilon=1e-6, num_buckets=32,
                 max_distance=128, is_decoder=False, **kwargs):
        super().__init__(**kwargs)
        self.num_layers, self.hidden_dim = int(num_layers), int(hidden_dim)
        self.intermediate_dim, self.num_heads = int(intermediate_dim), int(num_heads)
        self.head_dim, self.feed_forward = int(head_dim), feed_forward
        self.dropout, self.layer_norm_epsilon = float(dropout), float(layer_norm_epsilon)
        self.num_buckets, self.max_distance = int(num_buckets), int(max_distance)
        self.is_decoder = bool(is_decoder)
        policy = self.dtype_policy
        self.relative_position_bias = T5RelativePositionBias(
            self.num_heads, bidirectional=not self.is_decoder, num_buckets=self.num_buckets,
            max_distance=self.max_distance,
            kernel_initializer=keras.initializers.RandomNormal(stddev=self.hidden_dim ** -0.5),
            dtype=policy, name="relative_position_bias")
        self.transformer_layers = [
            T5TransformerLayer(self.hidden_dim, self.intermediate_dim, self.num_heads,
                               self.head_dim, feed_forward, self.dropout,
                               self.layer_norm_epsilon, self.is_decoder, dtype=policy,
                               name=f"layer_{i}")
            for i in range(self.num_layers)]
        self.final_layer_norm = keras.layers.RMSNormalization(
            epsilon=self.layer_norm_epsilon, dtype=policy, name="final_layer_norm")
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=policy)

    def call(self, x, padding_mask, encoder_outputs=None, encoder_padding_mask=None,
             training=False):
        """Embedded tokens x [B, T, d_model] -> the stack's output [B, T, d_model]."""
        length = ops.shape(x)[1]
        positions = ops.arange(length, dtype="int32")
        bias = self.relative_position_bias(positions, positions)  # shared by every layer
        mask = ops.cast(padding_mask, "bool")[:, None, :]  # [B, 1, T]: real keys
        if self.is_decoder:
            mask = ops.logical_and(mask, (positions[None, :] <= positions[:, None])[None])
            cross_mask = ops.cast(encoder_padding_mask, "bool")[:, None, :]
        else:
            cross_mask = None
        x = self.dropout_layer(x, training=training)
        for layer in self.transformer_layers:
            x, _ = layer(x, bias, mask, encoder_outputs=encoder_outputs,
                         cross_attention_mask=cross_mask, training=training)
        return self.dropout_layer(self.final_layer_norm(x), training=training)

    def cross_attention_cache(self, encoder_outputs):
        """The keys / values of the encoder outputs in every layer: [B, L, 2, S, heads,
        d_kv] (computed once per source, a static leaf of the decoding state)."""
        per_layer = [ops.stack(layer.cross_attention.key_values(encoder_outputs), axis=1)
                     for layer in self.transformer_layers]
        return ops.stack(per_layer, axis=1)

    def decode(self, x, self_attention_cache, cross_attention_cache, encoder_padding_mask,
               index):
        """A decoding step: embedded tokens x [B, n, d_model] at positions ``index``, ...
        -> (output [B, n, d_model], the updated self-attention cache: per layer (keys,
        values) [B, heads, max_length, d_kv]). Each layer writes the keys/values of these
        positions in place and attends over its whole buffers
        (`decoder_cache.cached_block_call`, `T5TransformerLayer.call_with_buffers`); the
        bias is that of the positions ``index + i`` against every buffered position, and
        keys after a query are masked (causal)."""
        n = ops.shape(x)[1]
        queries = ops.arange(n, dtype="int32") + ops.cast(index, "int32")
        keys = ops.arange(ops.shape(self_attention_cache[0][0])[2], dtype="int32")
        bias = self.relative_position_bias(queries, keys)
        mask = (keys[None, :] <= queries[:, None])[None]  # [1, n, max_length]
        cross_mask = ops.cast(encoder_padding_mask, "bool")[:, None, :]
        updated = []
        for i, (layer, layer_state) in enumerate(zip(self.transformer_layers,
                                                     self_attention_cache)):
            cross = (cross_attention_cache[:, i, 0], cross_attention_cache[:, i, 1])
            x, layer_state = decoder_cache.cached_block_call(
                layer, x, layer_state, index, self_attention_bias=bias,
                self_attention_mask=mask, cross_attention_mask=cross_mask,
                cross_attention_cache=cross)
            updated.append(layer_state)
        self_attention_cache = tuple(updated)
        return self.final_layer_norm(x), self_attention_cache

    def get_config(self):
        config = super().get_config()
        config.update({"num_layers": self.num_layers, "hidden_dim": self.hidden_dim,
                       "intermediate_dim": self.intermediate_dim, "num_heads": self.num_heads,
                       "head_dim": self.head_dim, "feed_forward": self.feed_forward,
                       "dropout": self.dropout, "layer_norm_epsilon": self.layer_norm_epsilon,
                       "num_buckets": self.num_buckets, "max_distance": self.max_distance,
                       "is_decoder": self.is_decoder})
        return config
