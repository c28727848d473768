"""T5's multi-head attention (Raffel et al. 2020, §2.1; mesh-tensorflow / the released
T5 code): no biases in any projection, no 1/sqrt(d_k) scaling of the logits (the
reference folds it into the query weights' initialisation, std (d_model * d_kv)^-0.5),
and a relative position bias added to the logits.

keras-nlp's `CachedMultiHeadAttention` (Keras' `MultiHeadAttention`) always scales the
query by 1/sqrt(key_dim) and has no additive logit bias, so the layer is written here.
The inner width is ``num_heads * head_dim``, which T5.1.1 sets apart from d_model.
"""

import keras
from keras import ops

from lmfactory.models import decoder_cache

_MASKED = -1e9


class T5Attention(keras.layers.Layer):
    """Attention of queries over keys/values, with an additive bias and a boolean mask.

    Args:
        hidden_dim: d_model (the input and output width).
        num_heads, head_dim: heads and their width d_kv.
        dropout: dropout on the attention weights.
    """

    def __init__(self, hidden_dim, num_heads, head_dim, dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.hidden_dim, self.num_heads, self.head_dim = int(hidden_dim), int(num_heads), \
            int(head_dim)
        self.dropout = float(dropout)
        inner = self.num_heads * self.head_dim
        normal = keras.initializers.RandomNormal

        def dense(units, stddev, name):
            return keras.layers.Dense(units, use_bias=False, kernel_initializer=normal(
                stddev=stddev), dtype=self.dtype_policy, name=name)

        # The reference's initialisation (mesh-tensorflow / T5): the query absorbs the
        # 1/sqrt(d_kv) the logits are not scaled by.
        self.query_dense = dense(inner, (self.hidden_dim * self.head_dim) ** -0.5, "query")
        self.key_dense = dense(inner, self.hidden_dim ** -0.5, "key")
        self.value_dense = dense(inner, self.hidden_dim ** -0.5, "value")
        self.output_dense = dense(self.hidden_dim, inner ** -0.5, "output")
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)


    def split_heads(self, x):
        """[B, T, heads * d_kv] -> [B, T, heads, d_kv]."""
        shape = ops.shape(x)
        return ops.reshape(x, (shape[0], shape[1], self.num_heads, self.head_dim))

    def key_values(self, x):
        """The keys and values of ``x`` [B, T, d_model], each [B, T, heads, d_kv]."""
        return self.split_heads(self.key_dense(x)), self.split_heads(self.value_dense(x))

    def call(self, query, key_value=None, bias=None, attention_mask=None, cache=None,
             cache_index=None, training=False):
        """Attention of ``query`` [B, Tq, d_model] over ``key_value`` [B, Tk, d_model]
        (default: the query itself).

        bias: added to the logits, broadcastable to [B, heads, Tq, Tk].
        attention_mask: bool, broadcastable to [B, Tq, Tk] (True: may attend).
        cache: (keys, values) [B, L, heads, d_kv]. With ``cache_index``, the keys/values of
            ``query`` are written at positions ``cache_index, ...`` and attention runs over
            the whole cache (self-attention while decoding); without it the cache is
            static keys/values (cross-attention) and ``key_value`` is not used.
        Returns: the output [B, Tq, d_model], and the (updated) cache when one was given.
        """
        q = self.split_heads(self.query_dense(query))
        if cache is not None:
            keys, values = cache
            if cache_index is not None:
                new_keys, new_values = self.key_values(query)
                start = [0, cache_index, 0, 0]
                keys = ops.slice_update(keys, start, ops.cast(new_keys, keys.dtype))
                values = ops.slice_update(values, start, ops.cast(new_values, values.dtype))
        else:
            keys, values = self.key_values(query if key_value is None else key_value)
        logits = ops.einsum("bqhd,bkhd->bhqk", q, keys)  # no 1/sqrt(d_kv) (see above)
        if bias is not None:
            logits = logits + ops.cast(bias, logits.dtype)
        if attention_mask is not None:
            logits = ops.where(ops.cast(attention_mask, "bool")[:, None], logits,
                               ops.cast(_MASKED, logits.dtype))
        weights = ops.softmax(ops.cast(logits, "float32"), axis=-1)
        weights = self.dropout_layer(ops.cast(weights, self.compute_dtype), training=training)
        attended = ops.einsum("bhqk,bkhd->bqhd", weights, values)
        shape = ops.shape(attended)
        output = self.output_dense(ops.reshape(
            attended, (shape[0], shape[1], self.num_heads * self.head_dim)))
        if cache is not None:
            return output, (keys, values)
        return output

    def attend_over_buffers(self, query, keys, values, index, bias=None,
                            attention_mask=None, training=False):
        """Self-attention while decoding over heads-first buffers (models/decoder_cache.py):
        writes the keys/values of ``query`` [B, n, d_model] (positions ``index, ...``) into
        ``keys`` / ``values`` [B, heads, max_length, d_kv] in place, then attends over every
        buffered position with ``bias`` [1, heads, n, max_length] and ``attention_mask``
        (bool, [B or 1, n, max_length]): the arithmetic of `call`, the two products as
        batched matmuls on the buffers. Returns (output [B, n, d_model], (keys, values))."""
        new_keys, new_values = self.key_values(query)
        keys = decoder_cache.write_positions(keys, decoder_cache.heads_first(new_keys), index)
        values = decoder_cache.write_positions(values, decoder_cache.heads_first(new_values),
                                               index)
        q = decoder_cache.heads_first(self.split_heads(self.query_dense(query)))
        logits = decoder_cache.buffer_logits(q, keys)  # no 1/sqrt(d_kv) (see above)
        if bias is not None:
            logits = logits + ops.cast(bias, logits.dtype)
        if attention_mask is not None:
            logits = ops.where(ops.cast(attention_mask, "bool")[:, None], logits,
                               ops.cast(_MASKED, logits.dtype))
        weights = ops.softmax(ops.cast(logits, "float32"), axis=-1)
        weights = self.dropout_layer(ops.cast(weights, self.compute_dtype), training=training)
        attended = decoder_cache.buffer_mix(weights, values)  # [B, n, heads, d_kv]
        shape = ops.shape(attended)
        output = self.output_dense(ops.reshape(
            attended, (shape[0], shape[1], self.num_heads * self.head_dim)))
        return output, (keys, values)

    def get_config(self):
        config = super().get_config()
        config.update({"hidden_dim": self.hidden_dim, "num_heads": self.num_heads,
                       "head_dim": self.head_dim, "dropout": self.dropout})
        return config
