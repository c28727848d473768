"""The negative-sampling objective shared by skip-gram and CBOW (Mikolov et al. 2013b §2.2).

For an input vector h and a target word w_O (skip-gram: h = v_{w_I} of the centre word and
w_O a context word, 2013a §3.2; CBOW: h = the mean of the context words' input vectors and
w_O the centre word, §3.1), negative sampling maximises

    log σ(v'_{w_O} · h) + Σ_{i=1..k} E_{w_i ~ P_n(w)} [log σ(-v'_{w_i} · h)]     (2013b eq. 4)

with v' the output vectors and P_n the unigram^3/4 distribution (`word2vec_noise.py`). The
loss is its negative, summed over the batch's (input, target) pairs: word2vec.c takes one
SGD step of size alpha per pair, so a minibatch step applies alpha to each pair's gradient
(the pairs' steps taken at once instead of one after another). The metric ``sgns_loss`` is
the mean per pair, comparable across batch sizes.

Batches: `components/pretraining_data/word_windows.py`, x = ``centre_ids`` [B],
``context_ids`` [B, 2W], ``context_mask`` [B, 2W].
"""

import keras
from keras import ops

from lmfactory.models.task_model import SubclassedTask
from lmfactory.models.word2vec.word2vec_noise import UnigramNoise


def negative_sampling_loss(positive_logits, negative_logits, negative_weights):
    """-log σ(s⁺) - Σ_k w_k log σ(-s⁻_k) per pair: ``positive_logits`` [N],
    ``negative_logits`` / ``negative_weights`` [N, k] -> [N] (float32)."""
    positive_logits = ops.cast(positive_logits, "float32")
    negative_logits = ops.cast(negative_logits, "float32")
    positive = -ops.log_sigmoid(positive_logits)
    negative = -ops.sum(negative_weights * ops.log_sigmoid(-negative_logits), axis=-1)
    return positive + negative


class NegativeSamplingTask(SubclassedTask, register=False):
    """A `Word2VecBackbone` trained with negative sampling. A subclass defines
    `prediction_pairs`: the batch -> ``(input vectors h [N, d], targets [N], pair weights
    [N])``.

    Args:
        backbone: a `Word2VecBackbone`.
        negatives: k, noise words per pair (2013b §2.2: 5-20 for small data sets, 2-5 for
            large ones; word2vec.c's default 5).
        token_counts: the corpus count of each id (the noise distribution; the pipeline
            passes the examples' ``token_counts``); None: uniform until weights are loaded.
        seed: the noise sampler's seed.
    """

    def __init__(self, backbone, negatives=5, token_counts=None, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.backbone = backbone
        self.negatives = int(negatives)
        if self.negatives < 1:
            raise ValueError(f"negatives must be >= 1, got {negatives}")
        self.seed = seed
        self.noise = UnigramNoise(backbone.vocabulary_size, seed=seed, counts=token_counts,
                                  dtype="float32", name="noise")
        self.sgns_loss_tracker = keras.metrics.Mean(name="sgns_loss")
        self.built = True  # every weight exists: the backbone's and the noise table

    def prediction_pairs(self, inputs):
        raise NotImplementedError(f"{type(self).__name__} defines no prediction pairs")

    def input_vectors(self, ids):
        return self.backbone.input_embedding(ids)

    def score(self, hidden, targets, negatives):
        """``(positive logits [N], negative logits [N, k])`` = v'·h of targets / negatives."""
        output = self.backbone.output_embedding
        positive = ops.sum(hidden * output(targets), axis=-1)
        negative = ops.einsum("nd,nkd->nk", hidden, output(negatives))
        return positive, negative

    def call(self, inputs, training=False):
        hidden, targets, pair_weights = self.prediction_pairs(inputs)
        negatives, negative_weights = self.noise(targets, num_negatives=self.negatives)
        positive, negative = self.score(hidden, targets, negatives)
        return {"positive_logits": positive, "negative_logits": negative,
                "negative_weights": negative_weights, "pair_weights": pair_weights,
                "negatives": negatives, "targets": targets}

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        per_pair = negative_sampling_loss(y_pred["positive_logits"],
                                          y_pred["negative_logits"],
                                          y_pred["negative_weights"])
        weights = ops.cast(y_pred["pair_weights"], "float32")
        self.sgns_loss_tracker.update_state(ops.stop_gradient(per_pair),
                                            sample_weight=weights)
        return ops.sum(per_pair * weights)

    def get_config(self):
        config = super().get_config()
        config.update({"negatives": self.negatives, "seed": self.seed})
        return config
