"""The Model artifact every training stage writes and the next stage reads (CONTRACTS §4).

    <uri>/Format-Serving/           SavedModel taking raw strings (what Pusher pushes)
    <uri>/keras/model.keras         the trained Keras task model
    <uri>/keras/backbone.weights.h5 the backbone's weights
    <uri>/keras/model_config.json   architecture, preset, backbone_config, task, metrics
    <uri>/keras/vocabulary/         the tokenizer folder (CONTRACTS §2)

Trainers (``run_fn``), the checkpoint importer, the task kinds and the evaluator share these
readers, so the layout has one definition; `export.write_model_artifact` writes it.
"""

from __future__ import annotations

import json
import os

import keras
import tensorflow as tf

from lmfactory import models
from lmfactory.models import weights_file
from lmfactory.components.trainer.precision import stage_backbone_config
from lmfactory.components.trainer.serving import SERVING_DIR

KERAS_DIR = "keras"
MODEL_CONFIG = "model_config.json"
BACKBONE_WEIGHTS = "backbone.weights.h5"
TASK_MODEL = "model.keras"
VOCABULARY_DIR = "vocabulary"


def keras_dir_of(model_path: str) -> str:
    """Accepts a Model artifact uri or its ``Format-Serving`` folder (what TFX passes)."""
    model_path = model_path.rstrip("/")
    if os.path.basename(model_path) == SERVING_DIR:
        model_path = os.path.dirname(model_path)
    return os.path.join(model_path, KERAS_DIR)


def read_model_config(model_path: str) -> dict:
    path = os.path.join(keras_dir_of(model_path), MODEL_CONFIG)
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"{model_path!r} is not an lmfactory Model artifact: no {path}")
    with tf.io.gfile.GFile(path) as f:
        return json.load(f)


def load_model_backbone(model_path: str):
    """The trained backbone of a Model artifact and its ``model_config``; it computes in the
    loading stage's precision (the Keras dtype policy in force), not in the one it was
    trained in (`stage_backbone_config`)."""
    model_config = read_model_config(model_path)
    arch = models.get(model_config["architecture"])
    backbone = weights_file.load_backbone(
        arch.backbone_cls, stage_backbone_config(model_config["backbone_config"]),
        os.path.join(keras_dir_of(model_path), BACKBONE_WEIGHTS), model_path)
    return backbone, model_config


def load_task_model(model_path: str):
    """The trained Keras task model of a Model artifact."""
    path = os.path.join(keras_dir_of(model_path), TASK_MODEL)
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"No trained Keras model at {path}")
    return load_keras_file(path)


def load_keras_file(path: str):
    """``keras.saving.load_model(path)`` in Keras' safe mode (no Python code stored in the
    file is run). A file Keras refuses or cannot rebuild is a ValueError in one line naming
    the file; the whole Keras error stays chained to it."""
    try:
        return keras.saving.load_model(path, compile=False)
    except (TypeError, ValueError) as error:
        raise ValueError(f"Keras cannot load {path}: {_keras_reason(error)}") from error


def _keras_reason(error: BaseException) -> str:
    text = str(error)
    if "safe_mode" in text or "unsafe_deserialization" in text:
        return ("it holds Python code (a lambda or function) to deserialize, which Keras' safe "
                "mode refuses; lmfactory's models hold none, so the file was not written by "
                "lmfactory or was altered")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0] if lines else type(error).__name__
    return first if len(first) <= 300 else first[:297] + "..."


def vocabulary_dir_of(model_path: str) -> str:
    return os.path.join(keras_dir_of(model_path), VOCABULARY_DIR)


def copy_dir(source: str, destination: str) -> None:
    if tf.io.gfile.exists(destination):
        tf.io.gfile.rmtree(destination)
    tf.io.gfile.makedirs(destination)
    for name in tf.io.gfile.listdir(source):
        tf.io.gfile.copy(os.path.join(source, name), os.path.join(destination, name))
