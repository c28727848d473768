"""TransE (Bordes et al. 2013) and the filtered link-prediction evaluation
(components/knowledge_graph/transe.py), and the KGEmbeddingTrainer's executor function."""

import collections
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from lmfactory.components.knowledge_graph import transe
from lmfactory.components.knowledge_graph.embedding_component import (load_embeddings,
                                                                      train_embeddings)
from lmfactory.components.knowledge_graph.executor import generate_graph
from lmfactory.components.knowledge_graph.graph import KnowledgeGraph, build_graph

FB15K = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "kg",
                     "FB15k-237")


def test_corruption_replaces_head_or_tail_uniformly():
    num_entities, n = 10, 6000
    rng = np.random.default_rng(0)
    triples = np.stack([rng.integers(0, num_entities, n), rng.integers(0, 5, n),
                        rng.integers(0, num_entities, n)], 1).astype(np.int32)
    corrupted, head_replaced = transe.corrupt_triples(triples, num_entities, seed=3)
    corrupted, head_replaced = corrupted.numpy(), head_replaced.numpy()
    np.testing.assert_array_equal(corrupted[:, 1], triples[:, 1])  # relation kept
    np.testing.assert_array_equal(corrupted[head_replaced, 2], triples[head_replaced, 2])
    np.testing.assert_array_equal(corrupted[~head_replaced, 0], triples[~head_replaced, 0])
    assert 0.47 < head_replaced.mean() < 0.53  # heads or tails, 50/50
    new = np.where(head_replaced, corrupted[:, 0], corrupted[:, 2])
    frequencies = np.bincount(new, minlength=num_entities) / n  # uniform over entities
    assert new.min() >= 0 and new.max() < num_entities
    assert np.all(np.abs(frequencies - 0.1) < 0.02)
    again, _ = transe.corrupt_triples(triples, num_entities, seed=3)
    np.testing.assert_array_equal(again.numpy(), corrupted)  # seeded


def test_distance_and_margin_ranking_loss():
    h, r, t = (tf.constant([[1.0, 2.0]]), tf.constant([[0.5, -1.0]]),
               tf.constant([[0.0, 0.0]]))
    assert transe.distance(h, r, t, 1).numpy() == pytest.approx([2.5])
    assert transe.distance(h, r, t, 2).numpy() == pytest.approx([np.sqrt(1.5 ** 2 + 1)])
    # [γ + d+ − d−]_+ summed: [1 + 1 − 3]_+ + [1 + 2 − 1.5]_+ = 0 + 1.5
    loss = transe.margin_ranking_loss(tf.constant([1.0, 2.0]), tf.constant([3.0, 1.5]), 1.0)
    assert float(loss) == pytest.approx(1.5)


def test_initialisation_and_entity_renormalisation_each_step():
    model = transe.TransE(20, 3, dim=8, norm=1, margin=1.0, seed=0)
    bound = 6 / np.sqrt(8)
    entities = model.entity_embeddings.numpy()
    assert np.abs(entities).max() <= bound and np.abs(entities).max() > 0.5 * bound
    np.testing.assert_allclose(np.linalg.norm(model.relation_embeddings.numpy(), axis=1), 1,
                               rtol=1e-5)  # Algorithm 1 line 2
    model.entity_embeddings.assign(entities * 5)
    model.compile(optimizer=transe.make_optimizer("sgd", 1e-8))
    model.fit(np.array([[0, 1, 2], [3, 0, 4]], np.int32), batch_size=2, epochs=1, verbose=0)
    np.testing.assert_allclose(np.linalg.norm(model.entity_embeddings.numpy(), axis=1), 1,
                               rtol=1e-4)  # Algorithm 1 line 5, before the (tiny) step


@pytest.fixture
def line_graph():
    """Five entities on a line (1-d vectors 0, 1, 2, 3, 10) and one relation "+1"."""
    graph = KnowledgeGraph(entities=list("abcde"), labels=[[]] * 5, relations=["next"],
                           splits={"train": np.array([[0, 0, 1], [1, 0, 2]], np.int32),
                                   "test": np.array([[0, 0, 2], [3, 0, 4]], np.int32)})
    model = transe.TransE(5, 1, dim=1, norm=1)
    model.entity_embeddings.assign([[0.0], [1.0], [2.0], [3.0], [10.0]])
    model.relation_embeddings.assign([[1.0]])
    return graph, model


