"""``lmfactory evaluate MODEL --data FILE``: a trained model's official metrics on a new
held-out file, computed by the same code as the pipeline's Evaluator.

The file goes through the pipeline's own steps, so the figure is the one the Evaluator would
report on it: TextExampleGen's ingestion (components/example_gen: the task's format, malformed
records counted and reported) and, for a language model, PretrainingExampleGen's windows of
the model's objective and sequence length (components/pretraining_data); then the model's task
kind scores the records (components/tasks ``evaluate``: perplexity for a causal LM, accuracy /
F1 / Matthews for a classifier, Pearson / Spearman for regression, entity F1 for a tagger,
EM / F1 for span QA, accuracy for multiple choice, BLEU for translation ...).

The file's layout defaults to the task's: a GLUE task's columns (``glue_task`` in the task
record), the task record's ``format`` (CoNLL, SQuAD JSON, CommonsenseQA JSONL ...), plain
text for a language model, else a TSV with a header and a ``label`` column; ``--format`` and
``--option KEY=VALUE`` (TextExampleGen ``input_config`` keys: ``column_names``,
``has_header``, ``label_column``, ``label_type``, ``text_field``) change it.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import threading
import time

import yaml

_EXTENSION_FORMATS = {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".txt": "text",
                      ".conll": "conll"}
BEAM_ARGS = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


class EvaluateError(ValueError):
    """The model or the file cannot be evaluated; the message is one line for the user."""


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextlib.contextmanager
def heartbeat(what: str, every: float = 10.0):
    """Prints ``what`` and the elapsed time on stderr every ``every`` seconds until the
    block ends (the task kinds' scoring loops report no per-batch progress), then the
    total time."""
    started = time.time()
    stop = threading.Event()

    def beat():
        while not stop.wait(every):
            _progress(f"  {what}: {time.time() - started:.0f} s")

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        _progress(f"  {what}: done in {time.time() - started:.1f} s")


def parse_options(options: list[str]) -> dict:
    parsed = {}
    for option in options:
        key, sep, value = option.partition("=")
        if not sep or not key:
            raise EvaluateError(f"--option takes KEY=VALUE, got {option!r}")
        parsed[key.strip()] = yaml.safe_load(value)
    return parsed


def input_config(task: dict, data_file: str, file_format: str | None,
                 options: dict) -> dict:
    """TextExampleGen's ``input_config`` reading ``data_file`` as the eval split."""
    from lmfactory.components.example_gen import formats, glue

    path = os.path.abspath(data_file)
    if task.get("objective"):  # a language model: running text
        config = {"format": formats.TEXT_FORMAT}
    elif task.get("glue_task") and not file_format:
        config = glue.input_config(task["glue_task"], os.path.dirname(path))
        config.pop("splits")
    else:
        extension = os.path.splitext(path)[1].lower()
        chosen = file_format or task.get("format") or _EXTENSION_FORMATS.get(extension, "tsv")
        config = {"format": chosen}
        if chosen in formats.TABLE_FORMATS:
            config["has_header"] = True
            if task.get("kind") in ("classification", "regression") \
                    and not task.get("label_vocabulary"):
                config["label_column"] = "label"
                config["label_type"] = "float" if task["kind"] == "regression" else "int"
    if file_format:
        config["format"] = file_format
    config.update(options)
    config["splits"] = {"eval": path}
    return config


def ingest(config: dict, output_dir: str) -> tuple[str, dict]:
    """Ingests the file; returns the eval split's record pattern and its counts."""
    from lmfactory.components.example_gen.executor import ingest as ingest_records

    report = ingest_records(config, output_dir, beam_pipeline_args=BEAM_ARGS)
    counts = {key: value for key, value in report["splits"].get("eval", {}).items() if value}
    return os.path.join(output_dir, "Split-eval", "*"), counts


def required_features(task: dict) -> list[str]:
    """The record features the task's model reads, for the kinds whose task record names
    them (text features and the label); empty when the kind's own format fixes them."""
    features = list(task.get("text_features") or [])
    if features and task.get("kind") in ("classification", "regression"):
        features.append(task.get("label_feature") or "label")
    return features


def first_record_features(pattern: str) -> set | None:
    """The feature names of the first record matching ``pattern`` (None: no record)."""
    import tensorflow as tf

    files = sorted(tf.io.gfile.glob(pattern))
    if not files:
        return None
    for serialized in tf.data.TFRecordDataset(files, compression_type="GZIP").take(1):
        return set(tf.train.Example.FromString(serialized.numpy()).features.feature)
    return None


def check_records(data_file: str, config: dict, task: dict, pattern: str,
                  counts: dict) -> None:
    """EvaluateError, in one line, when the ingested file holds no record or records
    without the features the model reads (named, with what the file had)."""
    kind = task.get("kind", "the")
    features = first_record_features(pattern)
    if not counts.get("good") or features is None:
        shown = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if k != "good")
        raise EvaluateError(f"{data_file}: no record could be read as {config['format']}"
                            f"{' (' + shown + ')' if shown else ''}; the {kind} model reads "
                            f"{_expected(task, config)}")
    missing = [name for name in required_features(task) if name not in features]
    if missing:
        raise EvaluateError(f"{data_file}: the records have {sorted(features)}, the {kind} "
                            f"model reads {required_features(task)}: missing {missing} "
                            f"(--format / --option column_names=[...], label_column=... "
                            f"name them)")


