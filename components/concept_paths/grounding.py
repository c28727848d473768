"""KagNet's §3.1 on Python values: a KG (+ TransE) -> `ConceptGraph`, and questions with
their choices -> schema-graph records, with the counts the Beam stage reports.

Concept recognition uses the KG's `EntityMatcher` (label n-gram matching, longest first;
concepts that are only stop words never match, ``models/kagnet/kagnet_preprocessor.py``);
path finding, pruning and the schema graph are `ConceptPathFinder`, the very layer the
exported model runs, so a record holds what serving computes for the same text.
"""

from __future__ import annotations

import json
import os

import numpy as np
import tensorflow as tf

from lmfactory.models.kagnet.kagnet_graph import ConceptGraph, build_concept_graph
from lmfactory.models.kagnet.kagnet_path_finder import GRAPH_INPUTS, ConceptPathFinder
from lmfactory.models.kagnet.kagnet_preprocessor import PATH_ARGUMENTS, grounding_labels

EMBEDDING_SETTINGS_FILE = "embedding.json"
GRAPH_ARGUMENTS = ("max_neighbours",)
COUNTERS = ("questions", "choices", "questions_without_concept", "choices_without_concept",
            "choices_without_path", "paths", "malformed_examples")


def transe_norm(embeddings_uri) -> int:
    """The distance norm TransE was trained with (the KGEmbeddings folder's settings), 1
    when the folder does not say."""
    path = os.path.join(embeddings_uri, EMBEDDING_SETTINGS_FILE) if embeddings_uri else None
    if path and tf.io.gfile.exists(path):
        with tf.io.gfile.GFile(path) as f:
            return int(json.load(f).get("norm", 1))
    return 1


def concept_graph_of(graph, embeddings=None, norm: int = 1, max_neighbours: int = 64):
    """The `ConceptGraph` of a `KnowledgeGraph` (its train triples and labels) scored by
    TransE ``embeddings`` = (entity [E, d], relation [R, d]) or unscored (None)."""
    entity, relation = embeddings if embeddings is not None else (None, None)
    return build_concept_graph(len(graph.entities), len(graph.relations),
                               graph.splits["train"], entity, relation, norm=norm,
                               max_neighbours=max_neighbours, labels=graph.labels)


def split_settings(task_args: dict) -> tuple[dict, dict]:
    """(path-finder settings, concept-graph settings) among the recipe's task_args."""
    task_args = dict(task_args or {})
    return ({k: task_args[k] for k in PATH_ARGUMENTS if k in task_args},
            {k: task_args[k] for k in GRAPH_ARGUMENTS if k in task_args})


def _ragged(lists) -> tf.RaggedTensor:
    values = np.asarray([v for row in lists for v in row], dtype=np.int64)
    lengths = np.asarray([len(row) for row in lists], dtype=np.int64)
    return tf.RaggedTensor.from_row_lengths(values, lengths)


class SchemaGraphBuilder:
    """Questions and choices -> the `GRAPH_INPUTS` of each (question, choice) row.

    Args:
        concept_graph: a `ConceptGraph` with labels.
        linking: the KG's linking settings (``max_ngram``, ``lowercase``).
        path_settings: `ConceptPathFinder` settings (`PATH_ARGUMENTS`).
    """

    def __init__(self, concept_graph: ConceptGraph, linking: dict, path_settings: dict,
                 graph_dir: str | None = None):
        from lmfactory.components.knowledge_graph.linking import EntityMatcher

        self.matcher = EntityMatcher(grounding_labels(concept_graph.labels),
                                     max_ngram=linking.get("max_ngram", 4),
                                     lowercase=linking.get("lowercase", True))
        self.finder = ConceptPathFinder(graph_dir, graph=concept_graph, **path_settings)
        self._find = tf.function(self.finder.call, reduce_retracing=True)

    def ground(self, text: str) -> list:
        return [mention.entity_index for mention in self.matcher.link(text)]

    def build(self, questions, choices) -> tuple[dict, dict]:
        """``(arrays, counts)``: arrays name -> int32 [B, C, ...] for ``questions`` [B]
        and ``choices`` [B][C]; counts of `COUNTERS` (without malformed_examples)."""
        num_choices = len(choices[0])
        question_concepts = [self.ground(q) for q in questions]
        answer_concepts = [self.ground(c) for row in choices for c in row]
        rows = [question_concepts[i // num_choices] for i in range(len(answer_concepts))]
        graph = self._find(_ragged(rows), _ragged(answer_concepts))
        arrays = {name: graph[name].numpy().reshape((len(questions), num_choices)
                                                    + tuple(graph[name].shape[1:]))
                  for name in GRAPH_INPUTS}
        paths = (arrays["path_nodes"][..., 0] >= 0).sum(axis=(2, 3))  # [B, C]
        counts = {"questions": len(questions), "choices": len(answer_concepts),
                  "questions_without_concept": sum(not q for q in question_concepts),
                  "choices_without_concept": sum(not a for a in answer_concepts),
                  "choices_without_path": int((paths == 0).sum()),
                  "paths": int(paths.sum())}
        return arrays, counts


def add_graph_features(example: tf.train.Example, arrays: dict, index: int) -> None:
    """Writes question ``index``'s arrays (flattened, int64) into ``example``."""
    for name in GRAPH_INPUTS:
        example.features.feature[name].int64_list.value[:] = (
            np.asarray(arrays[name][index]).reshape(-1).tolist())


__all__ = ["COUNTERS", "SchemaGraphBuilder", "add_graph_features", "concept_graph_of",
           "split_settings", "transe_norm"]
