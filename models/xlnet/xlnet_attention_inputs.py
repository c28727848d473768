"""What every XLNet layer's attention reads besides the streams (Yang et al. 2019 §2.3-2.5;
the reference code's `_create_mask` / `relative_positional_encoding` / `seg_mat`): the two
attention masks, the relative segment matrix and the sinusoidal relative encodings. No
weights; keras-nlp has no layer computing them."""

import keras
from keras import ops


def relative_positions(query_length, key_length, clamp_len=-1, backward=False):
    """The relative distances the encodings are taken at: key_length .. -query_length + 1
    (Transformer-XL's "bi" attention; -(those) with ``backward``, the reference's bi_data),
    clamped to [-clamp_len, clamp_len] when clamp_len > 0."""
    positions = ops.arange(key_length, -query_length, -1, dtype="float32")
    if backward:
        positions = -positions
    if clamp_len > 0:
        positions = ops.clip(positions, -float(clamp_len), float(clamp_len))
    return positions


def sinusoid_encoding(positions, hidden_dim):
    """[len(positions), hidden_dim]: sin(p / 10000^(2k/d)) for the first half of the
    features, cos for the second (Transformer-XL's `positional_embedding`)."""
    frequencies = ops.arange(0, hidden_dim, 2, dtype="float32") / float(hidden_dim)
    inverse = 1.0 / ops.power(10000.0, frequencies)
    angles = positions[:, None] * inverse[None, :]
    return ops.concatenate([ops.sin(angles), ops.cos(angles)], axis=-1)


@keras.saving.register_keras_serializable(package="lmfactory")
class XLNetAttentionInputs(keras.layers.Layer):
    """Masks, segment matrix and relative encodings of one forward pass.

    Call arguments:
        padding_mask: [B, T], 1 on real tokens. segment_ids: [B, T] ints.
        permutation_mask: optional [B, T, T]; 1 at [b, i, j] where position i may NOT see
            position j (the factorisation order puts j at or after i; §2.3).
        memory: optional [B, M, H], the previous segment (only its length is used).
    Returns a dict:
        content_allowed [B, T, M + T]: the content stream may see the memory, every real
            token the permutation allows, and always itself (§2.3: h_z(t) encodes x_z(t));
        query_allowed [B, T, M + T]: the same without itself (g_z(t) must not see
            x_z(t)); padded keys are never seen;
        segment_matrix [B, T, M + T]: 1 where i and j lie in different segments (§2.5;
            memory counts as segment 0, as the reference);
        position_encoding [B, M + 2T, H]: sinusoids of distances M + T .. -T + 1; with
            ``bi_data`` the second half of the batch uses the negated distances.
    """

    def __init__(self, hidden_dim, clamp_len=-1, bi_data=False, **kwargs):
        super().__init__(**kwargs)
        self.hidden_dim = int(hidden_dim)
        self.clamp_len = int(clamp_len)
        self.bi_data = bool(bi_data)

    def call(self, padding_mask, segment_ids, permutation_mask=None, memory=None):
        batch, length = ops.shape(padding_mask)[0], ops.shape(padding_mask)[1]
        memory_length = 0 if memory is None else ops.shape(memory)[1]
        visible = ops.cast(padding_mask, "float32")[:, None, :] * ops.ones((1, length, 1))
        if permutation_mask is not None:
            visible = visible * (1.0 - ops.cast(permutation_mask, "float32"))
        content = ops.maximum(visible, ops.eye(length)[None])
        segment_ids = ops.cast(segment_ids, "int32")
        keys = segment_ids
        if memory is not None:
            seen = ops.ones((batch, length, memory_length))
            content = ops.concatenate([seen, content], axis=-1)
            visible = ops.concatenate([seen, visible], axis=-1)
            keys = ops.concatenate([ops.zeros((batch, memory_length), "int32"), keys], axis=1)
        different = ops.cast(ops.not_equal(segment_ids[:, :, None], keys[:, None, :]),
                             "float32")
        key_length = memory_length + length
        forward = sinusoid_encoding(
            relative_positions(length, key_length, self.clamp_len), self.hidden_dim)
        encoding = ops.broadcast_to(forward[None], (batch,) + tuple(ops.shape(forward)))
        if self.bi_data:
            backward = sinusoid_encoding(
                relative_positions(length, key_length, self.clamp_len, backward=True),
                self.hidden_dim)
            first_half = ops.arange(batch) < batch // 2
            encoding = ops.where(first_half[:, None, None], forward[None], backward[None])
        return {"content_allowed": content, "query_allowed": visible,
                "segment_matrix": different, "position_encoding": encoding}

    def get_config(self):
        config = super().get_config()
        config.update({"hidden_dim": self.hidden_dim, "clamp_len": self.clamp_len,
                       "bi_data": self.bi_data})
        return config
