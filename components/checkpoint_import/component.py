"""CheckpointImporter: published weights -> a standard TFX Model artifact (CONTRACTS §4)."""

from __future__ import annotations

from tfx import types
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter

from lmfactory.components.checkpoint_import.executor import MODEL_KEY, Executor


class CheckpointImporterSpec(ComponentSpec):
    PARAMETERS = {
        "architecture": ExecutionParameter(type=str),
        "checkpoint": ExecutionParameter(type=str),
        "tokenizer_dir": ExecutionParameter(type=str, optional=True),
        "sequence_length": ExecutionParameter(type=int, optional=True),
        "export_serving": ExecutionParameter(type=bool, optional=True),
    }
    INPUTS = {}
    OUTPUTS = {MODEL_KEY: ChannelParameter(type=standard_artifacts.Model)}


class CheckpointImporter(base_component.BaseComponent):
    """Loads ``checkpoint`` (a Hugging Face folder: config.json + model.safetensors + tokenizer
    files; or an original TF checkpoint with its vocab.txt) as an ``architecture`` backbone.

    Its ``model`` output takes the place of the Pretrainer's: the FineTuner warm-starts from
    it. ``tokenizer_dir`` defaults to the checkpoint folder; ``export_serving`` also exports
    the imported backbone's SavedModel (``runtime.export_every_stage``).
    """

    SPEC_CLASS = CheckpointImporterSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(self, architecture: str, checkpoint: str, tokenizer_dir: str | None = None,
                 sequence_length: int = 128, export_serving: bool = False):
        spec = CheckpointImporterSpec(
            architecture=architecture, checkpoint=checkpoint, tokenizer_dir=tokenizer_dir,
            sequence_length=sequence_length, export_serving=export_serving,
            model=types.Channel(type=standard_artifacts.Model))
        super().__init__(spec=spec)
