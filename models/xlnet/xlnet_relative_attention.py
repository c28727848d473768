"""XLNet's two-stream relative self-attention (Yang et al. 2019 §2.3, §2.4, §2.5).

keras-nlp has no layer for this mechanism (its public `CachedMultiHeadAttention` has neither
relative positions nor two streams), so it is written here. One layer computes both
streams of §2.3 with the same projections:

* the content stream h_z(t) attends with query h_z(t) (it may see itself);
* the query stream g_z(t) attends with query g_z(t) to the content of the context only
  (never its own content); keys and values are always the content stream (and memory).

Scores follow Transformer-XL (Dai et al. 2019 §3.3), which §2.4 integrates, plus the
relative segment term of §2.5:

    a_ij = (q_i + u)·k_j  +  shift((q_i + v)·W_r R)_ij  +  (q_i + b)·s_ij

with the global content bias u (`r_w_bias`), the global position bias v (`r_r_bias`), the
sinusoidal relative encodings R of distances (i + M) - j (M = memory length) and the
relative shift (`relative_shift`), and the segment bias b (`r_s_bias`) with s_ij one of two
learned vectors `segment_embedding[0]` (same segment) or `[1]` (different segments). Scores
are scaled by 1/sqrt(d_head), then masked, softmaxed, dropped out; the output projection,
dropout, residual and LayerNorm follow (post-LN, as the reference code).
"""

import keras
from keras import ops

MASKED_SCORE = -1e30  # the reference subtracts 1e30 from disallowed scores


def relative_shift(scores, key_length):
    """Transformer-XL's relative shift (Dai et al. 2019, Appendix B).

    ``scores`` [B, n, T, R] hold, in column r, the score of relative distance
    ``key_length - r`` (R = key_length + T encodings, distances key_length .. -T + 1).
    Returns [B, n, T, key_length] whose entry [i, j] is the score of distance
    ``(i + M) - j`` (M = key_length - T, the memory), by the reshape trick: view the last
    two axes as [R, T], drop the first row, view as [T, R - 1] and keep key_length columns.
    """
    shape = ops.shape(scores)
    batch, heads, length, positions = shape[0], shape[1], shape[2], shape[3]
    shifted = ops.reshape(scores, (batch, heads, positions, length))[:, :, 1:, :]
    shifted = ops.reshape(shifted, (batch, heads, length, positions - 1))
    return shifted[:, :, :, :key_length]


