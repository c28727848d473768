"""One T5 block (Raffel et al. 2020, §2.1): "Layer normalization is applied to the input
of each subcomponent. We use a simplified version of layer normalization where the
activations are only rescaled and no additive bias is applied. After layer
normalization, a residual skip connection adds each subcomponent's input to its output.
Dropout is applied within the feed-forward network, on the skip connection, on the
attention weights, and at the input and output of the entire stack."

So each sub-layer is x + dropout(f(RMSNorm(x))) (pre-norm): self-attention, then in the
decoder cross-attention over the encoder output (no position bias, §2.1), then the
feed-forward network. The norm is Keras' public `RMSNormalization` (scale only: no bias,
no mean subtraction). keras-nlp's `TransformerEncoder` / `TransformerDecoder` have biased
projections, mean-centring LayerNorm and no additive attention bias, so the block is
written here.
"""

import keras

from lmfactory.models.t5.t5_attention import T5Attention
from lmfactory.models.t5.t5_feed_forward import T5FeedForward


class T5TransformerLayer(keras.layers.Layer):
    """A pre-norm T5 encoder block, or a decoder block (``is_decoder``, with
    cross-attention).

    Args:
        hidden_dim, intermediate_dim, num_heads, head_dim: d_model, d_ff, heads, d_kv.
        feed_forward: ``"relu"`` (T5) or ``"gated-gelu"`` (T5.1.1).
        dropout: the rate of every dropout in the block.
        layer_norm_epsilon: the RMS norm's epsilon (1e-6 in the reference).
        is_decoder: add the cross-attention sub-layer.
    """

    def __init__(self, hidden_dim, intermediate_dim, num_heads, head_dim,
                 feed_forward="relu", dropout=0.1, layer_norm_epsilon=1e-6,
                 is_decoder=False, **kwargs):
        super().__init__(**kwargs)
        self.hidden_dim, self.intermediate_dim = int(hidden_dim), int(intermediate_dim)
        self.num_heads, self.head_dim = int(num_heads), int(head_dim)
        self.feed_forward_kind, self.dropout = feed_forward, float(dropout)
        self.layer_norm_epsilon, self.is_decoder = float(layer_norm_epsilon), bool(is_decoder)
        policy = self.dtype_policy

        def norm(name):
            return keras.layers.RMSNormalization(epsilon=self.layer_norm_epsilon,
                                                 dtype=policy, name=name)

        def attention(name):
            return T5Attention(self.hidden_dim, self.num_heads, self.head_dim,
                               dropout=self.dropout, dtype=policy, name=name)

        self.self_attention_layer_norm = norm("self_attention_layer_norm")
        self.self_attention = attention("self_attention")
        if self.is_decoder:
            self.cross_attention_layer_norm = norm("cross_attention_layer_norm")
            self.cross_attention = attention("cross_attention")
        self.feed_forward_layer_norm = norm("feed_forward_layer_norm")
        self.feed_forward = T5FeedForward(self.hidden_dim, self.intermediate_dim,
                                          feed_forward, dropout=self.dropout, dtype=policy,
                                          name="feed_forward")
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=policy)

    def call_with_buffers(self, x, keys, values, index, **kwargs):
        """The layer at positions ``index, ...`` over its self-attention buffers ``keys`` /
        ``values`` [B, heads, max_length, d_kv] (`decoder_cache.cached_block_call`): writes
        the keys/values of these positions there and attends over every buffered position
        (`T5Attention.attend_over_buffers`); ``kwargs`` as `call` (the bias and mask over
        the max_length positions). Returns (x, keys, values)."""
        index = keras.ops.convert_to_tensor(index, "int32")  # a tensor, as the buffers
        x, (keys, values) = self(x, self_attention_buffers=(keys, values, index), **kwargs)
        return x, keys, values

    def call(self, x, self_attention_bias, self_attention_mask, encoder_outputs=None,
             cross_attention_mask=None, self_attention_cache=None, cache_index=None,
             cross_attention_cache=None, self_attention_buffers=None, training=False):
        """x [B, T, d_model] -> (x, the updated self-attention cache or None).

        self_attention_bias: [1, heads, T, Tk] (the stack's shared relative bias);
        self_attention_mask: bool [B or 1, T, Tk]; encoder_outputs [B, S, d_model] and
        cross_attention_mask bool [B, 1, S] (decoder); with ``self_attention_cache`` (keys,
        values [B, L, heads, d_kv]) and ``cache_index`` the decoding step writes its keys /
        values there; with ``self_attention_buffers`` (keys, values [B, heads, max_length,
        d_kv], index) it does so in the decoding buffers (`call_with_buffers`);
        ``cross_attention_cache`` holds the encoder's keys / values.
        """
        normed = self.self_attention_layer_norm(x)
        if self_attention_buffers is not None:
            attended, self_attention_cache = self.self_attention.attend_over_buffers(
                normed, *self_attention_buffers, bias=self_attention_bias,
                attention_mask=self_attention_mask, training=training)
        elif self_attention_cache is not None:
            attended, self_attention_cache = self.self_attention(
                normed, bias=self_attention_bias, attention_mask=self_attention_mask,
                cache=self_attention_cache, cache_index=cache_index, training=training)
        else:
            attended = self.self_attention(normed, bias=self_attention_bias,
                                           attention_mask=self_attention_mask,
                                           training=training)
        x = x + self.dropout_layer(attended, training=training)
        if self.is_decoder:
            normed = self.cross_attention_layer_norm(x)
            if cross_attention_cache is not None:
                attended, _ = self.cross_attention(normed, attention_mask=cross_attention_mask,
                                                   cache=cross_attention_cache,
                                                   training=training)
            else:
                attended = self.cross_attention(normed, encoder_outputs,
                                                attention_mask=cross_attention_mask,
                                                training=training)
            x = x + self.dropout_layer(attended, training=training)
        x = x + self.dropout_layer(self.feed_forward(self.feed_forward_layer_norm(x),
                                                     training=training), training=training)
        return x, self_attention_cache

    def get_config(self):
        config = super().get_config()
        config.update({"hidden_dim": self.hidden_dim, "intermediate_dim": self.intermediate_dim,
                       "num_heads": self.num_heads, "head_dim": self.head_dim,
                       "feed_forward": self.feed_forward_kind, "dropout": self.dropout,
                       "layer_norm_epsilon": self.layer_norm_epsilon,
                       "is_decoder": self.is_decoder})
        return config
