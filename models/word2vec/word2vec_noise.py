"""The noise distribution of negative sampling (Mikolov et al. 2013b §2.2).

"We investigated a number of choices for P_n(w) and found that the unigram distribution
U(w) raised to the 3/4rd power (i.e., U(w)^{3/4}/Z) outperformed significantly": k noise
words are drawn from P_n for every (input, target) pair. A noise word equal to the target
would push the target's own output vector both ways; word2vec.c skips such a draw
(``if (target == word) continue``). Here each pair draws ``spare_draws`` candidates beyond
its k and keeps the first k that differ from the target (so the kept ones are draws from
P_n conditioned on not being the target); should fewer than k differ, the rest get weight
0, so the true target is never a negative. keras-nlp has no sampler of this kind, hence
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


@keras.saving.register_keras_serializable(package="lmfactory")
class UnigramNoise(keras.layers.Layer):
    """Draws ``k`` negatives per target from P_n, never equal to the target.

    The table (``log_probabilities`` [V], not trainable) is a weight, so a saved model keeps
    the distribution it was trained with; ``counts`` (the corpus count of every id) set it
    at construction; without counts it is uniform (a model rebuilt from its config, before
    its weights are loaded).

    Call: ``targets`` [N] int -> ``(negatives [N, k] int32, weights [N, k] float32)``;
    weight 0 marks a draw equal to its target (fewer than k of the k + ``spare_draws``
    candidates differed from it).
    """

    def __init__(self, vocabulary_size, power=NOISE_POWER, spare_draws=10, seed=None,
                 counts=None, **kwargs):
        super().__init__(**kwargs)
        self.vocabulary_size = int(vocabulary_size)
        self.power = float(power)
        self.spare_draws = int(spare_draws)
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
        width = num_negatives + self.spare_draws
        candidates = self._draw((ops.shape(targets)[0], width))
        differs = ops.not_equal(candidates, targets)
        # The first k candidates that differ from the target, in draw order (then the
        # colliding ones, masked): every differing candidate outranks every colliding one.
        position = ops.arange(width, dtype="float32")
        priority = ops.where(differs, -position, -position - width)
        _, chosen = ops.top_k(priority, k=num_negatives)
        negatives = ops.take_along_axis(candidates, chosen, axis=1)
        weights = ops.cast(ops.take_along_axis(differs, chosen, axis=1), "float32")
        return negatives, weights

    def get_config(self):
        config = super().get_config()
        config.update({"vocabulary_size": self.vocabulary_size, "power": self.power,
                       "spare_draws": self.spare_draws, "seed": self.seed})
        return config
