"""KagNet (Lin et al. 2019): what the conformance harness cannot know. Path finding on a
hand graph against a brute-force enumeration (§3.1), pruning by TransE scores (§3.1 "path
pruning"), the hierarchical path attention's masks (§3.3), choices without concepts or
paths, TransE initialisation, and the Beam stage's schema graphs equal to those the
exported model computes in-graph on real CommonsenseQA questions (a test KG in ConceptNet's
CSV format built from CommonsenseQA question stems)."""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from lmfactory import models
from lmfactory.components.concept_paths.cooccurrence import (
    commonsenseqa_stems, cooccurrence_assertions, write_conceptnet_csv)
from lmfactory.components.concept_paths.grounding import SchemaGraphBuilder, concept_graph_of
from lmfactory.components.example_gen.multiple_choice_readers import read_commonsenseqa
from lmfactory.models.kagnet.kagnet_graph import ConceptGraph, build_concept_graph
from lmfactory.models.kagnet.kagnet_layers import HierarchicalPathAttention
from lmfactory.models.kagnet.kagnet_multiple_choice import KagNetMultipleChoice
from lmfactory.models.kagnet.kagnet_path_finder import GRAPH_INPUTS, ConceptPathFinder
from lmfactory.models.kagnet.kagnet_preprocessor import KagNetPreprocessor, make_linker

# A hand graph: 0-1-2-3 chain, 0-4-3, 4-2, an island 5-6, concept 7 without edges.
HAND_TRIPLES = [(0, 0, 1), (1, 1, 2), (2, 0, 3), (0, 1, 4), (4, 0, 3), (4, 1, 2),
                (5, 0, 6)]


def brute_force_paths(triples, q, a, max_hops):
    """Every simple path of <= max_hops edges from q to a on the undirected graph."""
    neighbours = {}
    for h, _, t in triples:
        neighbours.setdefault(h, set()).add(t)
        neighbours.setdefault(t, set()).add(h)
    found, stack = set(), [(q,)]
    while stack:
        path = stack.pop()
        if path[-1] == a and len(path) > 1:
            found.add(path)
            continue
        if len(path) > max_hops:
            continue
        stack += [path + (n,) for n in neighbours.get(path[-1], ()) if n not in path]
    return found


def found_paths(finder, q, a):
    pair, _, nodes, relations, _ = finder.find_paths(tf.constant([q]), tf.constant([a]))
    return [tuple(int(c) for c in row if c >= 0) for row in nodes.numpy()], relations.numpy()


@pytest.mark.parametrize("max_hops", [1, 2, 3])
def test_path_finder_finds_every_simple_path_of_the_hand_graph(max_hops):
    graph = build_concept_graph(8, 2, HAND_TRIPLES)
    finder = ConceptPathFinder(graph=graph, max_hops=max_hops, max_paths_per_pair=100)
    triples = {(h, t): r for h, r, t in HAND_TRIPLES}
    for q, a in itertools.permutations(range(8), 2):
        paths, relations = found_paths(finder, q, a)
        assert len(paths) == len(set(paths))
        assert set(paths) == brute_force_paths(HAND_TRIPLES, q, a, max_hops), (q, a)
        for path, hops in zip(paths, relations):  # each hop names its triple and direction
            for step, (x, y) in enumerate(zip(path, path[1:])):
                expected = triples[(x, y)] if (x, y) in triples else triples[(y, x)] + 2
                assert hops[step] == expected


