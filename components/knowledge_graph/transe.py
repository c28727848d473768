"""TransE (Bordes et al. 2013, "Translating Embeddings for Modeling Multi-relational Data")
and the filtered link-prediction evaluation.

§2: a relation is a translation in the embedding space, h + r ≈ t for a true triple, scored
by the dissimilarity d(h + r, t), the L1 or L2 norm. Training minimises the margin ranking
loss  L = Σ_{(h,r,t)} Σ_{(h',r,t')} [γ + d(h + r, t) − d(h' + r, t')]_+  over corrupted
triples, each with its head or its tail (not both) replaced by a random entity (Algorithm 1:
uniform entity, head or tail with equal probability; the "unif" setting). Algorithm 1 also
initialises every vector uniformly in [−6/√k, 6/√k], L2-normalises the relation vectors once
and renormalises every entity vector to unit L2 norm at the start of each minibatch step (so
the loss cannot be lowered by growing the entity norms). Optimisation: minibatch SGD (§4.2);
Adam is offered too.

Evaluation (§4.2 "filtered" protocol): for each test triple, the head and then the tail is
replaced by every entity; the rank of the true triple among them by d (smaller is better) is
recorded, after removing the corrupted triples that are themselves true (in train, valid or
test). Reported: mean reciprocal rank (MRR) and Hits@1/3/10 over both directions, and the raw
(unfiltered) MRR. Ties count half (the rank is 1 + #better + #tied/2), so a constant model
does not score as perfect.
"""

from __future__ import annotations

from typing import Mapping

import keras
import numpy as np
import tensorflow as tf

from lmfactory.components.knowledge_graph.settings import (EMBEDDING_DEFAULTS as
                                                           DEFAULT_EMBEDDING, NORMS, OPTIMIZERS)

HITS_AT = (1, 3, 10)


def distance(heads, relations, tails, norm: int):
    """d(h + r, t) over the last axis: the L1 (``norm=1``) or L2 (``norm=2``) norm."""
    raise NotImplementedError


def corrupt_triples(triples, num_entities: int, seed):
    """Algorithm 1's corrupted triples: each (h, r, t) of ``triples`` (int [B, 3]) with, with
    probability 1/2, its head and otherwise its tail replaced by an entity drawn uniformly
    from [0, num_entities). ``seed``: a stateless seed (int32 [2]). Returns int [B, 3]."""
    raise NotImplementedError


def margin_ranking_loss(positive_distances, negative_distances, margin: float):
    """Σ [margin + d_pos − d_neg]_+ over the batch (Bordes et al. 2013, Eq. 1)."""
    raise NotImplementedError


class TransE(keras.Model):
    """Entity and relation embeddings trained by the margin ranking loss. Called on int
    triples [B, 3] (head, relation, tail indices) it returns d(h + r, t) [B].

    Args:
        num_entities, num_relations: sizes of the graph.
        dim: embedding size k.
        norm: 1 (L1) or 2 (L2) dissimilarity.
        margin: γ.
        seed: initialisation and corruption seed.
    """

    def __init__(self, num_entities: int, num_relations: int, dim: int = 100, norm: int = 1,
                 margin: float = 1.0, seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        raise NotImplementedError

    def get_config(self) -> dict:
        raise NotImplementedError


def rank_queries(model: TransE, triples: np.ndarray, known: np.ndarray,
                 batch_size: int = 256) -> dict:
    """Ranks of ``triples`` (int [N, 3]) against every entity, for head and tail
    replacement: ``{"filtered": float [2N], "raw": float [2N]}`` (the tail queries first).
    ``known``: every true triple (train + valid + test) removed by the filtered ranking."""
    raise NotImplementedError


def ranking_metrics(ranks) -> dict:
    """MRR and Hits@1/3/10 of an array of ranks."""
    raise NotImplementedError


def evaluate(model: TransE, graph, split: str = "test", batch_size: int = 256) -> dict:
    """Filtered ``mrr``, ``hits@1``, ``hits@3``, ``hits@10``, raw ``raw_mrr`` and the number
    of ``triples`` of ``graph.splits[split]`` (filtered against all of the graph's splits)."""
    raise NotImplementedError


def train_transe(graph, embedding: Mapping, epochs: int | None = None,
                 max_seconds: float | None = None):
    """Trains TransE on ``graph.splits["train"]`` with the recipe's ``embedding`` settings
    (`DEFAULT_EMBEDDING` keys). ``epochs`` overrides the setting; ``max_seconds`` stops after
    the epoch that passes it. Returns ``(model, history)`` (history: per-epoch mean loss)."""
    raise NotImplementedError
