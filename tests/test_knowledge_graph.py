"""Knowledge-graph stages: triple readers, the graph artifact, KnowledgeGraphGen,
the recipe's knowledge_graph section and the pipeline wiring (construction only; ERNIE and
KagNet run the DAG)."""

import dataclasses
import json
import os

import numpy as np
import pytest

from lmfactory import models
from lmfactory.components.knowledge_graph.executor import generate_graph
from lmfactory.components.knowledge_graph.graph import KnowledgeGraph, build_graph
from lmfactory.components.knowledge_graph.triples import read_triples
from lmfactory.recipe import RecipeError, load_recipe

FB15K = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "kg",
                     "FB15k-237")


def _write(path, data: bytes):
    path.write_bytes(data)
    return str(path)


@pytest.fixture
def tsv_graph(tmp_path):
    """A 4-entity graph: train with a malformed line, a non-UTF-8 line, a blank line and a
    duplicate; test with a triple of an entity train lacks."""
    train = _write(tmp_path / "train.txt",
                   b"a\tr1\tb\nb\tr1\tc\n\nc\tr2\ta\na\tr1\tb\nbroken line\n"
                   b"a\tr2\t\xff\xfe\nd\tr2\ta\n")
    test = _write(tmp_path / "test.txt", b"a\tr2\tc\nz\tr1\ta\nb\tr9\tc\n")
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({"a": {"label": "Alpha", "alternatives": ["the A|list"]},
                                  "b": {"label": "Beta"}, "c": "Gamma",
                                  "d": {"label": "OF", "alternatives": [".", "in", "Delta"]}}))
    return {"format": "tsv", "splits": {"train": train, "test": test}, "labels": str(labels),
            "linking": {"max_ngram": 3, "lowercase": True}}


def test_tsv_reader_counts_bad_lines(tsv_graph):
    triples, counts = read_triples(tsv_graph["splits"]["train"], "tsv")
    assert triples == [("a", "r1", "b"), ("b", "r1", "c"), ("c", "r2", "a"), ("a", "r1", "b"),
                       ("d", "r2", "a")]
    assert counts == {"lines": 8, "triples": 5, "blank_lines": 1, "malformed_lines": 2,
                      "skipped_non_english": 0, "skipped_non_concept": 0}


def test_missing_file_is_a_one_line_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="knowledge graph file .*nope.txt does not "
                                                "exist"):
        read_triples(str(tmp_path / "nope.txt"), "tsv")
    with pytest.raises(ValueError, match="format must be one of"):
        read_triples(str(tmp_path / "nope.txt"), "csv")


def test_conceptnet_reader_keeps_english_concepts(tmp_path):
    meta = '{"dataset": "/d/conceptnet/4/en", "weight": 1.0}'
    rows = [
        f"/a/[/r/IsA/,/c/en/dog/n/,/c/en/animal/]\t/r/IsA\t/c/en/dog/n\t/c/en/animal\t{meta}",
        f"/a/[/r/AtLocation/,/c/en/new_york/,/c/en/united_states/]\t/r/AtLocation\t"
        f"/c/en/new_york/n/wn/location\t/c/en/united_states\t{meta}",
        f"/a/[/r/IsA/,/c/fr/chien/,/c/fr/animal/]\t/r/IsA\t/c/fr/chien\t/c/fr/animal\t{meta}",
        f"/a/[/r/Synonym/,/c/en/dog/,/c/de/hund/]\t/r/Synonym\t/c/en/dog\t/c/de/hund\t{meta}",
        f"/a/[/r/ExternalURL/,/c/en/dog/]\t/r/ExternalURL\t/c/en/dog\t"
        f"http://dbpedia.org/resource/Dog\t{meta}",
        "/a/[truncated]\t/c/en/dog",  # malformed: too few fields
        f"/a/[x]\tIsA\t/c/en/cat\t/c/en/animal\t{meta}",  # malformed: no /r/ relation
        f"/a/[/r/IsA/,/c/en/,/c/en/animal/]\t/r/IsA\t/c/en/\t/c/en/animal\t{meta}",  # no term
    ]
    path = _write(tmp_path / "assertions.csv", ("\n".join(rows) + "\n").encode())
    triples, counts = read_triples(path, "conceptnet")
    assert triples == [("/c/en/dog", "/r/IsA", "/c/en/animal"),
                       ("/c/en/new_york", "/r/AtLocation", "/c/en/united_states")]
    assert counts["skipped_non_english"] == 2 and counts["skipped_non_concept"] == 1
    assert counts["malformed_lines"] == 3 and counts["lines"] == 8
    graph = build_graph({"format": "conceptnet", "splits": {"train": path}})
    assert graph.labels[graph.entity_index()["/c/en/new_york"]] == ["new york"]
    assert graph.relations == ["/r/AtLocation", "/r/IsA"]


