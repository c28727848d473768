"""Evaluator executor: a plain function of its inputs plus a thin TFX executor around it.

The ModelEvaluation artifact's ``metrics.json`` holds every metric computed, the blessing
metric and verdict, and ``official_metrics``: the task's official figures (the task
record's ``official_metrics``: GLUE's CoLA Matthews correlation, MRPC/QQP F1 and accuracy,
STS-B Pearson and Spearman, the others accuracy; entity F1 / precision / recall for tagging;
SQuAD EM / F1; multiple-choice accuracy). Beside it, ``report.md`` and ``report.html``: the
metrics, the verdict, the training curve and, where the task has classes, the confusion
matrix (components/evaluator/report.py). With a transfer control (``control_model``, the
same task model fine-tuned from a fresh backbone), both are scored by the same code and the
outcome carries ``control_metrics`` and ``transfer_gain`` (components/evaluator/transfer.py).

Each model is scored by the task kind of its task record (components/tasks): classifiers,
regression models, taggers, span extractors and multiple-choice models through the exported
``serving_default`` signature on raw strings, so the figure is the one the pushed model will
give; causal language models by perplexity on held-out pretraining-format records with the
trained Keras model.
"""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import tensorflow as tf
from tfx.components.evaluator import executor as tfx_evaluator
from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils

from lmfactory.components.evaluator import metrics as metric_lib
from lmfactory.components.evaluator import report as report_lib
from lmfactory.components.evaluator import transfer

REPORT_JSON = "metrics.json"
CONFUSION_KEY = report_lib.CONFUSION_KEY
TRAINING_CURVE = "training_curve.json"  # the Trainer's, in the Model artifact's keras/


def _model_config(model_uri: str) -> dict:
    from lmfactory.components.trainer.model_artifact import read_model_config

    return read_model_config(model_uri)


def evaluate(model_uri: str, file_pattern: str, config: dict) -> dict:
    """The metrics of the model's task kind (components/tasks) on the records."""
    from lmfactory.components import tasks as task_kinds

    task = _model_config(model_uri)["task"]
    return task_kinds.get(task["kind"]).evaluate(model_uri, file_pattern, task, config)


def evaluate_and_bless(model_uri: str, file_pattern: str, config: dict,
                       baseline_uri: str | None = None, control_uri: str | None = None
                       ) -> dict:
    """Scores the model (and the baseline and the transfer control on the same data) and
    applies the blessing rule; with ``config["require_transfer_gain"]`` the model must also
    beat the control (transfer.py)."""
    metric = config["metric"]
    if metric not in metric_lib.METRICS:
        raise ValueError(f"metric must be one of {sorted(metric_lib.METRICS)}, got {metric!r}")
    results = evaluate(model_uri, file_pattern, config)
    if metric not in results:
        raise ValueError(f"evaluation.metric {metric!r} is not reported for this model; it "
                         f"reports {sorted(k for k in results if k in metric_lib.METRICS)}")
    baseline_results = evaluate(baseline_uri, file_pattern, config) if baseline_uri else None
    baseline_value = baseline_results[metric] if baseline_results else None
    blessed, reason = metric_lib.passes(metric, results[metric], config.get("threshold"),
                                        baseline_value)
    control = {}
    if control_uri:
        control_results = evaluate(control_uri, file_pattern, config)
        gain = transfer.gains(results, control_results)
        beats, transfer_reason = transfer.passes(metric, gain.get(metric),
                                                 metric_lib.METRICS[metric])
        if config.get("require_transfer_gain") and blessed and not beats:
            blessed, reason = False, transfer_reason
        control = {"control_model": control_uri, "control_metrics": control_results,
                   "transfer_gain": gain, "transfer_reason": transfer_reason}
    task = _model_config(model_uri)["task"]
    official = {name: results[name] for name in task.get("official_metrics", [])
                if name in results}
    return {"metric": metric, "value": results[metric], "metrics": results,
            "meanings": {name: metric_lib.describe(name, task) for name in results
                         if metric_lib.describe(name, task)},
            "notes": metric_lib.notes(results, task, config.get("split", "eval")),
            "task": task.get("glue_task") or " ".join(
                str(task[key]) for key in ("kind", "format") if task.get(key)),
            "official_metrics": official,
            "baseline_metrics": baseline_results, "threshold": config.get("threshold"),
            "blessed": blessed, "reason": reason, **control}