def test_paths_are_capped_per_pair_and_rows_hold_the_schema_graph():
    graph = build_concept_graph(8, 2, HAND_TRIPLES)
    finder = ConceptPathFinder(graph=graph, max_hops=3, max_paths_per_pair=2,
                               max_question_concepts=2, max_answer_concepts=2)
    # Row 0: question {0}, answer {3}; row 1: no concept; row 2: island, no path;
    # row 3: an unknown id and -1 are ignored.
    out = finder(tf.ragged.constant([[0], [], [5], [99, -1, 0]], dtype=tf.int64),
                 tf.ragged.constant([[3], [3], [3], [3, 3]], dtype=tf.int64))
    out = {name: value.numpy() for name, value in out.items()}
    assert out["path_nodes"].shape == (4, 4, 2, 4)
    concepts = out["concept_ids"]
    row = [int(c) for c in concepts[0] if c >= 0]
    assert row == sorted(row) and {0, 3} <= set(row)
    paths = [[row[p] for p in path if p >= 0] for path in out["path_nodes"][0, 0]]
    assert len(paths) == 2  # 4 paths exist (0-4-3, 0-1-2-3, 0-4-2-3, 0-1-2-4-3 > 3 hops)
    assert [len(p) for p in paths] == [3, 4]  # equal scores: the shorter first
    assert out["pair_nodes"][0, 0].tolist() == [row.index(0), row.index(3)]
    assert (out["pair_nodes"][0, 1:] == -1).all()  # one question x one answer concept
    # Every path edge is in the schema graph's edge list, once.
    edges = {tuple(sorted(e)) for e in out["edges"][0].tolist() if e[0] >= 0}
    for path in out["path_nodes"][0, 0]:
        path = [p for p in path if p >= 0]
        assert {tuple(sorted(e)) for e in zip(path, path[1:])} <= edges
    assert len(edges) == int((out["edges"][0, :, 0] >= 0).sum())
    for empty in (1, 2):
        assert (out["path_nodes"][empty] == -1).all()
    assert (out["pair_nodes"][1] == -1).all() and out["pair_nodes"][2, 0].min() >= 0
    np.testing.assert_array_equal(out["path_nodes"][3], out["path_nodes"][0])


def test_pruning_keeps_the_best_transe_scored_paths():
    """§3.1: triples scored by TransE, a path by the product of its triples' scores."""
    # q=0 reaches a=3 through x=1 (plausible triples) or y=2 (implausible ones).
    triples = [(0, 0, 1), (1, 0, 3), (0, 0, 2), (2, 0, 3)]
    entities = np.array([[0.0], [0.1], [5.0], [0.2]], np.float32)
    relations = np.zeros((1, 1), np.float32)
    graph = build_concept_graph(4, 1, triples, entities, relations, norm=1)
    scores = {(int(s), int(t)): float(l) for s, t, l in
              zip(graph.sources, graph.targets, graph.log_scores)}
    assert scores[(0, 1)] > scores[(0, 2)] and scores[(1, 3)] > scores[(2, 3)]
    best = ConceptPathFinder(graph=graph, max_hops=2, max_paths_per_pair=1)
    assert found_paths(best, 0, 3)[0] == [(0, 1, 3)]
    both = ConceptPathFinder(graph=graph, max_hops=2, max_paths_per_pair=2)
    assert found_paths(both, 0, 3)[0] == [(0, 1, 3), (0, 2, 3)]
    path_scores = both.find_paths(tf.constant([0]), tf.constant([3]))[4].numpy()
    np.testing.assert_allclose(path_scores, [scores[(0, 1)] + scores[(1, 3)],
                                             scores[(0, 2)] + scores[(2, 3)]], rtol=1e-6)
    threshold = float(np.exp(path_scores.mean()))
    pruned = ConceptPathFinder(graph=graph, max_hops=2, max_paths_per_pair=2,
                               min_path_score=threshold)
    assert found_paths(pruned, 0, 3)[0] == [(0, 1, 3)]


def test_concept_graph_round_trips_through_its_folder(tmp_path):
    graph = build_concept_graph(8, 2, HAND_TRIPLES, labels=[[f"w{i}"] for i in range(8)])
    loaded = ConceptGraph.load(graph.save(str(tmp_path / "graph")))
    for name in ("row_splits", "targets", "relations", "log_scores"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(graph, name))
    assert loaded.labels == graph.labels and loaded.num_relations == 4


