"""KGEmbeddingTrainer: a TFX component that trains knowledge-graph embeddings (TransE,
components/knowledge_graph/transe.py) on a KnowledgeGraph artifact and writes the
``KGEmbeddings`` artifact:

* ``entity_embeddings.npy``: float32 [E, d] in the graph's entity order;
* ``relation_embeddings.npy``: float32 [R, d];
* ``metrics.json``: filtered ``mrr``, ``hits@1``, ``hits@3``, ``hits@10`` and ``raw_mrr`` on
  the graph's test split (when it has one), the settings and the per-epoch loss;
* ``entities.tsv``: a copy of the graph's.

    embeddings = KGEmbeddingTrainer(knowledge_graph=graph_gen.outputs["knowledge_graph"],
                                    embedding=recipe["knowledge_graph"]["embedding"])
"""

from __future__ import annotations

import io
import json
import os
from typing import Mapping

import numpy as np
import tensorflow as tf
from tfx import types
from tfx.dsl.components.base import base_component, base_executor, executor_spec
from tfx.types import artifact_utils
from tfx.types.component_spec import ChannelParameter, ExecutionParameter

from lmfactory.components.artifacts import KGEmbeddings, KnowledgeGraph

KNOWLEDGE_GRAPH_KEY = "knowledge_graph"
KG_EMBEDDINGS_KEY = "kg_embeddings"
EMBEDDING_KEY = "embedding"
ENTITY_EMBEDDINGS, RELATION_EMBEDDINGS = "entity_embeddings.npy", "relation_embeddings.npy"
METRICS_FILE = "metrics.json"


def load_embeddings(uri: str) -> tuple[np.ndarray, np.ndarray]:
    """``(entity_embeddings [E, d], relation_embeddings [R, d])`` of a KGEmbeddings folder."""
    raise NotImplementedError


def train_embeddings(graph_uri: str, embedding: Mapping, output_uri: str) -> dict:
    """Trains the ``embedding`` settings' method on the graph at ``graph_uri``, writes the
    KGEmbeddings folder to ``output_uri`` and returns its metrics."""
    raise NotImplementedError


class Executor(base_executor.BaseExecutor):
    def Do(self, input_dict, output_dict, exec_properties):
        graph_uri = artifact_utils.get_single_uri(input_dict[KNOWLEDGE_GRAPH_KEY])
        output = artifact_utils.get_single_instance(output_dict[KG_EMBEDDINGS_KEY])
        metrics = train_embeddings(graph_uri, json.loads(exec_properties[EMBEDDING_KEY]),
                                   output.uri)
        for name in ("mrr", "hits@10"):
            if name in metrics:
                output.set_float_custom_property(name.replace("@", "_at_"), metrics[name])


class KGEmbeddingTrainerSpec(types.ComponentSpec):
    PARAMETERS = {EMBEDDING_KEY: ExecutionParameter(type=str)}
    INPUTS = {KNOWLEDGE_GRAPH_KEY: ChannelParameter(type=KnowledgeGraph)}
    OUTPUTS = {KG_EMBEDDINGS_KEY: ChannelParameter(type=KGEmbeddings)}


class KGEmbeddingTrainer(base_component.BaseComponent):
    SPEC_CLASS = KGEmbeddingTrainerSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(self, knowledge_graph: types.BaseChannel, embedding: Mapping):
        """Args:
          knowledge_graph: channel of a ``KnowledgeGraph``.
          embedding: the recipe's ``knowledge_graph.embedding`` settings (method ``transe``,
            dim, margin, norm, epochs, batch_size, learning_rate, seed, optimizer).
        """
        spec = KGEmbeddingTrainerSpec(
            knowledge_graph=knowledge_graph, embedding=json.dumps(dict(embedding),
                                                                  sort_keys=True),
            kg_embeddings=types.Channel(type=KGEmbeddings))
        super().__init__(spec=spec)
