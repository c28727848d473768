"""KagNet end to end through the DAG at tiny size: a ConceptNet-format KG (a test KG of word
co-occurrence in CommonsenseQA question stems, not ConceptNet) -> KnowledgeGraphGen ->
TransE -> ConceptPaths (Beam: grounding, paths, pruning, schema graphs) -> FineTuner
(KnowledgeTrainer; the tiny published-format BERT checkpoint imported as the statement
encoder) -> evaluation through the exported model -> push; the pushed SavedModel then
grounds and searches raw questions and choices itself."""

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (ops used by the serving graph)

from lmfactory.components.concept_paths.cooccurrence import (
    commonsenseqa_stems, cooccurrence_assertions, write_conceptnet_csv)
from lmfactory.components.example_gen import multiple_choice_readers
from lmfactory.models.kagnet.kagnet_graph import ConceptGraph
from lmfactory.pipelines import runners
from lmfactory.recipe import load_recipe

REPO = Path(__file__).resolve().parent.parent
CHECKPOINT = REPO / "tests" / "fixtures" / "hf" / "bert"
TINY = ["finetuning.steps=4", "finetuning.batch_size=4", "finetuning.eval_steps=1",
        "runtime.steps_per_checkpoint=4", "runtime.beam.direct_running_mode=in_memory",
        "runtime.beam.direct_num_workers=1", f"pretraining.init_checkpoint={CHECKPOINT}",
        "knowledge_graph.embedding.epochs=1", "knowledge_graph.embedding.dim=8",
        "finetuning.task_args={max_hops: 2, max_paths_per_pair: 2, "
        "max_question_concepts: 4, max_answer_concepts: 2, max_neighbours: 8, "
        "path_dim: 16, pair_dim: 16}"]


def _slice(source: Path, target: Path, lines: int) -> Path:
    kept = source.read_text(encoding="utf-8").splitlines()[:lines]
    target.write_text("\n".join(kept) + "\n", encoding="utf-8")
    return target


def test_kagnet_dag_pushes_a_model_that_grounds_raw_questions(tmp_path, shared_data):
    csqa = shared_data / "commonsenseqa"
    train = _slice(csqa / "train_rand_split.jsonl", tmp_path / "train.jsonl", 32)
    dev = _slice(csqa / "dev_rand_split.jsonl", tmp_path / "dev.jsonl", 16)
    kg = tmp_path / "assertions.csv"
    stems = commonsenseqa_stems(str(csqa / "train_rand_split.jsonl"), limit=800)
    write_conceptnet_csv(cooccurrence_assertions(stems), str(kg))
    with kg.open("a", encoding="utf-8") as f:  # bad KG lines are counted, not fatal
        f.write("not an assertion\n/a/[x]\t/r/RelatedTo\t/c/fr/chat\t/c/en/cat\t{}\n")
    recipe = load_recipe("kagnet_csqa", TINY + [
        f"data.task.splits.train={train}", f"data.task.splits.eval={dev}",
        f"knowledge_graph.splits.train={kg}"])
    summary = runners.run_local(recipe, str(tmp_path / "runs"))
    assert summary["pushed_model"], "a blessed model is pushed"
    root = Path(summary["pipeline_root"])

    graph_dir = next((root / "KnowledgeGraphGen" / "knowledge_graph").iterdir())
    counts = json.loads((graph_dir / "counts.json").read_text())
    assert counts["malformed_lines"] == 1 and counts["skipped_non_english"] == 1

    paths_dir = next((root / "TaskConceptPaths" / "examples").iterdir())
    paths_counts = json.loads((paths_dir / "concept_paths_counts.json").read_text())
    assert paths_counts["train"]["questions"] == 32 and paths_counts["eval"]["choices"] == 80
    for split in ("train", "eval"):
        assert 0 < paths_counts[split]["paths"]
        assert paths_counts[split]["choices_without_path"] >= \
            paths_counts[split]["choices_without_concept"]
    # The Beam stage and the fine-tuning stage searched the same concept graph.
    beam_graph = ConceptGraph.load(str(paths_dir / "concept_graph"))
    trained_graph = ConceptGraph.load(str(next(
        (root / "FineTuner" / "model_run").glob("*/concept_graph"))))
    for name in ("row_splits", "targets", "relations", "log_scores"):
        np.testing.assert_array_equal(getattr(beam_graph, name), getattr(trained_graph, name))

    questions = multiple_choice_readers.read_commonsenseqa(str(dev))
    serve = tf.saved_model.load(summary["pushed_model"]).signatures["serving_default"]
    outputs = serve(context=tf.constant([e.context for e in questions]),
                    choices=tf.constant([list(e.choices) for e in questions]))
    probabilities = outputs["probabilities"].numpy()
    assert probabilities.shape == (16, 5)
    assert probabilities.sum(axis=1) == pytest.approx(np.ones(16), abs=1e-5)
    labels = np.array([e.label for e in questions])
    accuracy = float(np.mean(outputs["label"].numpy() == labels))
    assert summary["evaluation"]["metrics"]["accuracy"] == pytest.approx(accuracy)
    # A question and choices the KG knows nothing of: still a distribution.
    unknown = serve(context=tf.constant(["zzzz qqqq?"]),
                    choices=tf.constant([["xxxx", "yyyy", "wwww", "vvvv", "uuuu"]]))
    assert np.isfinite(unknown["probabilities"].numpy()).all()
