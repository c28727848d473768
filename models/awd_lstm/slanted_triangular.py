"""ULMFiT's slanted triangular learning rates (Howard & Ruder 2018 §3.2, Eq. 3).

    cut = floor(T * cut_frac)
    p   = t / cut                                  if t < cut
          1 - (t - cut) / (cut * (1 / cut_frac - 1))   otherwise
    eta_t = eta_max * (1 + p * (ratio - 1)) / ratio

"T is the number of training iterations, cut_frac is the fraction of iterations we
increase the LR, cut is the iteration when we switch from increasing to decreasing the LR,
p is the fraction of the number of iterations we have increased or will decrease the LR
respectively, ratio specifies how much smaller the lowest LR is from the maximum LR eta_max
... We generally use cut_frac = 0.1, ratio = 32 and eta_max = 0.01." The rate rises
linearly from eta_max / ratio to eta_max over the first cut iterations, then decays
linearly back to eta_max / ratio at T (and stays there).
"""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="lmfactory")
class SlantedTriangular(keras.optimizers.schedules.LearningRateSchedule):
    """eta_t of Eq. 3 at optimizer step t (0-based)."""

    def __init__(self, max_learning_rate: float, total_steps: int, cut_frac: float = 0.1,
                 ratio: float = 32.0):
        if not 0.0 < cut_frac < 1.0:
            raise ValueError(f"cut_frac must lie in (0, 1), got {cut_frac}")
        if ratio < 1.0:
            raise ValueError(f"ratio must be >= 1, got {ratio}")
        if int(total_steps) < 1:
            raise ValueError(f"total_steps must be >= 1, got {total_steps}")
        self.max_learning_rate = float(max_learning_rate)
        self.total_steps = int(total_steps)
        self.cut_frac = float(cut_frac)
        self.ratio = float(ratio)

    def __call__(self, step):
        step = ops.cast(step, "float32")
        cut = float(max(1, int(self.total_steps * self.cut_frac)))
        rising = step / cut
        falling = 1.0 - (step - cut) / (cut * (1.0 / self.cut_frac - 1.0))
        p = ops.clip(ops.where(step < cut, rising, falling), 0.0, 1.0)
        return self.max_learning_rate * (1.0 + p * (self.ratio - 1.0)) / self.ratio

    def get_config(self):
        return {"max_learning_rate": self.max_learning_rate, "total_steps": self.total_steps,
                "cut_frac": self.cut_frac, "ratio": self.ratio}


__all__ = ["SlantedTriangular"]
