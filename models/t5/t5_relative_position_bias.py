"""T5's relative position bias (Raffel et al. 2020, §2.1 "Model").

"Instead of using a fixed embedding for each position, relative position embeddings
produce a different learned embedding according to the offset between the 'key' and
'query' being compared in the self-attention mechanism. We use a simplified form of
position embeddings where each 'embedding' is simply a scalar that is added to the
corresponding logit used for computing the attention weights. For efficiency, we also
share the position embedding parameters across all layers in our model, though within a
given layer each attention head uses a different learned position embedding. Typically, a
fixed number of embeddings are learned, each corresponding to a range of possible
key-query offsets. In this work, we use 32 embeddings for all of our models with ranges
that increase in size logarithmically up to an offset of 128 beyond which we assign all
relative positions to the same embedding."

The bucketing follows the reference (mesh-tensorflow ``_relative_position_bucket``): half
the buckets are exact offsets, the other half grow logarithmically up to
``max_distance``; bidirectional attention (the encoder) gives half the buckets to keys
after the query, unidirectional attention (the decoder's self-attention) sends every key
after the query to bucket 0 (the causal mask removes them anyway).

keras-nlp has no relative-bias layer (its `CachedMultiHeadAttention` and Transformer
blocks use absolute positions), so it is written here.
"""

import math

import keras
from keras import ops


def relative_position_bucket(relative_position, bidirectional=True, num_buckets=32,
                             max_distance=128):
    """The bucket (int32, same shape) of each ``relative_position`` = key position - query
    position (an int tensor)."""
    relative_position = ops.cast(relative_position, "int32")
    distance = -relative_position  # > 0: the key lies before the query
    bucket = ops.zeros_like(distance)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + ops.cast(distance < 0, "int32") * num_buckets
        distance = ops.abs(distance)
    else:
        distance = ops.maximum(distance, 0)
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    # Offsets from max_exact to max_distance share the other half, logarithmically.
    scaled = ops.log(ops.cast(ops.maximum(distance, 1), "float32") / max_exact) \
        / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    large = ops.minimum(max_exact + ops.cast(scaled, "int32"), num_buckets - 1)
    return bucket + ops.where(is_small, distance, large)


class T5RelativePositionBias(keras.layers.Layer):
    """One learned scalar per (bucket, head), added to the attention logits.

    Called with the query and key positions, returns the bias [1, heads, queries, keys].
    Created once per stack (in its first layer, §2.1) and shared by every layer of it.

    Args:
        num_heads: attention heads (each has its own scalar per bucket).
        bidirectional: True in the encoder, False in the decoder's self-attention.
        num_buckets, max_distance: 32 and 128 in the paper.
    """

    def __init__(self, num_heads, bidirectional, num_buckets=32, max_distance=128,
                 kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.num_heads = int(num_heads)
        self.bidirectional = bool(bidirectional)
        self.num_buckets = int(num_buckets)
        self.max_distance = int(max_distance)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.num_buckets, self.num_heads),
            initializer=self.kernel_initializer)
        self.built = True

    def call(self, query_positions, key_positions):
        """``query_positions`` [Tq], ``key_positions`` [Tk] (int) -> [1, heads, Tq, Tk]."""
        relative = key_positions[None, :] - query_positions[:, None]
        buckets = relative_position_bucket(relative, self.bidirectional, self.num_buckets,
                                           self.max_distance)
        values = ops.take(self.embeddings, buckets, axis=0)  # [Tq, Tk, heads]
        return ops.transpose(values, (2, 0, 1))[None]

    def get_config(self):
        config = super().get_config()
        config.update({"num_heads": self.num_heads, "bidirectional": self.bidirectional,
                       "num_buckets": self.num_buckets, "max_distance": self.max_distance,
                       "kernel_initializer": keras.initializers.serialize(
                           self.kernel_initializer)})
        return config
