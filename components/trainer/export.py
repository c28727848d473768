"""Writes a Model artifact (CONTRACTS §4) and its serving SavedModel: the task kind of the
model's task record (components/tasks) exports the signature its task serves.

Tokenization runs inside the graph (components/trainer/serving.py); loading needs
``import tensorflow_text`` for its ops (TF Serving builds include them). Given the eval
records, the SavedModel also gets TF Serving's warm-up requests
(``assets.extra/tf_serving_warmup_requests``, components/pusher/warmup.py).
"""

from __future__ import annotations

import json
import logging
import os

import tensorflow as tf

from lmfactory import models
from lmfactory.models import saved_model
from lmfactory.components import tasks as task_kinds
from lmfactory.components.trainer.model_artifact import (
    BACKBONE_WEIGHTS, MODEL_CONFIG, TASK_MODEL, VOCABULARY_DIR, copy_dir, keras_dir_of)

# What a stage without a serving export leaves in its Format-Serving folder.
NOT_EXPORTED = "NOT_EXPORTED.txt"
NOT_EXPORTED_TEXT = ("This stage's model feeds a later training stage and is not exported "
                     "for serving; keras/ holds it. A recipe with runtime.export_every_stage: "
                     "true exports every stage's model.\n")


def export_serving_model(task_model, vocab_dir: str, model_config: dict, export_dir: str,
                         preprocessor=None) -> None:
    """Exports ``task_model`` as its task kind serves it (``model_config["task"]``)."""
    kind = model_config["task"]["kind"]
    task_kinds.get(kind).export(task_model, preprocessor, vocab_dir, model_config, export_dir)
    logging.info("Exported the %s SavedModel to %s", kind, export_dir)


def write_warmup(serving_model_dir: str, eval_files: str, model_config: dict,
                 vocab_dir: str, loaded=None) -> dict | None:
    """The SavedModel's warm-up requests from the first eval records (``loaded``: the model
    already loaded by ``tf.saved_model.load``, if any); a failure is logged, never fatal
    (the model serves without them, its first requests slower)."""
    from lmfactory.components.pusher.warmup import write_warmup_requests

    try:
        return write_warmup_requests(serving_model_dir, eval_files, model_config, vocab_dir,
                                     loaded=loaded)
    except (OSError, ValueError, tf.errors.OpError) as error:
        logging.error("No TF Serving warm-up requests written for %s: %s", serving_model_dir,
                      str(error).strip().splitlines()[0] if str(error).strip() else error)
        return None


def write_model_artifact(serving_model_dir: str, task_model, backbone, vocab_dir: str,
                         model_config: dict, preprocessor=None,
                         eval_files: str | None = None, export: bool = True) -> dict:
    """Writes the keras/ folder beside ``serving_model_dir`` and, with ``export``, exports
    the SavedModel into it, with warm-up requests built from ``eval_files`` (a file pattern
    of eval records) when given. ``model_config`` gets ``architecture`` from the backbone's
    registry record and ``backbone_config`` from ``backbone.get_config()``; returns the
    config written."""
    keras_dir = keras_dir_of(serving_model_dir)
    tf.io.gfile.makedirs(keras_dir)
    backbone.save_weights(os.path.join(keras_dir, BACKBONE_WEIGHTS))
    task_model.save(os.path.join(keras_dir, TASK_MODEL))
    copy_dir(vocab_dir, os.path.join(keras_dir, VOCABULARY_DIR))
    model_config = dict(model_config,
                        architecture=models.registry.find_by_backbone(backbone).name,
                        backbone_config=backbone.get_config())
    with tf.io.gfile.GFile(os.path.join(keras_dir, MODEL_CONFIG), "w") as f:
        json.dump(model_config, f, indent=2, sort_keys=True)
    if not export:
        # The folder exists all the same: TFX's Trainer takes a missing one for a failed run.
        tf.io.gfile.makedirs(serving_model_dir)
        with tf.io.gfile.GFile(os.path.join(serving_model_dir, NOT_EXPORTED), "w") as f:
            f.write(NOT_EXPORTED_TEXT)
        logging.info("No serving SavedModel for this stage: its model feeds a later stage "
                     "(runtime.export_every_stage: true exports one)")
        return model_config
    export_serving_model(task_model, vocab_dir, model_config, serving_model_dir,
                         preprocessor=preprocessor)
    if eval_files:
        # The requests run through the signatures just traced, not a reload of the
        # SavedModel; the Pusher's loader check compares the C API's answers with theirs.
        write_warmup(serving_model_dir, eval_files, model_config, vocab_dir,
                     loaded=saved_model.take_saved_signatures(serving_model_dir))
    return model_config
