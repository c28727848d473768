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

import time
from typing import Mapping

import keras
import numpy as np
import tensorflow as tf

from lmfactory.components.knowledge_graph.settings import (EMBEDDING_DEFAULTS as
                                                           DEFAULT_EMBEDDING, NORMS, OPTIMIZERS)

HITS_AT = (1, 3, 10)


def distance(heads, relations, tails, norm: int):
    """d(h + r, t) over the last axis: the L1 (``norm=1``) or L2 (``norm=2``) norm."""
    difference = heads + relations - tails
    if norm == 1:
        return tf.reduce_sum(tf.abs(difference), axis=-1)
    if norm == 2:  # the epsilon keeps the gradient finite at h + r = t
        return tf.sqrt(tf.reduce_sum(tf.square(difference), axis=-1) + 1e-12)
    raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")


def corrupt_triples(triples, num_entities: int, seed):
    """Algorithm 1's corrupted triples: each (h, r, t) of ``triples`` (int [B, 3]) with, with
    probability 1/2, its head and otherwise its tail replaced by an entity drawn uniformly
    from [0, num_entities). ``seed``: an int or a `keras.random.SeedGenerator`. Returns
    ``(corrupted int [B, 3], head_replaced bool [B])``."""
    triples = tf.convert_to_tensor(triples)
    size = tf.shape(triples)[:1]
    entities = tf.cast(keras.random.randint(size, 0, num_entities, seed=seed), triples.dtype)
    head_replaced = keras.random.uniform(size, seed=seed) < 0.5
    heads = tf.where(head_replaced, entities, triples[:, 0])
    tails = tf.where(head_replaced, triples[:, 2], entities)
    return tf.stack([heads, triples[:, 1], tails], axis=1), head_replaced


def margin_ranking_loss(positive_distances, negative_distances, margin: float):
    """Σ [margin + d_pos − d_neg]_+ over the batch (Bordes et al. 2013, Eq. 1)."""
    return tf.reduce_sum(tf.nn.relu(margin + positive_distances - negative_distances))


