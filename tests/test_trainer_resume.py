"""A training killed with SIGKILL resumes from its last checkpoint when run again; the Model
artifact it finally writes holds the Keras model, backbone weights, vocabulary and a
SavedModel serving raw strings. Each training is a process of its own (tests/run_fn_check.py,
forked from a server that has imported TensorFlow: tests/forked_tasks.py)."""

import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

import forked_tasks
from lmfactory.components.example_gen import ingest
from lmfactory.components.pretraining_data.executor import generate_pretraining_examples
from lmfactory.models.tokenizers import write_tokenizer_config

RESERVED = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@pytest.fixture(scope="module")
def bert_examples(tmp_path_factory, demo_data):
    tmp = tmp_path_factory.mktemp("resume")
    documents = (demo_data / "corpus.txt").read_text(encoding="utf-8").split("\n\n")[:120]
    (tmp / "corpus.txt").write_text("\n\n".join(documents) + "\n", encoding="utf-8")
    raw = tmp / "raw"
    ingest({"format": "text", "path": str(tmp / "corpus.txt"), "eval_fraction": 0.1}, str(raw),
           ["--direct_running_mode=in_memory"])
    words = sorted({w.lower() for doc in documents for w in doc.split()})[:1500]
    vocab = tmp / "vocab"
    vocab.mkdir()
    (vocab / "vocab.txt").write_text("\n".join(RESERVED + words) + "\n", encoding="utf-8")
    write_tokenizer_config(str(vocab), {
        "kind": "wordpiece", "vocabulary_file": "vocab.txt", "lowercase": True,
        "strip_accents": True, "special_tokens": dict(zip(
            ["pad", "unk", "cls", "sep", "mask"], RESERVED))})
    examples = tmp / "examples"
    generate_pretraining_examples(
        {"train": str(raw / "Split-train"), "eval": str(raw / "Split-eval")}, str(vocab),
        str(examples), {"objective": "bert_mlm_nsp", "max_seq_length": 32, "dupe_factor": 1,
                        "max_predictions_per_seq": 5},
        beam_pipeline_args=["--direct_running_mode=in_memory"])
    return tmp, examples


def _spec(tmp: Path, examples: Path, train_steps: int, run: str = "") -> dict:
    tmp = tmp / run if run else tmp
    return {
        "train_files": [str(examples / "Split-train" / "*")],
        "eval_files": [str(examples / "Split-eval" / "*")],
        "serving_model_dir": str(tmp / "model" / "Format-Serving"),
        "model_run_dir": str(tmp / "Trainer" / "model_run" / "7"),
        "train_steps": train_steps, "eval_steps": 2,
        "custom_config": {"architecture": "bert", "preset": "tiny", "batch_size": 8,
                          "learning_rate": 1e-3, "steps_per_checkpoint": 10,
                          "overrides": {"max_sequence_length": 32},
                          "checkpoint_dir": str(tmp / "backup")},
    }


def _weights(path: Path) -> dict:
    """Every array of a Keras weights file, by its path inside the file."""
    arrays = {}
    with h5py.File(path, "r") as weights:
        weights.visititems(lambda name, item: arrays.__setitem__(name, item[()])
                           if isinstance(item, h5py.Dataset) else None)
    return arrays


def _epochs(output: str) -> list[int]:
    return [int(n) for n in re.findall(r"^Epoch (\d+)/\d+", output, flags=re.M)]


