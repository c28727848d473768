"""The concept graph KagNet searches: undirected neighbour lists scored by TransE.

Lin et al. 2019 §3.1 ("Schema graph construction"): paths are found between question and
answer concepts "on the undirected graph" of the KG, and "path pruning" scores every triple
of a path with a KG embedding (TransE, Bordes et al. 2013) and keeps the paths whose score
(the product of their triple scores) is high. This module turns a KG's training triples
and its TransE embeddings into the arrays both the Beam stage and the SavedModel search
(``kagnet_path_finder.py``): plain numpy, written to and read from a folder so that a
layer's config holds a path, not the graph.

* every triple ``(h, r, t)`` gives two directed edges, ``h -> t`` with relation ``r`` and
  ``t -> h`` with relation ``r + R`` (its inverse; R = the KG's relation count), so the
  search is over the undirected graph while a path still says which way each triple goes;
* an edge's score is TransE's plausibility of its triple, ``exp(-d / tau)`` with
  ``d = ||e_h + r - e_t||`` (the embedding's norm) and ``tau`` the median ``d`` over the
  training triples (scale-free: a typical triple scores exp(-1)); the inverse edge has
  the triple's score. Without embeddings every edge scores 1 (no pruning by score);
* between two concepts only the best-scored edge is kept (one relation per step), and
  self-loops are dropped (they make no path);
* each concept's edges are ordered by score, best first; ``max_neighbours`` caps how many
  of them the search expands from a concept (ConceptNet's hubs have thousands of edges),
  while an edge's existence is always checked against all edges.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os

import numpy as np

GRAPH_FILE = "concept_graph.npz"
LABELS_FILE = "concept_labels.txt"
CONFIG_FILE = "concept_graph.json"


@dataclasses.dataclass
class ConceptGraph:
    """Directed edges of the undirected KG, sorted by (source, -score).

    Attributes:
        num_concepts: E.
        num_relations: 2R (forward and inverse relations).
        row_splits: int64 [E + 1]: concept c's edges are ``row_splits[c]:row_splits[c+1]``.
        targets, relations: int64 [num_edges]: each edge's other end and relation id.
        log_scores: float32 [num_edges]: log of each edge's TransE score (<= 0).
        max_neighbours: how many edges of a concept the search expands.
        labels: surface forms of each concept (what grounding matches), or None.
        embedding_dim: the width of the TransE embeddings that scored it (None: none).
    """

    num_concepts: int
    num_relations: int
    row_splits: np.ndarray
    targets: np.ndarray
    relations: np.ndarray
    log_scores: np.ndarray
    max_neighbours: int = 64
    labels: list = None
    embedding_dim: int = None

    @property
    def sources(self) -> np.ndarray:
        return np.repeat(np.arange(self.num_concepts, dtype=np.int64),
                         np.diff(self.row_splits))

    def save(self, directory: str) -> str:
        import tensorflow as tf

        tf.io.gfile.makedirs(directory)
        buffer = io.BytesIO()
        np.savez(buffer, row_splits=self.row_splits, targets=self.targets,
                 relations=self.relations, log_scores=self.log_scores)
        with tf.io.gfile.GFile(os.path.join(directory, GRAPH_FILE), "wb") as f:
            f.write(buffer.getvalue())
        with tf.io.gfile.GFile(os.path.join(directory, CONFIG_FILE), "w") as f:
            json.dump({"num_concepts": self.num_concepts, "num_relations": self.num_relations,
                       "max_neighbours": self.max_neighbours,
                       "embedding_dim": self.embedding_dim}, f)
        if self.labels is not None:
            with tf.io.gfile.GFile(os.path.join(directory, LABELS_FILE), "w") as f:
                f.write("".join("|".join(forms) + "\n" for forms in self.labels))
        return directory

    @classmethod
    def load(cls, directory: str) -> "ConceptGraph":
        import tensorflow as tf

        path = os.path.join(directory, GRAPH_FILE)
        if not tf.io.gfile.exists(path):
            raise FileNotFoundError(f"{directory!r} is not a KagNet concept graph folder "
                                    f"(no {GRAPH_FILE})")
        with tf.io.gfile.GFile(path, "rb") as f:
            arrays = np.load(io.BytesIO(f.read()))
            arrays = {key: arrays[key] for key in arrays.files}
        with tf.io.gfile.GFile(os.path.join(directory, CONFIG_FILE)) as f:
            config = json.load(f)
        labels = None
        labels_path = os.path.join(directory, LABELS_FILE)
        if tf.io.gfile.exists(labels_path):
            with tf.io.gfile.GFile(labels_path) as f:
                labels = [[form for form in line.split("|") if form]
                          for line in f.read().split("\n")[:config["num_concepts"]]]
        return cls(labels=labels, **config, **arrays)


def transe_distances(triples, entity_embeddings, relation_embeddings, norm=1) -> np.ndarray:
    """``||e_h + r - e_t||`` (L1 or L2) of each (head, relation, tail) row, float64."""
    triples = np.asarray(triples, dtype=np.int64)
    difference = (entity_embeddings[triples[:, 0]] + relation_embeddings[triples[:, 1]]
                  - entity_embeddings[triples[:, 2]]).astype(np.float64)
    if norm == 1:
        return np.abs(difference).sum(axis=-1)
    return np.sqrt((difference ** 2).sum(axis=-1))


def build_concept_graph(num_concepts: int, num_relations: int, triples,
                        entity_embeddings=None, relation_embeddings=None, norm: int = 1,
                        max_neighbours: int = 64, labels=None) -> ConceptGraph:
    """The `ConceptGraph` of a KG (see the module docstring).

    Args:
        num_concepts: E, the KG's entity count (concept ids are its entity indices).
        num_relations: R, the KG's relation count.
        triples: int [N, 3] (head, relation, tail) training triples.
        entity_embeddings, relation_embeddings: TransE's [E, d] and [R, d], or None.
        norm: TransE's distance norm (1 or 2).
        max_neighbours: edges expanded per concept by the search.
        labels: the concepts' surface forms (kept with the graph for grounding).
    """
    triples = np.asarray(triples, dtype=np.int64).reshape(-1, 3)
    if len(triples) and (triples[:, [0, 2]].max() >= num_concepts or triples.min() < 0
                         or triples[:, 1].max() >= num_relations):
        raise ValueError("build_concept_graph: a triple names a concept or relation outside "
                         f"the KG's {num_concepts} concepts / {num_relations} relations")
    if entity_embeddings is not None and len(triples):
        distances = transe_distances(triples, entity_embeddings, relation_embeddings, norm)
        tau = float(np.median(distances)) or 1.0
        log_scores = -distances / tau
    else:
        log_scores = np.zeros(len(triples))
    keep = triples[:, 0] != triples[:, 2]
    triples, log_scores = triples[keep], log_scores[keep]
    sources = np.concatenate([triples[:, 0], triples[:, 2]])
    targets = np.concatenate([triples[:, 2], triples[:, 0]])
    relations = np.concatenate([triples[:, 1], triples[:, 1] + num_relations])
    scores = np.concatenate([log_scores, log_scores])
    # Best edge first within each source; then one edge per (source, target): the first.
    order = np.lexsort((relations, -scores, targets, sources))
    sources, targets, relations, scores = (sources[order], targets[order],
                                           relations[order], scores[order])
    first = np.ones(len(sources), dtype=bool)
    first[1:] = (sources[1:] != sources[:-1]) | (targets[1:] != targets[:-1])
    sources, targets, relations, scores = (sources[first], targets[first],
                                           relations[first], scores[first])
    order = np.lexsort((targets, -scores, sources))
    sources, targets, relations, scores = (sources[order], targets[order],
                                           relations[order], scores[order])
    row_splits = np.concatenate([[0], np.cumsum(np.bincount(sources, minlength=num_concepts))])
    return ConceptGraph(num_concepts=int(num_concepts), num_relations=2 * int(num_relations),
                        row_splits=row_splits.astype(np.int64), targets=targets.astype(np.int64),
                        relations=relations.astype(np.int64),
                        log_scores=scores.astype(np.float32),
                        max_neighbours=int(max_neighbours),
                        labels=[list(forms) for forms in labels] if labels is not None
                        else None,
                        embedding_dim=None if entity_embeddings is None
                        else int(np.shape(entity_embeddings)[1]))


__all__ = ["ConceptGraph", "build_concept_graph", "transe_distances"]
