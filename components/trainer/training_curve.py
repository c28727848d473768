"""A training-curve recorder for the Trainer that survives a kill and resume.

``TrainingCurve`` is a Keras callback that keeps, every ``every_n_steps`` optimizer steps, the
mean of each logged training metric (the loss first of all) over the steps since the last
point. The curve it holds, and writes as JSON, is::

    {"steps": [4, 8, 12],                      # global optimizer steps, strictly increasing
     "metrics": {"loss": [0.9, 0.7, 0.6], ...}, # one value (or null) per step
     "validation": {"steps": [6, 12],          # optional: the eval split at each checkpoint
                    "metrics": {"loss": [0.8, 0.75], "accuracy": [0.6, 0.7]}},
     "best": {"step": 12, "monitor": "val_accuracy", "value": 0.7},  # optional: kept one
     "pending": {"step": 14, "count": 2, "sums": {"loss": 1.1}}}  # only in the state file

Validation points come from the ``val_<metric>`` entries a checkpoint's epoch-end logs carry
(``fit_loop.CheckpointValidation`` puts them there before this callback runs), recorded at the
global step of the checkpoint.

``pending`` is the part of the interval after the last point that has been seen but not yet
recorded (its metric sums over ``count`` steps, up to global step ``step``), so a run resumed
from a checkpoint taken at that step finishes the interval exactly.

Keras 3 logs, at the end of each batch, the running mean of every metric since the start of
the epoch (the trackers are reset each epoch), so the callback turns them back into sums
(``sum_k = mean_k * k`` after ``k`` batches of the epoch) and takes the differences. That is
exact for mean-type metrics (the loss, accuracy, MAE) with a fixed batch size; the loss
tracker weights each batch by its size, so a ragged last batch shifts the figure slightly.

Resume: with ``state_path`` the curve is written there at every epoch end and at the end of
training. A new callback with the same path loads it; once ``BackupAndRestore`` has restored
the optimizer (the check runs at the first ``on_epoch_begin``, after every callback's
``on_train_begin``, so the list order of the two callbacks does not matter for loading),
points after the restored step are dropped, since those steps will be trained again. Put
``TrainingCurve`` before ``BackupAndRestore`` in the callback list so that at an epoch end
the curve is written before the checkpoint: a kill between the two writes then leaves the
curve ahead of the checkpoint (trimmed on resume) rather than behind it (a gap).
"""

from __future__ import annotations

import json
import math
import os
import uuid

import keras
import numpy as np
import tensorflow as tf


def default_interval(total_steps: int, points: int = 100) -> int:
    """The recording interval that gives about ``points`` points over ``total_steps``."""
    return max(1, int(total_steps) // max(1, int(points)))


def _is_number(value) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)) or value is None


def _validate_points(points, fail, where: str = "") -> None:
    """Checks ``{"steps": [...], "metrics": {name: [...]}}``."""
    if not isinstance(points, dict):
        fail(f"{where}expected an object with 'steps' and 'metrics'")
    steps, metrics = points.get("steps"), points.get("metrics")
    if not isinstance(steps, list) or not all(
            isinstance(s, int) and not isinstance(s, bool) for s in steps):
        fail(f"{where}'steps' must be a list of integers")
    if any(b <= a for a, b in zip(steps, steps[1:])):
        fail(f"{where}'steps' must be strictly increasing, got {steps}")
    if not isinstance(metrics, dict):
        fail(f"{where}'metrics' must be an object of metric name to values")
    for name, values in metrics.items():
        if not isinstance(values, list) or not all(_is_number(v) for v in values):
            fail(f"{where}metric {name!r} must be a list of numbers")
        if len(values) != len(steps):
            fail(f"{where}metric {name!r} has {len(values)} values for {len(steps)} steps")