def test_graph_counts_and_round_trip(tsv_graph, tmp_path):
    counts = generate_graph(tsv_graph, str(tmp_path / "out"))
    graph = KnowledgeGraph.load(str(tmp_path / "out"))
    # ordered by train degree: a (3 triples), b, c (2 each, by id), d (1)
    assert graph.entities == ["a", "b", "c", "d"]
    assert graph.relations == ["r1", "r2"]
    # "OF" (too short), "." (no letter), "in" (stop word) are not linked
    assert graph.labels == [["alpha", "the a list"], ["beta"], ["gamma"], ["delta"]]
    np.testing.assert_array_equal(graph.splits["train"],
                                  [[0, 0, 1], [1, 0, 2], [2, 1, 0], [3, 1, 0]])
    np.testing.assert_array_equal(graph.splits["test"], [[0, 1, 2]])
    assert graph.splits["train"].dtype == np.int32
    assert counts["malformed_lines"] == 2 and counts["duplicate_triples"] == 1
    assert counts["unknown_entity_triples"] == 2  # z (entity) and r9 (relation)
    assert counts["entities_without_label"] == 0 and counts["surface_forms_skipped"] == 3
    assert counts["entities"] == 4 and graph.counts == counts
    assert graph.linking == {"max_ngram": 3, "lowercase": True, "min_label_chars": 3,
                             "skip_stopwords": True}
    assert sorted(os.listdir(tmp_path / "out")) == [
        "counts.json", "entities.tsv", "graph.json", "relations.tsv", "triples-test.npy",
        "triples-train.npy"]
    assert (tmp_path / "out" / "entities.tsv").read_text().splitlines()[0] == \
        "0\ta\talpha|the a list"
    without_filters = build_graph({**tsv_graph, "linking": {"min_label_chars": 1,
                                                            "skip_stopwords": False}})
    assert without_filters.labels[3] == ["of", "in", "delta"]


def test_graph_without_good_train_triples_fails_in_one_line(tmp_path):
    train = _write(tmp_path / "train.txt", b"only two\tfields\n")
    with pytest.raises(ValueError, match="has no good triple"):
        build_graph({"splits": {"train": train}})


def test_fb15k237_labels_come_from_entity2wikidata(tmp_path):
    train = _write(tmp_path / "train.txt", b"/m/010016\t/r\t/m/0100mt\n")
    graph = build_graph({"splits": {"train": train},
                         "labels": os.path.join(FB15K, "entity2wikidata.json")})
    assert graph.labels == [["denton", "denton, texas"], ["el paso", "el paso, texas"]]


# ------------------------------------------------------------------------------ recipe


def _kg_overrides(**section):
    section = {"splits": {"train": os.path.join(FB15K, "train.txt")}, **section}
    return [f"knowledge_graph={json.dumps(section)}"]


