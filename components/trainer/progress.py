"""Progress inside a checkpoint interval: a Keras callback that logs the step, loss, rate and
ETA through ``logging`` (the lines the LocalDagRunner and Vertex show), so a long interval is
not silent between Keras's one line per "epoch".

Keras's own progress bar redraws a terminal line (useless in a log) or, with ``verbose=2``,
prints once per epoch; `ProgressLogger` logs at a time cadence OR a step cadence, whichever
comes first, and its clock is injectable for tests.
"""

from __future__ import annotations

import logging
import math
import time

import keras
import numpy as np


def format_duration(seconds: float) -> str:
    """``3725.2`` -> ``"1:02:05"``; ``"?"`` when unknown."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "?"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def default_every_steps(total_steps: int, lines: int = 20) -> int:
    """The step cadence that gives about ``lines`` lines over a run (the time cadence wins on
    a slow run)."""
    return max(1, int(total_steps) // lines)


class ProgressLogger(keras.callbacks.Callback):
    """Logs ``step s/N (p%), loss L, r steps/s (e examples/s), ETA h:mm:ss`` every
    ``every_seconds`` seconds or every ``every_steps`` optimizer steps, whichever comes first,
    and at the last step.

    The step is the global optimizer step (``model.optimizer.iterations``), so a resumed run
    continues the count. The rate is measured from the end of the run's first batch (which
    includes tracing and compilation) to now; the ETA divides the remaining steps by it. The
    loss is the one Keras logs: the running mean since the start of the checkpoint interval.

    Args:
        total_steps: the optimizer steps of the whole training.
        batch_size: the global batch size, for examples/s (None: steps/s only).
        every_seconds: the time cadence (seconds; None: none).
        every_steps: the step cadence (None: `default_every_steps`).
        clock: a function returning seconds (``time.monotonic``); tests pass a fake one.
        logger: where the lines go (the root logger by default, as the Trainer's others).
    """

    def __init__(self, total_steps: int, batch_size: int | None = None,
                 every_seconds: float | None = 30.0, every_steps: int | None = None,
                 clock=time.monotonic, logger: logging.Logger | None = None):
        super().__init__()
        if int(total_steps) < 1:
            raise ValueError(f"total_steps must be at least 1, got {total_steps}")
        self.total_steps = int(total_steps)
        self.batch_size = batch_size
        self.every_seconds = every_seconds
        self.every_steps = int(every_steps or default_every_steps(total_steps))
        self.clock = clock
        self.logger = logger or logging.getLogger()
        self._start: tuple[int, float] | None = None  # (step, time) at the first batch's end
        self._last: tuple[int, float] | None = None  # (step, time) of the last line

    def _global_step(self) -> int:
        return int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))

    def on_train_begin(self, logs=None):
        self._start = self._last = None

    def on_train_batch_end(self, batch, logs=None):
        step, now = self._global_step(), self.clock()
        if self._start is None:
            self._start = self._last = (step, now)
            return
        last_step, last_time = self._last
        due = (step - last_step >= self.every_steps or step >= self.total_steps
               or (self.every_seconds is not None and now - last_time >= self.every_seconds))
        if due and step > last_step:
            self.logger.info("%s", self.message(step, now, logs))
            self._last = (step, now)

    def rate(self, step: int, now: float) -> float | None:
        """Steps per second since the first batch of this run; None before any time passed."""
        start_step, start_time = self._start
        if now <= start_time or step <= start_step:
            return None
        return (step - start_step) / (now - start_time)

    def message(self, step: int, now: float, logs=None) -> str:
        parts = [f"Training progress: step {step}/{self.total_steps} "
                 f"({100.0 * step / self.total_steps:.0f}%)"]
        loss = (logs or {}).get("loss")
        if loss is not None and np.ndim(loss) == 0:
            parts.append(f"loss {float(loss):.4f}")
        rate = self.rate(step, now)
        if rate is not None:
            speed = f"{rate:.2f} steps/s"
            if self.batch_size:
                speed += f" ({rate * self.batch_size:.1f} examples/s)"
            parts.append(speed)
            parts.append(f"ETA {format_duration(max(0, self.total_steps - step) / rate)}")
        else:
            parts.append("ETA ?")
        return ", ".join(parts)


__all__ = ["ProgressLogger", "format_duration", "default_every_steps"]
