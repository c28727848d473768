"""Continuous skip-gram with negative sampling (Mikolov et al. 2013a §3.2; 2013b §2.2)."""

from keras import ops

from lmfactory.models.word2vec.word2vec_negative_sampling import NegativeSamplingTask


class Word2VecSkipGram(NegativeSamplingTask):
    """Skip-gram: "use each current word as an input ... and predict words within a certain
    range before and after the current word" (2013a §3.2). Every real (centre, context)
    pair of a window record is one prediction: h = v_centre, target = the context word
    (the paper's direction, p(w_O | w_I) of 2013b eq. 1; word2vec.c scores the centre word
    with the context word's input vector instead, the same pairs with the roles swapped)."""

    def prediction_pairs(self, inputs):
        hidden = self.input_vectors(inputs["centre_ids"])
        weights = ops.cast(inputs["context_mask"], "float32")
        return hidden, inputs["context_ids"], weights
