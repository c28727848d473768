"""ELMo's context-independent token encoder (Peters et al. 2018 §3.4): a character CNN with
highway layers and a linear projection, after Jozefowicz et al. 2016 §3.3 / Kim et al. 2016."""

from __future__ import annotations

import keras
from keras import ops

from lmfactory.models.elmo.elmo_highway import ElmoHighway
from lmfactory.models.tokenizers.word_characters import CHARACTER_VOCABULARY_SIZE


@keras.saving.register_keras_serializable(package="lmfactory")
class ElmoCharacterEncoder(keras.layers.Layer):
    """Character ids [B, T, C] -> token representations x_k^LM [B, T, projection_dim].

    §3.4: "The context insensitive type representation uses 2048 character n-gram
    convolutional filters followed by two highway layers (Srivastava et al., 2015) and a
    linear projection down to a 512 representation." Each token's characters are embedded
    (``character_embedding_dim``, 16 in the original), convolved with one filter bank per
    width (``filters``: ``[[width, count], ...]``; the original's 1..7 give 2048 filters),
    each followed by ReLU and a max over the character positions (Kim et al. 2016 §2.2),
    then concatenated, passed through ``num_highway_layers`` highway layers and projected
    linearly.

    Keras' Embedding / Conv1D / Dense do the work; the highway layer is `ElmoHighway`.

    Args:
        filters: list of ``[width, count]`` filter banks.
        num_highway_layers: highway layers after the CNN (2 in §3.4).
        projection_dim: width of the projection (512 in §3.4).
        character_embedding_dim: width of a character embedding.
        max_characters_per_token: C, the characters per token (widths must not exceed it).
    """

    def __init__(self, filters, num_highway_layers: int, projection_dim: int,
                 character_embedding_dim: int = 16, max_characters_per_token: int = 50,
                 **kwargs):
        super().__init__(**kwargs)
        self.filters = [[int(width), int(count)] for width, count in filters]
        if not self.filters:
            raise ValueError("filters needs at least one [width, count] bank")
        widest = max(width for width, _ in self.filters)
        if widest > int(max_characters_per_token):
            raise ValueError(f"A filter of width {widest} does not fit "
                             f"max_characters_per_token={max_characters_per_token}")
        self.num_highway_layers = int(num_highway_layers)
        self.projection_dim = int(projection_dim)
        self.character_embedding_dim = int(character_embedding_dim)
        self.max_characters_per_token = int(max_characters_per_token)
        dtype = self.dtype_policy
        self.character_embedding = keras.layers.Embedding(
            CHARACTER_VOCABULARY_SIZE, self.character_embedding_dim, dtype=dtype,
            embeddings_initializer=keras.initializers.RandomUniform(-1.0, 1.0),
            name="character_embedding")
        self.convolutions = [
            keras.layers.Conv1D(count, width, activation="relu", padding="valid",
                                dtype=dtype, name=f"convolution_{width}")
            for width, count in self.filters]
        self.highways = [ElmoHighway(dtype=dtype, name=f"highway_{index}")
                         for index in range(self.num_highway_layers)]
        self.projection = keras.layers.Dense(self.projection_dim, dtype=dtype,
                                             name="projection")

    @property
    def cnn_width(self) -> int:
        return sum(count for _, count in self.filters)

    def build(self, input_shape):
        characters = self.max_characters_per_token
        self.character_embedding.build((None, characters))
        for convolution in self.convolutions:
            convolution.build((None, characters, self.character_embedding_dim))
        for highway in self.highways:
            highway.build((None, self.cnn_width))
        self.projection.build((None, self.cnn_width))
        self.built = True

    def call(self, character_ids):
        shape = ops.shape(character_ids)
        flat = ops.reshape(character_ids, (-1, self.max_characters_per_token))
        embedded = self.character_embedding(flat)
        pooled = [ops.max(convolution(embedded), axis=1) for convolution in self.convolutions]
        hidden = ops.concatenate(pooled, axis=-1)
        for highway in self.highways:
            hidden = highway(hidden)
        projected = self.projection(hidden)
        return ops.reshape(projected, (shape[0], shape[1], self.projection_dim))

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[1], self.projection_dim)

    def get_config(self):
        config = super().get_config()
        config.update({"filters": self.filters, "num_highway_layers": self.num_highway_layers,
                       "projection_dim": self.projection_dim,
                       "character_embedding_dim": self.character_embedding_dim,
                       "max_characters_per_token": self.max_characters_per_token})
        return config