def _validate(curve, source: str) -> dict:
    """Checks the curve's shape and returns it; ValueError naming ``source`` otherwise."""
    def fail(problem: str):
        raise ValueError(f"Malformed training curve {source}: {problem}")

    if not isinstance(curve, dict):
        fail(f"expected a JSON object, got {type(curve).__name__}")
    _validate_points(curve, fail)
    if curve.get("validation") is not None:
        _validate_points(curve["validation"], fail, "validation: ")
    best = curve.get("best")
    if best is not None and (not isinstance(best, dict) or not isinstance(best.get("step"), int)
                             or not isinstance(best.get("monitor"), str)
                             or not _is_number(best.get("value"))):
        fail("'best' must hold an integer 'step', a 'monitor' name and a numeric 'value'")
    pending = curve.get("pending")
    if pending is not None:
        if (not isinstance(pending, dict) or not isinstance(pending.get("step"), int)
                or not isinstance(pending.get("count"), int)
                or not isinstance(pending.get("sums"), dict)
                or not all(_is_number(v) and v is not None for v in pending["sums"].values())):
            fail("'pending' must hold an integer 'step', an integer 'count' and numeric 'sums'")
    return curve


def _json_value(value):
    """NaN and infinities as JSON null, so the file stays standard JSON."""
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def _json_points(points: dict) -> dict:
    return {"steps": [int(s) for s in points["steps"]],
            "metrics": {name: [_json_value(v) for v in values]
                        for name, values in points["metrics"].items()}}


def _append_point(points: dict, step: int, values: dict) -> None:
    """Appends ``values`` (metric name -> number) at ``step``; a metric missing on either
    side gets null."""
    steps, metrics = points["steps"], points["metrics"]
    for name in values:
        metrics.setdefault(name, [None] * len(steps))
    for name, column in metrics.items():
        column.append(values.get(name))
    steps.append(step)


def _points_until(points: dict, step: int) -> dict:
    keep = sum(1 for s in points["steps"] if s <= step)
    return {"steps": points["steps"][:keep],
            "metrics": {name: values[:keep] for name, values in points["metrics"].items()}}


def save_curve(curve: dict, path: str) -> None:
    """Writes ``curve`` to ``path`` as JSON atomically (a temporary file, then a rename), so a
    kill never leaves half a file; any ``tf.io.gfile`` path (``gs://`` too)."""
    _validate(curve, "to save")
    data = _json_points(curve)
    if curve.get("validation") is not None:
        data["validation"] = _json_points(curve["validation"])
    if curve.get("best") is not None:
        best = curve["best"]
        data["best"] = {"step": int(best["step"]), "monitor": best["monitor"],
                        "value": _json_value(best["value"])}
    if curve.get("pending") is not None:
        pending = curve["pending"]
        data["pending"] = {"step": int(pending["step"]), "count": int(pending["count"]),
                           "sums": {k: float(v) for k, v in pending["sums"].items()}}
    directory = os.path.dirname(path)
    if directory:
        tf.io.gfile.makedirs(directory)
    temporary = f"{path}.tmp-{uuid.uuid4().hex}"
    with tf.io.gfile.GFile(temporary, "w") as f:
        f.write(json.dumps(data, indent=1))
    tf.io.gfile.rename(temporary, path, overwrite=True)


def load_curve(path: str) -> dict | None:
    """The curve saved at ``path``; None when there is no file. ValueError on a file that is
    not a curve."""
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as f:
        text = f.read()
    try:
        curve = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"Malformed training curve {path}: not JSON ({error})") from error
    return _validate(curve, path)


