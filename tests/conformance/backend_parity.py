"""The same tiny models on the TensorFlow and the JAX backend, with the same weights.

Keras 3 runs a model written on ``keras.ops`` on any backend; this module proves it for
every registered architecture that declares the JAX backend (``Architecture.backends``),
in a process where TensorFlow is not importable, as on an accelerator machine that has
JAX and no TensorFlow.

Two halves, one per process:

* `write_references` (TensorFlow, the test process): per architecture, the tiny backbone's
  config, weights, synthetic inputs and outputs; per pretraining objective, one synthetic
  batch in the objective's record format (read through its own tf.data reader), the task
  model's weights and its loss on that batch.
* `check_references` (``python -m conformance.backend_parity REFERENCES RESULTS`` under
  the JAX virtualenv, TensorFlow blocked in ``sys.modules``): rebuilds each backbone from
  its config, loads the weights, compares the outputs; rebuilds each task model, loads its
  weights, compares the loss, then takes `training.training_steps` jit-compiled Adam steps
  on the batch and records the loss after them. An architecture that declares only the
  TensorFlow backend must refuse `models.build` with a one-line error.

The results are JSON, so the test process asserts on them and prints the worst difference
of each architecture.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import time

import numpy as np

PARITY_ATOL = 1e-5
REFERENCE_FILE = "references.json"


def jax_python(repository: str) -> str:
    """The JAX virtualenv's interpreter (made by ``./run.sh setup``)."""
    return os.path.join(repository, ".venv-jax", "bin", "python")


def _flatten(outputs, prefix=""):
    if isinstance(outputs, dict):
        flat = {}
        for key, value in outputs.items():
            flat.update(_flatten(value, f"{prefix}{key}/"))
        return flat
    return {prefix.rstrip("/") or "output": np.asarray(outputs)}


# ------------------------------------------------------------------ TensorFlow side


def _write_objective(model, objective, batch, folder):
    from .tiny import to_numpy
    from .training import _loss

    numpy_batch = tuple(None if part is None else to_numpy(part) for part in batch)
    model(numpy_batch[0], training=False)
    first = _loss(model, *numpy_batch)
    second = _loss(model, *numpy_batch)
    model.save_weights(os.path.join(folder, f"{objective}.weights.h5"))
    with open(os.path.join(folder, f"{objective}.batch.pkl"), "wb") as f:
        pickle.dump(numpy_batch, f, protocol=4)
    # A loss that samples (ELECTRA's generator) differs between two evaluations even on
    # one backend; only the training check applies to it.
    return {"loss": first, "deterministic": bool(first == second)}


def write_reference(name: str, folder: str) -> dict:
    """Writes architecture ``name``'s tiny backbone and task models (TensorFlow backend)
    to ``folder``; returns what the JAX side needs to know about them."""
    from lmfactory import models

    from .tiny import backbone_inputs, build_tiny, config_value
    from .training import build_pretrainer, pretraining_batch

    os.makedirs(folder, exist_ok=True)
    record = {"backends": list(models.get(name).backends), "objectives": {}}
    if "jax" not in models.get(name).backends:
        return record
    backbone = build_tiny(name)
    inputs = backbone_inputs(backbone)
    outputs = _flatten(backbone(inputs, training=False))
    with open(os.path.join(folder, "backbone.json"), "w") as f:
        json.dump(backbone.get_config(), f)
    backbone.save_weights(os.path.join(folder, "backbone.weights.h5"))
    np.savez(os.path.join(folder, "inputs.npz"), **inputs)
    np.savez(os.path.join(folder, "outputs.npz"), **outputs)
    vocabulary = config_value(backbone, "vocabulary_size")
    for objective in models.get(name).objectives:
        model = build_pretrainer(name, objective, build_tiny(name))
        batch = pretraining_batch(objective, vocabulary, tmp_dir=folder)
        record["objectives"][objective] = _write_objective(model, objective, batch, folder)
    return record


def write_references(names, folder: str) -> None:
    references = {name: write_reference(name, os.path.join(folder, name)) for name in names}
    with open(os.path.join(folder, REFERENCE_FILE), "w") as f:
        json.dump(references, f, indent=1)


# ------------------------------------------------------------------ JAX side


def _max_difference(expected: dict, actual: dict) -> float:
    if sorted(expected) != sorted(actual):
        raise AssertionError(f"outputs {sorted(actual)} != {sorted(expected)}")
    worst = 0.0
    for key, value in expected.items():
        if value.shape != actual[key].shape:
            raise AssertionError(f"{key}: shape {actual[key].shape} != {value.shape}")
        worst = max(worst, float(np.max(np.abs(value.astype("float64")
                                                - actual[key].astype("float64")))))
    return worst


