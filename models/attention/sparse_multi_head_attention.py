"""Multi-head self-attention restricted to a factorised sparse pattern (Child et al. 2019
§4.2-4.3)."""

import keras
import keras_nlp
from keras import ops

from lmfactory.models.attention import sparse_kernels, sparse_patterns

IMPLEMENTATIONS = ("sparse", "masked_dense")


@keras.saving.register_keras_serializable(package="lmfactory")
class SparseMultiHeadAttention(keras_nlp.layers.CachedMultiHeadAttention):
    """Causal multi-head self-attention over a sparse connectivity pattern.

    Child et al. 2019 §4.2: attend(X, S) = (a(x_i, S_i))_{i in {1..n}}, each output
    position i attending only to the keys in its connectivity set S_i, with
    a(x_i, S_i) = softmax((W_q x_i) K_{S_i}^T / sqrt(d)) V_{S_i}. The sets are the strided
    or fixed factorisations of §4.3, or a causal local band (GPT-3's "locally banded"
    layers, Brown et al. 2020 §2.1), or plain causal attention; see `sparse_patterns`.

    keras-nlp lacks this mechanism: its `CachedMultiHeadAttention` (the projections, the
    key/value cache and the dense computation, all reused here) only takes a dense mask.
    This layer adds the pattern and two ways to compute it:

    - ``implementation="masked_dense"``: standard scaled dot-product attention with the
      [T, T] pattern mask; the FLOPs and memory of dense attention.
    - ``implementation="sparse"``: `sparse_kernels.blocked_sparse_attention`, which never
      materialises the T x T scores (memory O(T * (l + T / l)) per head); same outputs.
      (``pattern="dense"`` is ordinary causal attention either way.)

    Cached decoding (``cache`` given) always uses the masked computation over the cache,
    with the pattern evaluated at the query positions ``cache_update_index, ...``, so a
    banded layer only sees its band while generating too.

    Args:
        num_heads, key_dim, value_dim, dropout, use_bias, output_shape,
            kernel_initializer, bias_initializer, ...: as `keras.layers.MultiHeadAttention`
            (`key_dim` is the head size, independent of the model width).
        pattern: "dense", "local", "strided" or "fixed".
        stride: l, the block length / stride (the band width for "local").
        summary: c, the number of summary positions per block for "fixed".
        component: "union" (merged head), "A1", "A2" (one factor, for layers that
            alternate) or "heads" (half the heads on each factor).
        implementation: "sparse" or "masked_dense".

    Call arguments:
        query: [B, T, dim] (self-attention: keys and values come from it, or from
            `value` / `key` of the same length).
        padding_mask: optional [B, S], 1/True on real keys.
        attention_mask: optional extra [B, T, S] mask (masked-dense and cached calls only).
        cache, cache_update_index: as `CachedMultiHeadAttention`; the index is required
            with a cache (it gives the query positions).
        cache_filled: with a cache, True when it already holds the keys/values of the
            query positions (`decoder_cache.cached_block_call` writes them in place): the
            layer then reads the cache without updating it.
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        pattern="dense",
        stride=None,
        summary=1,
        component="union",
        implementation="sparse",
        **kwargs,
    ):
        sparse_patterns.check_pattern(pattern, stride, summary, component)
        if implementation not in IMPLEMENTATIONS:
            raise ValueError(f"Unknown implementation {implementation!r}; known: "
                             f"{IMPLEMENTATIONS}")
        if component == "heads" and num_heads % 2:
            raise ValueError(f"component='heads' needs an even num_heads, got {num_heads}")
        super().__init__(num_heads=num_heads, key_dim=key_dim, **kwargs)
        self.pattern = pattern
        self.stride = stride
        self.summary = summary
        self.component = component
        self.implementation = implementation

    def build(self, query_shape, value_shape=None, key_shape=None):
        super().build(query_shape, value_shape or query_shape, key_shape)

    def pattern_mask(self, query_positions, key_positions):
        """Bool [Tq, Tk] (or [heads, Tq, Tk]) pattern mask at the given positions."""
        return sparse_patterns.sparse_attention_mask(
            query_positions, key_positions, self.pattern, self.stride, self.summary,
            self.component, self._num_heads)

    def _dropout_probs(self, training):
        if not self._dropout:
            return None
        return lambda probs: self._dropout_layer(probs, training=training)

    def call(
        self,
        query,
        value=None,
        key=None,
        padding_mask=None,
        attention_mask=None,
        cache=None,
        cache_update_index=None,
        cache_filled=False,
        training=None,
    ):
        value = query if value is None else value
        key = value if key is None else key
        if cache is not None and cache_update_index is None:
            raise ValueError("SparseMultiHeadAttention needs `cache_update_index` with a "
                             "cache: the pattern depends on the query positions")
        use_sparse = (cache is None and self.implementation == "sparse"
                      and self.pattern != "dense")
        if use_sparse:
            if attention_mask is not None:
                raise ValueError("implementation='sparse' takes a `padding_mask`, not a "
                                 "dense `attention_mask`; use implementation='masked_dense'")
            q = self._query_dense(query)
            k = self._key_dense(key)
            v = self._value_dense(value)
            key_mask = None if padding_mask is None else ops.cast(padding_mask, "bool")
            output = sparse_kernels.blocked_sparse_attention(
                q, k, v, self.pattern, self.stride, self.summary, self.component,
                key_mask=key_mask, dropout_fn=self._dropout_probs(training))
            return self._output_dense(output)

        # Masked dense: the pattern at the query positions (offset while decoding), as a
        # [B or 1, heads or 1, Tq, S] mask for `_compute_attention`.
        query_length = ops.shape(query)[1]
        key_length = ops.shape(cache)[2] if cache is not None else ops.shape(key)[1]
        start = 0 if cache is None else cache_update_index
        query_positions = ops.arange(query_length, dtype="int32") + ops.cast(start, "int32")
        mask = self.pattern_mask(query_positions, ops.arange(key_length, dtype="int32"))
        mask = mask[None] if self.component == "heads" else mask[None, None]
        if padding_mask is not None:
            mask = ops.logical_and(mask, ops.cast(padding_mask, "bool")[:, None, None, :])
        if attention_mask is not None:
            mask = ops.logical_and(mask, ops.cast(attention_mask, "bool")[:, None])
        return super().call(query=query, value=value, key=key, attention_mask=mask,
                            cache=cache,
                            cache_update_index=None if cache_filled else cache_update_index,
                            training=training)

    def _compute_attention(self, query, key, value, attention_mask=None, training=None,
                           return_attention_scores=False):
        """The masked-dense computation (called by `CachedMultiHeadAttention.call` with the
        projected query/key/value): `sparse_kernels.masked_dense_attention`, which gives a
        query with no allowed key a zero output like the sparse kernels do."""
        if return_attention_scores:
            raise ValueError("SparseMultiHeadAttention does not return attention scores")
        mask = attention_mask if attention_mask is not None else ops.ones(
            (ops.shape(query)[1], ops.shape(key)[1]), dtype="bool")
        output = sparse_kernels.masked_dense_attention(
            query, key, value, mask, dropout_fn=self._dropout_probs(training))
        return output, None

    def get_config(self):
        config = super().get_config()
        config.update({
            "pattern": self.pattern,
            "stride": self.stride,
            "summary": self.summary,
            "component": self.component,
            "implementation": self.implementation,
        })
        return config
