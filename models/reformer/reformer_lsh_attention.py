"""LSH self-attention, the attention of Kitaev et al. 2020 §2 (a mechanism keras-nlp lacks,
hence a layer of our own).

* Shared-QK (§2, "Shared-QK Transformer"): one projection gives the queries; the keys are
  the same vectors normalised to unit length (here scaled as the reference does: divided by
  their root-mean-square and by sqrt(head_dim)).
* Angular LSH (§2, "Hashing attention"): h(x) = argmax([xR; -xR]) for a random matrix R of
  shape [head_dim, num_buckets / 2]; `num_hashes` independent rotations per head give
  `num_hashes` rounds. Padded positions go to an extra bucket after the last one.
* Sorting and chunking (§2, Figure 2): the rounds' (bucket, position) keys are sorted, the
  sorted sequence is cut into chunks of `chunk_length`, and each chunk attends to itself
  and the previous chunk (`num_chunks_before` / `num_chunks_after`).
* Masks: causal masking on the original positions (a decoder), padding masking, and a
  query never attends to its own position unless nothing else is available (§2: its score
  is set to -1e5 instead of -1e9).
* Multi-round LSH (§2, "Multi-round LSH attention"): each round's output is weighted by
  exp(its logsumexp - logsumexp over rounds), i.e. the rounds' softmax normalisers combine
  into one distribution over the union of the rounds' keys.

A sequence no longer than `chunk_length` is one chunk: the layer then does full (masked,
self-excluding) attention without hashing, as the reference does. Longer sequences are
padded to a multiple of `chunk_length` (padding in the padding bucket, masked as keys).

Rotations: in training they are drawn from the ``seed`` the reversible stack passes (new
each step, replayed by the backward pass, §3); in inference from the fixed `hash_seed`,
so that a model is deterministic (exported, generating). ``rotations`` [heads, head_dim,
num_hashes, num_buckets / 2] overrides both (tests, the parity test with the reference's
draws).
"""

import keras
import numpy as np

from lmfactory.models.backend import tf
from lmfactory.models.reformer import reformer_attention_utils as utils


