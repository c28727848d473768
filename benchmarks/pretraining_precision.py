"""The loss-curve half of the bfloat16 comparison in `pretraining.py`: the project's BERT
(MLM + NSP) trained for N steps from the same seed under ``runtime.precision: float32``
and ``mixed_bfloat16`` (components/trainer/precision.py, the recipe switch), on the same
batches, with the same initial weights; a third run, float32 with the same initial weights
but other dropout draws, gives the run-to-run noise the bfloat16 difference is compared
with.

The batches are `pretraining.encoder_data`'s layout with Zipf-distributed token ids
(``zipf=1.1``), so the masked-LM loss has something to learn (the unigram distribution,
then co-occurrences) and falls over the first steps as on text, instead of staying at
ln(V) as on uniform random ids.
"""

from __future__ import annotations

import keras
import numpy as np

from lmfactory.components.trainer.precision import precision_policy

import common  # noqa: E402  (benchmarks/ is on sys.path: pretraining.py puts it there)

RUNS = ("float32", "mixed_bfloat16", "float32, other dropout draws")


class StepLosses(keras.callbacks.Callback):
    """The loss of every training step (the metrics are reset before each step, so the
    logged loss is that step's, not the running mean of the epoch)."""

    def __init__(self):
        super().__init__()
        self.losses = []

    def on_train_batch_begin(self, batch, logs=None):
        self.model.reset_metrics()

    def on_train_batch_end(self, batch, logs=None):
        self.losses.append(float(logs["loss"]))


def loss_curves(build, data, steps: int, seed: int, strategy) -> dict:
    """{run: [loss at step 1..steps]} for the `RUNS`. ``build(precision)`` returns the
    compiled task model under that precision (called inside its policy and ``strategy``'s
    scope); the global seed is reset before each build, so the float32 and bfloat16 runs
    start from the same weights and draw the same dropout masks. The third run takes the
    first run's initial weights and a model built under another seed (other dropout
    seeds)."""
    curves, initial = {}, None
    for run in RUNS:
        precision = "mixed_bfloat16" if run == "mixed_bfloat16" else "float32"
        keras.utils.set_random_seed(seed + (1 if run == RUNS[2] else 0))
        with precision_policy(precision), strategy.scope():
            model = build(precision)
        if initial is None:
            initial = model.get_weights()
        elif run == RUNS[2]:
            model.set_weights(initial)
        recorder = StepLosses()
        model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[recorder])
        curves[run] = recorder.losses
        del model
        keras.backend.clear_session()
    return curves


def curve_table(curves: dict, label: str, every: int) -> common.Table:
    """Every ``every``-th step of the three curves, and the last one; then the mean and
    largest absolute differences to the float32 curve."""
    single, mixed, other = (np.asarray(curves[run]) for run in RUNS)
    steps = len(single)
    shown = sorted(set(range(every - 1, steps, every)) | {0, steps - 1})
    rows = [[step + 1, single[step], mixed[step], other[step], mixed[step] - single[step],
             other[step] - single[step]] for step in shown]
    rows.append(["mean abs", "", "", "", float(np.mean(np.abs(mixed - single))),
                 float(np.mean(np.abs(other - single)))])
    rows.append(["max abs", "", "", "", float(np.max(np.abs(mixed - single))),
                 float(np.max(np.abs(other - single)))])
    return common.Table(
        f"Loss curve, float32 vs mixed_bfloat16 ({label}, same seed, {steps} steps)",
        ["step", "float32 loss", "bf16 loss", "float32 (other dropout) loss",
         "bf16 - float32", "float32 other dropout - float32"], rows,
        "MLM + NSP training loss of each step (not a running mean), AdamW lr 1e-4, dropout "
        "0.1, Zipf-distributed token ids. The last column is the noise: the same initial "
        "weights with other dropout draws. bf16 matches float32 within noise when its "
        "difference is of the same size or smaller.")


def curve_plot(path: str, curves: dict, label: str) -> str:
    steps = list(range(1, len(curves[RUNS[0]]) + 1))
    return common.line_plot(path, f"Training loss, float32 vs bf16 ({label})", "step",
                            "loss", {run: (steps, curves[run]) for run in RUNS})
