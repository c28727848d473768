"""The query stream's first layer (Yang et al. 2019 §2.3): g_i^(0) = w, one trainable
vector shared by every predicted position (the reference's `mask_emb`)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="lmfactory")
class XLNetQueryEmbedding(keras.layers.Layer):
    """Broadcasts the learned vector w [H] (N(0, 0.02)) to [B, K, H] for a target mapping
    [B, K, T] (one query per predicted position)."""

    def __init__(self, hidden_dim, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.hidden_dim = int(hidden_dim)
        self.initializer_range = float(initializer_range)

    def build(self, *args, **kwargs):
        self.mask_embedding = self.add_weight(
            name="mask_embedding", shape=(self.hidden_dim,),
            initializer=keras.initializers.RandomNormal(stddev=self.initializer_range))
        self.built = True

    def call(self, target_mapping):
        shape = ops.shape(target_mapping)
        return ops.broadcast_to(ops.cast(self.mask_embedding, self.compute_dtype),
                                (shape[0], shape[1], self.hidden_dim))

    def get_config(self):
        config = super().get_config()
        config.update({"hidden_dim": self.hidden_dim,
                       "initializer_range": self.initializer_range})
        return config
