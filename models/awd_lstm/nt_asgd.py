"""Non-monotonically triggered averaged SGD, NT-ASGD (Merity et al. 2018 §3, Algorithm 1).

ASGD returns the average of the iterates from a point T onwards instead of the last one.
NT-ASGD chooses T itself: every L steps (the logging interval) it computes the validation
metric v, and once ``t > n and v > min(v_0, ..., v_{t-n-1})`` -- the metric has not
improved on the best value seen before the last n checks (non-monotone interval n = 5) --
averaging starts. From then on each step updates the running average
avg <- avg + (w - avg) / (k + 1), and at the end of training the model's weights are
replaced by the average (the reference code evaluates and saves the averaged weights).

With SGD underneath (the paper's constant-rate SGD) this is NT-ASGD; the callback averages
whatever optimizer the model compiles with (the pipeline's trainer uses AdamW, where it is
the same iterate averaging). It is an option for a training loop with a validation set
(`benchmarks/awd_lstm_ulmfit.py`); the pipeline's Trainer runs `fit` without one, so the
recipes do not use it.
"""

from __future__ import annotations

import keras
import numpy as np

from lmfactory.models.backend import tf


def causal_lm_nll(model, batches) -> float:
    """Token-weighted mean next-token NLL of ``model`` over ``(x, y, weights)`` batches."""
    total, count = 0.0, 0.0
    for x, y, weights in batches:
        logits = tf.cast(model(x, training=False), tf.float32)
        nll = tf.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        weights = tf.cast(weights, tf.float32)
        total += float(tf.reduce_sum(nll * weights))
        count += float(tf.reduce_sum(weights))
    return total / max(count, 1e-9)


class NtAsgd(keras.callbacks.Callback):
    """NT-ASGD as a callback (see module docstring).

    Args:
        validation_metric: ``fn(model) -> float``, lower is better (e.g. `causal_lm_nll`
            on held-out batches).
        check_every: L, training steps between two checks.
        non_monotone: n (5).
    """

    def __init__(self, validation_metric, check_every: int, non_monotone: int = 5):
        super().__init__()
        if check_every < 1 or non_monotone < 1:
            raise ValueError("check_every and non_monotone must be >= 1")
        self.validation_metric = validation_metric
        self.check_every = int(check_every)
        self.non_monotone = int(non_monotone)
        self.history = []
        self.trigger_step = None  # T: the step averaging started at
        self.averaged_steps = 0
        self.averages = None
        self.step = 0

    @property
    def averaging(self) -> bool:
        return self.trigger_step is not None

    def should_trigger(self) -> bool:
        """Algorithm 1's condition on the checks so far (the reference code's): more than
        n earlier checks, and the latest value is above the best of those before the last
        n of them."""
        *previous, current = self.history
        n = self.non_monotone
        return len(previous) > n and current > min(previous[:-n])

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        if self.averaging:
            self.averaged_steps += 1
            weight = 1.0 / (self.averaged_steps + 1)
            for average, variable in zip(self.averages, self.model.trainable_variables):
                average.assign_add((variable.value - average) * weight)
        if self.step % self.check_every:
            return
        self.history.append(float(self.validation_metric(self.model)))
        if not self.averaging and self.should_trigger():
            self.trigger_step = self.step
            self.averages = [tf.Variable(variable.value, trainable=False)
                             for variable in self.model.trainable_variables]

    def on_train_end(self, logs=None):
        if self.averaging:
            for average, variable in zip(self.averages, self.model.trainable_variables):
                variable.assign(average)


__all__ = ["NtAsgd", "causal_lm_nll"]
