"""The adaptive softmax (Grave et al. 2017, "Efficient softmax approximation for GPUs") with
projections, Transformer-XL's output layer (Dai et al. 2019, §4; the reference's
ProjectedAdaptiveLogSoftmax)."""

from __future__ import annotations

import keras
from keras import ops

from lmfactory.models.transformer_xl.transformer_xl_adaptive_embedding import (
    check_cutoffs, cluster_bounds, cluster_dims)


class AdaptiveLogSoftmax(keras.layers.Layer):
    """Log-probabilities [..., V] of hidden states [..., hidden_dim] by an adaptive softmax.

    Without cutoffs: one softmax over the vocabulary. With cutoffs c_0 < c_1 < ...: the
    head is a softmax over the c_0 most frequent words plus one entry per tail cluster
    (``cluster_kernel`` / ``cluster_bias``); a word w of tail cluster i has
    log p(w) = log p_head(cluster i) + log p_i(w), the second a softmax within the cluster
    (Grave et al. §3). Each cluster's logits are ``(h P_i) W_i^T + b_i``: the projection P_i
    [hidden_dim, d_i] (none where d_i = hidden_dim with ``div_val`` 1), then the cluster's
    output weights W_i [size_i, d_i], d_i = embedding_dim // div_val^i.

    Tying (the reference's ``tie_weight`` / ``tie_projs``): with ``tie_weights`` the W_i
    are the `AdaptiveEmbedding` tables; ``tie_projections[i]`` makes P_i the transpose of
    the embedding's projection of cluster i (of its only projection with ``div_val`` 1).
    Biases are always this layer's own. The embedding is passed at call time.

    The full [..., V] is computed (not only the target's entry), so the result is also
    what generation samples from. keras-nlp has no adaptive softmax; written here.

    Call: ``(hidden, embedding=...)`` with ``embedding`` the backbone's `AdaptiveEmbedding`.
    """

    def __init__(self, vocabulary_size, embedding_dim, hidden_dim, cutoffs=(), div_val=1,
                 tie_weights=True, tie_projections=None, kernel_initializer="glorot_uniform",
                 **kwargs):
        super().__init__(**kwargs)
        self.vocabulary_size, self.embedding_dim = int(vocabulary_size), int(embedding_dim)
        self.hidden_dim, self.div_val = int(hidden_dim), int(div_val)
        self.cutoffs = [int(c) for c in cutoffs]
        check_cutoffs(self.vocabulary_size, self.cutoffs, self.div_val)
        self.tie_weights = bool(tie_weights)
        clusters = len(self.cutoffs) + 1
        if tie_projections is None:
            tie_projections = [False] + [True] * (clusters - 1)
        if len(tie_projections) != clusters:
            raise ValueError(f"tie_projections needs one flag per cluster ({clusters}), got "
                             f"{list(tie_projections)}")
        self.tie_projections = [bool(t) for t in tie_projections]
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, input_shape=None):
        bounds = cluster_bounds(self.vocabulary_size, self.cutoffs)
        dims = cluster_dims(self.embedding_dim, self.cutoffs, self.div_val)
        if self.div_val == 1:
            dims = dims * len(bounds)
        self.kernels, self.biases, self.projections = [], [], []
        for index, ((start, end), dim) in enumerate(zip(bounds, dims)):
            own_kernel = not self.tie_weights and (self.div_val > 1 or index == 0)
            self.kernels.append(self.add_weight(
                name=f"kernel_{index}", shape=(end - start if self.div_val > 1 else
                                               self.vocabulary_size, dim),
                initializer=self.kernel_initializer) if own_kernel else None)
            self.biases.append(self.add_weight(name=f"bias_{index}", shape=(end - start,),
                                               initializer="zeros"))
            needs_projection = self.div_val > 1 or dim != self.hidden_dim
            own_projection = needs_projection and not self.tie_projections[index]
            self.projections.append(self.add_weight(
                name=f"projection_{index}", shape=(self.hidden_dim, dim),
                initializer=self.kernel_initializer) if own_projection else None)
        if len(bounds) > 1:
            self.cluster_kernel = self.add_weight(name="cluster_kernel",
                                                  shape=(len(bounds) - 1, dims[0]),
                                                  initializer="zeros")
            self.cluster_bias = self.add_weight(name="cluster_bias", shape=(len(bounds) - 1,),
                                                initializer="zeros")
        self.built = True

    def _cluster(self, index, embedding):
        """(kernel [size_i, d_i], projection [hidden, d_i] or None) of cluster ``index``."""
        start, end = cluster_bounds(self.vocabulary_size, self.cutoffs)[index]
        if self.div_val == 1:
            kernel = embedding.embeddings[0] if self.tie_weights else self.kernels[0]
            kernel = kernel[start:end]
            tied_projection = embedding.projections[0]
        else:
            kernel = embedding.embeddings[index] if self.tie_weights else self.kernels[index]
            tied_projection = embedding.projections[index]
        projection = self.projections[index]
        if projection is None and self.tie_projections[index] and tied_projection is not None:
            projection = ops.transpose(tied_projection)
        return kernel, projection

    def _log_softmax(self, hidden, kernel, bias, projection):
        if projection is not None:
            hidden = ops.matmul(hidden, ops.cast(projection, hidden.dtype))
        logits = ops.matmul(hidden, ops.transpose(ops.cast(kernel, hidden.dtype)))
        logits = ops.cast(logits + ops.cast(bias, logits.dtype), "float32")
        return ops.log_softmax(logits, axis=-1)

    def call(self, hidden, embedding):
        clusters = len(self.cutoffs) + 1
        kernel, projection = self._cluster(0, embedding)
        if clusters == 1:
            return self._log_softmax(hidden, kernel, self.biases[0], projection)
        head = self._log_softmax(
            hidden, ops.concatenate([ops.cast(kernel, self.cluster_kernel.dtype),
                                     self.cluster_kernel], axis=0),
            ops.concatenate([self.biases[0], self.cluster_bias], axis=0), projection)
        pieces = [head[..., :self.cutoffs[0]]]
        for index in range(1, clusters):
            kernel, projection = self._cluster(index, embedding)
            tail = self._log_softmax(hidden, kernel, self.biases[index], projection)
            pieces.append(head[..., self.cutoffs[0] + index - 1:self.cutoffs[0] + index] + tail)
        return ops.concatenate(pieces, axis=-1)

    def get_config(self):
        config = super().get_config()
        config.update({"vocabulary_size": self.vocabulary_size,
                       "embedding_dim": self.embedding_dim, "hidden_dim": self.hidden_dim,
                       "cutoffs": list(self.cutoffs), "div_val": self.div_val,
                       "tie_weights": self.tie_weights,
                       "tie_projections": list(self.tie_projections),
                       "kernel_initializer": keras.initializers.serialize(
                           self.kernel_initializer)})
        return config


__all__ = ["AdaptiveLogSoftmax"]
