"""BackboneInitializer: vocabulary -> a Model artifact holding a fresh backbone."""

from __future__ import annotations

import json

from tfx import types
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter

from lmfactory.components.artifacts import Vocabulary
from lmfactory.components.model_init.executor import (BASE_MODEL_KEY, MODEL_KEY,
                                                      VOCABULARY_KEY, Executor)


class BackboneInitializerSpec(ComponentSpec):
    PARAMETERS = {
        "architecture": ExecutionParameter(type=str),
        "preset": ExecutionParameter(type=str),
        "overrides": ExecutionParameter(type=str, optional=True),  # JSON
        "seed": ExecutionParameter(type=int, optional=True),
    }
    INPUTS = {VOCABULARY_KEY: ChannelParameter(type=Vocabulary, optional=True),
              BASE_MODEL_KEY: ChannelParameter(type=standard_artifacts.Model, optional=True)}
    OUTPUTS = {MODEL_KEY: ChannelParameter(type=standard_artifacts.Model)}


class BackboneInitializer(base_component.BaseComponent):
    """A freshly initialised backbone, in the Model artifact layout the FineTuner
    warm-starts from.

    - From a ``vocabulary``: the recipe's architecture and preset sized to it, for a recipe
      without pretraining (``pretraining: null``; e.g. RNNsearch, trained from scratch on
      parallel text), in the Pretrainer's place in the DAG.
    - Like a ``base_model``: that model's architecture, backbone configuration and
      vocabulary with fresh weights, for the transfer control (``evaluation.control:
      from_scratch``), fine-tuned beside the pretrained model."""

    SPEC_CLASS = BackboneInitializerSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(self, vocabulary=None, architecture: str = "", preset: str = "",
                 overrides: dict | None = None, seed: int = 0, base_model=None):
        if (vocabulary is None) == (base_model is None):
            raise ValueError("BackboneInitializer takes a vocabulary or a base_model")
        spec = BackboneInitializerSpec(
            vocabulary=vocabulary, base_model=base_model, architecture=architecture,
            preset=preset, overrides=json.dumps(overrides or {}, sort_keys=True), seed=seed,
            model=types.Channel(type=standard_artifacts.Model))
        super().__init__(spec=spec)
