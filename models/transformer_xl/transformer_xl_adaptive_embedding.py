"""Adaptive input representations (Baevski & Auli 2019; the reference's AdaptiveEmbedding),
the word embedding of Transformer-XL (Dai et al. 2019, §4: "we adopt adaptive softmax and
input representations")."""

from __future__ import annotations

import keras
from keras import ops


def cluster_bounds(vocabulary_size, cutoffs):
    """[(start, end)] of each frequency cluster: [0, c_0), [c_0, c_1), ..., [c_last, V)."""
    ends = [0, *[int(c) for c in cutoffs], int(vocabulary_size)]
    return list(zip(ends[:-1], ends[1:]))


def cluster_dims(embedding_dim, cutoffs, div_val):
    """The embedding width of each cluster: ``embedding_dim // div_val**i`` (one cluster,
    the whole vocabulary, when ``div_val`` is 1)."""
    if div_val == 1:
        return [int(embedding_dim)]
    return [int(embedding_dim) // int(div_val) ** i for i in range(len(cutoffs) + 1)]


def check_cutoffs(vocabulary_size, cutoffs, div_val):
    """Raises ``ValueError`` unless the cutoffs increase strictly inside (0, V)."""
    cutoffs = [int(c) for c in cutoffs]
    if any(b <= a for a, b in zip([0, *cutoffs], [*cutoffs, vocabulary_size])):
        raise ValueError(f"cutoffs must increase strictly inside (0, vocabulary_size="
                         f"{vocabulary_size}), got {cutoffs}")
    if int(div_val) < 1:
        raise ValueError(f"div_val must be >= 1, got {div_val}")


class AdaptiveEmbedding(keras.layers.Layer):
    """Word embeddings whose width shrinks with frequency, projected to ``hidden_dim`` and
    scaled by sqrt(hidden_dim).

    ``div_val`` = 1: one table [V, embedding_dim], projected by ``projection_0``
    [embedding_dim, hidden_dim] only where the widths differ. ``div_val`` > 1: the vocabulary
    is cut at ``cutoffs`` into clusters (ids sorted by frequency), cluster i has a table of
    width embedding_dim // div_val^i and its own projection to hidden_dim. The output is
    multiplied by sqrt(hidden_dim), as the reference (``emb_scale``).

    keras-nlp has no adaptive input layer (its `ReversibleEmbedding` is one table), so this
    layer is written here. `AdaptiveLogSoftmax` can tie its output weights and projections
    to ``embeddings`` / ``projections``.
    """

    def __init__(self, vocabulary_size, embedding_dim, hidden_dim, cutoffs=(), div_val=1,
                 embeddings_initializer="uniform", projection_initializer="glorot_uniform",
                 **kwargs):
        super().__init__(**kwargs)
        self.vocabulary_size, self.embedding_dim = int(vocabulary_size), int(embedding_dim)
        self.hidden_dim, self.div_val = int(hidden_dim), int(div_val)
        self.cutoffs = [int(c) for c in cutoffs]
        check_cutoffs(self.vocabulary_size, self.cutoffs, self.div_val)
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.projection_initializer = keras.initializers.get(projection_initializer)

    @property
    def bounds(self):
        if self.div_val == 1:
            return [(0, self.vocabulary_size)]
        return cluster_bounds(self.vocabulary_size, self.cutoffs)

    def build(self, input_shape=None):
        dims = cluster_dims(self.embedding_dim, self.cutoffs, self.div_val)
        self.embeddings, self.projections = [], []
        for index, ((start, end), dim) in enumerate(zip(self.bounds, dims)):
            self.embeddings.append(self.add_weight(
                name=f"embeddings_{index}", shape=(end - start, dim),
                initializer=self.embeddings_initializer))
            if self.div_val > 1 or dim != self.hidden_dim:
                self.projections.append(self.add_weight(
                    name=f"projection_{index}", shape=(dim, self.hidden_dim),
                    initializer=self.projection_initializer))
            else:
                self.projections.append(None)
        self.built = True

    def call(self, token_ids):
        token_ids = ops.cast(token_ids, "int32")
        output = None
        for (start, end), table, projection in zip(self.bounds, self.embeddings,
                                                   self.projections):
            local = ops.clip(token_ids - start, 0, end - start - 1)
            vectors = ops.take(ops.cast(table, self.compute_dtype), local, axis=0)
            if projection is not None:
                vectors = ops.matmul(vectors, ops.cast(projection, self.compute_dtype))
            if len(self.bounds) > 1:
                inside = ops.logical_and(token_ids >= start, token_ids < end)
                vectors = vectors * ops.cast(inside, vectors.dtype)[..., None]
            output = vectors if output is None else output + vectors
        return output * ops.cast(self.hidden_dim ** 0.5, output.dtype)

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.hidden_dim)

    def get_config(self):
        config = super().get_config()
        config.update({"vocabulary_size": self.vocabulary_size,
                       "embedding_dim": self.embedding_dim, "hidden_dim": self.hidden_dim,
                       "cutoffs": list(self.cutoffs), "div_val": self.div_val,
                       "embeddings_initializer": keras.initializers.serialize(
                           self.embeddings_initializer),
                       "projection_initializer": keras.initializers.serialize(
                           self.projection_initializer)})
        return config


__all__ = ["AdaptiveEmbedding", "check_cutoffs", "cluster_bounds", "cluster_dims"]