class TransE(keras.Model):
    """Entity and relation embeddings trained by the margin ranking loss. Called on int
    triples [B, 3] (head, relation, tail indices) it returns d(h + r, t) [B]; `train_step`
    is Algorithm 1's loop body (renormalise the entities, corrupt, take a gradient step on
    the margin loss).

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
        if norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
        self.num_entities, self.num_relations = int(num_entities), int(num_relations)
        self.dim, self.norm, self.margin, self.seed = int(dim), int(norm), float(margin), seed
        bound = 6.0 / float(dim) ** 0.5  # Algorithm 1: uniform(−6/√k, 6/√k)
        self.entity_embeddings = self.add_weight(
            shape=(self.num_entities, self.dim), name="entity_embeddings",
            initializer=keras.initializers.RandomUniform(-bound, bound, seed=seed))
        self.relation_embeddings = self.add_weight(
            shape=(self.num_relations, self.dim), name="relation_embeddings",
            initializer=keras.initializers.RandomUniform(-bound, bound, seed=seed + 1))
        # Algorithm 1, line 2: ℓ ← ℓ / ‖ℓ‖ once for each relation.
        self.relation_embeddings.assign(tf.math.l2_normalize(self.relation_embeddings, 1))
        self.seed_generator = keras.random.SeedGenerator(seed + 2)
        self.loss_tracker = keras.metrics.Mean(name="margin_loss")

    @property
    def metrics(self):
        return [self.loss_tracker]

    def call(self, triples):
        triples = tf.convert_to_tensor(triples)
        return distance(tf.gather(self.entity_embeddings, triples[:, 0]),
                        tf.gather(self.relation_embeddings, triples[:, 1]),
                        tf.gather(self.entity_embeddings, triples[:, 2]), self.norm)

    def normalize_entities(self) -> None:
        """Algorithm 1, line 5: e ← e / ‖e‖ for every entity."""
        self.entity_embeddings.assign(tf.math.l2_normalize(self.entity_embeddings, 1))

    def train_step(self, triples):
        self.normalize_entities()
        corrupted, _ = corrupt_triples(triples, self.num_entities, self.seed_generator)
        with tf.GradientTape() as tape:
            loss = margin_ranking_loss(self(triples), self(corrupted), self.margin)
        variables = self.trainable_variables
        self.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        # reported: the epoch's mean loss per training triple
        self.loss_tracker.update_state(loss / tf.cast(tf.shape(triples)[0], loss.dtype),
                                       tf.cast(tf.shape(triples)[0], loss.dtype))
        return {"margin_loss": self.loss_tracker.result()}

    def get_config(self) -> dict:
        return {**super().get_config(), "num_entities": self.num_entities,
                "num_relations": self.num_relations, "dim": self.dim, "norm": self.norm,
                "margin": self.margin, "seed": self.seed}


def _known_answers(known: np.ndarray, num_relations: int, side: int):
    """For head (side 0) or tail (side 2) queries: sorted query keys and the true answers in
    the same order (a CSR index of every known triple)."""
    if side == 2:
        keys = known[:, 0].astype(np.int64) * num_relations + known[:, 1]
    else:
        keys = known[:, 2].astype(np.int64) * num_relations + known[:, 1]
    order = np.argsort(keys, kind="stable")
    return keys[order], known[order, side]


def _query_distances(model: TransE, norm: int):
    entities = model.entity_embeddings

    @tf.function(jit_compile=True, reduce_retracing=True)  # XLA fuses away the [B, E, d]
    def distances(queries):  # queries [B, d] -> distance to every entity [B, E]
        difference = queries[:, tf.newaxis, :] - entities[tf.newaxis, :, :]
        if norm == 1:
            return tf.reduce_sum(tf.abs(difference), -1)
        return tf.sqrt(tf.reduce_sum(tf.square(difference), -1))

    return distances


def rank_queries(model: TransE, triples: np.ndarray, known: np.ndarray,
                 batch_size: int | None = None) -> dict:
    """Ranks of ``triples`` (int [N, 3]) against every entity, for tail and head
    replacement: ``{"filtered": float [2N], "raw": float [2N]}`` (the tail queries first).
    ``known``: every true triple (train + valid + test), removed by the filtered ranking
    (the test triple itself stays). A rank is 1 + #closer + #tied / 2."""
    triples = np.asarray(triples, np.int64).reshape(-1, 3)
    known = np.asarray(known, np.int64).reshape(-1, 3)
    entity = model.entity_embeddings.numpy()
    relation = model.relation_embeddings.numpy()
    num_entities = entity.shape[0]
    if batch_size is None:  # keep the [B, E, d] difference near 64M floats
        batch_size = max(1, (1 << 26) // max(1, num_entities * entity.shape[1]))
    distances = _query_distances(model, model.norm)
    ranks = {"filtered": [], "raw": []}
    for side in (2, 0):
        sorted_keys, answers = _known_answers(known, model.num_relations, side)
        for start in range(0, len(triples), batch_size):
            batch = triples[start:start + batch_size]
            gold = batch[:, side]
            if side == 2:  # d(h + r, t') = ‖(h + r) − t'‖
                queries = entity[batch[:, 0]] + relation[batch[:, 1]]
                keys = batch[:, 0] * model.num_relations + batch[:, 1]
            else:  # d(h' + r, t) = ‖h' − (t − r)‖
                queries = entity[batch[:, 2]] - relation[batch[:, 1]]
                keys = batch[:, 2] * model.num_relations + batch[:, 1]
            scores = distances(tf.constant(queries, tf.float32)).numpy()
            gold_scores = scores[np.arange(len(batch)), gold][:, np.newaxis]
            closer, tied = scores < gold_scores, scores == gold_scores
            raw_closer, raw_tied = closer.sum(1), tied.sum(1) - 1  # minus the gold itself
            low = np.searchsorted(sorted_keys, keys, "left")
            high = np.searchsorted(sorted_keys, keys, "right")
            rows = np.repeat(np.arange(len(batch)), high - low)
            columns = answers[np.concatenate([np.arange(a, b) for a, b in zip(low, high)])
                              if len(rows) else np.zeros(0, np.int64)]
            other = columns != gold[rows]
            rows, columns = rows[other], columns[other]
            removed_closer = np.bincount(rows, closer[rows, columns], len(batch))
            removed_tied = np.bincount(rows, tied[rows, columns], len(batch))
            ranks["raw"].append(1 + raw_closer + raw_tied / 2)
            ranks["filtered"].append(1 + raw_closer - removed_closer +
                                     (raw_tied - removed_tied) / 2)
    return {name: np.concatenate(values) if values else np.zeros(0)
            for name, values in ranks.items()}


def ranking_metrics(ranks) -> dict:
    """MRR and Hits@1/3/10 of an array of ranks."""
    ranks = np.asarray(ranks, np.float64)
    if not len(ranks):
        return {"mrr": float("nan"), **{f"hits@{k}": float("nan") for k in HITS_AT}}
    return {"mrr": float(np.mean(1.0 / ranks)),
            **{f"hits@{k}": float(np.mean(ranks <= k)) for k in HITS_AT}}


def evaluate(model: TransE, graph, split: str = "test", batch_size: int | None = None) -> dict:
    """Filtered ``mrr``, ``hits@1``, ``hits@3``, ``hits@10``, raw ``raw_mrr`` and the number
    of ``triples`` of ``graph.splits[split]`` (filtered against all of the graph's splits)."""
    triples = graph.splits[split]
    ranks = rank_queries(model, triples, graph.all_triples(), batch_size)
    return {**ranking_metrics(ranks["filtered"]),
            "raw_mrr": ranking_metrics(ranks["raw"])["mrr"], "triples": int(len(triples))}


class _TimeLimit(keras.callbacks.Callback):
    def __init__(self, max_seconds: float):
        super().__init__()
        self.max_seconds, self.started = max_seconds, None

    def on_train_begin(self, logs=None):
        self.started = time.monotonic()

    def on_epoch_end(self, epoch, logs=None):
        if time.monotonic() - self.started > self.max_seconds:
            self.model.stop_training = True


def make_optimizer(name: str, learning_rate: float):
    if name == "sgd":  # Bordes et al. 2013 §4.2: minibatch SGD
        return keras.optimizers.SGD(learning_rate)
    if name == "adam":
        return keras.optimizers.Adam(learning_rate)
    raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {name!r}")


def train_transe(graph, embedding: Mapping, epochs: int | None = None,
                 max_seconds: float | None = None):
    """Trains TransE on ``graph.splits["train"]`` with the recipe's ``embedding`` settings
    (`DEFAULT_EMBEDDING` keys). ``epochs`` overrides the setting; ``max_seconds`` stops after
    the epoch that passes it. Returns ``(model, history)`` (history: per-epoch mean loss per
    triple). The entities are renormalised once more at the end (Algorithm 1's invariant)."""
    settings = {**DEFAULT_EMBEDDING, **dict(embedding)}
    if settings["method"] != "transe":
        raise ValueError(f"embedding method must be transe, got {settings['method']!r}")
    # The stage seeds every generator itself, as the Trainer stages do: its embeddings do not
    # depend on what ran before it in the process (a re-run whose earlier stages are cached
    # trains the same ones).
    keras.utils.set_random_seed(int(settings["seed"]))
    train = np.asarray(graph.splits["train"], np.int32)
    if not len(train):
        raise ValueError("TransE needs training triples; the graph's train split is empty")
    model = TransE(graph.num_entities, graph.num_relations, settings["dim"], settings["norm"],
                   settings["margin"], settings["seed"])
    model.compile(optimizer=make_optimizer(settings["optimizer"], settings["learning_rate"]))
    data = (tf.data.Dataset.from_tensor_slices(train)
            .shuffle(len(train), seed=settings["seed"], reshuffle_each_iteration=True)
            .batch(settings["batch_size"]).prefetch(2))
    callbacks = [_TimeLimit(max_seconds)] if max_seconds else []
    history = model.fit(data, epochs=epochs or settings["epochs"], callbacks=callbacks,
                        verbose=0)
    model.normalize_entities()
    return model, [float(value) for value in history.history.get("margin_loss", [])]
