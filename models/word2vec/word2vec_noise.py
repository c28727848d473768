"""The noise distribution of negative sampling (Mikolov et al. 2013b §2.2).

"We investigated a number of choices for P_n(w) and found that the unigram distribution
U(w) raised to the 3/4rd power (i.e., U(w)^{3/4}/Z) outperformed significantly": k noise
words are drawn from P_n for every (input, target) pair. A noise word equal to the target
would push the target's own output vector both ways; word2vec.c and gensim skip such a
draw (``if (target == word) continue``), so that pair trains with one negative fewer. Here
a colliding draw is drawn again, up to ``redraws`` times (default 2), so every pair keeps
its k negatives (a kept draw is a draw from P_n conditioned on not being the target:
P(w) + P(target) P(w) + ... is proportional to P(w)); one still equal to its target gets
weight 0 (probability P(target)^(redraws + 1)), so the true target is never a negative.
``redraws=0`` is word2vec.c's skip. The redraws come from a pool of fresh draws 1/16 the
size of the batch's (collisions are rare; the i-th collision takes pool entry i, cycling
should there be more), so they cost little.

Sampling is inverse-CDF over an integer table, as gensim's ``cum_table``: the CDF scaled to
2^31 - 1 and rounded (int32, so it runs where float64 does not, e.g. TPUs), a uniform
integer below that looked up by binary search (``searchsorted``), O(log V) per draw
(word2vec.c indexes a 10^8-entry table instead; TensorFlow's multinomial kernel took 1.5x
as long per draw over a 4,329-word table). keras-nlp has no sampler of this kind, hence
this layer.
"""

import keras
import numpy as np
from keras import ops

NOISE_POWER = 0.75  # 2013b §2.2


def noise_log_probabilities(counts, power: float = NOISE_POWER) -> np.ndarray:
    """log P_n(w) = log(count(w)^power / Z); ids with count 0 (special tokens) get a
    probability of 0 (log = -inf is represented by -1e9)."""
    counts = np.asarray(counts, dtype=np.float64)
    if counts.ndim != 1 or (counts < 0).any() or counts.sum() <= 0:
        raise ValueError("noise counts must be a 1-D array of non-negative counts, not all 0")
    weights = counts ** power
    probabilities = weights / weights.sum()
    with np.errstate(divide="ignore"):
        return np.where(probabilities > 0, np.log(probabilities), -1e9).astype("float32")


CDF_SCALE = 2 ** 31 - 1  # the integer CDF's last value (gensim's domain)


def cumulative_distribution(log_probabilities) -> np.ndarray:
    """The CDF of P_n scaled to ``CDF_SCALE`` and rounded (int32), non-decreasing, its
    entries from the last id of positive probability on exactly ``CDF_SCALE`` (a draw
    below it always lands on an id of positive probability; an id's share is its
    probability to within 1 / CDF_SCALE)."""
    log_probabilities = np.asarray(log_probabilities, dtype=np.float64)
    probabilities = np.where(log_probabilities <= -1e8, 0.0, np.exp(log_probabilities))
    if not probabilities.any():
        probabilities = np.ones_like(probabilities)
    cumulative = np.cumsum(probabilities)
    scaled = np.round(cumulative / cumulative[-1] * CDF_SCALE)
    scaled[int(np.flatnonzero(probabilities)[-1]):] = CDF_SCALE
    return scaled.astype(np.int32)


@keras.saving.register_keras_serializable(package="lmfactory")
class UnigramNoise(keras.layers.Layer):
    """Draws ``k`` negatives per target from P_n, never equal to the target.

    Weights (not trainable, so a saved model keeps the distribution it was trained with):
    ``log_probabilities`` [V] and the integer CDF it implies, ``cumulative_counts`` [V]
    (int32). ``counts`` (the corpus count of every id) set them at construction; without
    counts P_n is uniform (a model rebuilt from its config, before its weights are loaded).

    Call: ``targets`` [N] int -> ``(negatives [N, k] int32, weights [N, k] float32)``;
    weight 0 marks a draw equal to its target (after ``redraws`` redraws), which is skipped.
    """

    def __init__(self, vocabulary_size, power=NOISE_POWER, redraws=2, seed=None,
                 counts=None, **kwargs):
        super().__init__(**kwargs)
        self.vocabulary_size = int(vocabulary_size)
        self.power = float(power)
        self.redraws = int(redraws)
        if self.redraws < 0:
            raise ValueError(f"redraws must be >= 0, got {redraws}")
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        initial = (np.zeros(self.vocabulary_size, "float32") if counts is None
                   else noise_log_probabilities(counts, self.power))
        if initial.shape != (self.vocabulary_size,):
            raise ValueError(f"{len(initial)} noise counts for a vocabulary of "
                             f"{self.vocabulary_size} ids")
        self.log_probabilities = self.add_weight(
            shape=(self.vocabulary_size,), initializer=keras.initializers.Constant(initial),
            trainable=False, dtype="float32", name="log_probabilities")
        self.cumulative_counts = self.add_weight(
            shape=(self.vocabulary_size,),
            initializer=keras.initializers.Constant(cumulative_distribution(initial)),
            trainable=False, dtype="int32", name="cumulative_counts")
        self.built = True

    def set_counts(self, counts) -> None:
        log_probabilities = noise_log_probabilities(counts, self.power)
        self.log_probabilities.assign(log_probabilities)
        self.cumulative_counts.assign(cumulative_distribution(log_probabilities))

    def _draw(self, shape):
        uniform = keras.random.randint(shape, 0, CDF_SCALE, dtype="int32",
                                       seed=self.seed_generator)
        flat = ops.searchsorted(self.cumulative_counts, ops.reshape(uniform, (-1,)),
                                side="right")
        return ops.reshape(ops.cast(flat, "int32"), shape)

    def _redraw_collisions(self, negatives, targets):
        """``negatives`` [N, k] with each draw equal to its target replaced by a fresh one."""
        shape = ops.shape(negatives)
        collided = ops.reshape(ops.equal(negatives, targets), (-1,))
        pool_size = (shape[0] * shape[1]) // 16 + 16
        pool = self._draw((pool_size,))
        rank = ops.cumsum(ops.cast(collided, "int32")) - 1  # i-th collision -> pool entry i
        replacement = ops.take(pool, ops.mod(ops.maximum(rank, 0), pool_size))
        return ops.reshape(ops.where(collided, replacement, ops.reshape(negatives, (-1,))),
                           shape)

    def call(self, targets, num_negatives):
        targets = ops.cast(ops.reshape(targets, (-1, 1)), "int32")
        negatives = self._draw((ops.shape(targets)[0], num_negatives))
        for _ in range(self.redraws):
            negatives = self._redraw_collisions(negatives, targets)
        weights = ops.cast(ops.not_equal(negatives, targets), "float32")
        return negatives, weights

    def get_config(self):
        config = super().get_config()
        config.update({"vocabulary_size": self.vocabulary_size, "power": self.power,
                       "redraws": self.redraws, "seed": self.seed})
        return config
