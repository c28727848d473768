"""Embedding dropout (Merity et al. 2018 §4.3, after Gal & Ghahramani 2016).

"Embedding dropout ... is equivalent to performing dropout on the embedding matrix at a word
level, where the dropout is broadcast across all the word vector's embedding. The remaining
non-dropped-out word embeddings are scaled by 1 / (1 - p_e)." A dropped word is therefore
zero at every one of its occurrences in the batch, for the whole forward pass.

Keras has no such layer (`Dropout(noise_shape=...)` masks positions of the looked-up
tensor, not rows of the vocabulary), so this one draws a mask over the vocabulary, one
value per word, and applies the mask of each token's id to its looked-up vector: the same
result as masking the rows of the matrix before the lookup, without copying the [V, D]
table.
"""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="lmfactory")
class EmbeddingDropout(keras.layers.Layer):
    """Drops whole rows of the embedding matrix (see module docstring).

    Call: ``layer(embedded [B, T, D], token_ids [B, T], training=None)`` -> [B, T, D], the
    vectors of dropped words zeroed and the others scaled by 1 / (1 - rate) in training;
    the input unchanged otherwise.

    Args:
        rate: the word dropout rate p_e (AWD-LSTM: 0.1).
        vocabulary_size: the number of rows.
        seed: seed of the mask's generator.
    """

    def __init__(self, rate: float, vocabulary_size: int, seed=None, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"embedding dropout rate must lie in [0, 1), got {rate}")
        self.rate = float(rate)
        self.vocabulary_size = int(vocabulary_size)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def row_mask(self):
        """A fresh scaled keep-mask over the vocabulary [V]: 0 or 1 / (1 - rate)."""
        ones = ops.ones((self.vocabulary_size,), dtype=self.compute_dtype)
        return keras.random.dropout(ones, self.rate, seed=self.seed_generator)

    def call(self, embedded, token_ids, training=None):
        if not training or self.rate == 0.0:
            return embedded
        mask = ops.take(self.row_mask(), ops.cast(token_ids, "int32"), axis=0)
        return embedded * ops.cast(mask, embedded.dtype)[..., None]

    def compute_output_shape(self, embedded_shape, token_ids_shape=None):
        return embedded_shape

    def get_config(self):
        config = super().get_config()
        config.update({"rate": self.rate, "vocabulary_size": self.vocabulary_size,
                       "seed": self.seed})
        return config


__all__ = ["EmbeddingDropout"]
