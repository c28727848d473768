"""PretrainingExampleGen: corpus Examples + Vocabulary -> pretraining Examples (CONTRACTS §3).

A thin TFX component; the work is in :mod:`executor` (Beam) and the objectives registered in
:mod:`objectives` (:mod:`bert_mlm_nsp`, :mod:`albert_mlm_sop`, :mod:`full_sentences` for
``mlm``, :mod:`causal_lm`; :mod:`masking` and :mod:`mlm_objective` shared by the masked-LM
ones). Parameters are the keys of ``features.DEFAULT_CONFIG`` (``features.BOOL_KEYS`` travel
as 0/1 ints, the way TFX stores execution properties).
"""

from __future__ import annotations

from tfx import types
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ExecutionParameter

from lmfactory.components.artifacts import Vocabulary
from lmfactory.components.pretraining_data import executor
from lmfactory.components.pretraining_data.features import (
    BOOL_KEYS, DEFAULT_CONFIG, resolve_config)


def _parameter_type(key: str):
    value = DEFAULT_CONFIG[key]
    if key in BOOL_KEYS:
        return int
    return type(value)


def _as_property(key: str, value):
    """bool -> 0/1 for the flag keys, int -> float for the rate keys; others unchanged."""
    if key in BOOL_KEYS and isinstance(value, bool):
        return int(value)
    if isinstance(DEFAULT_CONFIG.get(key), float) and isinstance(value, int):
        return float(value)
    return value


class PretrainingExampleGenSpec(types.ComponentSpec):
    """Inputs ``examples`` (corpus) and ``vocabulary``; output ``pretraining_examples``."""

    PARAMETERS = {key: ExecutionParameter(type=_parameter_type(key), optional=True)
                  for key in DEFAULT_CONFIG}
    INPUTS = {
        executor.EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples),
        executor.VOCABULARY_KEY: ChannelParameter(type=Vocabulary),
    }
    OUTPUTS = {
        executor.PRETRAINING_EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples),
    }


class PretrainingExampleGen(base_component.BaseComponent):
    """Turns a text corpus into BERT MLM+NSP, ALBERT MLM+SOP, RoBERTa FULL-SENTENCES MLM or
    GPT-2 causal-LM training records (``objective``, one of ``objectives.names()``).

    Example::

        PretrainingExampleGen(examples=text_gen.outputs["examples"],
                              vocabulary=vocab_gen.outputs["vocabulary"],
                              objective="bert_mlm_nsp", max_seq_length=128, dupe_factor=5)
    """

    SPEC_CLASS = PretrainingExampleGenSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)

    def __init__(self, examples: types.BaseChannel, vocabulary: types.BaseChannel,
                 objective: str = "bert_mlm_nsp", **config):
        """``config``: any other key of ``features.DEFAULT_CONFIG``; unknown keys raise."""
        config["objective"] = objective
        plain = {k: v for k, v in config.items() if isinstance(v, (bool, int, float, str))}
        resolve_config(plain)  # fail at pipeline-definition time, not in the executor
        properties = {key: _as_property(key, value) for key, value in config.items()}
        spec = PretrainingExampleGenSpec(
            examples=examples, vocabulary=vocabulary,
            pretraining_examples=types.Channel(type=standard_artifacts.Examples),
            **properties)
        super().__init__(spec=spec)