def test_filtered_ranks_on_a_hand_made_graph(line_graph):
    graph, model = line_graph
    # Tail query (a, next, ?): h + r = 1, distances [1, 0, 1, 2, 9], gold c (1): b is closer
    # (raw) but (a, next, b) is a train triple (filtered away); a ties: rank 1 + 0 + 1/2.
    # (d, next, ?): h + r = 4, distances [4, 3, 2, 1, 6]: four closer, none known: 5.
    # Head query (?, next, c): t − r = 1: b closer but (b, next, c) is known; c ties: 1.5.
    # (?, next, e): t − r = 9, distances [9, 8, 7, 6, 1]: e is closer, unknown: 2.
    for batch_size in (None, 1):
        ranks = transe.rank_queries(model, graph.splits["test"], graph.all_triples(),
                                    batch_size)
        np.testing.assert_allclose(ranks["filtered"], [1.5, 5, 1.5, 2])
        np.testing.assert_allclose(ranks["raw"], [2.5, 5, 2.5, 2])
    metrics = transe.evaluate(model, graph, "test")
    assert metrics["mrr"] == pytest.approx(np.mean([1 / 1.5, 1 / 5, 1 / 1.5, 1 / 2]))
    assert (metrics["hits@1"], metrics["hits@3"], metrics["hits@10"]) == (0, 0.75, 1)
    assert metrics["raw_mrr"] == pytest.approx(np.mean([1 / 2.5, 1 / 5, 1 / 2.5, 1 / 2]))
    assert metrics["triples"] == 2


@pytest.fixture(scope="module")
def small_fb15k(tmp_path_factory):
    """The FB15k-237 train triples among its 150 most connected entities, 85 / 15 split."""
    with open(os.path.join(FB15K, "train.txt"), encoding="utf-8") as f:
        triples = [line.rstrip("\n").split("\t") for line in f]
    degree = collections.Counter(e for h, _, t in triples for e in (h, t))
    top = {entity for entity, _ in degree.most_common(150)}
    kept = [t for t in triples if t[0] in top and t[2] in top]
    np.random.default_rng(0).shuffle(kept)
    folder = tmp_path_factory.mktemp("small_fb15k")
    cut = int(0.85 * len(kept))
    paths = {}
    for split, rows in (("train", kept[:cut]), ("test", kept[cut:])):
        paths[split] = str(folder / f"{split}.txt")
        with open(paths[split], "w", encoding="utf-8") as f:
            f.writelines("\t".join(row) + "\n" for row in rows)
    return paths


def test_short_training_beats_random_embeddings(small_fb15k):
    graph = build_graph({"splits": small_fb15k})
    assert graph.num_entities >= 90 and len(graph.splits["test"]) > 150
    settings = {"dim": 32, "norm": 1, "margin": 1.0, "batch_size": 128,
                "learning_rate": 0.01, "optimizer": "sgd", "seed": 0}
    untrained, _ = transe.train_transe(graph, settings, epochs=1, max_seconds=0)
    random_model = transe.TransE(graph.num_entities, graph.num_relations, 32, 1, 1.0, seed=1)
    model, losses = transe.train_transe(graph, settings, epochs=15)
    assert losses[-1] < 0.7 * losses[0]
    trained_mrr = transe.evaluate(model, graph)["mrr"]
    random_mrr = transe.evaluate(random_model, graph)["mrr"]
    assert trained_mrr > 2 * random_mrr and trained_mrr > 0.2, (trained_mrr, random_mrr)
    assert transe.evaluate(untrained, graph)["mrr"] < trained_mrr


def test_kg_embedding_trainer_writes_the_artifact(tmp_path):
    train = tmp_path / "train.txt"
    train.write_text("a\tr\tb\nb\tr\tc\nc\tq\ta\n")
    test = tmp_path / "test.txt"
    test.write_text("a\tq\tc\n")
    generate_graph({"splits": {"train": str(train), "test": str(test)}}, str(tmp_path / "g"))
    metrics = train_embeddings(str(tmp_path / "g"), {"dim": 4, "epochs": 2, "seed": 1},
                               str(tmp_path / "e"))
    entities, relations = load_embeddings(str(tmp_path / "e"))
    assert entities.shape == (3, 4) and relations.shape == (2, 4)
    assert entities.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(entities, axis=1), 1, rtol=1e-5)
    written = json.loads((tmp_path / "e" / "metrics.json").read_text())
    assert written == metrics and set(written) >= {"mrr", "hits@1", "hits@3", "hits@10",
                                                   "raw_mrr", "epoch_losses"}
    assert len(written["epoch_losses"]) == 2 and written["settings"]["dim"] == 4
    assert json.loads((tmp_path / "e" / "embedding.json").read_text())["norm"] == 1
    assert (tmp_path / "e" / "entities.tsv").read_text() == \
        (tmp_path / "g" / "entities.tsv").read_text()
    with pytest.raises(FileNotFoundError, match="is not a KGEmbeddings folder"):
        load_embeddings(str(tmp_path / "g"))
