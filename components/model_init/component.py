"""BackboneInitializer: vocabulary -> a Model artifact holding a fresh backbone."""

from __future__ import annotations

import json

from tfx import types
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter

from lmfactory.components.artifacts import Vocabulary
from lmfactory.components.model_init.executor import MODEL_KEY, VOCABULARY_KEY, Executor


class BackboneInitializerSpec(ComponentSpec):
    PARAMETERS = {
        "architecture": ExecutionParameter(type=str),
        "preset": ExecutionParameter(type=str),
        "overrides": ExecutionParameter(type=str, optional=True),  # JSON
        "seed": ExecutionParameter(type=int, optional=True),
    }
    INPUTS = {VOCABULARY_KEY: ChannelParameter(type=Vocabulary)}
    OUTPUTS = {MODEL_KEY: ChannelParameter(type=standard_artifacts.Model)}


class BackboneInitializer(base_component.BaseComponent):
    """For a recipe without pretraining (``pretraining: null``; e.g. RNNsearch, trained from
    scratch on parallel text): a freshly initialised backbone of the recipe's architecture
    and preset, sized to the learned vocabulary, in the Model artifact layout the
    FineTuner warm-starts from (the Pretrainer's place in the DAG)."""

    SPEC_CLASS = BackboneInitializerSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(self, vocabulary, architecture: str, preset: str,
                 overrides: dict | None = None, seed: int = 0):
        spec = BackboneInitializerSpec(
            vocabulary=vocabulary, architecture=architecture, preset=preset,
            overrides=json.dumps(overrides or {}, sort_keys=True), seed=seed,
            model=types.Channel(type=standard_artifacts.Model))
        super().__init__(spec=spec)
