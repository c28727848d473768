"""KnowledgeGraphGen: a TFX component that reads knowledge-graph triple files (FB15k-237 /
WN18RR TSV or the ConceptNet 5 assertions CSV) into a ``KnowledgeGraph`` artifact.

    graph_gen = KnowledgeGraphGen(knowledge_graph=recipe["knowledge_graph"])
    graph_gen.outputs["knowledge_graph"]  # entities.tsv, relations.tsv, triples-*.npy, ...

Layout and counts: components/knowledge_graph/graph.py and CONTRACTS "Knowledge graphs".
"""

from __future__ import annotations

import json
from typing import Mapping

from tfx import types
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types.component_spec import ChannelParameter, ExecutionParameter

from lmfactory.components.artifacts import KnowledgeGraph
from lmfactory.components.knowledge_graph.executor import (KNOWLEDGE_GRAPH_KEY, SECTION_KEY,
                                                          Executor)


class KnowledgeGraphGenSpec(types.ComponentSpec):
    """The recipe's ``knowledge_graph`` section travels as a JSON string (``section``)."""

    PARAMETERS = {SECTION_KEY: ExecutionParameter(type=str)}
    INPUTS = {}
    OUTPUTS = {KNOWLEDGE_GRAPH_KEY: ChannelParameter(type=KnowledgeGraph)}


class KnowledgeGraphGen(base_component.BaseComponent):
    SPEC_CLASS = KnowledgeGraphGenSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(self, knowledge_graph: Mapping):
        """Args:
          knowledge_graph: the recipe section (``format``, ``splits``, ``labels``,
            ``linking``; ``embedding`` is the KGEmbeddingTrainer's), with absolute paths.
        """
        spec = KnowledgeGraphGenSpec(
            section=json.dumps(dict(knowledge_graph), sort_keys=True),
            **{KNOWLEDGE_GRAPH_KEY: types.Channel(type=KnowledgeGraph)})
        super().__init__(spec=spec)
