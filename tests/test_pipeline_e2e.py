"""The whole DAG at tiny size, BERT and GPT-2, with LocalDagRunner; then the pushed SavedModel
is loaded with tf.saved_model.load and called on raw strings. Also: caching on re-run, and the
same DAG compiled for Vertex AI / Kubeflow Pipelines v2."""

import json
import os
import re
from pathlib import Path

import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (ops used by the serving graph)

from dag_helpers import TINY_TRAINING, small_corpus, small_tsv
from lmfactory.pipelines import runners
from lmfactory.recipe import load_recipe

COMPONENTS_CLASSIFICATION = {
    "CorpusExampleGen", "VocabularyGen", "PretrainingExampleGen", "Pretrainer",
    "TaskExampleGen", "FineTuner", "LatestBlessedModelResolver", "LMEvaluator", "Pusher"}
COMPONENTS_CAUSAL_LM = (COMPONENTS_CLASSIFICATION - {"TaskExampleGen"}) | {
    "TargetExampleGen", "TargetLMExampleGen"}


@pytest.fixture(scope="module")
def bert_run(tmp_path_factory, demo_data):
    tmp = tmp_path_factory.mktemp("bert")
    corpus = small_corpus(demo_data, tmp / "corpus.txt", 150)
    train = small_tsv(demo_data / "sst2" / "train.tsv", tmp / "train.tsv", 300)
    dev = small_tsv(demo_data / "sst2" / "dev.tsv", tmp / "dev.tsv", 60)
    recipe = load_recipe("bert_tiny_sst2", TINY_TRAINING + [
        f"data.corpus.path={corpus}", f"data.task.splits.train={train}",
        f"data.task.splits.eval={dev}", "tokenizer.vocab_size=600",
        "finetuning.sequence_length=32", "evaluation.threshold=0.0",
        # a label budget and the transfer control ride on this run
        "data.task.train_examples=200", "evaluation.control=from_scratch"])
    summary = runners.run_local(recipe, str(tmp / "runs"))
    return recipe, summary, tmp


def test_bert_dag_pushes_a_model_that_classifies_raw_strings(bert_run):
    recipe, summary, _ = bert_run
    assert summary["evaluation"]["blessed"] is True
    assert 0.0 <= summary["evaluation"]["metrics"]["accuracy"] <= 1.0
    assert summary["evaluation"]["metrics"]["examples"] == 60
    pushed = summary["pushed_model"]
    # TF Serving layout: <serving_dir>/<model_name>/<version>/saved_model.pb
    assert Path(pushed).parent.name == recipe["serving"]["model_name"]
    assert Path(pushed).name.isdigit() and (Path(pushed) / "saved_model.pb").exists()
    serve = tf.saved_model.load(pushed).signatures["serving_default"]
    outputs = serve(sentence=tf.constant(["a gorgeous , witty film", "dull and lifeless",
                                          "", "non-ascii: caf\u00e9 \u2013 \u4e2d\u6587"]))
    probabilities = outputs["probabilities"].numpy()
    assert probabilities.shape == (4, 2)
    assert probabilities.sum(axis=1) == pytest.approx([1, 1, 1, 1], abs=1e-5)
    assert outputs["label"].numpy().shape == (4,)


def test_the_control_is_fine_tuned_from_scratch_and_reported_beside_the_model(bert_run):
    """``evaluation.control: from_scratch``: a fresh backbone shaped like the pretrained one
    is fine-tuned with the same settings, scored by the same code, and the report shows
    both, the transfer gain and both validation curves; ``data.task.train_examples``: the
    task ingestion keeps a stratified 200 of the 300 train rows and says so."""
    from lmfactory.components.trainer.model_artifact import (load_model_backbone,
                                                             read_model_config)

    _, summary, _ = bert_run
    root = Path(summary["pipeline_root"])
    outcome = summary["evaluation"]
    control = outcome["control_metrics"]
    assert control["examples"] == outcome["metrics"]["examples"] == 60
    assert outcome["transfer_gain"]["accuracy"] == pytest.approx(
        outcome["metrics"]["accuracy"] - control["accuracy"])
    assert re.search(r"(beats|does not beat) the from-scratch control on accuracy",
                     outcome["transfer_reason"])

    def newest(component, output="model"):
        folder = root / component / output
        return str(max(folder.iterdir(), key=lambda p: int(p.name)))

    pretrained, pretrained_config = load_model_backbone(newest("Pretrainer"))
    fresh, fresh_config = load_model_backbone(newest("ControlInitializer"))
    assert fresh_config["backbone_config"] == pretrained_config["backbone_config"]
    assert not all(bool(tf.reduce_all(a == b)) for a, b in zip(
        pretrained.get_weights(), fresh.get_weights())), "the control starts from new weights"
    control_config = read_model_config(newest("Control"))
    finetuned_config = read_model_config(newest("FineTuner"))
    assert control_config["task"] == finetuned_config["task"]
    assert (Path(newest("Control")) / "Format-Serving" / "saved_model.pb").exists()

    evaluation = Path(newest("LMEvaluator", "evaluation"))
    written = json.loads((evaluation / "metrics.json").read_text())
    assert written["control_metrics"]["accuracy"] == control["accuracy"]
    report = (evaluation / "report.md").read_text()
    assert "Transfer: pretrained against from scratch" in report
    assert "from scratch (control)" in report and "transfer gain" in report
    assert (evaluation / "transfer_curves.png").stat().st_size > 5000

    ingestion = json.loads((Path(newest("TaskExampleGen", "examples"))
                            / "ingestion_report.json").read_text())
    budget = ingestion["label_budget"]
    assert (budget["requested"], budget["kept"], budget["good"]) == (200, 200, 300)
    assert sum(c["kept"] for c in budget["per_class"].values()) == 200


