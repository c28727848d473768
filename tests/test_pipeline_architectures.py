"""Encoder DAGs at tiny size (LocalDagRunner), one per vocabulary kind, pretraining objective
and DAG shape the BERT DAG (test_pipeline_e2e.py) leaves out: RoBERTa (byte-level BPE, MLM),
ALBERT (SentencePiece, MLM+SOP), TinyBERT's two distillation stages (teacher, Distiller,
teacher fine-tuning, task distillation; DistilBERT's DAG is its first part), each with SST-2
fine-tuning, evaluation and push, the pushed SavedModel classifying raw strings; and a
published checkpoint (the real all-MiniLM-L6-v2) imported by the CheckpointImporter and
fine-tuned. ELECTRA pretrains on the MLM records RoBERTa's DAG covers (its replaced-token
detection is the conformance harness's and test_electra.py's); every DAG shape compiles for
Vertex."""

import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (ops used by the serving graph)

from dag_helpers import TINY_TRAINING, small_corpus, small_tsv
from lmfactory.pipelines import runners
from lmfactory.recipe import load_recipe

SENTENCES = ["a gorgeous , witty film", "dull and lifeless", "",
             "non-ascii: caf\u00e9 \u2013 \u4e2d\u6587"]


def _run(recipe_name, tmp_path, demo_data, extra=(), corpus=True):
    train = small_tsv(demo_data / "sst2" / "train.tsv", tmp_path / "train.tsv", 200)
    dev = small_tsv(demo_data / "sst2" / "dev.tsv", tmp_path / "dev.tsv", 40)
    overrides = [f"data.task.splits.train={train}", f"data.task.splits.eval={dev}",
                 "finetuning.sequence_length=32", "evaluation.threshold=0.0"]
    if corpus:
        overrides += TINY_TRAINING + [
            f"data.corpus.path={small_corpus(demo_data, tmp_path / 'corpus.txt', 120)}",
            "tokenizer.vocab_size=600"]
    else:
        overrides += [t for t in TINY_TRAINING if t.startswith(("finetuning.", "runtime."))]
    recipe = load_recipe(recipe_name, overrides + list(extra))  # the test's own last
    summary = runners.run_local(recipe, str(tmp_path / "runs"))
    assert summary["evaluation"]["blessed"] is True
    assert summary["evaluation"]["metrics"]["examples"] == 40
    serve = tf.saved_model.load(summary["pushed_model"]).signatures["serving_default"]
    outputs = serve(sentence=tf.constant(SENTENCES))
    probabilities = outputs["probabilities"].numpy()
    assert probabilities.shape == (len(SENTENCES), 2)
    assert probabilities.sum(axis=1) == pytest.approx([1.0] * len(SENTENCES), abs=1e-5)
    return summary


@pytest.mark.parametrize("recipe_name, extra", [
    ("roberta_tiny_sst2", []),
    ("albert_tiny_sst2", ["overrides={max_sequence_length: 64, hidden_dim: 64}"]),
])
def test_encoder_pretrains_fine_tunes_and_pushes(recipe_name, extra, tmp_path, demo_data):
    summary = _run(recipe_name, tmp_path, demo_data, extra)
    root = summary["pipeline_root"]
    assert tf.io.gfile.exists(f"{root}/Pretrainer")


def test_student_is_distilled_from_a_pretrained_teacher(tmp_path, demo_data):
    """TinyBERT's two stages: general distillation, then task-specific distillation."""
    summary = _run("tinybert_tiny_sst2", tmp_path, demo_data,
                   ["teacher.overrides={max_sequence_length: 64}"])
    root = summary["pipeline_root"]
    for component in ("TeacherExampleGen", "TeacherPretrainer", "Distiller",
                      "TeacherFineTuner", "TaskDistiller"):
        assert tf.io.gfile.exists(f"{root}/{component}"), component


def test_published_checkpoint_is_imported_and_fine_tuned(tmp_path, demo_data):
    summary = _run("minilm_sst2", tmp_path, demo_data, ["finetuning.steps=4"], corpus=False)
    assert tf.io.gfile.exists(f"{summary['pipeline_root']}/CheckpointImporter")


@pytest.mark.parametrize("recipe_name, expected", [
    ("roberta_tiny_sst2", {"VocabularyGen", "PretrainingExampleGen", "Pretrainer", "FineTuner"}),
    ("tinybert_tiny_sst2", {"TeacherExampleGen", "TeacherPretrainer", "Distiller",
                            "TeacherFineTuner", "TaskDistiller"}),
    ("distilbert_tiny_sst2", {"TeacherPretrainer", "Distiller", "FineTuner"}),
    ("minilm_sst2", {"CheckpointImporter", "TaskExampleGen", "FineTuner", "Pusher"}),
])
def test_every_dag_shape_compiles_for_vertex(recipe_name, expected, tmp_path):
    import json

    output = tmp_path / "pipeline.json"
    runners.compile_vertex(load_recipe(recipe_name), str(output), "gs://bucket/root",
                           local_data="as_is")  # the DAG shape only
    spec = json.loads(output.read_text())
    tasks = set(spec["pipelineSpec"]["root"]["dag"]["tasks"])
    assert expected <= tasks, expected - tasks
    if recipe_name == "minilm_sst2":
        assert not {"CorpusExampleGen", "Pretrainer"} & tasks
    executors = json.dumps(spec["pipelineSpec"]["deploymentSpec"]["executors"])
    assert "lmfactory.components" in executors


@pytest.mark.parametrize("recipe_name, pushed", [("tinybert_tiny_sst2", "TaskDistiller"),
                                                 ("gpt2_tiny_shakespeare", "FineTuner")])
def test_only_the_pushed_stage_exports_a_serving_model(recipe_name, pushed, tmp_path):
    """Every other training stage's model only feeds a later one: keras/ without the serving
    export, unless runtime.export_every_stage asks for every stage's."""
    import json

    from lmfactory.pipelines.pipeline import create_components

    def exports(overrides):
        found = {}
        for component in create_components(load_recipe(recipe_name, overrides),
                                           str(tmp_path)):
            config = component.exec_properties.get("custom_config")
            config = json.loads(config) if isinstance(config, str) else config
            if config and "export_serving" in config:  # the Trainer stages
                found[component.id] = config["export_serving"]
        return found

    default = exports([])
    assert len(default) >= 2 and {stage for stage, on in default.items() if on} == {pushed}
    assert set(exports(["runtime.export_every_stage=true"]).values()) == {True}
