"""LMEvaluator: task metric into ModelEvaluation, pass/fail into ModelBlessing."""

from __future__ import annotations

import json

from tfx.dsl.components.base import base_component, executor_spec
from tfx import types
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter

from lmfactory.components.evaluator.executor import Executor


class LMEvaluatorSpec(ComponentSpec):
    PARAMETERS = {"config": ExecutionParameter(type=str)}
    INPUTS = {
        "model": ChannelParameter(type=standard_artifacts.Model),
        "examples": ChannelParameter(type=standard_artifacts.Examples),
        "baseline_model": ChannelParameter(type=standard_artifacts.Model, optional=True),
        "control_model": ChannelParameter(type=standard_artifacts.Model, optional=True),
    }
    OUTPUTS = {
        "evaluation": ChannelParameter(type=standard_artifacts.ModelEvaluation),
        "blessing": ChannelParameter(type=standard_artifacts.ModelBlessing),
    }


class LMEvaluator(base_component.BaseComponent):
    """Scores ``model`` on the ``split`` of ``examples`` with ``metric``.

    Blessed when the metric passes ``threshold`` and is not worse than ``baseline_model``
    (normally the latest blessed model, from a LatestBlessedModelStrategy resolver). With a
    ``control_model`` (the transfer control, fine-tuned from scratch) both are scored and
    compared; ``require_transfer_gain`` makes beating it part of the blessing.
    """

    SPEC_CLASS = LMEvaluatorSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(self, model, examples, metric: str, threshold: float | None = None,
                 baseline_model=None, split: str = "eval", batch_size: int = 64,
                 max_batches: int | None = None, control_model=None,
                 require_transfer_gain: bool = False):
        config = {"metric": metric, "threshold": threshold, "split": split,
                  "batch_size": batch_size, "max_batches": max_batches}
        if require_transfer_gain:
            if control_model is None:
                raise ValueError("require_transfer_gain needs a control_model")
            config["require_transfer_gain"] = True
        spec = LMEvaluatorSpec(
            model=model, examples=examples, baseline_model=baseline_model,
            control_model=control_model,
            config=json.dumps(config, sort_keys=True),
            evaluation=types.Channel(type=standard_artifacts.ModelEvaluation),
            blessing=types.Channel(type=standard_artifacts.ModelBlessing))
        super().__init__(spec=spec)
