"""The model's random-number state kept with the training backup, so a resumed run draws the
same dropout masks as an uninterrupted one (exact resume).

Keras ``BackupAndRestore`` checkpoints the weights and the optimizer; the states of the
layers' ``SeedGenerator``s (dropout and every other Keras random op) are not among a layer's
saved variables, so a restored model would replay the masks of step 0. `RandomStateBackup`
saves those states at each checkpoint interval, keyed by the number of finished intervals, and
puts back the ones matching the interval ``BackupAndRestore`` restored. It keeps the two
newest intervals: a kill between its write and the checkpoint's still finds a match.
"""

from __future__ import annotations

import io
import json
import logging
import os

import keras
import numpy as np
import tensorflow as tf

STATE_FILE = "random_state.npz"
KEPT_INTERVALS = 2


def random_state_variables(model) -> list:
    """The model's variables that are neither weights nor metrics: the seed states."""
    weights = {id(variable) for variable in model.weights}
    return [variable for variable in model.variables if id(variable) not in weights]


def _layout(variables) -> list:
    """What identifies the seed states across processes: their order, shapes and dtypes.
    Not their paths: Keras numbers auto-named layers and seed generators per process
    (``seed_generator_12``), so the same model built after other stages ran in the process
    (a whole DAG in one LocalDagRunner process) or after none (a re-run whose earlier
    stages are cached) names them differently."""
    return [[list(variable.shape), str(variable.dtype)] for variable in variables]


class RandomStateBackup(keras.callbacks.Callback):
    """Saves the seed states at each epoch end into ``backup_dir`` and, when a training
    resumes at epoch k (``BackupAndRestore`` restored the weights), puts back those saved
    after epoch k before its first step. List it BEFORE ``BackupAndRestore``: at an epoch end
    the states are written first, so the checkpoint never runs ahead of them."""

    def __init__(self, backup_dir: str):
        super().__init__()
        self.path = os.path.join(backup_dir, STATE_FILE)
        self._first_epoch = True

    def _read(self) -> dict:
        if not tf.io.gfile.exists(self.path):
            return {}
        with tf.io.gfile.GFile(self.path, "rb") as f:
            stored = np.load(io.BytesIO(f.read()))
            return {key: stored[key] for key in stored.files}

    def on_train_begin(self, logs=None):
        self._first_epoch = True

    def on_epoch_begin(self, epoch, logs=None):
        # Every callback's on_train_begin has run: `epoch` is where the fit resumes.
        if not self._first_epoch:
            return
        self._first_epoch = False
        variables = random_state_variables(self.model)
        if not epoch or not variables:
            return
        stored = self._read()
        layout = json.loads(str(stored.get("layout", "[]")))
        prefix = f"epoch{epoch}_"
        if layout != _layout(variables) or f"{prefix}0" not in stored:
            logging.warning("No random state saved for checkpoint interval %d in %s: dropout "
                            "masks after the resume differ from an uninterrupted run's",
                            epoch, self.path)
            return
        for index, variable in enumerate(variables):
            variable.assign(stored[f"{prefix}{index}"])
        logging.info("Restored the random state of checkpoint interval %d", epoch)

    def on_epoch_end(self, epoch, logs=None):
        variables = random_state_variables(self.model)
        stored = self._read()
        kept = sorted({int(key[5:].split("_")[0]) for key in stored if key.startswith("epoch")})
        keep = set(kept[-(KEPT_INTERVALS - 1):]) if KEPT_INTERVALS > 1 else set()
        arrays = {key: value for key, value in stored.items()
                  if key.startswith("epoch") and int(key[5:].split("_")[0]) in keep}
        arrays.update({f"epoch{epoch + 1}_{index}": np.asarray(variable.numpy())
                       for index, variable in enumerate(variables)})
        arrays["layout"] = np.array(json.dumps(_layout(variables)))
        tf.io.gfile.makedirs(os.path.dirname(self.path))
        temporary = self.path + ".tmp"
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        with tf.io.gfile.GFile(temporary, "wb") as f:
            f.write(buffer.getvalue())
        tf.io.gfile.rename(temporary, self.path, overwrite=True)

    def on_train_end(self, logs=None):
        if tf.io.gfile.exists(self.path):  # the training finished: nothing to resume
            tf.io.gfile.remove(self.path)


__all__ = ["RandomStateBackup", "random_state_variables"]