def _check_backbone(name, folder):
    from lmfactory import models

    with open(os.path.join(folder, "backbone.json")) as f:
        config = json.load(f)
    backbone = models.get(name).backbone_cls.from_config(config)
    inputs = dict(np.load(os.path.join(folder, "inputs.npz")))
    backbone(inputs, training=False)
    backbone.load_weights(os.path.join(folder, "backbone.weights.h5"))
    actual = _flatten(backbone(inputs, training=False))
    expected = dict(np.load(os.path.join(folder, "outputs.npz")))
    return _max_difference(expected, actual)


def _train_on_batch(model, batch, steps):
    import keras

    from .tiny import LEARNING_RATE
    from .training import computes_own_loss

    loss = None if computes_own_loss(model) else keras.losses.SparseCategoricalCrossentropy(
        from_logits=True)
    model.compile(optimizer=keras.optimizers.Adam(LEARNING_RATE), loss=loss)
    for _ in range(steps):
        model.train_on_batch(*batch)


def _check_objective(name, objective, reference, folder):
    from .tiny import build_tiny
    from .training import _loss, build_pretrainer, training_steps

    with open(os.path.join(folder, f"{objective}.batch.pkl"), "rb") as f:
        batch = pickle.load(f)
    model = build_pretrainer(name, objective, build_tiny(name))
    model(batch[0], training=False)
    model.load_weights(os.path.join(folder, f"{objective}.weights.h5"))
    before = _loss(model, *batch)
    steps = training_steps(model)
    _train_on_batch(model, batch, steps)
    after = _loss(model, *batch)
    return {"loss_tensorflow": reference["loss"], "loss_jax": before,
            "loss_difference": (abs(before - reference["loss"])
                                if reference["deterministic"] else None),
            "steps": steps, "loss_after_steps": after}


def _describe(error) -> str:
    """The error's first line and the innermost frame of the project's code it came from."""
    import traceback

    frames = [frame for frame in traceback.extract_tb(error.__traceback__)
              if f"{os.sep}models{os.sep}" in frame.filename
              and not frame.filename.endswith("backend.py")]
    where = (f" (at {frames[-1].filename.split(os.sep + 'models' + os.sep)[-1]}:"
             f"{frames[-1].lineno})" if frames else "")
    return f"{type(error).__name__}: {(str(error) or ' ').splitlines()[0]}{where}"


def _check_refused(name):
    from lmfactory import models

    from .tiny import smallest_preset

    try:
        models.build(name, smallest_preset(name))
    except Exception as error:  # noqa: BLE001 (the message is the result)
        return {"refused": f"{type(error).__name__}: {error}"}
    return {"refused": None}


def check_references(folder: str) -> dict:
    """Every architecture of ``folder``'s references, on the current (JAX) backend."""
    import keras

    with open(os.path.join(folder, REFERENCE_FILE)) as f:
        references = json.load(f)
    results = {"backend": keras.backend.backend(), "keras": keras.__version__,
               "architectures": {}}
    for name, reference in references.items():
        if "jax" not in reference["backends"]:
            results["architectures"][name] = _check_refused(name)
            continue
        architecture_folder = os.path.join(folder, name)
        started = time.perf_counter()
        try:
            result = {"backbone_max_abs_difference": _check_backbone(name,
                                                                     architecture_folder),
                      "objectives": {}}
            for objective, objective_reference in reference["objectives"].items():
                result["objectives"][objective] = _check_objective(
                    name, objective, objective_reference, architecture_folder)
        except Exception as error:  # noqa: BLE001 (every architecture is reported)
            result = {"error": _describe(error)}
        result["seconds"] = round(time.perf_counter() - started, 2)
        results["architectures"][name] = result
    results["tensorflow_imported"] = "tensorflow" in sys.modules \
        and sys.modules["tensorflow"] is not None
    return results


def main(argv) -> int:
    references, out = argv
    sys.modules["tensorflow"] = None  # an accelerator machine has no TensorFlow
    sys.modules["tensorflow_text"] = None
    os.environ["KERAS_BACKEND"] = "jax"
    import jax

    # Tiny models compiled once each: XLA's optimisation passes cost more than they save
    # here, and they change no result beyond float rounding.
    jax.config.update("jax_disable_most_optimizations", True)
    results = check_references(references)
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
