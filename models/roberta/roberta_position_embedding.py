"""Learned position embeddings indexed past the padding index, as the released RoBERTa."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="lmfactory")
class RobertaPositionEmbedding(keras.layers.Layer):
    """Learned absolute position embeddings whose ids count real tokens only.

    RoBERTa keeps BERT's learned position embeddings (Liu et al. 2019 §2.1, §3.1: sequences
    of at most T = 512 tokens), but the released fairseq model numbers positions the way
    fairseq's ``LearnedPositionalEmbedding`` does: position ids start after the padding
    index, ``position = (number of real tokens up to and including this one) +
    padding_index`` for a real token and ``padding_index`` for a padding token. With
    ``padding_index = 1`` the first real token is position 2, so T tokens need
    ``T + padding_index + 1`` rows (514 for T = 512), and a left-padded sequence gets the
    same ids as the unpadded one.

    Written here because keras-nlp's ``PositionEmbedding`` (and ``TokenAndPositionEmbedding``)
    only number positions ``0 .. seq_len - 1`` from the start of the row, whatever the
    padding; they cannot derive ids from the padding mask.

    Input: ``padding_mask`` [batch, seq_len] (1 / True = real token).
    Output: position embeddings [batch, seq_len, embedding_dim].

    Args:
        sequence_length: T, the longest sequence of real tokens.
        embedding_dim: width of each embedding.
        padding_index: the index reserved for padding (1 in fairseq's dictionary, where
            ``<pad>`` is token 1); real positions start at ``padding_index + 1``.
        initializer: initializer of the table.
    """

    def __init__(self, sequence_length, embedding_dim, padding_index=1,
                 initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        if sequence_length <= 0 or embedding_dim <= 0:
            raise ValueError(f"sequence_length and embedding_dim must be positive, got "
                             f"{sequence_length} and {embedding_dim}")
        if padding_index < 0:
            raise ValueError(f"padding_index must be >= 0, got {padding_index}")
        self.sequence_length = int(sequence_length)
        self.embedding_dim = int(embedding_dim)
        self.padding_index = int(padding_index)
        self.initializer = keras.initializers.get(initializer)

    @property
    def num_positions(self):
        """Rows of the table: the padding index, the rows below it, and T real positions."""
        return self.sequence_length + self.padding_index + 1

    def build(self, input_shape=None):
        self.position_embeddings = self.add_weight(
            name="embeddings",
            shape=(self.num_positions, self.embedding_dim),
            initializer=self.initializer,
            trainable=True,
        )
        self.built = True

    def position_ids(self, padding_mask):
        """[batch, seq_len] int32 ids: cumulative real-token count + padding_index on real
        tokens, padding_index on padding."""
        mask = ops.cast(ops.not_equal(padding_mask, 0), "int32")
        return ops.cumsum(mask, axis=1) * mask + self.padding_index

    def call(self, inputs):
        """``inputs``: the padding mask [batch, seq_len]."""
        length = inputs.shape[-1]
        if length is not None and length > self.sequence_length:
            raise ValueError(f"Sequences of {length} tokens are longer than the "
                             f"{self.sequence_length} positions this model has")
        embeddings = ops.take(self.position_embeddings, self.position_ids(inputs), axis=0)
        return ops.cast(embeddings, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape) + (self.embedding_dim,)

    def get_config(self):
        config = super().get_config()
        config.update({
            "sequence_length": self.sequence_length,
            "embedding_dim": self.embedding_dim,
            "padding_index": self.padding_index,
            "initializer": keras.initializers.serialize(self.initializer),
        })
        return config
