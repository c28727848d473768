"""What a MODEL argument of ``lmfactory predict`` / ``evaluate`` names.

A MODEL is one of:

* a SavedModel folder (``saved_model.pb``): a pushed version (``serving/<name>/<version>``)
  or a Model artifact's ``Format-Serving``;
* a serving folder holding numbered versions (``runs/<recipe>/serving/<name>``, what TF
  Serving's ``--model_base_path`` names): the newest version, as TF Serving serves it; a
  folder holding exactly one such serving folder (``runs/<recipe>/serving``) too;
* a Model artifact (the folder holding ``Format-Serving/`` and ``keras/``);
* a local run folder (``runs/<recipe>``): its pushed model's newest version for
  `saved_model_dir`; the model its newest evaluation scored (else the newest model of its
  last training stage) for `model_artifact`, and for `saved_model_dir` when nothing was
  pushed.

`saved_model_dir` gives the SavedModel to call; `model_artifact` the Model artifact (the
trained Keras model, vocabulary and task record the Evaluator needs), found for a pushed
SavedModel by comparing its ``saved_model.pb`` with the run's exported ones.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os

SAVED_MODEL = "saved_model.pb"
SERVING_DIR = "Format-Serving"  # components/trainer/serving.py (a Model artifact's SavedModel)
KERAS_CONFIG = os.path.join("keras", "model_config.json")  # components/trainer/model_artifact
# Trainers of a local run, the stage whose model is pushed first.
_TRAINERS = ("FineTuner", "TargetLMTrainer", "Distiller", "Pretrainer", "CheckpointImporter")


class ModelPathError(ValueError):
    """MODEL names nothing lmfactory can load; the message says what was expected."""


def _versions(folder: str) -> list[str]:
    """Numbered sub-folders holding a complete SavedModel, oldest first."""
    if not os.path.isdir(folder):
        return []
    names = [n for n in os.listdir(folder) if n.isdigit()
             and os.path.exists(os.path.join(folder, n, SAVED_MODEL))]
    return sorted(names, key=int)


def saved_model_dir(path: str) -> str:
    """The SavedModel folder ``path`` names (see the module docstring)."""
    path = os.path.abspath(path.rstrip("/") or "/")
    if not os.path.exists(path):
        raise ModelPathError(f"No model at {path!r}")
    if os.path.exists(os.path.join(path, SAVED_MODEL)):
        return path
    if os.path.exists(os.path.join(path, SERVING_DIR, SAVED_MODEL)):
        return os.path.join(path, SERVING_DIR)
    if os.path.exists(os.path.join(path, KERAS_CONFIG)):
        raise ModelPathError(
            f"{path!r} is the Model artifact of a stage whose model feeds a later stage, and "
            f"has no serving SavedModel (the pushed stage's has one; a recipe with "
            f"runtime.export_every_stage: true exports every stage's)")
    versions = _versions(path)
    if versions:
        return os.path.join(path, versions[-1])
    if os.path.isdir(path):
        served = [os.path.join(path, n) for n in sorted(os.listdir(path))
                  if _versions(os.path.join(path, n))]
        if len(served) == 1:
            return os.path.join(served[0], _versions(served[0])[-1])
        if os.path.isdir(os.path.join(path, "serving")):  # a run folder: what it pushed
            pushed = [os.path.join(path, "serving", n)
                      for n in sorted(os.listdir(os.path.join(path, "serving")))
                      if _versions(os.path.join(path, "serving", n))]
            if len(pushed) == 1:
                return os.path.join(pushed[0], _versions(pushed[0])[-1])
        if os.path.isdir(os.path.join(path, "pipeline")):  # else the model it evaluated
            return os.path.join(model_artifact(path), SERVING_DIR)
        if len(served) > 1:
            raise ModelPathError(f"{path!r} holds several served models "
                                 f"({', '.join(os.path.basename(s) for s in served)}); name one")
    raise ModelPathError(
        f"{path!r} is not a model: expected a SavedModel folder ({SAVED_MODEL}), a serving "
        f"folder of numbered versions, a Model artifact or a run folder (runs/<recipe>)")


def saved_model_dirs(path: str) -> list[str]:
    """`saved_model_dir` of ``path``, then, when that is a version of a serving folder, the
    older versions of that folder, newest first: the versions to try in turn when one does
    not load."""
    chosen = saved_model_dir(path)
    parent = os.path.dirname(chosen)
    if not os.path.basename(chosen).isdigit():
        return [chosen]
    older = [os.path.join(parent, v) for v in reversed(_versions(parent))
             if int(v) < int(os.path.basename(chosen))]
    return [chosen] + older


def _digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _artifacts(pipeline_root: str) -> list[str]:
    found = glob.glob(os.path.join(pipeline_root, "*", "model", "*", KERAS_CONFIG))
    return [os.path.dirname(os.path.dirname(p)) for p in found]


def _preference(artifact: str):
    trainer = os.path.basename(os.path.dirname(os.path.dirname(artifact)))
    rank = _TRAINERS.index(trainer) if trainer in _TRAINERS else len(_TRAINERS)
    name = os.path.basename(artifact)
    return rank, -(int(name) if name.isdigit() else -1)


def _run_of(path: str) -> str | None:
    """The run folder above ``path`` (the one holding ``pipeline/``), or None."""
    while True:
        if os.path.isdir(os.path.join(path, "pipeline")):
            return path
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent


def _evaluated_model(run: str) -> str | None:
    """The Model artifact the run's newest evaluation scored (``metrics.json`` ``model``)."""
    reports = glob.glob(os.path.join(run, "pipeline", "*", "evaluation", "*", "metrics.json"))
    reports.sort(key=lambda p: int(p.split(os.sep)[-2]) if p.split(os.sep)[-2].isdigit() else -1)
    for report in reversed(reports):
        with open(report, encoding="utf-8") as f:
            model = json.load(f).get("model")
        if model and os.path.exists(os.path.join(model, KERAS_CONFIG)):
            return model
    return None


def model_artifact(path: str) -> str:
    """The Model artifact (folder holding ``keras/``) that ``path`` names."""
    path = os.path.abspath(path.rstrip("/") or "/")
    if os.path.exists(os.path.join(path, KERAS_CONFIG)):
        return path
    if os.path.basename(path) == SERVING_DIR and os.path.exists(
            os.path.join(os.path.dirname(path), KERAS_CONFIG)):
        return os.path.dirname(path)
    if os.path.isdir(os.path.join(path, "pipeline")):  # a run folder
        evaluated = _evaluated_model(path)
        candidates = _artifacts(os.path.join(path, "pipeline"))
        if evaluated or candidates:
            return evaluated or min(candidates, key=_preference)
        raise ModelPathError(f"No trained model in the run folder {path!r}")
    saved = saved_model_dir(path)  # a pushed version: find the artifact it was copied from
    run = _run_of(saved)
    if run is not None:
        digest = _digest(os.path.join(saved, SAVED_MODEL))
        for candidate in sorted(_artifacts(os.path.join(run, "pipeline")), key=_preference):
            exported = os.path.join(candidate, SERVING_DIR, SAVED_MODEL)
            if os.path.exists(exported) and _digest(exported) == digest:
                return candidate
    raise ModelPathError(
        f"{saved!r} is a SavedModel without its Model artifact (the trained Keras model, "
        f"vocabulary and task record evaluation needs), and no run folder above it exported "
        f"it; pass the Model artifact (runs/<recipe>/pipeline/<Trainer>/model/<id>)")