class ReformerLSHAttention(keras.layers.Layer):
    """The LSH attention sub-block: LayerNorm, shared-QK LSH attention, output projection,
    dropout (the reference's ReformerAttention with LSHSelfAttention).

    Args:
        hidden_dim: width of the input and output.
        num_heads, head_dim: heads and their size.
        chunk_length: length of the chunks of the sorted sequence.
        num_hashes: hashing rounds.
        num_buckets: buckets per round (even).
        num_chunks_before, num_chunks_after: neighbouring chunks each chunk attends to.
        attention_dropout: dropout on the attention probabilities.
        dropout: dropout on the output projection.
        layer_norm_epsilon: of the input LayerNorm.
        hash_seed: seed of the rotations used in inference.
        kernel_initializer: of the projections.
    """

    def __init__(self, hidden_dim, num_heads, head_dim, chunk_length, num_hashes, num_buckets,
                 num_chunks_before=1, num_chunks_after=0, attention_dropout=0.0, dropout=0.0,
                 layer_norm_epsilon=1e-12, hash_seed=0, kernel_initializer="glorot_uniform",
                 **kwargs):
        super().__init__(**kwargs)
        if num_buckets % 2:
            raise ValueError(f"num_buckets must be even (angular LSH uses [xR; -xR]), got "
                             f"{num_buckets}")
        self.hidden_dim, self.num_heads, self.head_dim = hidden_dim, num_heads, head_dim
        self.chunk_length, self.num_hashes, self.num_buckets = \
            chunk_length, num_hashes, num_buckets
        self.num_chunks_before, self.num_chunks_after = num_chunks_before, num_chunks_after
        self.attention_dropout, self.dropout = attention_dropout, dropout
        self.layer_norm_epsilon, self.hash_seed = layer_norm_epsilon, hash_seed
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        inner = num_heads * head_dim
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm")
        self.query_key = keras.layers.Dense(inner, use_bias=False, name="query_key",
                                            kernel_initializer=self.kernel_initializer,
                                            dtype=self.dtype_policy)
        self.value = keras.layers.Dense(inner, use_bias=False, name="value",
                                        kernel_initializer=self.kernel_initializer,
                                        dtype=self.dtype_policy)
        self.output_dense = keras.layers.Dense(
            hidden_dim, use_bias=False, name="output", kernel_initializer=self.kernel_initializer,
            dtype=self.dtype_policy)

    def build(self, input_shape):
        inner = (None,) * (len(input_shape) - 1) + (self.num_heads * self.head_dim,)
        self.layer_norm.build(input_shape)
        self.query_key.build(input_shape)
        self.value.build(input_shape)
        self.output_dense.build(inner)
        self.built = True

    @property
    def rotations_shape(self):
        return (self.num_heads, self.head_dim, self.num_hashes, self.num_buckets // 2)

    def draw_rotations(self, seed=None):
        """Random rotations [heads, head_dim, num_hashes, num_buckets / 2] ~ N(0, 1) from
        ``seed`` [2] (the `hash_seed` when None)."""
        if seed is None:
            seed = tf.constant([self.hash_seed, 0], "int64")
        return tf.random.stateless_normal(self.rotations_shape, seed=utils.fold_seed(seed, 7))

    def hash_buckets(self, vectors, mask, rotations):
        """Angular LSH buckets [B, heads, num_hashes, T] of ``vectors`` [B, heads, T, d]:
        argmax([xR; -xR]); positions where ``mask`` [B, T] is False get the extra bucket
        ``num_buckets``."""
        rotated = tf.einsum("bhtd,hdnr->bhntr", tf.stop_gradient(vectors),
                            tf.cast(rotations, vectors.dtype))
        buckets = tf.argmax(tf.concat([rotated, -rotated], axis=-1), axis=-1,
                            output_type=tf.int32)
        return tf.where(mask[:, None, None, :], buckets, self.num_buckets)

    def call(self, hidden, padding_mask, seed=None, rotations=None, training=False):
        """hidden [B, T, H], padding_mask [B, T] (1 = real) -> [B, T, H]. ``seed`` [2]
        draws the rotations (training) and the dropout masks."""
        training = bool(training)
        if seed is None:
            seed = tf.constant([self.hash_seed, 0], "int64")
        x = self.layer_norm(hidden)
        query_key = utils.split_heads(self.query_key(x), self.num_heads, self.head_dim)
        value = utils.split_heads(self.value(x), self.num_heads, self.head_dim)
        mask = tf.cast(padding_mask, "bool")
        length = tf.shape(hidden)[1]
        static_length = hidden.shape[1]
        if rotations is None:
            rotations = self.draw_rotations(seed if training else None)

        def standard():
            return self._attend_all(query_key, value, mask, seed, training)

        def hashed():
            return self._attend_hashed(query_key, value, mask, rotations, seed, training)

        if static_length is not None:
            out = standard() if static_length <= self.chunk_length else hashed()
        else:
            out = tf.cond(length <= self.chunk_length, standard, hashed)
        out = self.output_dense(utils.merge_heads(out))
        return utils.seeded_dropout(out, self.dropout, utils.fold_seed(seed, 2), training)

    def _attend_all(self, query_key, value, mask, seed, training):
        """One chunk: full causal attention, own position excluded unless alone."""
        keys = self._normalise_keys(query_key)
        dots = tf.matmul(query_key, keys, transpose_b=True)
        positions = tf.range(tf.shape(query_key)[2])
        causal = positions[:, None] >= positions[None, :]
        allowed = tf.logical_and(causal[None, None], mask[:, None, None, :])
        own = tf.equal(positions[:, None], positions[None, :])[None, None]
        out, _ = utils.masked_softmax_attend(
            dots, allowed, value, own, dropout_rate=self.attention_dropout,
            seed=utils.fold_seed(seed, 1), training=training)
        return out

    def _normalise_keys(self, vectors):
        """Keys of shared-QK attention: the queries over their RMS, over sqrt(head_dim)."""
        variance = tf.reduce_mean(tf.square(vectors), axis=-1, keepdims=True)
        return vectors * tf.math.rsqrt(variance + 1e-6) / np.sqrt(self.head_dim)

    def _attend_hashed(self, query_key, value, mask, rotations, seed, training):
        length = tf.shape(query_key)[2]
        query_key = utils.pad_to_multiple(query_key, length, self.chunk_length, axis=2)
        value = utils.pad_to_multiple(value, length, self.chunk_length, axis=2)
        mask = tf.cast(utils.pad_to_multiple(tf.cast(mask, "int32"), length,
                                             self.chunk_length, axis=1), "bool")
        padded = tf.shape(query_key)[2]
        buckets = self.hash_buckets(query_key, mask, rotations)  # [B, h, n, T]
        # Sort by (round, bucket, position): round r's buckets are offset by r * (n_b + 1).
        rounds = tf.range(self.num_hashes, dtype=tf.int64)[None, None, :, None]
        keys = ((rounds * (self.num_buckets + 1) + tf.cast(buckets, "int64"))
                * tf.cast(padded, "int64")
                + tf.range(padded, dtype=tf.int64)[None, None, None, :])
        shape = tf.shape(keys)
        keys = tf.reshape(keys, [shape[0], shape[1], -1])  # [B, h, n * T]
        sorted_index = tf.argsort(keys, axis=-1, stable=True)
        undo_sort = tf.argsort(sorted_index, axis=-1)
        positions = sorted_index % padded  # the original position of each sorted slot
        sorted_qk = tf.gather(query_key, positions, axis=2, batch_dims=2)
        sorted_value = tf.gather(value, positions, axis=2, batch_dims=2)
        queries = utils.chunk(sorted_qk, self.chunk_length)
        keys_ = utils.look_adjacent(utils.chunk(self._normalise_keys(sorted_qk),
                                                self.chunk_length),
                                    self.num_chunks_before, self.num_chunks_after)
        values = utils.look_adjacent(utils.chunk(sorted_value, self.chunk_length),
                                     self.num_chunks_before, self.num_chunks_after)
        query_positions = utils.chunk(positions, self.chunk_length)
        key_positions = utils.look_adjacent(query_positions, self.num_chunks_before,
                                            self.num_chunks_after)
        dots = tf.matmul(queries, keys_, transpose_b=True)  # [B, h, C, c, K]
        key_real = tf.gather(mask, key_positions, batch_dims=1)  # [B, h, C, K]
        causal = query_positions[..., :, None] >= key_positions[..., None, :]
        allowed = tf.logical_and(causal, key_real[..., None, :])
        own = tf.equal(query_positions[..., :, None], key_positions[..., None, :])
        out, logsumexp = utils.masked_softmax_attend(
            dots, allowed, values, own, dropout_rate=self.attention_dropout,
            seed=utils.fold_seed(seed, 1), training=training)
        # Undo the sort, then combine the rounds weighted by their normalisers.
        out = tf.gather(utils.unchunk(out), undo_sort, axis=2, batch_dims=2)
        logsumexp = tf.gather(utils.unchunk(logsumexp[..., 0]), undo_sort, axis=2,
                              batch_dims=2)
        batch, heads = tf.shape(out)[0], tf.shape(out)[1]
        out = tf.reshape(out, [batch, heads, self.num_hashes, padded, self.head_dim])
        logsumexp = tf.reshape(logsumexp, [batch, heads, self.num_hashes, padded, 1])
        weights = tf.exp(logsumexp - tf.reduce_logsumexp(logsumexp, axis=2, keepdims=True))
        out = tf.reduce_sum(out * weights, axis=2)
        return out[:, :, :length]

    def get_config(self):
        config = super().get_config()
        config.update({
            "hidden_dim": self.hidden_dim, "num_heads": self.num_heads, "head_dim": self.head_dim,
            "chunk_length": self.chunk_length, "num_hashes": self.num_hashes,
            "num_buckets": self.num_buckets, "num_chunks_before": self.num_chunks_before,
            "num_chunks_after": self.num_chunks_after,
            "attention_dropout": self.attention_dropout, "dropout": self.dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon, "hash_seed": self.hash_seed,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        })
        return config