def test_recipe_section_defaults_and_checks():
    recipe = load_recipe("bert_tiny_sst2", _kg_overrides(embedding={"dim": 8}))
    section = recipe["knowledge_graph"]
    assert section["format"] == "tsv" and section["labels"] is None
    assert section["embedding"]["dim"] == 8 and section["embedding"]["norm"] == 1
    assert section["linking"] == {"max_ngram": 4, "lowercase": True, "min_label_chars": 3,
                                  "skip_stopwords": True}
    assert section["splits"] == {"train": os.path.join(FB15K, "train.txt")}
    assert load_recipe("bert_tiny_sst2")["knowledge_graph"] is None
    for overrides, field in [
            (_kg_overrides(embedding={"dimm": 8}), "knowledge_graph.embedding.dimm"),
            (_kg_overrides(fromat="tsv"), "knowledge_graph.fromat"),
            (_kg_overrides(embedding={"norm": 3}), "knowledge_graph.embedding.norm"),
            (_kg_overrides(format="csv"), "knowledge_graph.format"),
            (_kg_overrides(linking={"max_ngram": 0}), "knowledge_graph.linking.max_ngram"),
            (["knowledge_graph={splits: {valid: x}}"], "knowledge_graph.splits.train")]:
        with pytest.raises(RecipeError, match=f"'{field}'"):
            load_recipe("bert_tiny_sst2", overrides)


@pytest.fixture
def linking_bert():
    """BERT's record with ``links_entities`` (what ERNIE / KagNet set), registered for the
    test only."""
    record = dataclasses.replace(models.get("bert"), name="kg_linking_bert",
                                 links_entities=True)
    with models.registry.registered(record):
        yield record.name


def test_an_architecture_that_links_entities_needs_a_graph(linking_bert):
    with pytest.raises(RecipeError, match="'knowledge_graph': kg_linking_bert links text"):
        load_recipe("bert_tiny_sst2", [f"architecture={linking_bert}"])


def _by_id(components):
    return {component.id: component for component in components}


def test_pipeline_wiring(linking_bert, tmp_path):
    from lmfactory.components.knowledge_graph.trainer_component import KnowledgeTrainer
    from lmfactory.pipelines.pipeline import create_components

    plain = _by_id(create_components(load_recipe("bert_tiny_sst2", _kg_overrides()),
                                     str(tmp_path)))
    assert {"KnowledgeGraphGen", "KGEmbeddingTrainer"} <= set(plain)
    assert "CorpusEntityLinker" not in plain and "TaskEntityLinker" not in plain
    assert not isinstance(plain["Pretrainer"], KnowledgeTrainer)

    recipe = load_recipe("bert_tiny_sst2", _kg_overrides() + [
        f"architecture={linking_bert}"])
    components = _by_id(create_components(recipe, str(tmp_path)))
    graph = components["KnowledgeGraphGen"].outputs["knowledge_graph"]
    embeddings = components["KGEmbeddingTrainer"].outputs["kg_embeddings"]
    assert components["KGEmbeddingTrainer"].inputs["knowledge_graph"] is graph
    corpus_linker, task_linker = components["CorpusEntityLinker"], components[
        "TaskEntityLinker"]
    assert corpus_linker.inputs["input_examples"] is \
        components["CorpusExampleGen"].outputs["examples"]
    assert task_linker.inputs["input_examples"] is \
        components["TaskExampleGen"].outputs["examples"]
    assert json.loads(task_linker.exec_properties["text_features"]) == ["sentence"]
    assert components["PretrainingExampleGen"].inputs["examples"] is \
        corpus_linker.outputs["examples"]
    for trainer, examples in [("Pretrainer", components["PretrainingExampleGen"].outputs[
            "pretraining_examples"]), ("FineTuner", task_linker.outputs["examples"])]:
        assert isinstance(components[trainer], KnowledgeTrainer)
        assert components[trainer].inputs["kg_embeddings"] is embeddings
        assert components[trainer].inputs["knowledge_graph"] is graph
        assert components[trainer].inputs["examples"] is examples
    assert components["LMEvaluator"].inputs["examples"] is task_linker.outputs["examples"]
    section = json.loads(components["KnowledgeGraphGen"].exec_properties["section"])
    assert "embedding" not in section and os.path.isabs(section["splits"]["train"])
    missing = load_recipe("bert_tiny_sst2", _kg_overrides(labels=str(tmp_path / "no.json")))
    with pytest.raises(FileNotFoundError, match="knowledge graph file .*no.json does not "):
        create_components(missing, str(tmp_path))


# ---------------------------------------------------------------- TFX executors, trainer


def _artifact(artifact_type, uri):
    artifact = artifact_type()
    artifact.uri = str(uri)
    return artifact


