"""Continuous bag-of-words with negative sampling (Mikolov et al. 2013a §3.1; 2013b §2.2)."""

from keras import ops

from lmfactory.models.word2vec.word2vec_negative_sampling import NegativeSamplingTask


class Word2VecCBOW(NegativeSamplingTask):
    """CBOW: the current word is predicted from its context, "the projection layer is
    shared for all words (not just the projection matrix); thus, all words get projected
    into the same position (their vectors are averaged)" (2013a §3.1). h = the mean of the
    real context words' input vectors (word2vec.c's ``cbow_mean`` default), target = the
    centre word."""

    def prediction_pairs(self, inputs):
        mask = ops.cast(inputs["context_mask"], "float32")
        vectors = self.input_vectors(inputs["context_ids"])
        count = ops.sum(mask, axis=1, keepdims=True)
        hidden = ops.sum(vectors * ops.expand_dims(mask, -1), axis=1) / ops.maximum(count, 1.0)
        weights = ops.cast(count > 0, "float32")
        return hidden, ops.expand_dims(inputs["centre_ids"], 1), weights