@keras.saving.register_keras_serializable(package="lmfactory")
class XLNetTwoStreamAttention(keras.layers.Layer):
    """Two-stream relative multi-head attention with post-LN (see the module docstring).

    Weights (the reference's names and shapes): `q`, `k`, `v`, `o`, `r` [hidden, heads,
    head_dim]; `r_w_bias`, `r_r_bias`, `r_s_bias` [heads, head_dim]; `segment_embedding`
    [2, heads, head_dim]; `layer_norm`. All initialised N(0, 0.02) (`initializer_range`).

    Call arguments:
        content: h [B, T, H]. query: g [B, K, H] or None (content stream only).
        content_allowed, query_allowed: float [B, T, M + T], 1 where position i may attend
            to key j (`xlnet_attention_inputs`).
        position_encoding: [B, M + 2T, H] sinusoids of distances M + T .. -T + 1.
        segment_matrix: float [B, T, M + T], 1 where i and j lie in different segments.
        memory: [B, M, H] or None, the previous segment's content (no gradient).
        target_mapping: [B, K, T] or None: row k is the one-hot position the k-th query
            predicts (query [B, T, H] without it).
    Returns the new content [B, T, H], or (content, query) when a query is given.
    """

    def __init__(self, hidden_dim, num_heads, head_dim, dropout=0.0, layer_norm_epsilon=1e-12,
                 initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.hidden_dim = int(hidden_dim)
        self.num_heads = int(num_heads)
        self.head_dim = int(head_dim)
        self.dropout = float(dropout)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.initializer_range = float(initializer_range)
        self.scale = 1.0 / self.head_dim ** 0.5
        self.probs_dropout = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        self.output_dropout = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm")

    def build(self, *args, **kwargs):
        hidden = self.hidden_dim
        init = keras.initializers.RandomNormal(stddev=self.initializer_range)
        shape = (hidden, self.num_heads, self.head_dim)
        for name in ("q", "k", "v", "o", "r"):
            setattr(self, name, self.add_weight(name=name, shape=shape, initializer=init))
        for name in ("r_w_bias", "r_r_bias", "r_s_bias"):
            setattr(self, name, self.add_weight(name=name, shape=(self.num_heads,
                                                                  self.head_dim),
                                                initializer=init))
        self.segment_embedding = self.add_weight(
            name="segment_embedding", shape=(2, self.num_heads, self.head_dim),
            initializer=init)
        self.layer_norm.build((None, None, hidden))
        self.built = True

    def _attend(self, q_head, k_head, v_head, r_head, segment_matrix, allowed, training):
        """Scores, mask, softmax and weighted values: [B, T, n, d] from queries [B, T, n, d]."""
        key_length = ops.shape(k_head)[1]
        content_scores = ops.einsum("bind,bjnd->bnij", q_head + self.r_w_bias, k_head)
        position_scores = ops.einsum("bind,bjnd->bnij", q_head + self.r_r_bias, r_head)
        position_scores = relative_shift(position_scores, key_length)
        segment_bias = ops.einsum("bind,snd->bnis", q_head + self.r_s_bias,
                                  self.segment_embedding)  # [B, n, T, 2]
        same, different = segment_bias[..., 0:1], segment_bias[..., 1:2]
        segment_scores = same + segment_matrix[:, None] * (different - same)
        scores = (content_scores + position_scores + segment_scores) * self.scale
        allowed = ops.cast(allowed[:, None], scores.dtype)
        scores = scores + (1.0 - allowed) * ops.cast(MASKED_SCORE, scores.dtype)
        probs = ops.softmax(ops.cast(scores, "float32"), axis=-1)
        # A row that may see nothing (a query stream with no context) attends to nothing,
        # instead of uniformly to every position (which would leak its own content).
        probs = ops.cast(probs, scores.dtype) * ops.max(allowed, axis=-1, keepdims=True)
        probs = self.probs_dropout(probs, training=training)
        return ops.einsum("bnij,bjnd->bind", probs, v_head)

    def _post_attention(self, residual, attended, training):
        output = ops.einsum("bind,hnd->bih", attended, self.o)
        output = self.output_dropout(output, training=training)
        return self.layer_norm(output + residual)

    def call(self, content, query=None, content_allowed=None, query_allowed=None,
             position_encoding=None, segment_matrix=None, memory=None, target_mapping=None,
             training=None):
        keys = content if memory is None else ops.concatenate(
            [ops.cast(memory, content.dtype), content], axis=1)
        k_head = ops.einsum("bjh,hnd->bjnd", keys, self.k)
        v_head = ops.einsum("bjh,hnd->bjnd", keys, self.v)
        r_head = ops.einsum("brh,hnd->brnd", ops.cast(position_encoding, content.dtype),
                            self.r)
        segment_matrix = ops.cast(segment_matrix, content.dtype)
        q_head = ops.einsum("bih,hnd->bind", content, self.q)
        attended = self._attend(q_head, k_head, v_head, r_head, segment_matrix,
                                content_allowed, training)
        new_content = self._post_attention(content, attended, training)
        if query is None:
            return new_content
        g_head = ops.einsum("bkh,hnd->bknd", query, self.q)
        if target_mapping is not None:
            mapping = ops.cast(target_mapping, content.dtype)
            g_head = ops.einsum("bknd,bkl->blnd", g_head, mapping)
        attended = self._attend(g_head, k_head, v_head, r_head, segment_matrix,
                                query_allowed, training)
        if target_mapping is not None:
            attended = ops.einsum("blnd,bkl->bknd", attended, mapping)
        return new_content, self._post_attention(query, attended, training)

    def get_config(self):
        config = super().get_config()
        config.update({"hidden_dim": self.hidden_dim, "num_heads": self.num_heads, "head_dim": self.head_dim,
                       "dropout": self.dropout, "layer_norm_epsilon": self.layer_norm_epsilon,
                       "initializer_range": self.initializer_range})
        return config