def test_path_attention_masks_missing_paths_and_pairs():
    layer = HierarchicalPathAttention()
    rng = np.random.default_rng(0)
    statement = rng.normal(size=(3, 4)).astype("float32")
    pairs = rng.normal(size=(3, 2, 5)).astype("float32")
    paths = rng.normal(size=(3, 2, 3, 6)).astype("float32")
    mask = np.zeros((3, 2, 3), "float32")
    mask[0, 0, :2] = 1  # row 0: pair 0 has two paths, pair 1 none
    mask[1] = 1  # row 1: every path; row 2: no path at all
    g = layer(statement, pairs, paths, mask).numpy()
    noisy = paths + 100.0 * (1 - mask)[..., None] * rng.normal(size=paths.shape)
    np.testing.assert_allclose(layer(statement, pairs, noisy.astype("float32"), mask),
                               g, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(g[2], np.zeros(11))
    # Row 0: all pair weight on pair 0 (pair 1 has no path): g = [R^_0; T_0].
    np.testing.assert_allclose(g[0, 6:], pairs[0, 0], rtol=1e-5)


def _tiny_head(num_concepts=20):
    backbone = models.build("kagnet", "tiny", vocabulary_size=50, num_layers=1,
                            hidden_dim=16, num_heads=2, intermediate_dim=32)
    return KagNetMultipleChoice(backbone, num_choices=3, num_concepts=num_concepts,
                                num_relations=4, concept_dim=8)


def test_a_choice_without_paths_is_scored_from_text_alone():
    model = _tiny_head()
    graph = model.synthetic_inputs(2)
    statement = tf.random.normal((6, 16))
    folded = {name: tf.reshape(value, (6,) + value.shape[2:]) for name, value in
              graph.items()}
    g = model.graph_encoder(statement, folded, training=False).numpy()
    np.testing.assert_array_equal(g[-1], 0.0)  # the empty row
    assert np.abs(g[:-1]).sum(axis=1).min() > 0
    text = {"token_ids": np.ones((2, 3, 6), "int32"), "padding_mask": np.ones((2, 3, 6), "int32"),
            "segment_ids": np.zeros((2, 3, 6), "int32")}
    logits = model({**text, **graph}, training=False).numpy()
    assert logits.shape == (2, 3) and np.isfinite(logits).all()


def test_knowledge_init_copies_transe_with_inverse_relations():
    model = _tiny_head(num_concepts=5)
    entities = np.random.default_rng(0).normal(size=(5, 8)).astype("float32")
    relations = np.random.default_rng(1).normal(size=(2, 8)).astype("float32")
    models.get("kagnet").knowledge_init(model, entities, relations)
    encoder = model.graph_encoder
    np.testing.assert_array_equal(encoder.concept_embedding.embeddings.numpy(), entities)
    np.testing.assert_array_equal(encoder.relation_embedding.embeddings.numpy(),
                                  np.concatenate([relations, -relations]))
    with pytest.raises(ValueError, match="concept embedding table"):
        model.initialize_from_kg(entities[:4])


@pytest.fixture(scope="module")
def csqa_graph(tmp_path_factory, shared_data):
    """A test KG in ConceptNet's CSV format: word co-occurrence in 1,500 CommonsenseQA
    train question stems (not ConceptNet), read by the KG stage's ConceptNet reader."""
    from lmfactory.components.knowledge_graph.graph import build_graph

    path = str(tmp_path_factory.mktemp("kg") / "assertions.csv")
    stems = commonsenseqa_stems(str(shared_data / "commonsenseqa" / "train_rand_split.jsonl"),
                                limit=1500)
    write_conceptnet_csv(cooccurrence_assertions(stems), path)
    return build_graph({"format": "conceptnet", "splits": {"train": path}, "labels": None,
                        "linking": {"max_ngram": 4, "lowercase": True}})


def test_beam_stage_and_serving_graph_build_the_same_schema_graphs(csqa_graph, shared_data):
    """Training reads the Beam stage's records, serving computes them in the SavedModel:
    on real dev questions both give identical inputs, and their counters add up."""
    dev = read_commonsenseqa(str(shared_data / "commonsenseqa" /
                                 "dev_rand_split.jsonl")).examples[:48]
    questions, choices = [e.context for e in dev], [list(e.choices) for e in dev]
    entities = np.random.default_rng(0).normal(size=(len(csqa_graph.entities), 8))
    relations = np.random.default_rng(1).normal(size=(len(csqa_graph.relations), 8))
    concept_graph = concept_graph_of(csqa_graph, (entities, relations), max_neighbours=16)
    settings = dict(max_hops=2, max_paths_per_pair=3, max_question_concepts=5,
                    max_answer_concepts=3)
    builder = SchemaGraphBuilder(concept_graph, csqa_graph.linking, settings)
    arrays, counts = builder.build(questions, choices)
    preprocessor = KagNetPreprocessor(
        _NoText(), make_linker(concept_graph.labels),
        ConceptPathFinder(graph=concept_graph, **settings))
    served = tf.function(preprocessor.graph)(tf.constant(questions), tf.constant(choices))
    for name in GRAPH_INPUTS:
        np.testing.assert_array_equal(arrays[name], served[name].numpy(), err_msg=name)
    paths = (arrays["path_nodes"][..., 0] >= 0).sum(axis=(2, 3))
    assert counts["choices"] == 240 and counts["paths"] == paths.sum() > 0
    assert 0 < counts["choices_without_path"] == (paths == 0).sum() < 240
    assert counts["choices_without_concept"] <= counts["choices_without_path"]


class _NoText(tf.keras.layers.Layer):
    sequence_length = 8

    def call(self, inputs):
        return {}


@pytest.mark.parametrize("override, field, message", [
    ("finetuning.task_args={max_hops: 4}", "finetuning.task_args.max_hops", "<= 3"),
    ("finetuning.task_args={max_paths_per_pair: 0}", "finetuning.task_args.max_paths_per_pair",
     "positive integer"),
    ("finetuning.task_args={hops: 2}", "finetuning.task_args", "multiple_choice takes"),
    ("knowledge_graph=null", "knowledge_graph", "give a knowledge_graph section"),
])
def test_recipe_errors_name_the_kagnet_field(override, field, message):
    from lmfactory.recipe import RecipeError, load_recipe

    with pytest.raises(RecipeError, match=message) as error:
        load_recipe("kagnet_csqa", [override])
    assert error.value.field == field


def test_gcn_layer_averages_neighbours_as_in_section_3_2():
    """h_i' = ReLU(W_self h_i + sum_{j in N_i} W h_j / |N_i|); padded nodes stay 0."""
    from lmfactory.models.kagnet.kagnet_layers import SchemaGraphConvolution

    rng = np.random.default_rng(0)
    nodes = rng.normal(size=(1, 4, 3)).astype("float32")
    adjacency = np.array([[[0, 1, 1, 0], [1, 0, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]]],
                         "float32")
    mask = np.array([[1, 1, 1, 0]])
    layer = SchemaGraphConvolution(5)
    out = layer(nodes, adjacency, mask).numpy()
    w_self, b = layer.self_dense.kernel.numpy(), layer.self_dense.bias.numpy()
    w = layer.neighbour_dense.kernel.numpy()
    h = nodes[0]
    expected = np.stack([h[0] @ w_self + b + (h[1] @ w + h[2] @ w) / 2,
                         h[1] @ w_self + b + h[0] @ w,
                         h[2] @ w_self + b + h[0] @ w])
    np.testing.assert_allclose(out[0, :3], np.maximum(expected, 0), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out[0, 3], 0.0)


def test_beam_batches_count_malformed_and_graphless_questions():
    from lmfactory.components.concept_paths.component import add_schema_graphs
    from lmfactory.components.example_gen.multiple_choice_readers import (
        MultipleChoiceExample, to_tf_example)

    labels = [["apple"], ["tree"], ["fruit"], ["red"], ["leaf"], ["car"], ["road"], ["sky"]]
    graph = build_concept_graph(8, 2, HAND_TRIPLES, labels=labels)
    builder = SchemaGraphBuilder(graph, {"max_ngram": 2, "lowercase": True},
                                 dict(max_hops=2, max_paths_per_pair=2))
    good = to_tf_example(MultipleChoiceExample("q1", "An apple on a tree?",
                                               ("red", "sky", "zebra"), 0))
    bare = tf.train.Example()
    bare.features.feature["label"].int64_list.value.append(0)
    counts, outputs = add_schema_graphs([good.SerializeToString(), bare.SerializeToString()],
                                        builder)
    assert counts["malformed_examples"] == 1 and len(outputs) == 1
    assert counts["questions"] == 1 and counts["choices"] == 3
    assert counts["choices_without_concept"] == 1  # zebra
    assert counts["choices_without_path"] == 2  # sky (a concept without edges), zebra
    record = tf.train.Example.FromString(outputs[0]).features.feature
    assert record["context"].bytes_list.value[0] == b"An apple on a tree?"
    shapes = builder.finder.output_shapes()
    for name in GRAPH_INPUTS:
        assert len(record[name].int64_list.value) == 3 * int(np.prod(shapes[name]))