def write_report(outcome: dict, evaluation_dir: str, model_uri: str | None = None) -> dict:
    """Writes ``metrics.json`` (every metric, the blessing, the official metrics; with a
    transfer control its metrics and ``transfer_gain``) and the human-readable
    ``report.md`` / ``report.html`` (report.py) with the model's training curve (the
    Trainer's ``keras/training_curve.json``), the control's beside it, and, where the task
    has classes, its confusion matrix."""
    from lmfactory.components.trainer.training_curve import load_curve

    def curve_of(uri):
        return load_curve(os.path.join(uri, "keras", TRAINING_CURVE)) if uri else None

    tf.io.gfile.makedirs(evaluation_dir)
    with tf.io.gfile.GFile(os.path.join(evaluation_dir, REPORT_JSON), "w") as f:
        json.dump(outcome, f, indent=2, sort_keys=True)
    metrics = dict(outcome["metrics"])
    confusion = metrics.pop(CONFUSION_KEY, None)
    attention = metrics.pop(report_lib.ATTENTION_KEY, None)
    shown = dict(outcome, metrics=metrics)
    for key in ("baseline_metrics", "control_metrics"):
        if shown.get(key):
            shown[key] = {name: value for name, value in shown[key].items()
                          if name not in (CONFUSION_KEY, report_lib.ATTENTION_KEY)}
    return report_lib.write_report(
        shown, evaluation_dir, curve=curve_of(model_uri),
        confusion=np.array(confusion["matrix"]) if confusion else None,
        class_names=confusion["labels"] if confusion else None, attention=attention,
        control_curve=curve_of(outcome.get("control_model")))


class Executor(tfx_evaluator.Executor):
    """Scores ``model`` (and compares it with ``baseline_model``) and writes the blessing.

    A subclass of TFX's Evaluator executor for one reason: on Vertex AI / Kubeflow v2 the
    container entrypoint then rewrites the blessing's ``current_model_id`` from the numeric
    id it gave the model to the model's ML Metadata resource name
    (``kubeflow_v2_run_executor``: ``refactor_model_blessing``), which the compiled
    LatestBlessedModelResolver query matches on; with a numeric id the next run never finds
    its baseline (caught by tests/test_vertex_spec.py). Nothing of TFX's ``Do`` is used."""

    def __init__(self, context=None):
        # The base class's Beam set-up is skipped: this executor runs no Beam pipeline and
        # gets a plain executor context (ExecutorClassSpec).
        base_executor.BaseExecutor.__init__(self, context)

    def Do(self, input_dict, output_dict, exec_properties):
        model = artifact_utils.get_single_instance(input_dict["model"])
        examples = artifact_utils.get_single_instance(input_dict["examples"])
        baselines = input_dict.get("baseline_model") or []
        baseline_uri = baselines[0].uri if baselines else None
        if baseline_uri == model.uri:
            baseline_uri = None
        controls = input_dict.get("control_model") or []
        config = json.loads(exec_properties["config"])
        split = config.get("split", "eval")
        pattern = os.path.join(artifact_utils.get_split_uri([examples], split), "*")
        outcome = evaluate_and_bless(model.uri, pattern, config, baseline_uri,
                                     controls[0].uri if controls else None)
        outcome["model"] = model.uri  # where the exported model is, blessed or not
        evaluation = artifact_utils.get_single_instance(output_dict["evaluation"])
        write_report(outcome, evaluation.uri, model.uri)
        blessing = artifact_utils.get_single_instance(output_dict["blessing"])
        _write_blessing(blessing, model, outcome["blessed"], baseline_uri)
        logging.info("Evaluation: %s", outcome["reason"])


def _write_blessing(blessing, model, blessed: bool, baseline_uri: str | None) -> None:
    """Marks the blessing as TFX's Evaluator does, so Pusher and LatestBlessedModelStrategy read it."""
    tf.io.gfile.makedirs(blessing.uri)
    marker = "BLESSED" if blessed else "NOT_BLESSED"
    with tf.io.gfile.GFile(os.path.join(blessing.uri, marker), "w") as f:
        f.write("")
    blessing.set_int_custom_property("blessed", int(blessed))
    blessing.set_string_custom_property("current_model", model.uri)
    blessing.set_int_custom_property("current_model_id", model.id)
    if baseline_uri:
        blessing.set_string_custom_property("baseline_model", baseline_uri)
