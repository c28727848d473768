"""Fine-tuning task kinds beyond sentence classification: one module per kind, one record here.

A kind says which ingestion formats its records come from, its metrics (the first is its
official one), the ``finetuning.task_args`` it takes, and where its three steps live:

* ``train(context)`` (run by the Trainer's ``run_fn`` with a `run_fn.StageContext`) -> the
  trained task model, backbone, preprocessor, metrics and the task record (CONTRACTS §4);
* ``export(task_model, preprocessor, model_config, export_dir)`` -> the serving SavedModel
  that takes the task's raw inputs;
* ``evaluate(model_uri, file_pattern, task, batch_size)`` -> the official metrics of the
  exported model on ingested records (the Evaluator).

Sentence classification and regression keep their own path (``run_fn._train_classifier``,
``export.ClassifierServing``, ``evaluator.evaluate_classifier``).
"""

from __future__ import annotations

import dataclasses
import importlib

from lmfactory.components.example_gen import formats


@dataclasses.dataclass(frozen=True)
class TaskKind:
    name: str
    formats: tuple
    metrics: tuple  # evaluation.metric choices; the first is the task's official metric
    official_metrics: tuple
    task_args: tuple  # the finetuning.task_args keys the kind understands
    module: str

    def _implementation(self):
        return importlib.import_module(self.module)

    def train(self, context) -> dict:
        return self._implementation().train(context)

    def export(self, task_model, preprocessor, model_config: dict, export_dir: str) -> None:
        return self._implementation().export(task_model, preprocessor, model_config,
                                             export_dir)

    def evaluate(self, model_uri: str, file_pattern: str, task: dict,
                 batch_size: int = 64) -> dict:
        return self._implementation().evaluate(model_uri, file_pattern, task, batch_size)

    def task_record(self, finetuning: dict, source: dict) -> dict:
        """The task record (CONTRACTS §4 ``task``) of a recipe's ``finetuning`` section and
        ``data.task`` source; ``train`` completes it from the data (e.g. the tag set)."""
        record = {"kind": self.name, "format": source["format"],
                  "sequence_length": finetuning["sequence_length"],
                  "official_metrics": list(self.official_metrics)}
        extra = getattr(self._implementation(), "task_record", None)
        return {**record, **(extra(finetuning, source) if extra else {})}


KINDS = {kind.name: kind for kind in (
    TaskKind("tagging", (formats.CONLL_FORMAT,),
             ("entity_f1", "entity_precision", "entity_recall"),
             ("entity_f1", "entity_precision", "entity_recall"),
             ("dropout", "feature_mode", "lstm_units", "num_lstm_layers"),
             "lmfactory.components.tasks.tagging"),
    TaskKind("span_qa", (formats.SQUAD_FORMAT,), ("f1", "exact_match"), ("exact_match", "f1"),
             ("doc_stride", "max_query_length", "n_best_size", "max_answer_length"),
             "lmfactory.components.tasks.span_qa"),
    TaskKind("multiple_choice", (formats.COMMONSENSEQA_FORMAT, formats.SWAG_FORMAT),
             ("accuracy",), ("accuracy",), ("dropout", "lm_weight"),
             "lmfactory.components.tasks.multiple_choice"),
)}


def names() -> tuple:
    return tuple(KINDS)


def get(name: str) -> TaskKind:
    if name not in KINDS:
        raise ValueError(f"Unknown task kind {name!r}; expected one of {names()}")
    return KINDS[name]


__all__ = ["KINDS", "TaskKind", "get", "names"]
