"""Distiller: trains a student against a teacher Model artifact (knowledge distillation).

The Trainer's spec plus a ``teacher_model`` input. It runs the same ``run_fn`` as the
Trainer; ``run_fn`` sees the teacher in ``custom_config["teacher_model"]`` and builds the
architecture's distillation task model:

* general distillation (``examples`` = pretraining records): the objective's pretrainer has
  ``needs_teacher`` (DistilBERT, TinyBERT); the student is built fresh (``base_model``
  unset);
* task-specific distillation (``examples`` = task records, TinyBERT §3.2): the student is
  ``base_model`` (the general-distilled model), the teacher a fine-tuned classifier; the
  architecture's ``classification_distillation`` head trains it and its classifier is
  exported.
"""

from __future__ import annotations

import json

from tfx import types
from tfx.dsl.components.base import base_component, executor_spec
from tfx.proto import trainer_pb2
from tfx.types import standard_artifacts, standard_component_specs
from tfx.types.component_spec import ChannelParameter

from lmfactory.components.distiller.executor import TEACHER_MODEL_KEY, Executor


class DistillerSpec(standard_component_specs.TrainerSpec):
    INPUTS = {
        **standard_component_specs.TrainerSpec.INPUTS,
        TEACHER_MODEL_KEY: ChannelParameter(type=standard_artifacts.Model),
    }


class Distiller(base_component.BaseComponent):
    SPEC_CLASS = DistillerSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(self, examples: types.BaseChannel, teacher_model: types.BaseChannel,
                 run_fn: str, train_args: trainer_pb2.TrainArgs,
                 eval_args: trainer_pb2.EvalArgs, custom_config: dict,
                 base_model: types.BaseChannel | None = None):
        spec = DistillerSpec(
            examples=examples, teacher_model=teacher_model, base_model=base_model,
            run_fn=run_fn, train_args=train_args, eval_args=eval_args,
            custom_config=json.dumps(custom_config, sort_keys=True),
            model=types.Channel(type=standard_artifacts.Model),
            model_run=types.Channel(type=standard_artifacts.ModelRun))
        super().__init__(spec=spec)
