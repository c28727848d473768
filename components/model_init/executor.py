"""Executor of BackboneInitializer: a plain function plus a thin TFX executor around it."""

from __future__ import annotations

import json
import logging
import os

import keras
import tensorflow as tf
from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils

from lmfactory import models
from lmfactory.components.trainer.model_artifact import (BACKBONE_WEIGHTS, MODEL_CONFIG,
                                                         VOCABULARY_DIR, copy_dir,
                                                         keras_dir_of, read_model_config,
                                                         vocabulary_dir_of)
from lmfactory.components.trainer.precision import stage_backbone_config
from lmfactory.models.tokenizers import load_tokenizer

VOCABULARY_KEY = "vocabulary"
BASE_MODEL_KEY = "base_model"
MODEL_KEY = "model"


def _write_model(backbone, architecture: str, preset, vocab_dir: str, model_uri: str,
                 task: dict) -> dict:
    """Writes the ``keras/`` folder of a Model artifact (CONTRACTS §4: backbone weights,
    ``model_config.json``, vocabulary) holding ``backbone``; returns its model_config."""
    keras_dir = keras_dir_of(model_uri)
    tf.io.gfile.makedirs(keras_dir)
    backbone.save_weights(os.path.join(keras_dir, BACKBONE_WEIGHTS))
    copy_dir(vocab_dir, os.path.join(keras_dir, VOCABULARY_DIR))
    model_config = {"architecture": architecture, "preset": preset,
                    "backbone_config": backbone.get_config(), "task": task,
                    "train_metrics": {}, "generation": {}}
    with tf.io.gfile.GFile(os.path.join(keras_dir, MODEL_CONFIG), "w") as f:
        json.dump(model_config, f, indent=2, sort_keys=True)
    return model_config


def initialize_backbone(architecture: str, preset: str, overrides: dict, vocab_dir: str,
                        model_uri: str, seed: int = 0) -> dict:
    """A Model artifact holding a fresh ``architecture`` backbone of ``preset`` sized to the
    vocabulary, for the FineTuner to start from. It has no trained task model and no
    serving SavedModel: it is never evaluated or pushed."""
    keras.utils.set_random_seed(seed)
    vocabulary_size = load_tokenizer(vocab_dir).vocabulary_size()
    backbone = models.build(architecture, preset,
                            **{**overrides, "vocabulary_size": vocabulary_size})
    model_config = _write_model(backbone, architecture, preset, vocab_dir, model_uri,
                                {"kind": "initialization"})
    logging.info("Initialised a %s %s backbone (%d parameters, %d tokens)", architecture,
                 preset, backbone.count_params(), vocabulary_size)
    return model_config


def initialize_like(base_model_uri: str, model_uri: str, seed: int = 0) -> dict:
    """A fresh backbone with the exact configuration and vocabulary of the backbone in the
    Model artifact ``base_model_uri`` (a pretrained or imported one), in the layout of
    `initialize_backbone`: what a transfer control fine-tunes instead of the pretrained
    weights (same task model, data, vocabulary, schedule and seed)."""
    base_config = read_model_config(base_model_uri)
    architecture = base_config["architecture"]
    keras.utils.set_random_seed(seed)
    backbone = models.get(architecture).backbone_cls.from_config(
        stage_backbone_config(base_config["backbone_config"]))
    model_config = _write_model(backbone, architecture, base_config.get("preset"),
                                vocabulary_dir_of(base_model_uri), model_uri,
                                {"kind": "initialization", "like": base_model_uri})
    logging.info("Initialised a fresh %s backbone like %s (%d parameters)", architecture,
                 base_model_uri, backbone.count_params())
    return model_config


class Executor(base_executor.BaseExecutor):
    def Do(self, input_dict, output_dict, exec_properties):
        model = artifact_utils.get_single_instance(output_dict[MODEL_KEY])
        seed = int(exec_properties.get("seed") or 0)
        if input_dict.get(BASE_MODEL_KEY):
            base_model = artifact_utils.get_single_instance(input_dict[BASE_MODEL_KEY])
            initialize_like(base_model.uri, model.uri, seed)
            return
        vocabulary = artifact_utils.get_single_instance(input_dict[VOCABULARY_KEY])
        initialize_backbone(exec_properties["architecture"], exec_properties["preset"],
                            json.loads(exec_properties.get("overrides") or "{}"),
                            vocabulary.uri, model.uri, seed)