def test_serving_rejects_wrong_shapes_and_types(bert_run):
    _, summary, _ = bert_run
    serve = tf.saved_model.load(summary["pushed_model"]).signatures["serving_default"]
    with pytest.raises(tf.errors.InvalidArgumentError, match="1-D batch of UTF-8 strings"):
        serve(sentence=tf.constant([[b"two", b"dims"]]))
    with pytest.raises((TypeError, ValueError, tf.errors.InvalidArgumentError)):
        serve(sentence=tf.constant([1, 2]))


def test_rerun_reuses_cached_results(bert_run):
    recipe, summary, tmp = bert_run
    root = Path(summary["pipeline_root"])
    cached = ["CorpusExampleGen", "VocabularyGen", "PretrainingExampleGen", "Pretrainer",
              "TaskExampleGen", "FineTuner", "ControlInitializer", "Control"]
    before = {name: sorted(os.listdir(root / name)) for name in cached}
    executions_before = {name: sorted(os.listdir(next((root / name).iterdir())))
                         for name in cached}
    runners.run_local(recipe, str(tmp / "runs"))
    assert {name: sorted(os.listdir(next((root / name).iterdir())))
            for name in cached} == executions_before
    assert {name: sorted(os.listdir(root / name)) for name in cached} == before


def test_gpt2_dag_pushes_a_model_that_continues_prompts(tmp_path, demo_data, shared_data):
    corpus = small_corpus(demo_data, tmp_path / "corpus.txt", 150)
    target = tmp_path / "shakespeare.txt"
    target.write_text((shared_data / "tiny_shakespeare" / "input.txt")
                      .read_text(encoding="utf-8")[:30_000], encoding="utf-8")
    recipe = load_recipe("gpt2_tiny_shakespeare", TINY_TRAINING + [
        f"data.corpus.path={corpus}", f"data.target_corpus.path={target}",
        "tokenizer.vocab_size=400", "evaluation.threshold=1000000.0",
        "evaluation.max_batches=4", "serving.generation.max_length=24"])
    summary = runners.run_local(recipe, str(tmp_path / "runs"))
    outcome = summary["evaluation"]
    assert outcome["blessed"] is True and outcome["metric"] == "perplexity"
    assert 1.0 < outcome["metrics"]["perplexity"] < 400 * 2
    signatures = tf.saved_model.load(summary["pushed_model"]).signatures
    prompts = ["First Citizen:", "ROMEO: my"]
    # The recipe's decoding settings, then the same request with explicit sampling inputs.
    generated = signatures["generate_default"](prompt=tf.constant(prompts))
    explicit = signatures["serving_default"](
        prompt=tf.constant(prompts), max_length=tf.constant(24), sampler=tf.constant("beam"),
        temperature=tf.constant(1.0), k=tf.constant(5), p=tf.constant(0.9))
    for outputs in (generated, explicit):
        texts = outputs["generated_text"].numpy()
        assert texts.shape == (2,)
        for prompt, text in zip(prompts, texts):
            assert text.decode("utf-8").startswith(prompt)
            assert len(text.decode("utf-8")) > len(prompt)


def test_same_dag_compiles_for_vertex(tmp_path):
    for name, expected in [("bert_tiny_sst2", COMPONENTS_CLASSIFICATION),
                           ("gpt2_tiny_shakespeare", COMPONENTS_CAUSAL_LM)]:
        output = tmp_path / f"{name}.json"
        runners.compile_vertex(load_recipe(name), str(output), "gs://bucket/root",
                               local_data="as_is")  # the DAG shape only
        spec = json.loads(output.read_text())
        tasks = set(spec["pipelineSpec"]["root"]["dag"]["tasks"])
        # The KFP v2 compiler runs the latest-blessed-model resolver as two query tasks.
        expected = (expected - {"LatestBlessedModelResolver"}) | {
            "LatestBlessedModelResolver-model-resolver",
            "LatestBlessedModelResolver-model-blessing-resolver"}
        assert tasks == expected, (name, tasks)
        executors = json.dumps(spec["pipelineSpec"]["deploymentSpec"]["executors"])
        assert "lmfactory.components" in executors
