"""ERNIE through the whole DAG at tiny size (LocalDagRunner): a small FB15k-237 graph,
TransE, the corpus linked to the graph's entities, MLM + NSP + dEA pretraining with the
TransE table frozen, relation-classification fine-tuning (§3.5: head / tail mentions
marked, [CLS] classified) on KG-linked WikiText-2 sentences built by
components/knowledge_graph/relation_data.py, evaluation and push; the pushed SavedModel
marks, links and classifies raw (text, head, tail) strings. (One DAG run serves both the
GLUE-style classification path, which relation classification packs through ERNIE's
classification preprocessor and [CLS] head, and the relation task.)"""

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (ops used by the serving graph)

import resume_runs
from dag_helpers import TINY_TRAINING, small_corpus
from lmfactory.components.knowledge_graph import relation_data
from lmfactory.pipelines import pipeline, runners
from lmfactory.recipe import load_recipe

KG = "../shared/data/kg/FB15k-237"
SENTENCES = ["a gorgeous film shot in india and canada", "dull and lifeless",
             "", "caf\u00e9 in norway \u2013 \u4e2d\u6587"]
HEADS, TAILS = ["india", "", "x", "norway"], ["canada", "lifeless", "", "caf\u00e9"]


def _head(source, path, lines):
    with open(source, encoding="utf-8") as f:
        path.write_text("".join(f.readline() for _ in range(lines)), encoding="utf-8")
    return str(path)


def _relations(tmp_path, shared_data):
    """Relation data of WikiText-2 valid; its first 60 train / 20 eval rows."""
    counts = relation_data.build(str(tmp_path / "relations"), str(shared_data), top_k=5,
                                 eval_fraction=0.3,
                                 sources=relation_data.default_sources(str(shared_data))[:1])
    assert min(counts["examples"].values()) >= 20
    paths = []
    for split, rows in (("train", 60), ("eval", 20)):
        paths.append(_head(str(tmp_path / "relations" / f"{split}.tsv"),
                           tmp_path / f"{split}.tsv", rows + 1))
    return paths


def test_ernie_links_pretrains_fine_tunes_and_pushes(tmp_path, demo_data, shared_data):
    train, dev = _relations(tmp_path, shared_data)
    corpus = small_corpus(demo_data, tmp_path / "corpus.txt", 30)
    triples = _head(f"{KG}/train.txt", tmp_path / "train.txt", 2000)
    overrides = [t for t in TINY_TRAINING if not t.startswith("overrides=")] + [
        f"data.task.splits.train={train}", f"data.task.splits.eval={dev}",
        f"data.corpus.path={corpus}", "tokenizer.vocab_size=600",
        "finetuning.sequence_length=48", "evaluation.threshold=0.0",
        # Mark characters of the tiny vocabulary (§3.5's [HD] / [TL]).
        'finetuning.task_args={head_marker: "%", tail_marker: ":"}',
        f"knowledge_graph.splits={{train: {triples}}}",
        "knowledge_graph.embedding={method: transe, dim: 16, epochs: 1, batch_size: 256}",
        "overrides={hidden_dim: 32, num_heads: 2, intermediate_dim: 64, entity_num_heads: 2,"
        " max_sequence_length: 64}"]
    recipe = load_recipe("ernie_fb15k237_relations", overrides)
    summary = runners.run_local(recipe, str(tmp_path / "runs"))
    assert summary["evaluation"]["blessed"] is True
    assert summary["evaluation"]["metrics"]["examples"] == 20
    root = summary["pipeline_root"]
    for component in ("CorpusEntityLinker", "Pretrainer", "FineTuner"):
        assert tf.io.gfile.exists(f"{root}/{component}"), component

    # The pretraining records carry §3.4's dEA corruption of real alignments.
    (config_path,) = tf.io.gfile.glob(f"{root}/PretrainingExampleGen/pretraining_examples/*/"
                                      "pretraining_config.json")
    counts = json.loads(tf.io.gfile.GFile(config_path).read())["counts"]["train"]
    assert counts["aligned_entities"] > 30
    assert 0 < counts["masked_entities"] < counts["aligned_entities"]

    serve = tf.saved_model.load(summary["pushed_model"]).signatures["serving_default"]
    outputs = serve(text=tf.constant(SENTENCES), head=tf.constant(HEADS),
                    tail=tf.constant(TAILS))
    probabilities = outputs["probabilities"].numpy()
    relations = {line.split("\t")[3] for line in open(train, encoding="utf-8").read(
        ).splitlines()[1:] + open(dev, encoding="utf-8").read().splitlines()[1:]}
    assert probabilities.shape == (len(SENTENCES), len(relations))
    assert probabilities.sum(axis=1) == pytest.approx([1.0] * len(SENTENCES), abs=1e-5)
    assert {name.decode() for name in outputs["label_name"].numpy()} <= relations

    # The pushed model links raw text itself: its vocabulary holds the graph's labels, and
    # the preprocessor built from them finds the entity names in the served sentences.
    from lmfactory.models.ernie.ernie_preprocessor import pipeline_preprocessor

    (vocabulary,) = tf.io.gfile.glob(f"{root}/FineTuner/model/*/keras/vocabulary")
    packed = pipeline_preprocessor(vocabulary, 32, 1, {})((tf.constant(SENTENCES),))
    mask = packed["entity_mask"].numpy()
    assert mask[0].sum() >= 2 and mask[3].sum() >= 1
    assert np.all(packed["entity_ids"].numpy()[mask == 0] == 0)

    _knowledge_trainer_resumes_exactly(recipe, root, tmp_path / "resume")


def _knowledge_trainer_resumes_exactly(recipe: dict, root: str, folder: Path) -> None:
    """The KnowledgeTrainer (the Pretrainer fed the graph and its TransE embeddings), run
    again on the DAG's own inputs with the DAG's own settings, killed with SIGKILL after a
    checkpoint and re-run, ends with the task model of a run never killed
    (tests/resume_runs.py)."""
    (trainer,) = [component for component in pipeline.create_components(recipe, str(folder))
                  if component.id == "Pretrainer"]
    custom_config = json.loads(trainer.exec_properties["custom_config"])  # TFX stores JSON
    (examples,) = tf.io.gfile.glob(f"{root}/PretrainingExampleGen/pretraining_examples/*")
    for key, pattern in (("kg_embeddings", "*/kg_embeddings/*"),
                         ("knowledge_graph", "*/knowledge_graph/*")):
        (custom_config[key],) = tf.io.gfile.glob(f"{root}/{pattern}")
    stage = resume_runs.spec(folder / "killed", Path(examples), 30, {
        **custom_config, "steps_per_checkpoint": 5, "export_serving": False})
    output, saved_epoch = resume_runs.kill_resume_and_compare(folder, stage,
                                                              kill_after_epoch=2, epochs=6)
    assert "Initialised ErniePretrainer from the knowledge-graph embeddings" in output
    assert f"at step {saved_epoch * 5} of 30" in output
