"""The word2vec network: two embedding matrices and nothing else (Mikolov et al. 2013a §3;
2013b §2).

Both models of "Efficient Estimation of Word Representations in Vector Space" (§3.1 CBOW,
§3.2 continuous skip-gram) drop the hidden layer of the earlier neural LMs: a word's
"input" vector v_w is looked up and scored against "output" vectors v'_w by a dot product
(2013b §2, "v_w and v'_w are the input and output vector representations of w"). The input
vectors are the word vectors the model is trained for.

Initialisation follows word2vec.c, as the papers do not give one: input vectors uniform in
[-0.5/d, 0.5/d], output vectors zero (d = ``embedding_dim``).

Inputs: ``token_ids`` [B, T] only (no ``padding_mask``: each position's vector depends on
its own id alone). Outputs: ``sequence_output`` [B, T, d], the input vectors, and
``output_vectors`` [B, T, d], the output vectors of the same ids. The task models'
negative-sampling loss (`word2vec_negative_sampling.py`) reads both matrices.
"""

import keras

from lmfactory.models.backbone import Backbone


def input_initializer(embedding_dim: int):
    """word2vec.c: ``syn0`` uniform in [-0.5/d, 0.5/d]."""
    bound = 0.5 / embedding_dim
    return keras.initializers.RandomUniform(-bound, bound)


class Word2VecBackbone(Backbone):
    """Input and output word vectors (keras ``Embedding`` layers).

    Args:
        vocabulary_size: number of ids (the word vocabulary, special tokens included).
        embedding_dim: d, the size of a word vector.
        dtype: Keras dtype policy.
    """

    def __init__(self, vocabulary_size, embedding_dim, dtype=None, **kwargs):
        self.input_embedding = keras.layers.Embedding(
            vocabulary_size, embedding_dim, embeddings_initializer=input_initializer(
                embedding_dim), dtype=dtype, name="input_embedding")
        self.output_embedding = keras.layers.Embedding(
            vocabulary_size, embedding_dim, embeddings_initializer="zeros", dtype=dtype,
            name="output_embedding")
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        vectors = self.input_embedding(token_ids)
        # The output vectors of the same ids: in the graph so that both matrices are the
        # backbone's weights (saved, loaded and exported together).
        context_vectors = self.output_embedding(token_ids)
        outputs = {"sequence_output": vectors, "output_vectors": context_vectors}
        super().__init__(inputs={"token_ids": token_ids},
                         outputs=outputs, dtype=dtype, arguments=locals(), **kwargs)

    @property
    def word_vectors(self):
        """The input matrix [V, d]: the trained word vectors."""
        return self.input_embedding.embeddings

    @property
    def context_matrix(self):
        """The output matrix [V, d] (v'_w)."""
        return self.output_embedding.embeddings