def test_executors_and_stage_context(tsv_graph, tmp_path):
    """KnowledgeGraphGen's and KGEmbeddingTrainer's executors on artifacts, then the
    trainer's StageContext as a KnowledgeTrainer stage sees them."""
    import types as pytypes

    from lmfactory.components import artifacts
    from lmfactory.components.knowledge_graph import embedding_component, executor
    from lmfactory.components.trainer.config import TrainerConfig
    from lmfactory.components.trainer.run_fn import StageContext
    from lmfactory.models.bert.bert_backbone import BertBackbone

    graph = _artifact(artifacts.KnowledgeGraph, tmp_path / "graph")
    executor.Executor().Do({}, {"knowledge_graph": [graph]},
                           {"section": json.dumps(tsv_graph)})
    assert graph.get_int_custom_property("num_entities") == 4
    embeddings = _artifact(artifacts.KGEmbeddings, tmp_path / "emb")
    embedding_component.Executor().Do({"knowledge_graph": [graph]},
                                      {"kg_embeddings": [embeddings]},
                                      {"embedding": json.dumps({"dim": 6, "epochs": 1})})
    assert embeddings.has_custom_property("mrr")

    class EntityBackbone(BertBackbone):  # a backbone that takes an entity table's shape
        def __init__(self, entity_vocabulary_size=0, entity_dim=0, **kwargs):
            super().__init__(**kwargs)

    calls = []
    record = dataclasses.replace(
        models.get("bert"), name="kg_entity_bert", backbone_cls=EntityBackbone,
        knowledge_init=lambda model, entities, relations: calls.append(
            (model, entities.shape, relations.shape)))
    (tmp_path / "vocab").mkdir()
    (tmp_path / "vocab" / "vocab.txt").write_text("[PAD]\n")
    fn_args = pytypes.SimpleNamespace(model_run_dir=str(tmp_path / "run"))
    with models.registry.registered(record):
        config = TrainerConfig.from_dict({"architecture": "kg_entity_bert",
                                          "kg_embeddings": embeddings.uri,
                                          "knowledge_graph": graph.uri})
        context = StageContext(fn_args, config, None, "")
        assert context.backbone_overrides(100) == {
            "vocabulary_size": 100, "entity_vocabulary_size": 4, "entity_dim": 6}
        context.knowledge_init("task model")
        assert calls == [("task model", (4, 6), (2, 6))]
        assert context.knowledge_graph.entities == ["a", "b", "c", "d"]
        vocab = context.knowledge_vocabulary(str(tmp_path / "vocab"))
        assert sorted(os.listdir(vocab)) == ["entities.tsv", "linking.json", "vocab.txt"]
    plain = StageContext(fn_args, TrainerConfig.from_dict({"architecture": "bert"}), None, "")
    assert plain.kg_embeddings is None and plain.knowledge_graph is None
    assert plain.knowledge_vocabulary("v") == "v"
    plain.knowledge_init("task model")  # nothing to do without embeddings
    assert len(calls) == 1


def test_knowledge_trainer_hands_the_folders_to_run_fn(monkeypatch):
    from tfx.components.trainer import executor as trainer_executor

    from lmfactory.components import artifacts
    from lmfactory.components.knowledge_graph.trainer_component import Executor

    seen = {}
    monkeypatch.setattr(trainer_executor.GenericExecutor, "Do",
                        lambda self, inputs, outputs, properties: seen.update(properties))
    inputs = {"kg_embeddings": [_artifact(artifacts.KGEmbeddings, "/e")],
              "knowledge_graph": [_artifact(artifacts.KnowledgeGraph, "/g")]}
    Executor().Do(inputs, {}, {"custom_config": json.dumps({"architecture": "bert"})})
    assert json.loads(seen["custom_config"]) == {"architecture": "bert",
                                                 "kg_embeddings": "/e",
                                                 "knowledge_graph": "/g"}
    Executor().Do({"kg_embeddings": inputs["kg_embeddings"]}, {}, {"custom_config": "{}"})
    assert json.loads(seen["custom_config"]) == {"kg_embeddings": "/e"}
