"""The Trainer's checkpointed fit, shared by every task kind (run_fn.StageContext.fit).

One Keras "epoch" per checkpoint interval of ``steps_per_checkpoint`` optimizer steps; the
last interval is shorter when the steps asked are not a multiple of it (`StepLimit` stops the
fit at exactly ``total_steps``: 500 steps with checkpoints every 200 train 200 + 200 + 100).
At each checkpoint, in this order:

1. the eval split is evaluated for ``eval_steps`` batches (`CheckpointValidation`);
2. with ``keep: best`` the weights are kept when the monitored validation metric improved
   (`BestCheckpoint`);
3. the training curve, with the validation point, is written (`TrainingCurve`);
4. the random state and the weights + optimizer (``BackupAndRestore``) are written.

A run killed and run again resumes from the last checkpoint: the input skips the batches the
checkpointed steps consumed, so it continues exactly as an uninterrupted run would.

Multi-worker (MultiWorkerMirroredStrategy): every worker runs this same code (saving weights
reads variables that the collective ops keep in step), but only the chief writes to the
backup folder; another worker works in a private temporary copy of it (resuming from the
chief's checkpoint) that is removed when the fit ends.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os

import keras
import tensorflow as tf

from lmfactory.components.trainer import random_state, training_curve
from lmfactory.components.trainer.checkpoints import (
    DEFAULT_MONITOR, BestCheckpoint, CheckpointValidation, StepLimit, format_metrics)
from lmfactory.components.trainer.progress import ProgressLogger
from lmfactory.components.trainer.strategy import is_chief, private_copy, worker_role

BACKUP_METADATA = "training_metadata.json"  # written by keras.callbacks.BackupAndRestore
BACKUP_WEIGHTS = "latest.weights.h5"  # its weights, and both files' previous copies:
PREVIOUS_SUFFIX = ".bkp"  # it copies them to ``<name>.bkp`` before writing new ones
CURVE_STATE = "training_curve.json"


@dataclasses.dataclass(frozen=True)
class FitSettings:
    """What the fit needs beyond the model and data (from `TrainerConfig` and ``fn_args``)."""
    total_steps: int
    steps_per_checkpoint: int
    eval_steps: int = 1
    batch_size: int | None = None
    validate_checkpoints: bool = True
    keep: str = "last"  # or "best"
    monitor: str = DEFAULT_MONITOR
    progress_seconds: float | None = 30.0


def checkpoint_intervals(total_steps: int, steps_per_checkpoint: int) -> tuple[int, int]:
    """``(epochs, steps_per_epoch)``: whole intervals of ``steps_per_checkpoint`` steps (fewer
    when the training is shorter), the last one cut short by `StepLimit`."""
    if total_steps < 1 or steps_per_checkpoint < 1:
        raise ValueError(f"total_steps and steps_per_checkpoint must be >= 1, got "
                         f"{total_steps} and {steps_per_checkpoint}")
    steps_per_epoch = min(int(steps_per_checkpoint), int(total_steps))
    return math.ceil(total_steps / steps_per_epoch), steps_per_epoch


def _read_epoch(path: str) -> int | None:
    """The ``epoch`` of a backup metadata file; None when it does not parse."""
    try:
        with tf.io.gfile.GFile(path) as f:
            return int(json.load(f)["epoch"])
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def _modified_ns(path: str) -> int:
    """A file's modification time in ns: the file system's own for a local file
    (``tf.io.gfile.stat`` rounds local times to whole seconds), the store's for a remote
    one."""
    if "://" in path:
        return tf.io.gfile.stat(path).mtime_nsec
    return os.stat(path).st_mtime_ns


def _modified_after(path: str, other: str) -> bool:
    return _modified_ns(path) > _modified_ns(other)


def repair_backup(backup_dir: str) -> None:
    """Puts a backup whose weights and metadata do not belong together back to the checkpoint
    before it.

    ``BackupAndRestore`` (with ``double_checkpoint``) copies the weights and the metadata to
    ``.bkp``, then writes the new weights, then the new metadata. A run killed after the
    weights leaves the next interval's weights beside the metadata of the interval before
    (older than the weights), or beside a half-written metadata file; killed after the
    first interval's weights, beside none. Keras falls back to the ``.bkp`` pair only when
    the weights do not load: it would resume the newer weights at the older step (or at step
    0), and it stops on a half-written metadata file. This restores the ``.bkp`` pair in
    those cases; with no previous pair the backup's metadata and weights are removed and the
    training starts over."""
    path = os.path.join(backup_dir, BACKUP_METADATA)
    weights = os.path.join(backup_dir, BACKUP_WEIGHTS)
    if not tf.io.gfile.exists(path):
        problem = "is missing beside its weights" if tf.io.gfile.exists(weights) else None
    elif _read_epoch(path) is None:
        problem = "is unreadable (a run killed while writing it)"
    elif tf.io.gfile.exists(weights) and _modified_after(weights, path):
        problem = ("is older than the weights beside it (a run killed after writing the "
                   "weights)")
    else:
        problem = None
    if problem is None:
        return
    previous = (path + PREVIOUS_SUFFIX, weights + PREVIOUS_SUFFIX)
    if all(tf.io.gfile.exists(name) for name in previous) and \
            _read_epoch(previous[0]) is not None:
        logging.warning("The checkpoint metadata %s %s; resuming from the checkpoint before "
                        "it", path, problem)
        tf.io.gfile.copy(previous[1], weights, overwrite=True)
        tf.io.gfile.copy(previous[0], path, overwrite=True)
        return
    logging.warning("The checkpoint metadata %s %s and no earlier checkpoint is kept; "
                    "training starts over", path, problem)
    for name in (path, weights):
        if tf.io.gfile.exists(name):
            tf.io.gfile.remove(name)


def checkpointed_epochs(backup_dir: str) -> int:
    """How many checkpoint intervals ("epochs") the backup in ``backup_dir`` has finished
    (Keras ``BackupAndRestore``'s ``training_metadata.json``); 0 without a backup."""
    path = os.path.join(backup_dir, BACKUP_METADATA)
    if not tf.io.gfile.exists(path):
        return 0
    return _read_epoch(path) or 0  # unreadable: `repair_backup` runs before the fit reads it


def resume_input(train_data, backup_dir: str, steps_per_epoch: int, total_steps: int):
    """The training input of a resumed run continues where the killed one stopped: the
    batches the checkpointed steps consumed are skipped (the input is a repeated, seeded
    dataset, so the continuation equals an uninterrupted run's). Only whole intervals are
    ever checkpointed before the last one, so ``epochs * steps_per_epoch`` is the step."""
    done = min(checkpointed_epochs(backup_dir) * steps_per_epoch, total_steps)
    if not done:
        return train_data
    logging.info("Resuming from the checkpoint in %s at step %d of %d; skipping the %d "
                 "batches already trained on", backup_dir, done, total_steps, done)
    return train_data.skip(done) if isinstance(train_data, tf.data.Dataset) else train_data


def fit_checkpointed(task_model, train_data, eval_data, settings: FitSettings,
                     backup_dir: str, log_dir: str | None = None,
                     extra_callbacks=()) -> tuple[dict, dict]:
    """Trains ``task_model`` (compiled, inside its strategy's scope) for exactly
    ``settings.total_steps`` optimizer steps with a checkpoint every
    ``settings.steps_per_checkpoint``; returns ``(metrics, curve)``: the eval-split metrics of
    the kept weights (the last checkpoint's, or the best one's with ``keep: best``) and the
    training curve (with the validation points and the kept checkpoint)."""
    if settings.keep == "best" and not settings.validate_checkpoints:
        raise ValueError("keep: best needs the validation at each checkpoint")
    chief = is_chief(task_model.distribute_strategy)
    work_dir = backup_dir if chief else private_copy(backup_dir)
    if not chief:
        logging.info("%s is not the chief: its checkpoints go to the temporary folder %s, "
                     "removed at the end", worker_role(), work_dir)
        log_dir = os.path.join(work_dir, "logs") if log_dir else None
    try:
        return _fit(task_model, train_data, eval_data, settings, work_dir, log_dir,
                    list(extra_callbacks))
    finally:
        if not chief and tf.io.gfile.exists(work_dir):
            tf.io.gfile.rmtree(work_dir)


def build_optimizer(task_model) -> None:
    """Creates the optimizer's slot variables before the train step is traced.

    Under the default strategy Keras defers this to the first trace of the train function,
    and a ``tf.function`` whose first trace creates variables is traced twice (once lifting
    the variables' initializers out of the graph, once more without variable creation): the
    whole train step, model, loss and update, is built a second time, and every slot
    variable is created through the initializer-lifting path. A model with unbuilt layers
    (variables that only exist after a first call) keeps Keras' deferred build."""
    optimizer = getattr(task_model, "optimizer", None)
    if optimizer is None or optimizer.built:
        return
    if not all(layer.built for layer in task_model._flatten_layers()):
        return
    with task_model.distribute_strategy.scope():
        optimizer.build(task_model.trainable_variables)


def _fit(task_model, train_data, eval_data, settings, backup_dir, log_dir, extra) -> tuple:
    total = settings.total_steps
    epochs, steps_per_epoch = checkpoint_intervals(total, settings.steps_per_checkpoint)
    repair_backup(backup_dir)
    train_data = resume_input(train_data, backup_dir, steps_per_epoch, total)
    # The curve is saved beside the checkpoint (before it at each epoch end), so a resumed
    # run continues it.
    curve = training_curve.TrainingCurve(training_curve.default_interval(total),
                                         state_path=os.path.join(backup_dir, CURVE_STATE))
    validation = (CheckpointValidation(eval_data, settings.eval_steps)
                  if settings.validate_checkpoints else None)
    best = (BestCheckpoint(backup_dir, settings.monitor) if settings.keep == "best" else None)
    callbacks = [
        StepLimit(total),
        ProgressLogger(total, settings.batch_size, every_seconds=settings.progress_seconds),
        *([validation] if validation else []),  # first: the others read its val_* logs
        *([best] if best else []),  # loads the best weights at train end, before the backup
        curve,                      # goes
        random_state.RandomStateBackup(backup_dir),  # before the checkpoint it belongs to
        # double_checkpoint: the previous checkpoint is kept beside the last one, for a kill
        # while the last one was written (`repair_backup`; Keras itself for the weights).
        keras.callbacks.BackupAndRestore(backup_dir, double_checkpoint=True),
        *([keras.callbacks.TensorBoard(log_dir=log_dir, update_freq="epoch")]
          if log_dir else []),
        *extra,
    ]
    last = total - (epochs - 1) * steps_per_epoch
    logging.info("Training %d steps (%d checkpoints: every %d steps%s), global batch %s%s",
                 total, epochs, steps_per_epoch,
                 f", the last after {last}" if last != steps_per_epoch else "",
                 settings.batch_size,
                 f"; validating {settings.eval_steps} eval batches at each checkpoint"
                 if validation else "")
    build_optimizer(task_model)
    task_model.fit(train_data, epochs=epochs, steps_per_epoch=steps_per_epoch,
                   callbacks=callbacks, verbose=2)
    result = dict(curve.curve)
    if best is not None and best.best is not None:
        result["best"] = {key: best.best[key] for key in ("step", "monitor", "value")}
        metrics = dict(best.best["metrics"])
    elif validation is not None and validation.last is not None:
        metrics = dict(validation.last)  # the last checkpoint is the end of training
    else:
        metrics = task_model.evaluate(eval_data, steps=max(1, settings.eval_steps),
                                      return_dict=True, verbose=0)
        metrics = {name: float(value) for name, value in metrics.items()}
    logging.info("Evaluation after training (%d eval batches): %s", settings.eval_steps,
                 format_metrics(metrics))
    return metrics, result


__all__ = ["FitSettings", "fit_checkpointed", "checkpoint_intervals", "checkpointed_epochs",
           "resume_input"]