class TrainingCurve(keras.callbacks.Callback):
    """Records the mean of each training metric every ``every_n_steps`` optimizer steps.

    Attributes:
        curve: ``{"steps": [...], "metrics": {name: [...]}}``, the points recorded so far
            (global optimizer steps, read from ``model.optimizer.iterations``), with
            ``"validation"`` once a checkpoint's logs carried ``val_*`` metrics.
        every_n_steps: the interval, in optimizer steps, between points.
        state_path: where the curve is kept across a kill and resume (None: in memory only).
    """

    def __init__(self, every_n_steps: int, state_path: str | None = None):
        super().__init__()
        if int(every_n_steps) < 1:
            raise ValueError(f"every_n_steps must be at least 1, got {every_n_steps}")
        self.every_n_steps = int(every_n_steps)
        self.state_path = state_path
        self.curve = {"steps": [], "metrics": {}}
        # The open interval: metric sums and step count since the last point, up to _step.
        self._sums: dict[str, float] = {}
        self._count = 0
        self._step: int | None = None
        # Running sums of the current epoch, to undo Keras's running means.
        self._epoch_sums: dict[str, float] = {}
        self._epoch_batches = 0
        self._synced = False

    def _global_step(self) -> int:
        return int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))

    def on_train_begin(self, logs=None):
        if self.state_path:
            saved = load_curve(self.state_path)
            if saved is not None:
                self.curve = {"steps": saved["steps"], "metrics": saved["metrics"]}
                if saved.get("validation") is not None:
                    self.curve["validation"] = saved["validation"]
                pending = saved.get("pending") or {"step": None, "count": 0, "sums": {}}
                self._step, self._count = pending["step"], pending["count"]
                self._sums = dict(pending["sums"])
        self._synced = False

    def _resume_at(self, step: int) -> None:
        """Drops what came after ``step`` (trained again from the checkpoint) and keeps the
        open interval only if it ends exactly at ``step``."""
        validation = self.curve.get("validation")
        self.curve = _points_until(self.curve, step)
        if validation is not None:
            self.curve["validation"] = _points_until(validation, step)
        if self._step != step:
            self._sums, self._count = {}, 0
        self._step = step

    def on_epoch_begin(self, epoch, logs=None):
        step = self._global_step()
        if not self._synced:  # every on_train_begin (BackupAndRestore's too) has run
            self._resume_at(step)
            self._synced = True
        self._epoch_sums, self._epoch_batches = {}, 0

    def on_train_batch_end(self, batch, logs=None):
        batches = batch + 1  # batches since the metrics were reset (end index of the step)
        for name, value in (logs or {}).items():
            value = np.asarray(value)
            if value.ndim != 0 or not np.issubdtype(value.dtype, np.number):
                continue
            running_sum = float(value) * batches
            self._sums[name] = (self._sums.get(name, 0.0) + running_sum
                                - self._epoch_sums.get(name, 0.0))
            self._epoch_sums[name] = running_sum
        self._count += batches - self._epoch_batches
        self._epoch_batches = batches
        previous, step = self._step, self._global_step()
        self._step = step
        if previous is None or step // self.every_n_steps > previous // self.every_n_steps:
            self._record(step)

    def _record(self, step: int) -> None:
        """Appends the means of the open interval as the point at ``step``."""
        if self._count <= 0:
            return
        _append_point(self.curve, step,
                      {name: total / self._count for name, total in self._sums.items()})
        self._sums, self._count = {}, 0

    def _record_validation(self, logs: dict) -> None:
        """The checkpoint's ``val_*`` metrics as a validation point at the global step."""
        values = {name[len("val_"):]: float(value) for name, value in (logs or {}).items()
                  if name.startswith("val_") and _is_number(value) and value is not None}
        if not values:
            return
        step = self._global_step()
        points = self.curve.setdefault("validation", {"steps": [], "metrics": {}})
        if points["steps"] and points["steps"][-1] >= step:
            return  # already recorded (a repeated epoch end)
        _append_point(points, step, values)

    def _save(self) -> None:
        if not self.state_path:
            return
        state = dict(self.curve)
        if self._count > 0:
            state["pending"] = {"step": self._step, "count": self._count, "sums": self._sums}
        save_curve(state, self.state_path)

    def on_epoch_end(self, epoch, logs=None):
        self._record_validation(logs)
        self._save()

    def on_train_end(self, logs=None):
        if self._count > 0 and self._step is not None and (
                not self.curve["steps"] or self._step > self.curve["steps"][-1]):
            self._record(self._step)
        self._save()