def _kill_resume_and_compare(tmp: Path, spec: dict, kill_after_epoch: int,
                             epochs: int) -> tuple[str, int]:
    """Runs ``spec`` in a process, SIGKILLs it once its backup has recorded epoch
    ``kill_after_epoch``, runs it again to the end, then runs it once more uninterrupted in
    ``tmp / "uninterrupted"``; asserts the resumed run's final backbone equals the
    uninterrupted one's (1e-6). Returns the resumed run's output and the epoch it saved."""
    command = [sys.executable, str(Path(__file__).with_name("run_fn_check.py")),
               json.dumps(spec)]
    metadata = Path(spec["custom_config"]["checkpoint_dir"]) / "training_metadata.json"
    first = forked_tasks.Forked(command, tmp / "first.log")
    deadline = time.time() + 300
    while time.time() < deadline and first.poll() is None:
        if metadata.exists() and json.loads(metadata.read_text() or "{}").get(
                "epoch", -1) >= kill_after_epoch:
            break
        time.sleep(0.05)
    assert first.poll() is None, "training ended before it could be killed:\n" + \
        first.output()[-2000:]
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    saved_epoch = json.loads(metadata.read_text())["epoch"]
    model = Path(spec["serving_model_dir"]).parent
    assert not (model / "keras" / "model.keras").exists()

    status, output = forked_tasks.run(command, tmp / "second.log", timeout=600)
    assert status == 0, output[-3000:]
    assert "RUN_FN_DONE" in output
    ran = _epochs(output)
    # training_metadata.json counts finished epochs; Keras numbers epochs from 1.
    assert ran[0] == saved_epoch + 1, (saved_epoch, ran[:3])
    assert ran[-1] == epochs
    assert not metadata.exists()  # the backup is removed once training completes

    # Exact resume: the input continues after the batches the checkpointed steps trained
    # on and the dropout seeds are restored, so the final weights equal those of a run
    # that was never killed.
    straight = _respec(spec, tmp, "uninterrupted")
    status, straight_output = forked_tasks.run(
        [sys.executable, str(Path(__file__).with_name("run_fn_check.py")),
         json.dumps(straight)], tmp / "uninterrupted.log", timeout=600)
    assert status == 0, straight_output[-3000:]
    resumed, uninterrupted = (_weights(Path(folder).parent / "keras" / "backbone.weights.h5")
                              for folder in (spec["serving_model_dir"],
                                             straight["serving_model_dir"]))
    assert resumed.keys() == uninterrupted.keys() and len(resumed) > 10
    worst = max(float(np.max(np.abs(resumed[name] - uninterrupted[name])))
                for name in resumed)
    assert worst <= 1e-6, f"resumed weights differ from the uninterrupted run by {worst:.3g}"
    return output, saved_epoch


def _respec(spec: dict, tmp: Path, run: str) -> dict:
    """The same training with its outputs and backup in ``tmp / run``."""
    folder = tmp / run
    return {**spec, "serving_model_dir": str(folder / "model" / "Format-Serving"),
            "model_run_dir": str(folder / "Trainer" / "model_run" / "7"),
            "custom_config": {**spec["custom_config"],
                              "checkpoint_dir": str(folder / "backup")}}


def test_killed_training_resumes_from_last_checkpoint(bert_examples):
    tmp, examples = bert_examples
    spec = _spec(tmp, examples, train_steps=250)
    output, saved_epoch = _kill_resume_and_compare(tmp, spec, kill_after_epoch=2, epochs=25)
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
    ingest({"format": "tsv", "label_column": "label", "num_classes": 2,
            "path": str(tmp_path / "train.tsv"), "eval_fraction": 0.2}, str(task_examples),
           ["--direct_running_mode=in_memory"])
    recipe = load_recipe("bert_tiny_sst2", ["finetuning.sequence_length=32"])
    spec = _respec(_spec(tmp_path, task_examples, train_steps=60), tmp_path, "killed")
    spec.update(base_model=str(base), train_files=[str(task_examples / "Split-train" / "*")],
                eval_files=[str(task_examples / "Split-eval" / "*")])
    spec["custom_config"].update(task=task_record(recipe), steps_per_checkpoint=5,
                                 learning_rate=3e-4)
    output, saved_epoch = _kill_resume_and_compare(tmp_path, spec, kill_after_epoch=3,
                                                   epochs=12)
    assert f"at step {saved_epoch * 5} of 60" in output
