"""KGEmbeddingTrainer: a TFX component that trains knowledge-graph embeddings (TransE,
components/knowledge_graph/transe.py) on a KnowledgeGraph artifact and writes the
``KGEmbeddings`` artifact:

* ``entity_embeddings.npy``: float32 [E, d] in the graph's entity order;
* ``relation_embeddings.npy``: float32 [R, d];
* ``metrics.json``: filtered ``mrr``, ``hits@1``, ``hits@3``, ``hits@10`` and ``raw_mrr`` on
  the graph's test split (when it has one), the settings and the per-epoch loss;
* ``embedding.json``: the settings it was trained with (method, dim, norm, margin, ...);
* ``entities.tsv``: a copy of the graph's.

    embeddings = KGEmbeddingTrainer(knowledge_graph=graph_gen.outputs["knowledge_graph"],
                                    embedding=recipe["knowledge_graph"]["embedding"])
"""

from __future__ import annotations

import io
import json
import logging
import os
import time
from typing import Mapping

import numpy as np
import tensorflow as tf
from tfx import types
from tfx.dsl.components.base import base_component, base_executor, executor_spec
from tfx.types import artifact_utils
from tfx.types.component_spec import ChannelParameter, ExecutionParameter

from lmfactory.components import artifacts
from lmfactory.components.knowledge_graph import transe
from lmfactory.components.knowledge_graph.graph import ENTITIES_FILE, KnowledgeGraph

KNOWLEDGE_GRAPH_KEY = "knowledge_graph"
KG_EMBEDDINGS_KEY = "kg_embeddings"
EMBEDDING_KEY = "embedding"
ENTITY_EMBEDDINGS, RELATION_EMBEDDINGS = "entity_embeddings.npy", "relation_embeddings.npy"
METRICS_FILE = "metrics.json"
SETTINGS_FILE = "embedding.json"  # the embedding settings it was trained with (method, norm..)


def _save_array(path: str, array: np.ndarray) -> None:
    buffer = io.BytesIO()
    np.save(buffer, array)
    with tf.io.gfile.GFile(path, "wb") as f:
        f.write(buffer.getvalue())


def _load_array(path: str) -> np.ndarray:
    with tf.io.gfile.GFile(path, "rb") as f:
        return np.load(io.BytesIO(f.read()))


def load_embeddings(uri: str) -> tuple[np.ndarray, np.ndarray]:
    """``(entity_embeddings [E, d], relation_embeddings [R, d])`` of a KGEmbeddings folder."""
    path = os.path.join(uri, ENTITY_EMBEDDINGS)
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"{uri} is not a KGEmbeddings folder (no {ENTITY_EMBEDDINGS})")
    return (_load_array(path).astype(np.float32),
            _load_array(os.path.join(uri, RELATION_EMBEDDINGS)).astype(np.float32))


def save_embeddings(output_uri: str, entity_embeddings, relation_embeddings, metrics: dict,
                    graph_uri: str) -> None:
    """Writes the KGEmbeddings folder (module docstring)."""
    tf.io.gfile.makedirs(output_uri)
    _save_array(os.path.join(output_uri, ENTITY_EMBEDDINGS),
                np.asarray(entity_embeddings, np.float32))
    _save_array(os.path.join(output_uri, RELATION_EMBEDDINGS),
                np.asarray(relation_embeddings, np.float32))
    with tf.io.gfile.GFile(os.path.join(output_uri, METRICS_FILE), "w") as f:
        json.dump(metrics, f, indent=2, sort_keys=True)
    with tf.io.gfile.GFile(os.path.join(output_uri, SETTINGS_FILE), "w") as f:
        json.dump(metrics.get("settings", {}), f, indent=2, sort_keys=True)
    tf.io.gfile.copy(os.path.join(graph_uri, ENTITIES_FILE),
                     os.path.join(output_uri, ENTITIES_FILE), overwrite=True)


def train_embeddings(graph_uri: str, embedding: Mapping, output_uri: str) -> dict:
    """Trains the ``embedding`` settings' method (TransE) on the graph at ``graph_uri``,
    evaluates it on the graph's test split (filtered ranking, when there is one), writes the
    KGEmbeddings folder to ``output_uri`` and returns its metrics."""
    graph = KnowledgeGraph.load(graph_uri)
    started = time.monotonic()
    model, losses = transe.train_transe(graph, embedding)
    metrics = {"settings": {**transe.DEFAULT_EMBEDDING, **dict(embedding)},
               "epoch_losses": losses, "train_seconds": round(time.monotonic() - started, 1)}
    if len(graph.splits.get("test", ())):
        metrics.update(transe.evaluate(model, graph, "test"))
        logging.info("TransE on %s: filtered MRR %.4f, Hits@10 %.4f (%d test triples)",
                     graph_uri, metrics["mrr"], metrics["hits@10"], metrics["triples"])
    save_embeddings(output_uri, model.entity_embeddings.numpy(),
                    model.relation_embeddings.numpy(), metrics, graph_uri)
    return metrics


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
    INPUTS = {KNOWLEDGE_GRAPH_KEY: ChannelParameter(type=artifacts.KnowledgeGraph)}
    OUTPUTS = {KG_EMBEDDINGS_KEY: ChannelParameter(type=artifacts.KGEmbeddings)}


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
            kg_embeddings=types.Channel(type=artifacts.KGEmbeddings))
        super().__init__(spec=spec)