def _expected(task: dict, config: dict) -> str:
    features = required_features(task)
    if features:
        return f"records with {features} ({config['format']}; --format changes it)"
    return f"{task.get('format') or config['format']} records"


def pretraining_records(examples_dir: str, vocab_dir: str, task: dict,
                        output_dir: str) -> tuple[str, dict]:
    """The model's objective's records of the ingested text (its sequence length)."""
    from lmfactory.components.pretraining_data.executor import generate_pretraining_examples

    config = {"objective": task["objective"]}
    if task.get("sequence_length"):
        config["max_seq_length"] = int(task["sequence_length"])
    counts = generate_pretraining_examples({"eval": os.path.join(examples_dir, "Split-eval")},
                                           vocab_dir, output_dir, config,
                                           beam_pipeline_args=BEAM_ARGS)
    return os.path.join(output_dir, "Split-eval", "*"), counts.get("eval", {})


def _count_line(counts: dict) -> str:
    shown = [f"{key} {value:,}" for key, value in sorted(counts.items())
             if isinstance(value, int)]
    return ", ".join(shown) if shown else "no counts reported"


def evaluate(model: str, data_file: str, file_format: str | None = None,
             options: dict | None = None, batch_size: int = 64,
             max_batches: int | None = None, check_model=None) -> dict:
    """``{"model", "task", "data", "counts", "metrics"}`` of ``model`` on ``data_file``.
    ``check_model``: called with the artifact's SavedModel folder before anything is read
    (the CLI's untrusted-model guard)."""
    from lmfactory.cli.model_paths import model_artifact
    from lmfactory.components import tasks as task_kinds
    from lmfactory.components.trainer.model_artifact import (read_model_config,
                                                             vocabulary_dir_of)

    if not os.path.isfile(data_file):
        raise EvaluateError(f"--data {data_file!r} is not a file")
    artifact = model_artifact(model)
    if check_model is not None:
        from lmfactory.components.trainer.serving import serving_dir_of

        check_model(serving_dir_of(artifact))
    task = read_model_config(artifact).get("task") or {}
    if not task.get("kind"):
        raise EvaluateError(f"{artifact} records no task; nothing to evaluate")
    kind = task_kinds.get(task["kind"])
    if task["kind"] == "language_model" and not task.get("objective"):
        raise EvaluateError(f"{artifact} is a {task['kind']} model without an objective")
    config = input_config(task, data_file, file_format, options or {})
    _progress(f"Evaluating {artifact} ({task['kind']}"
              f"{', ' + task['objective'] if task.get('objective') else ''}) on {data_file}")
    with tempfile.TemporaryDirectory(prefix="lmfactory_evaluate_") as work:
        with heartbeat(f"reading {config['format']} records"):
            pattern, counts = ingest(config, os.path.join(work, "examples"))
        _progress(f"  records: {_count_line(counts)}")
        check_records(data_file, config, task, pattern, counts)
        if task.get("objective"):
            with heartbeat(f"{task['objective']} windows"):
                pattern, window_counts = pretraining_records(
                    os.path.join(work, "examples"), vocabulary_dir_of(artifact), task,
                    os.path.join(work, "windows"))
            _progress(f"  windows: {_count_line(window_counts)}")
            if first_record_features(pattern) is None:
                raise EvaluateError(
                    f"{data_file}: too short for one {task['objective']} window"
                    f"{' of ' + str(task['sequence_length']) + ' tokens' if task.get('sequence_length') else ''}")
            counts = dict(counts, **{f"windows_{k}": v for k, v in window_counts.items()})
        with heartbeat("scoring"):
            metrics = kind.evaluate(artifact, pattern, task,
                                    {"batch_size": batch_size, "max_batches": max_batches})
    return {"model": artifact, "task": task, "data": os.path.abspath(data_file),
            "counts": counts, "metrics": metrics}


def format_result(result: dict) -> str:
    """The metrics, official ones first, each with what it means."""
    from lmfactory.components.evaluator import metrics as metric_lib
    from lmfactory.components.evaluator.report import CONFUSION_KEY, ATTENTION_KEY

    metrics = {k: v for k, v in result["metrics"].items()
               if k not in (CONFUSION_KEY, ATTENTION_KEY)}
    official = [m for m in result["task"].get("official_metrics", []) if m in metrics]
    lines = []
    for name in official + [m for m in metrics if m not in official]:
        value = metrics[name]
        shown = (f"{value:.4f}" if isinstance(value, float) else
                 json.dumps(value) if isinstance(value, (dict, list)) else f"{value}")
        meaning = metric_lib.describe(name, result["task"])
        mark = " (official)" if name in official else ""
        lines.append(f"{name}: {shown}{mark}" + (f"  - {meaning}" if meaning else ""))
    lines += [f"note: {note}" for note in metric_lib.notes(
        metrics, result["task"], split=os.path.basename(result["data"]), tuned_on_scored=False)]
    return "\n".join(lines) + "\n"
