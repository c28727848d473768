"""TextExampleGen: a TFX component that ingests raw text, TSV/CSV, JSONL or TFDS data.

Thin wrapper: all the work is in :mod:`lmfactory.components.example_gen.executor`.
"""

import json
from typing import Any, Mapping, Optional, Union

from absl import logging
from tfx import types
from tfx.dsl.components.base import base_beam_component
from tfx.dsl.components.base import executor_spec
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter
from tfx.types.component_spec import ComponentSpec
from tfx.types.component_spec import ExecutionParameter

from lmfactory.components.example_gen import executor


class TextExampleGenSpec(ComponentSpec):
    """No inputs; one Examples output; the input config and a fingerprint of its files."""

    PARAMETERS = {
        # JSON of the input_config dict (see executor.parse_input_config).
        executor.INPUT_CONFIG_KEY: ExecutionParameter(type=str),
        # Paths, sizes and modification times of the matched input files, taken when the
        # component is built; a change of the files changes it and so defeats TFX's cache.
        executor.INPUT_FINGERPRINT_KEY: ExecutionParameter(type=str),
    }
    INPUTS = {}
    OUTPUTS = {
        executor.EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples),
    }


class TextExampleGen(base_beam_component.BaseBeamComponent):
    """Raw text corpora / GLUE-style tables / JSONL / TFDS -> a TFX Examples artifact.

    Usage::

      example_gen = TextExampleGen(input_config={
          "format": "tsv", "label_column": "label",
          "splits": {"train": "glue/SST-2/train.tsv", "eval": "glue/SST-2/dev.tsv"}})
      example_gen.outputs["examples"]
    """

    SPEC_CLASS = TextExampleGenSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)

    def __init__(self, *, input_config: Union[Mapping[str, Any], str],
                 input_fingerprint: Optional[str] = None):
        """Builds the component.

        Args:
          input_config: the ingestion config (dict or its JSON), checked here.
          input_fingerprint: overrides the fingerprint of the input files that is otherwise
            computed now; inputs missing now are recorded in it (the run then fails clearly).
        """
        config_json = input_config if isinstance(input_config, str) else json.dumps(
            dict(input_config), sort_keys=True)
        executor.parse_input_config(config_json)
        if input_fingerprint is None:
            input_fingerprint = executor.fingerprint_inputs(config_json, strict=False)
        if "missing:" in input_fingerprint:
            logging.warning("TextExampleGen inputs are missing now: %s", input_fingerprint)
        spec = TextExampleGenSpec(
            input_config=config_json,
            input_fingerprint=input_fingerprint,
            examples=types.Channel(type=standard_artifacts.Examples))
        super().__init__(spec=spec)
