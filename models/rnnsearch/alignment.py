"""The alignment model of RNNsearch (Bahdanau et al. 2015 §3.1, Appendix A.1.2): how well
the source annotation h_j matches the decoder state s_{i-1}, normalised over the source.

keras-nlp has no recurrent-decoder attention (its attention layers are Transformer
multi-head attention over projected queries, keys and values), so this layer is written
here. It scores a query (the previous decoder state) against every annotation:

* ``"additive"`` (the paper, §A.1.2): e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j);
* ``"dot"``: e_ij = (W_a s_{i-1})^T (U_a h_j), a bilinear score (the decoder state and the
  annotations have different widths, n and 2n, so both are projected to ``attention_dim``);
* ``"cosine"``: e_ij = beta * cos(W_a s_{i-1}, U_a h_j) with a learned sharpness beta
  (a scalar weight, initialised to 1).

U_a h_j does not depend on i, so it is computed once per sentence (`keys`; §A.1.2: "U_a h_j
can be pre-computed"), and each decoding step adds only W_a s_{i-1} (`scores`). Padding
is masked before the softmax (`weights`): padded annotations get probability 0, and a
source with no real position gets all-zero weights (so a context of zeros) instead of NaN.

Initialisation (Appendix B.1): W_a and U_a from N(0, 0.001^2), v_a zeros.
"""

import keras
from keras import ops

SIMILARITIES = ("additive", "dot", "cosine")
# Added to the scores of padded annotations before the softmax.
_MASKED_SCORE = -1e9


class Alignment(keras.layers.Layer):
    """Soft alignment of a decoder state over the source annotations.

    Args:
        attention_dim: n', the width of W_a s and U_a h.
        query_dim: width of the decoder state s (n).
        annotation_dim: width of the annotations h_j (2n).
        similarity: one of ``SIMILARITIES``.
    """

    def __init__(self, attention_dim, query_dim, annotation_dim, similarity="additive",
                 **kwargs):
        super().__init__(**kwargs)
        if similarity not in SIMILARITIES:
            raise ValueError(f"attention must be one of {SIMILARITIES}, got {similarity!r}")
        self.attention_dim = attention_dim
        self.query_dim = query_dim
        self.annotation_dim = annotation_dim
        self.similarity = similarity
        small = keras.initializers.RandomNormal(stddev=0.001)
        self.query_projection = keras.layers.Dense(
            attention_dim, use_bias=False, kernel_initializer=small, dtype=self.dtype_policy,
            name="query_projection")  # W_a
        self.key_projection = keras.layers.Dense(
            attention_dim, use_bias=False, kernel_initializer=small,
            dtype=self.dtype_policy, name="key_projection")  # U_a
        self.query_projection.build((None, query_dim))
        self.key_projection.build((None, None, annotation_dim))
        if similarity == "additive":
            self.score_vector = self.add_weight(shape=(attention_dim,), initializer="zeros",
                                                name="score_vector")  # v_a
        if similarity == "cosine":
            self.sharpness = self.add_weight(shape=(), initializer="ones", name="sharpness")
        self.built = True

    def keys(self, annotations):
        """U_a h_j for every annotation: [B, S, attention_dim], computed once."""
        return self.key_projection(annotations)

    def scores(self, query, keys):
        """e_ij [B, S] for the decoder states ``query`` [B, n] over ``keys`` [B, S, n']."""
        projected = self.query_projection(query)[:, None, :]
        if self.similarity == "additive":
            return ops.einsum("bsa,a->bs", ops.tanh(projected + keys),
                              ops.cast(self.score_vector, keys.dtype))
        if self.similarity == "dot":
            return ops.sum(projected * keys, axis=-1)
        cosine = ops.sum(ops.normalize(projected, axis=-1) * ops.normalize(keys, axis=-1),
                         axis=-1)
        return ops.cast(self.sharpness, cosine.dtype) * cosine

    def weights_from_scores(self, scores, mask):
        """alpha_ij = softmax_j(e_ij) over the real positions (``mask`` bool [B, S])."""
        scores = ops.where(mask, ops.cast(scores, "float32"), _MASKED_SCORE)
        weights = ops.softmax(scores, axis=-1) * ops.cast(mask, "float32")
        return weights

    def call(self, query, keys, mask):
        """The attention weights alpha_i [B, S] of ``query`` [B, n]."""
        return self.weights_from_scores(self.scores(query, keys), mask)

    def get_config(self):
        config = super().get_config()
        config.update({"attention_dim": self.attention_dim, "query_dim": self.query_dim,
                       "annotation_dim": self.annotation_dim,
                       "similarity": self.similarity})
        return config
