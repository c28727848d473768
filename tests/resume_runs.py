"""Kill, resume and compare a Trainer stage: what the resume tests share.

A stage runs as its own process (tests/run_fn_check.py: the Trainer's ``run_fn`` from a JSON
spec, forked from a server that has imported TensorFlow, tests/forked_tasks.py), is killed
with SIGKILL once its backup has recorded a checkpoint, is run again to the end, and its final
task model is compared with that of a run never killed.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import sys
import time
import zipfile
from pathlib import Path

import h5py
import numpy as np

import forked_tasks
from lmfactory.components.example_gen import ingest
from lmfactory.components.pretraining_data.executor import generate_pretraining_examples
from lmfactory.models.tokenizers import write_tokenizer_config

RUN_FN_CHECK = str(Path(__file__).with_name("run_fn_check.py"))
RESERVED = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
IN_MEMORY = ["--direct_running_mode=in_memory"]


def word_vocabulary(folder: Path, documents: list[str], size: int = 1500) -> Path:
    """A WordPiece vocabulary of BERT's special tokens and the documents' first ``size``
    lower-cased words: whole words only, the cheapest tokenizer graph to trace."""
    words = sorted({w.lower() for doc in documents for w in doc.split()})[:size]
    folder.mkdir()
    (folder / "vocab.txt").write_text("\n".join(RESERVED + words) + "\n", encoding="utf-8")
    write_tokenizer_config(str(folder), {
        "kind": "wordpiece", "vocabulary_file": "vocab.txt", "lowercase": True,
        "strip_accents": True, "special_tokens": dict(zip(
            ["pad", "unk", "cls", "sep", "mask"], RESERVED))})
    return folder


def ingest_task(source: dict, folder: Path) -> Path:
    """Raw task records of ``source`` (a recipe's ``data.task`` section), as ExampleGen
    writes them."""
    ingest(source, str(folder), IN_MEMORY)
    return folder


def corpus_records(demo_data: Path, folder: Path, documents: int) -> tuple[list[str], Path]:
    """The demo corpus's first ``documents`` documents and their raw corpus records
    (``folder / "raw"``)."""
    text = (demo_data / "corpus.txt").read_text(encoding="utf-8").split("\n\n")[:documents]
    (folder / "corpus.txt").write_text("\n\n".join(text) + "\n", encoding="utf-8")
    return text, ingest_task({"format": "text", "path": str(folder / "corpus.txt"),
                              "eval_fraction": 0.1}, folder / "raw")


def pretraining_examples(raw: Path, vocab: Path, folder: Path, objective: dict) -> Path:
    """Pretraining records of ``objective`` (the objective section) from the raw corpus
    records ``raw``, written to ``folder``."""
    generate_pretraining_examples(
        {"train": str(raw / "Split-train"), "eval": str(raw / "Split-eval")}, str(vocab),
        str(folder), objective, beam_pipeline_args=IN_MEMORY)
    return folder


def _outputs(folder: Path, custom_config: dict) -> dict:
    """A stage's output folders and backup in ``folder``."""
    return {"serving_model_dir": str(folder / "model" / "Format-Serving"),
            "model_run_dir": str(folder / "Trainer" / "model_run" / "7"),
            "custom_config": {**custom_config, "checkpoint_dir": str(folder / "backup")}}


def spec(folder: Path, examples: Path, train_steps: int, custom_config: dict,
         base_model: str | None = None) -> dict:
    """The Trainer's fn_args of a stage reading ``examples`` with its outputs and backup in
    ``folder``."""
    return {"train_files": [str(examples / "Split-train" / "*")],
            "eval_files": [str(examples / "Split-eval" / "*")],
            "train_steps": train_steps, "eval_steps": 2, "base_model": base_model,
            **_outputs(folder, custom_config)}


def respec(stage: dict, folder: Path) -> dict:
    """The same stage with its outputs and backup in ``folder``."""
    return {**stage, **_outputs(folder, stage["custom_config"])}


def keras_dir(stage: dict) -> Path:
    return Path(stage["serving_model_dir"]).parent / "keras"


def weights_of(path: Path) -> dict:
    """Every array of the weights inside a ``.keras`` archive, by its path there."""
    with zipfile.ZipFile(path) as archive:
        source = io.BytesIO(archive.read("model.weights.h5"))
    arrays = {}
    with h5py.File(source, "r") as weights:
        weights.visititems(lambda name, item: arrays.__setitem__(name, item[()])
                           if isinstance(item, h5py.Dataset) else None)
    return arrays


def run(stage: dict, log: Path, timeout: int = 600) -> str:
    """Runs the stage to its end in a process of its own; returns its output."""
    status, output = forked_tasks.run([sys.executable, RUN_FN_CHECK, json.dumps(stage)], log,
                                      timeout=timeout)
    assert status == 0, output[-3000:]
    assert "RUN_FN_DONE" in output
    return output


def epochs_run(output: str) -> list[int]:
    return [int(n) for n in re.findall(r"^Epoch (\d+)/\d+", output, flags=re.M)]


def kill_resume_and_compare(folder: Path, stage: dict, kill_after_epoch: int,
                            epochs: int) -> tuple[str, int]:
    """Runs ``stage`` in a process, SIGKILLs it once its backup has recorded epoch
    ``kill_after_epoch``, runs it again to the end, then runs it once more uninterrupted in
    ``folder / "uninterrupted"``; asserts every array of the resumed run's task model (the
    artifact's keras/model.keras) equals the uninterrupted run's (1e-6). Returns the resumed
    run's output and the epoch it saved."""
    metadata = Path(stage["custom_config"]["checkpoint_dir"]) / "training_metadata.json"
    folder.mkdir(parents=True, exist_ok=True)
    first = forked_tasks.Forked([sys.executable, RUN_FN_CHECK, json.dumps(stage)],
                                folder / "first.log")
    deadline = time.time() + 300
    while time.time() < deadline and first.poll() is None:
        if metadata.exists() and json.loads(metadata.read_text() or "{}").get(
                "epoch", -1) >= kill_after_epoch:
            break
        time.sleep(0.02)
    assert first.poll() is None, "training ended before it could be killed:\n" + \
        first.output()[-2000:]
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    saved_epoch = json.loads(metadata.read_text())["epoch"]
    assert not (keras_dir(stage) / "model.keras").exists()

    output = run(stage, folder / "second.log")
    ran = epochs_run(output)
    # training_metadata.json counts finished epochs; Keras numbers epochs from 1.
    assert ran[0] == saved_epoch + 1, (saved_epoch, ran[:3])
    assert ran[-1] == epochs
    assert not metadata.exists()  # the backup is removed once training completes

    # Exact resume: the input continues after the batches the checkpointed steps trained
    # on and the random states are restored, so the final weights equal those of a run
    # that was never killed.
    straight = respec(stage, folder / "uninterrupted")
    run(straight, folder / "uninterrupted.log")
    resumed, uninterrupted = (weights_of(keras_dir(s) / "model.keras")
                              for s in (stage, straight))
    assert resumed.keys() == uninterrupted.keys() and len(resumed) > 10
    worst = max(float(np.max(np.abs(resumed[name].astype("float64")
                                    - uninterrupted[name].astype("float64"))))
                for name in resumed)
    assert worst <= 1e-6, f"resumed weights differ from the uninterrupted run by {worst:.3g}"
    return output, saved_epoch
