"""Executor of KnowledgeGraphGen: :func:`generate_graph` does the work as a plain function
(the recipe's ``knowledge_graph`` section in, the artifact folder and its counts out); the
TFX `Executor` only unpacks the exec property and the output URI."""

from __future__ import annotations

import json
import logging
from typing import Mapping

from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils

from lmfactory.components.knowledge_graph.graph import TOTALS, build_graph

KNOWLEDGE_GRAPH_KEY = "knowledge_graph"
SECTION_KEY = "section"  # exec property: the recipe section as JSON


def generate_graph(knowledge_graph: Mapping, output_uri: str) -> dict:
    """Reads the triple files of the recipe section ``knowledge_graph`` and writes the
    KnowledgeGraph folder to ``output_uri``; returns its counts (also in counts.json)."""
    graph = build_graph(knowledge_graph)
    graph.save(output_uri)
    logging.info("Knowledge graph: %d entities, %d relations, %s triples; %s",
                 graph.num_entities, graph.num_relations,
                 {split: len(array) for split, array in graph.splits.items()},
                 {key: graph.counts[key] for key in TOTALS if graph.counts.get(key)} or
                 "nothing dropped")
    return graph.counts


class Executor(base_executor.BaseExecutor):
    def Do(self, input_dict, output_dict, exec_properties):
        section = json.loads(exec_properties[SECTION_KEY])
        output = artifact_utils.get_single_instance(output_dict[KNOWLEDGE_GRAPH_KEY])
        counts = generate_graph(section, output.uri)
        output.set_int_custom_property("num_entities", counts["entities"])
        output.set_int_custom_property("num_relations", counts["relations"])
