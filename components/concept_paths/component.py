"""ConceptPaths: a Beam TFX component running KagNet's §3.1 stages over multiple-choice
Examples (``context``, ``choices``, ``label``; components/example_gen/multiple_choice_readers.py).

For each question and each of its C choices: concept recognition (the question's and the
choice's words grounded in KG concepts by label n-gram matching), path finding between
every question concept and every answer concept (at most ``max_hops`` hops on the
undirected KG, capped), pruning by TransE path scores, and the schema graph
(``grounding.py`` / ``models/kagnet``). The output holds the same Examples (same splits,
same features) plus the per-choice schema graphs and paths, C-major and flattened (int64,
-1 = padding): ``concept_ids`` [C*N], ``edges`` [C*E*2], ``pair_nodes`` [C*M*2],
``path_nodes`` [C*M*K*(H+1)], ``path_relations`` [C*M*K*H] (shapes: `ConceptPathFinder`).
A choice without concepts or paths gets an empty graph (all -1); the model handles it.

Counters (namespace ``lmfactory.concept_paths``, also in ``concept_paths_counts.json`` per
split): ``questions``, ``choices``, ``questions_without_concept``,
``choices_without_concept``, ``choices_without_path``, ``paths`` (kept), and
``malformed_examples`` (no context or no choices: left out, counted and logged; the
example generator already refuses such questions, so this is only a guard). The `ConceptGraph` used is written to ``<output>/concept_graph``.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Callable, Mapping

import apache_beam as beam
import tensorflow as tf
from apache_beam.metrics.metric import Metrics
from tfx import types
from tfx.dsl.components.base import base_beam_component, base_beam_executor, executor_spec
from tfx.types import artifact_utils, standard_artifacts
from tfx.types.component_spec import ChannelParameter, ExecutionParameter

from lmfactory.components import beam_options, example_stages
from lmfactory.components.artifacts import KGEmbeddings, KnowledgeGraph
from lmfactory.components.concept_paths.grounding import (
    COUNTERS, SchemaGraphBuilder, add_graph_features, concept_graph_of, split_settings,
    transe_norm)

EXAMPLES_KEY = "examples"
INPUT_EXAMPLES_KEY = "input_examples"
KNOWLEDGE_GRAPH_KEY = "knowledge_graph"
KG_EMBEDDINGS_KEY = "kg_embeddings"
SETTINGS_KEY = "settings"
COUNTS_FILE = "concept_paths_counts.json"
CONCEPT_GRAPH_DIR = "concept_graph"
NAMESPACE = "lmfactory.concept_paths"
PATHS_LABEL = "Paths"
BATCH_SIZE = 64


def load_concept_graph(graph_uri: str, embeddings_uri: str | None, settings: dict):
    """(KnowledgeGraph, ConceptGraph) of the artifacts, as the fine-tuning stage builds it."""
    from lmfactory.components.knowledge_graph.embedding_component import load_embeddings
    from lmfactory.components.knowledge_graph.graph import KnowledgeGraph as Graph

    graph = Graph.load(graph_uri)
    embeddings = load_embeddings(embeddings_uri) if embeddings_uri else None
    _, graph_settings = split_settings(settings)
    return graph, concept_graph_of(graph, embeddings, norm=transe_norm(embeddings_uri),
                                   **graph_settings)


class _AddSchemaGraphs(beam.DoFn):
    """Batches of serialized Examples -> the same Examples with the graph features."""

    def __init__(self, graph_uri, embeddings_uri, settings):
        self._args = (graph_uri, embeddings_uri, settings)
        self._counters = {name: Metrics.counter(NAMESPACE, name) for name in COUNTERS}

    def setup(self):
        graph, concept_graph = load_concept_graph(*self._args)
        path_settings, _ = split_settings(self._args[2])
        self._builder = SchemaGraphBuilder(concept_graph, graph.linking or {}, path_settings)

    def process(self, batch):
        counts, outputs = add_schema_graphs(batch, self._builder)
        for name, value in counts.items():
            if value:
                self._counters[name].inc(value)
        yield from outputs


def add_schema_graphs(serialized_batch, builder: SchemaGraphBuilder):
    """``(counts, serialized Examples)`` of a batch (questions grouped by their number of
    choices; malformed ones left out and counted)."""
    counts = dict.fromkeys(COUNTERS, 0)
    examples = [tf.train.Example.FromString(s) for s in serialized_batch]
    groups: dict[int, list] = {}
    for index, example in enumerate(examples):
        feature = example.features.feature
        context = feature["context"].bytes_list.value if "context" in feature else []
        choices = feature["choices"].bytes_list.value if "choices" in feature else []
        if len(context) != 1 or not choices:
            counts["malformed_examples"] += 1
            logging.warning("ConceptPaths: an example without one 'context' and its "
                            "'choices' is left out (counted as malformed_examples)")
            continue
        groups.setdefault(len(choices), []).append(
            (index, context[0].decode("utf-8", "replace"),
             [c.decode("utf-8", "replace") for c in choices]))
    kept = []
    for group in groups.values():
        arrays, group_counts = builder.build([g[1] for g in group], [g[2] for g in group])
        for name, value in group_counts.items():
            counts[name] += value
        for row, (index, _, _) in enumerate(group):
            add_graph_features(examples[index], arrays, row)
            kept.append(index)
    return counts, [examples[index].SerializeToString() for index in sorted(kept)]


def find_concept_paths(input_uris: Mapping[str, str], graph_uri: str,
                       embeddings_uri: str | None, output_uri: str, settings: dict,
                       make_pipeline: Callable[[], beam.Pipeline] | None = None) -> dict:
    """Adds the schema graphs to every split (split -> folder of GZIP TFRecords) into
    ``<output_uri>/Split-<split>/``; returns and writes the counters per split."""
    _, concept_graph = load_concept_graph(graph_uri, embeddings_uri, settings)
    concept_graph.save(os.path.join(output_uri, CONCEPT_GRAPH_DIR))

    def schema_graphs():
        return (beam.BatchElements(min_batch_size=BATCH_SIZE, max_batch_size=BATCH_SIZE)
                | beam.ParDo(_AddSchemaGraphs(graph_uri, embeddings_uri, settings)))

    return example_stages.run_counted_stage(input_uris, output_uri, PATHS_LABEL,
                                            schema_graphs, NAMESPACE, COUNTERS, COUNTS_FILE,
                                            make_pipeline)


class Executor(base_beam_executor.BaseBeamExecutor):
    def Do(self, input_dict, output_dict, exec_properties):
        self._log_startup(input_dict, output_dict, exec_properties)
        splits, input_uris = example_stages.input_split_uris(input_dict, INPUT_EXAMPLES_KEY)
        graph_uri = artifact_utils.get_single_uri(input_dict[KNOWLEDGE_GRAPH_KEY])
        embeddings = input_dict.get(KG_EMBEDDINGS_KEY)
        embeddings_uri = artifact_utils.get_single_uri(embeddings) if embeddings else None
        output = artifact_utils.get_single_instance(output_dict[EXAMPLES_KEY])
        find_concept_paths(input_uris, graph_uri, embeddings_uri, output.uri,
                           json.loads(exec_properties[SETTINGS_KEY]),
                           make_pipeline=beam_options.executor_pipeline(
                               self, beam_options.input_size(input_uris.values())))
        example_stages.finish_examples_output(output, splits)


class ConceptPathsSpec(types.ComponentSpec):
    PARAMETERS = {SETTINGS_KEY: ExecutionParameter(type=str)}
    INPUTS = {INPUT_EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples),
              KNOWLEDGE_GRAPH_KEY: ChannelParameter(type=KnowledgeGraph),
              KG_EMBEDDINGS_KEY: ChannelParameter(type=KGEmbeddings, optional=True)}
    OUTPUTS = {EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples)}


class ConceptPaths(base_beam_component.BaseBeamComponent):
    SPEC_CLASS = ConceptPathsSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)

    def __init__(self, examples: types.BaseChannel, knowledge_graph: types.BaseChannel,
                 kg_embeddings: types.BaseChannel | None = None, settings: dict | None = None):
        """Args:
          examples: multiple-choice ``Examples`` (``context``, ``choices``, ``label``).
          knowledge_graph: the ``KnowledgeGraph`` (ConceptNet CSV or any triple format).
          kg_embeddings: its TransE ``KGEmbeddings`` (path scores); None: no pruning by
              score (every path scores 1; the per-pair cap still applies).
          settings: the recipe's ``finetuning.task_args`` (path settings: ``max_hops``,
              ``max_paths_per_pair``, ``max_question_concepts``, ``max_answer_concepts``,
              ``min_path_score``, ``max_neighbours``; other keys are ignored).
        """
        spec = ConceptPathsSpec(
            input_examples=examples, knowledge_graph=knowledge_graph,
            kg_embeddings=kg_embeddings, settings=json.dumps(dict(settings or {}),
                                                             sort_keys=True),
            **{EXAMPLES_KEY: types.Channel(type=standard_artifacts.Examples)})
        super().__init__(spec=spec)


__all__ = ["ConceptPaths", "add_schema_graphs", "find_concept_paths", "load_concept_graph"]
