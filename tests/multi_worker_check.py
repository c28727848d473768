"""Run as a script by test_multiworker.py: one worker of a MultiWorkerMirroredStrategy run
(TF_CONFIG in the environment) or, without TF_CONFIG, the one-worker reference. Trains a tiny
classifier through the project's training path (strategy.make_strategy, optimization, and
fit_loop.fit_checkpointed) on a fixed global batch of 8 and writes what it saw as JSON.

Argument: a JSON spec {"backup", "out", "steps", "every", "pause_at", "ready"}. With
``pause_at`` worker 1 stops before that optimizer step, writes the ``ready`` file and waits to
be killed (the test kills it at a known point: the chief's checkpoint of the interval before).
"""

import json
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from lmfactory.components.trainer import fit_loop  # noqa: E402
from lmfactory.components.trainer.optimization import make_optimizer  # noqa: E402
from lmfactory.components.trainer.strategy import is_chief, make_strategy  # noqa: E402

GLOBAL_BATCH, FEATURES, CLASSES = 8, 6, 3


def dataset(seed: int) -> tf.data.Dataset:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(64, FEATURES)).astype("float32")
    y = (x[:, 0] > 0).astype("int32") + (x[:, 1] > 0.5).astype("int32")
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(GLOBAL_BATCH)


class PauseBefore(keras.callbacks.Callback):
    def __init__(self, step: int, ready: str):
        super().__init__()
        self.step, self.ready = step, ready

    def on_train_batch_begin(self, batch, logs=None):
        if int(keras.ops.convert_to_numpy(self.model.optimizer.iterations)) == self.step - 1:
            with open(self.ready, "w") as f:
                f.write(str(self.step))
            while True:  # killed by the test
                time.sleep(1)


def main(spec: dict) -> None:
    strategy = make_strategy("auto")
    keras.utils.set_random_seed(7)
    with strategy.scope():
        model = keras.Sequential([keras.Input((FEATURES,)),
                                  keras.layers.Dense(16, activation="tanh"),
                                  keras.layers.Dense(CLASSES)])
        model.compile(optimizer=make_optimizer(5e-2, spec["steps"], 0.1, 0.01, 1.0),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
    extra = ([PauseBefore(spec["pause_at"], spec["ready"])]
             if spec.get("pause_at") and task.get("index") == 1 else [])
    settings = fit_loop.FitSettings(total_steps=spec["steps"],
                                    steps_per_checkpoint=spec["every"], eval_steps=2,
                                    batch_size=GLOBAL_BATCH)
    metrics, curve = fit_loop.fit_checkpointed(model, dataset(0), dataset(1), settings,
                                               spec["backup"], extra_callbacks=extra)
    with open(spec["out"], "w") as f:
        json.dump({"replicas": strategy.num_replicas_in_sync, "chief": is_chief(strategy),
                   "metrics": metrics, "curve": curve,
                   "iterations": int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
                   "weights": [w.tolist() for w in model.get_weights()]}, f)


if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.INFO, force=True)
    main(json.loads(sys.argv[1]))
    print("WORKER_DONE", flush=True)
