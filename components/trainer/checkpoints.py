"""Callbacks of the checkpointed fit (fit_loop.py) that act at a checkpoint.

* `StepLimit` ends the training at exactly the requested optimizer step, inside the last
  (shorter) checkpoint interval, so ``steps: 500`` with ``steps_per_checkpoint: 200`` trains
  200 + 200 + 100 steps, not 3 x 167.
* `CheckpointValidation` evaluates the eval split (``eval_steps`` batches, always the same
  ones: the eval input is read from its start at each call) at every checkpoint and puts the
  results into the epoch-end logs as ``val_<metric>``, where `TrainingCurve`, `BestCheckpoint`
  and TensorBoard find them.
* `BestCheckpoint` keeps the weights of the checkpoint with the best validation metric
  (``keep: best``) beside the training backup, survives a kill and resume, and loads them
  into the model when the training ends, so the exported model is the best one.

Keras's ``ModelCheckpoint(save_best_only=True)`` would lose its best value on a resume (it
starts from infinity again) and has no notion of the chief of a multi-worker run; hence this
small callback of our own.
"""

from __future__ import annotations

import json
import logging
import math
import os
import uuid

import keras
import tensorflow as tf

BEST_STATE = "best_checkpoint.json"
KEEP_CHOICES = ("last", "best")
# The validation metric `keep: best` watches unless a recipe names another; "loss" and
# "val_loss" name the same log (`monitor_name`).
DEFAULT_MONITOR = "loss"
# Validation metrics where lower is better; any other is maximised.
_LOWER_IS_BETTER = ("loss", "error", "perplexity", "mae", "mse", "rmse", "cross_entropy")


def _global_step(model) -> int:
    return int(keras.ops.convert_to_numpy(model.optimizer.iterations))


def monitor_name(monitor: str) -> str:
    """``accuracy`` or ``val_accuracy`` -> ``val_accuracy`` (the epoch-end log name)."""
    return monitor if monitor.startswith("val_") else f"val_{monitor}"


def monitor_mode(monitor: str) -> str:
    """``"min"`` for a loss-like metric (loss, error, perplexity, MAE, MSE), else ``"max"``."""
    name = monitor_name(monitor)[len("val_"):].lower()
    return "min" if any(word in name for word in _LOWER_IS_BETTER) else "max"


def format_metrics(metrics: dict) -> str:
    return ", ".join(f"{name} {value:.4f}" for name, value in metrics.items())


class StepLimit(keras.callbacks.Callback):
    """Stops the fit once the optimizer has taken ``total_steps`` steps (Keras checks
    ``stop_training`` after every batch, then still ends the epoch: the last checkpoint and
    its validation happen at exactly ``total_steps``)."""

    def __init__(self, total_steps: int):
        super().__init__()
        self.total_steps = int(total_steps)

    def on_train_batch_end(self, batch, logs=None):
        if _global_step(self.model) >= self.total_steps:
            self.model.stop_training = True


class CheckpointValidation(keras.callbacks.Callback):
    """Evaluates ``eval_data`` for ``eval_steps`` batches at each epoch (checkpoint) end and
    adds the results to the logs as ``val_<name>``. List it before the callbacks that read
    them (the curve, `BestCheckpoint`, ``BackupAndRestore``).

    Attributes:
        last: the latest results, ``{name: value}`` without the ``val_`` prefix.
    """

    def __init__(self, eval_data, eval_steps: int):
        super().__init__()
        self.eval_data, self.eval_steps = eval_data, max(1, int(eval_steps))
        self.last: dict | None = None

    def on_epoch_end(self, epoch, logs=None):
        results = self.model.evaluate(self.eval_data, steps=self.eval_steps, verbose=0,
                                      return_dict=True)
        self.last = {name: float(value) for name, value in results.items()}
        if logs is not None:
            logs.update({f"val_{name}": value for name, value in self.last.items()})
        logging.info("Validation at step %d (%d eval batches): %s", _global_step(self.model),
                     self.eval_steps, format_metrics(self.last))


class BestCheckpoint(keras.callbacks.Callback):
    """Keeps the weights of the checkpoint whose ``monitor`` (a ``val_*`` log) is best.

    The weights go to ``<directory>/best-<step>.weights.h5`` and the record
    ``{"step", "monitor", "value", "metrics", "weights"}`` to ``best_checkpoint.json`` (the
    JSON is replaced after the new weights are written, then the old weights are removed, so a
    kill at any point leaves a matching pair). A resumed run reads the record and goes on
    comparing against it. At the end of training the best weights are loaded into the model.

    Args:
        directory: the training backup folder (the chief's; a worker's private copy).
        monitor: the validation metric, e.g. ``val_loss`` or ``accuracy``.
        mode: ``"min"`` or ``"max"`` (None: `monitor_mode`).
    """

    def __init__(self, directory: str, monitor: str = DEFAULT_MONITOR,
                 mode: str | None = None):
        super().__init__()
        self.directory = directory
        self.monitor = monitor_name(monitor)
        self.mode = mode or monitor_mode(monitor)
        if self.mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")
        self.state_path = os.path.join(directory, BEST_STATE)
        self.best: dict | None = None

    def on_train_begin(self, logs=None):
        self.best = None
        if tf.io.gfile.exists(self.state_path):
            with tf.io.gfile.GFile(self.state_path) as f:
                saved = json.load(f)
            if saved.get("monitor") == self.monitor and tf.io.gfile.exists(
                    os.path.join(self.directory, saved.get("weights", ""))):
                self.best = saved

    def _better(self, value: float) -> bool:
        if value is None or not math.isfinite(value):
            return False
        if self.best is None:
            return True
        return value < self.best["value"] if self.mode == "min" else value > self.best["value"]

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        if self.monitor not in logs:
            available = sorted(name for name in logs if name.startswith("val_"))
            raise ValueError(f"keep: best monitors {self.monitor!r}, which is not among the "
                             f"validation metrics {available}")
        value, step = float(logs[self.monitor]), _global_step(self.model)
        if not self._better(value):
            return
        tf.io.gfile.makedirs(self.directory)
        weights = f"best-{step}.weights.h5"
        self.model.save_weights(os.path.join(self.directory, weights), overwrite=True)
        previous = self.best
        self.best = {"step": step, "monitor": self.monitor, "value": value, "weights": weights,
                     "metrics": {name[len("val_"):]: float(v) for name, v in logs.items()
                                 if name.startswith("val_")}}
        temporary = f"{self.state_path}.tmp-{uuid.uuid4().hex}"
        with tf.io.gfile.GFile(temporary, "w") as f:
            json.dump(self.best, f)
        tf.io.gfile.rename(temporary, self.state_path, overwrite=True)
        if previous and previous["weights"] != weights:
            old = os.path.join(self.directory, previous["weights"])
            if tf.io.gfile.exists(old):
                tf.io.gfile.remove(old)

    def on_train_end(self, logs=None):
        if self.best is None:
            logging.warning("keep: best found no finite %s; the last weights are kept",
                            self.monitor)
            return
        self.model.load_weights(os.path.join(self.directory, self.best["weights"]))
        logging.info("Keeping the checkpoint of step %d, the best %s (%.4f)",
                     self.best["step"], self.monitor, self.best["value"])


__all__ = ["StepLimit", "CheckpointValidation", "BestCheckpoint", "monitor_mode",
           "monitor_name", "KEEP_CHOICES"]
