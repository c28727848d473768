"""The inputs of XLNet's two streams (Yang et al. 2019 §2.3): the content stream starts
from the token embeddings, h_i^(0) = e(x_i); the query stream from one trainable vector,
g_i^(0) = w, shared by every predicted position (the reference's `mask_emb`)."""

import keras
import keras_nlp
from keras import ops


@keras.saving.register_keras_serializable(package="lmfactory")
class XLNetStreamEmbedding(keras.layers.Layer):
    """Token embeddings (keras-nlp's `ReversibleEmbedding`, `token_embedding`, which the
    LM output layer reuses transposed) and w (`mask_embedding` [H]), both N(0, 0.02).

    ``call(token_ids)`` -> e(x) [B, T, H]; ``call(token_ids, target_mapping)`` ->
    (e(x), w broadcast to [B, K, H]) for a target mapping [B, K, T].
    """

    def __init__(self, vocabulary_size, hidden_dim, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.vocabulary_size = int(vocabulary_size)
        self.hidden_dim = int(hidden_dim)
        self.initializer_range = float(initializer_range)
        self.token_embedding = keras_nlp.layers.ReversibleEmbedding(
            self.vocabulary_size, self.hidden_dim, tie_weights=True,
            embeddings_initializer=keras.initializers.RandomNormal(
                stddev=self.initializer_range),
            dtype=self.dtype_policy, name="token_embedding")

    def build(self, *args, **kwargs):
        self.token_embedding.build((None, None))
        self.mask_embedding = self.add_weight(
            name="mask_embedding", shape=(self.hidden_dim,),
            initializer=keras.initializers.RandomNormal(stddev=self.initializer_range))
        self.built = True

    def call(self, token_ids, target_mapping=None):
        content = self.token_embedding(token_ids)
        if target_mapping is None:
            return content
        shape = ops.shape(target_mapping)
        query = ops.broadcast_to(ops.cast(self.mask_embedding, content.dtype),
                                 (shape[0], shape[1], self.hidden_dim))
        return content, query

    def get_config(self):
        config = super().get_config()
        config.update({"vocabulary_size": self.vocabulary_size, "hidden_dim": self.hidden_dim,
                       "initializer_range": self.initializer_range})
        return config
