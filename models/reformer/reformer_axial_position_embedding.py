"""Axial position embeddings (the Reformer's, Kitaev et al. 2020 reference code; used in
its enwik8 / crime-and-punishment models): the positions 0 .. n1 * n2 - 1 are laid out on an
(n1, n2) grid and position p = (p // n2, p % n2) gets the concatenation of row p // n2 of a
table [n1, d1] and row p % n2 of a table [n2, d2] (d1 + d2 = hidden width), i.e. the two
tables broadcast over the grid and concatenated. (n1 + n2) * d instead of n1 * n2 * d
weights. keras-nlp's PositionEmbedding is one full table, hence a layer of our own.
"""

import keras
from keras import ops


class ReformerAxialPositionEmbedding(keras.layers.Layer):
    """Args:
        axial_pos_shape: (n1, n2), n1 * n2 >= the longest sequence.
        axial_pos_embds_dim: (d1, d2), summing to the hidden width.
        initializer_stddev: the tables are N(0, stddev) (1.0 in the reference).

    Call: ``token_ids`` [B, T] -> the embeddings of positions 0 .. T - 1, [1, T, d1 + d2]
    (``positions=`` int [..., T] gives those of other positions, [..., T, d1 + d2]).
    """

    def __init__(self, axial_pos_shape, axial_pos_embds_dim, initializer_stddev=1.0,
                 **kwargs):
        super().__init__(**kwargs)
        if len(axial_pos_shape) != 2 or len(axial_pos_embds_dim) != 2:
            raise ValueError(f"axial_pos_shape and axial_pos_embds_dim must have 2 factors, "
                             f"got {axial_pos_shape} and {axial_pos_embds_dim}")
        self.axial_pos_shape = tuple(int(n) for n in axial_pos_shape)
        self.axial_pos_embds_dim = tuple(int(d) for d in axial_pos_embds_dim)
        self.initializer_stddev = initializer_stddev

    def build(self, input_shape=None):
        init = keras.initializers.RandomNormal(stddev=self.initializer_stddev)
        self.tables = [self.add_weight(shape=(n, d), initializer=init, name=f"axis_{i}")
                       for i, (n, d) in enumerate(zip(self.axial_pos_shape,
                                                      self.axial_pos_embds_dim))]
        self.built = True

    def compute_output_shape(self, input_shape):
        return (1, input_shape[1], sum(self.axial_pos_embds_dim))

    def call(self, token_ids=None, positions=None):
        if positions is None:
            positions = ops.expand_dims(ops.arange(ops.shape(token_ids)[1], dtype="int32"), 0)
        positions = ops.cast(positions, "int32")
        columns = self.axial_pos_shape[1]
        rows = ops.take(self.tables[0], positions // columns, axis=0)
        cols = ops.take(self.tables[1], positions % columns, axis=0)
        return ops.concatenate([rows, cols], axis=-1)

    def get_config(self):
        config = super().get_config()
        config.update({"axial_pos_shape": list(self.axial_pos_shape),
                       "axial_pos_embds_dim": list(self.axial_pos_embds_dim),
                       "initializer_stddev": self.initializer_stddev})
        return config
