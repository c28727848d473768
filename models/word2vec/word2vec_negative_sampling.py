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
``context_ids`` [B, 2W], ``context_mask`` [B, 2W]. The P pairs of a record share one input
vector (skip-gram: the centre word's, P = 2W; CBOW: the mean of the contexts, P = 1), so a
record's P * (k + 1) scores are one matrix-vector product of its gathered output vectors
[P (k + 1), d] with h [d] (a batched matmul). Scoring each pair on its own materialises h
P times and runs its einsum as B * P tiny batched matmuls: the word2vec benchmark's 4,978
steps of 128 records took 46.5 s that way, 34.8 s this way.
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
    `prediction_pairs`: the batch -> ``(input vectors h [B, d], targets [B, P], pair
    weights [B, P])``, the P targets of row b all predicted from h_b.

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
        """v'·h of the targets and negatives: ``hidden`` [B, d], ``targets`` [B, P],
        ``negatives`` [B, P, k] -> ``(positive logits [B, P], negative logits [B, P, k])``."""
        candidates = ops.concatenate([ops.expand_dims(targets, -1), negatives], axis=-1)
        rows, pairs = ops.shape(candidates)[0], ops.shape(candidates)[1]
        vectors = self.backbone.output_embedding(ops.reshape(candidates, (rows, -1)))
        logits = ops.matmul(vectors, ops.expand_dims(hidden, -1))  # [B, P (k + 1), 1]
        logits = ops.reshape(logits, (rows, pairs, self.negatives + 1))
        return logits[..., 0], logits[..., 1:]

    def call(self, inputs, training=False):
        """Per pair (flattened to N = B * P): ``positive_logits`` [N], ``negative_logits``
        [N, k], ``negative_weights`` [N, k], ``pair_weights`` [N], ``negatives`` [N, k],
        ``targets`` [N]."""
        hidden, targets, pair_weights = self.prediction_pairs(inputs)
        targets = ops.cast(targets, "int32")
        rows, pairs = ops.shape(targets)[0], ops.shape(targets)[1]
        negatives, negative_weights = self.noise(ops.reshape(targets, (-1,)),
                                                 num_negatives=self.negatives)
        positive, negative = self.score(
            hidden, targets, ops.reshape(negatives, (rows, pairs, self.negatives)))
        return {"positive_logits": ops.reshape(positive, (-1,)),
                "negative_logits": ops.reshape(negative, (-1, self.negatives)),
                "negative_weights": negative_weights,
                "pair_weights": ops.reshape(pair_weights, (-1,)),
                "negatives": negatives, "targets": ops.reshape(targets, (-1,))}

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
