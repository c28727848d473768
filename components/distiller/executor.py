"""Executor of the Distiller: TFX's generic Trainer executor, with the teacher's Model
artifact handed to ``run_fn`` through ``custom_config["teacher_model"]``."""

from __future__ import annotations

import json

from tfx.components.trainer import executor as trainer_executor
from tfx.types import artifact_utils

TEACHER_MODEL_KEY = "teacher_model"


class Executor(trainer_executor.GenericExecutor):
    def Do(self, input_dict, output_dict, exec_properties):
        teacher = artifact_utils.get_single_uri(input_dict[TEACHER_MODEL_KEY])
        exec_properties = dict(exec_properties)
        custom_config = json.loads(exec_properties.get("custom_config") or "{}")
        custom_config[TEACHER_MODEL_KEY] = teacher
        exec_properties["custom_config"] = json.dumps(custom_config)
        super().Do(input_dict, output_dict, exec_properties)
