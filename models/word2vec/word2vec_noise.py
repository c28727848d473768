"""The noise distribution of negative sampling (Mikolov et al. 2013b §2.2).

"We investigated a number of choices for P_n(w) and found that the unigram distribution
U(w) raised to the 3/4rd power (i.e., U(w)^{3/4}/Z) outperformed significantly": k noise
words are drawn from P_n for every (input, target) pair. A noise word equal to the target
would push the target's own output vector both ways; word2vec.c skips such a draw
(``if (target == word) continue``). Here it is drawn again, up to ``resample_rounds``
times; a draw that still equals the target after that gets weight 0, so the true target is
never a negative. keras-nlp has no sampler of this kind, hence this layer.
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


@keras.saving.register_keras_serializable(package="lmfactory")
class UnigramNoise(keras.layers.Layer):
    """Draws ``k`` negatives per target from P_n, never equal to the target.

    The table (``log_probabilities`` [V], not trainable) is a weight, so a saved model keeps
    the distribution it was trained with; ``counts`` (the corpus count of every id) set it
    at construction; without counts it is uniform (a model rebuilt from its config, before
    its weights are loaded).

    Call: ``targets`` [N] int -> ``(negatives [N, k] int32, weights [N, k] float32)``;
    weight 0 marks a draw that still equals its target after ``resample_rounds``.
    """

    def __init__(self, vocabulary_size, power=NOISE_POWER, resample_rounds=8, seed=None,
                 counts=None, **kwargs):
        super().__init__(**kwargs)
        self.vocabulary_size = int(vocabulary_size)
        self.power = float(power)
        self.resample_rounds = int(resample_rounds)
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
        self.built = True

    def set_counts(self, counts) -> None:
        self.log_probabilities.assign(noise_log_probabilities(counts, self.power))

    def _draw(self, shape):
        count = shape[0] * shape[1]
        samples = keras.random.categorical(
            ops.expand_dims(self.log_probabilities, 0), count, seed=self.seed_generator)
        return ops.cast(ops.reshape(samples, shape), "int32")

    def call(self, targets, num_negatives):
        targets = ops.cast(ops.reshape(targets, (-1, 1)), "int32")
        shape = (ops.shape(targets)[0], num_negatives)
        negatives = self._draw(shape)
        for _ in range(self.resample_rounds):
            negatives = ops.where(ops.equal(negatives, targets), self._draw(shape), negatives)
        weights = ops.cast(ops.not_equal(negatives, targets), "float32")
        return negatives, weights

    def get_config(self):
        config = super().get_config()
        config.update({"vocabulary_size": self.vocabulary_size, "power": self.power,
                       "resample_rounds": self.resample_rounds, "seed": self.seed})
        return config
