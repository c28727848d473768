"""EntityLinker: a Beam TFX component that annotates the text features of an Examples
artifact with knowledge-graph entity mentions (ERNIE §4.1: entities aligned to the corpus
text; KagNet §3.1: concept recognition), using `EntityMatcher` (linking.py).

The output holds the same Examples (same splits, same features) plus, per text feature F:
``F_entity_starts`` / ``F_entity_ends`` (int64 code-point offsets into F's UTF-8 decoded
text, end exclusive) and ``F_entity_ids`` (int64 entity indices of the graph), in text
order. Beam counters (namespace ``lmfactory.entity_linking``): ``examples``, ``texts``,
``linked_mentions``, ``texts_without_entity``, ``missing_text_feature`` (an example without
F: its mention lists are empty), ``invalid_utf8_texts`` (decoded with replacement
characters, offsets into that decoding), ``multi_value_texts`` (only the first value is
linked); they are also written to ``linking_counts.json`` in the output folder.

    linker = EntityLinker(examples=corpus_gen.outputs["examples"],
                          knowledge_graph=graph_gen.outputs["knowledge_graph"],
                          text_features=["text"])
"""

from __future__ import annotations

import json
from typing import Callable, Mapping, Sequence

import apache_beam as beam
import tensorflow as tf
from apache_beam.metrics.metric import Metrics
from tfx import types
from tfx.dsl.components.base import base_beam_component, base_beam_executor, executor_spec
from tfx.types import artifact_utils, standard_artifacts
from tfx.types.component_spec import ChannelParameter, ExecutionParameter

from lmfactory.components import beam_options, example_stages
from lmfactory.components.artifacts import KnowledgeGraph

EXAMPLES_KEY = "examples"  # the output
INPUT_EXAMPLES_KEY = "input_examples"  # TFX keys are unique across inputs and outputs
KNOWLEDGE_GRAPH_KEY = "knowledge_graph"
TEXT_FEATURES_KEY = "text_features"
COUNTS_FILE = "linking_counts.json"
NAMESPACE = "lmfactory.entity_linking"
COUNTERS = ("examples", "texts", "linked_mentions", "texts_without_entity",
            "missing_text_feature", "invalid_utf8_texts", "multi_value_texts")
LINK_LABEL = "Link"


def mention_features(feature: str) -> tuple[str, str, str]:
    """The names of the three features added for text feature ``feature``."""
    return f"{feature}_entity_starts", f"{feature}_entity_ends", f"{feature}_entity_ids"


class _LinkExamples(beam.DoFn):
    """Serialized tf.Example -> the same Example with the mention features added."""

    def __init__(self, graph_uri: str, text_features: Sequence[str]):
        self._graph_uri, self._text_features = graph_uri, list(text_features)
        self._counters = {name: Metrics.counter(NAMESPACE, name) for name in COUNTERS}

    def setup(self):
        from lmfactory.components.knowledge_graph.graph import KnowledgeGraph as Graph
        from lmfactory.components.knowledge_graph.linking import EntityMatcher

        self._matcher = EntityMatcher(Graph.load(self._graph_uri))

    def process(self, serialized: bytes):
        counts, output = link_example(serialized, self._matcher, self._text_features)
        for name, value in counts.items():
            if value:
                self._counters[name].inc(value)
        yield output


def link_example(serialized: bytes, matcher, text_features: Sequence[str]):
    """``(counts, serialized Example with the mention features)`` of one Example."""
    example = tf.train.Example.FromString(serialized)
    counts = dict.fromkeys(COUNTERS, 0)
    counts["examples"] = 1
    for feature in text_features:
        values = (example.features.feature[feature].bytes_list.value
                  if feature in example.features.feature else [])
        mentions = []
        if not values:
            counts["missing_text_feature"] += 1
        else:
            counts["texts"] += 1
            counts["multi_value_texts"] += len(values) > 1
            try:
                text = values[0].decode("utf-8")
            except UnicodeDecodeError:
                counts["invalid_utf8_texts"] += 1
                text = values[0].decode("utf-8", errors="replace")
            mentions = matcher.link(text)
            counts["linked_mentions"] += len(mentions)
            counts["texts_without_entity"] += not mentions
        for name, values in zip(mention_features(feature), zip(*mentions) if mentions
                                else ((), (), ())):
            example.features.feature[name].int64_list.value[:] = list(values)
    return counts, example.SerializeToString()


def link_examples(input_uris: Mapping[str, str], graph_uri: str, output_uri: str,
                  text_features: Sequence[str],
                  make_pipeline: Callable[[], beam.Pipeline] | None = None) -> dict:
    """Links every split (split -> folder of GZIP TFRecords) into
    ``<output_uri>/Split-<split>/``; returns and writes the counters per split."""
    return example_stages.run_counted_stage(
        input_uris, output_uri, LINK_LABEL,
        lambda: beam.ParDo(_LinkExamples(graph_uri, text_features)), NAMESPACE, COUNTERS,
        COUNTS_FILE, make_pipeline)


class Executor(base_beam_executor.BaseBeamExecutor):
    def Do(self, input_dict, output_dict, exec_properties):
        self._log_startup(input_dict, output_dict, exec_properties)
        splits, input_uris = example_stages.input_split_uris(input_dict, INPUT_EXAMPLES_KEY)
        graph_uri = artifact_utils.get_single_uri(input_dict[KNOWLEDGE_GRAPH_KEY])
        output = artifact_utils.get_single_instance(output_dict[EXAMPLES_KEY])
        link_examples(input_uris, graph_uri, output.uri,
                      json.loads(exec_properties[TEXT_FEATURES_KEY]),
                      make_pipeline=beam_options.executor_pipeline(
                          self, beam_options.input_size(input_uris.values())))
        example_stages.finish_examples_output(output, splits)


class EntityLinkerSpec(types.ComponentSpec):
    PARAMETERS = {TEXT_FEATURES_KEY: ExecutionParameter(type=str)}
    INPUTS = {INPUT_EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples),
              KNOWLEDGE_GRAPH_KEY: ChannelParameter(type=KnowledgeGraph)}
    OUTPUTS = {EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples)}


class EntityLinker(base_beam_component.BaseBeamComponent):
    SPEC_CLASS = EntityLinkerSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)

    def __init__(self, examples: types.BaseChannel, knowledge_graph: types.BaseChannel,
                 text_features: Sequence[str] = ("text",)):
        """Args:
          examples: channel of raw ``Examples`` (CONTRACTS §1).
          knowledge_graph: channel of a ``KnowledgeGraph`` (its labels and linking settings).
          text_features: the bytes features whose text is linked.
        """
        spec = EntityLinkerSpec(
            input_examples=examples, knowledge_graph=knowledge_graph,
            text_features=json.dumps(list(text_features)),
            **{EXAMPLES_KEY: types.Channel(type=standard_artifacts.Examples)})
        super().__init__(spec=spec)
