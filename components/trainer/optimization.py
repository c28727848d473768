"""AdamW with linear warmup then linear decay to zero, and global-norm gradient clipping.

This is BERT's optimiser (Devlin et al. 2019, App. A.2: Adam, beta1 0.9, beta2 0.999,
L2 weight decay 0.01 decoupled, warmup then linear decay; google-research/bert clips the
global norm at 1.0) and GPT-2's (AdamW, warmup, clip 1.0). Bias and LayerNorm weights are
excluded from weight decay, as both reference implementations do.
"""

from __future__ import annotations

import keras


@keras.saving.register_keras_serializable(package="lmfactory")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """lr(step) = peak * step / warmup for step < warmup, then decays linearly to 0 at total."""

    def __init__(self, peak_learning_rate: float, warmup_steps: int, total_steps: int):
        self.peak_learning_rate = float(peak_learning_rate)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(total_steps)

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        warmup = float(self.warmup_steps)
        total = float(max(self.total_steps, self.warmup_steps + 1))
        warmup_lr = self.peak_learning_rate * step / max(warmup, 1.0)
        decay_lr = self.peak_learning_rate * keras.ops.maximum(
            0.0, (total - step) / (total - warmup))
        return keras.ops.where(step < warmup, warmup_lr, decay_lr)

    def get_config(self):
        return {"peak_learning_rate": self.peak_learning_rate,
                "warmup_steps": self.warmup_steps, "total_steps": self.total_steps}


def make_optimizer(learning_rate: float, total_steps: int, warmup_fraction: float = 0.1,
                   weight_decay: float = 0.01, clip_norm: float = 1.0,
                   beta_2: float = 0.999, epsilon: float = 1e-6) -> keras.optimizers.AdamW:
    schedule = WarmupLinearDecay(learning_rate, int(total_steps * warmup_fraction), total_steps)
    optimizer = keras.optimizers.AdamW(
        learning_rate=schedule, weight_decay=weight_decay, beta_1=0.9, beta_2=beta_2,
        epsilon=epsilon, global_clipnorm=clip_norm)
    optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta", "layer_norm"])
    return optimizer
