"""A training killed with SIGKILL resumes from its last checkpoint when run again, and ends
exactly where a run never killed ends (tests/resume_runs.py); the Model artifact it finally
writes holds the Keras model, backbone weights, vocabulary and a SavedModel serving raw
strings. tests/test_stage_resume.py does the same for the other stage kinds."""

import json

import pytest

import resume_runs

pytestmark = pytest.mark.dag  # each case trains three times in processes of its own


@pytest.fixture(scope="module")
def bert_examples(tmp_path_factory, demo_data):
    tmp = tmp_path_factory.mktemp("resume")
    documents, raw = resume_runs.corpus_records(demo_data, tmp, 120)
    vocab = resume_runs.word_vocabulary(tmp / "vocab", documents)
    examples = resume_runs.pretraining_examples(raw, vocab, tmp / "examples", {
        "objective": "bert_mlm_nsp", "max_seq_length": 32, "dupe_factor": 1,
        "max_predictions_per_seq": 5})
    return tmp, examples


def _spec(tmp, examples, train_steps: int, run: str = "") -> dict:
    return resume_runs.spec(tmp / run if run else tmp, examples, train_steps, {
        "architecture": "bert", "preset": "tiny", "batch_size": 8, "learning_rate": 1e-3,
        "steps_per_checkpoint": 10, "overrides": {"max_sequence_length": 32}})


def test_killed_training_resumes_from_last_checkpoint(bert_examples):
    tmp, examples = bert_examples
    spec = _spec(tmp, examples, train_steps=60)
    output, saved_epoch = resume_runs.kill_resume_and_compare(tmp, spec, kill_after_epoch=2,
                                                              epochs=6)
    model = tmp / "model"
    for name in ["keras/model.keras", "keras/backbone.weights.h5", "keras/model_config.json",
                 "keras/vocabulary/vocab.txt", "Format-Serving/saved_model.pb"]:
        assert (model / name).exists(), name
    metrics = json.loads((tmp / "Trainer" / "model_run" / "7" / "metrics.json").read_text())
    assert {"loss", "mlm_loss", "nsp_loss"} <= set(metrics)
    assert f"Resuming from the checkpoint in {tmp / 'backup'} at step {saved_epoch * 10}" \
        in output


def test_killed_fine_tuning_resumes_exactly(bert_examples, demo_data, tmp_path):
    """The FineTuner's path (a classifier warm-started from a base model, dropout in the
    head and the backbone, a shuffled task input) resumes as exactly as pretraining."""
    from lmfactory.components.model_init.executor import initialize_backbone
    from lmfactory.pipelines.pipeline import task_record
    from lmfactory.recipe import load_recipe

    tmp, _ = bert_examples
    base = tmp_path / "base"
    initialize_backbone("bert", "tiny", {"max_sequence_length": 32}, str(tmp / "vocab"),
                        str(base), seed=1)
    rows = (demo_data / "sst2" / "train.tsv").read_text(encoding="utf-8").splitlines()[:241]
    (tmp_path / "train.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    task_examples = tmp_path / "task"
    resume_runs.ingest_task({"format": "tsv", "label_column": "label", "num_classes": 2,
                             "path": str(tmp_path / "train.tsv"), "eval_fraction": 0.2},
                            task_examples)
    recipe = load_recipe("bert_tiny_sst2", ["finetuning.sequence_length=32"])
    spec = _spec(tmp_path / "killed", task_examples, train_steps=30)
    spec.update(base_model=str(base), train_files=[str(task_examples / "Split-train" / "*")],
                eval_files=[str(task_examples / "Split-eval" / "*")])
    # The Model artifact's keras/ folder is what is compared; no serving export.
    spec["custom_config"].update(task=task_record(recipe), steps_per_checkpoint=5,
                                 learning_rate=3e-4, export_serving=False)
    output, saved_epoch = resume_runs.kill_resume_and_compare(
        tmp_path, spec, kill_after_epoch=3, epochs=6)
    assert f"at step {saved_epoch * 5} of 30" in output
