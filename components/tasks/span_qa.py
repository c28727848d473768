"""Span question answering (SQuAD v1.1 / v2.0) in the DAG: SQuAD records -> a model that
answers a raw question about a raw context, scored with the official EM / F1.

Devlin et al. 2019 §4.2: a start vector S and an end vector E over the final hidden states
(``models/tasks/span_extractor.py``); contexts longer than the window are cut into windows
``doc_stride`` apart; decoding takes the best of the ``n_best_size`` start / end candidates
with at most ``max_answer_length`` tokens (``models/tasks/span_decoding.py``). §4.3 (v2.0):
when the records hold unanswerable questions, the no-answer score s_null (at [CLS]) is
compared with the best span, and the threshold τ is tuned on the eval split (the paper tunes
it on dev) after training; the exported model abstains (answers "") when
``s_null - s_best > τ``.

Parts:
    record parsing: components.example_gen.squad.read_squad,
        components.example_gen.squad.read_examples
    head: models.tasks.span_extractor.SpanExtractor
    preprocessor: models.tasks.span_preprocessor.span_preprocessor
    training step: components.tasks.span_qa.train, models.tasks.span_finetune
    serving export: components.tasks.span_qa.export, models.tasks.span_serving.export,
        models.tasks.span_decoding
    metrics: components.tasks.span_qa.evaluate, components.evaluator.squad_metrics
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from lmfactory.components.example_gen import formats, squad
from lmfactory.components.tasks import registry

DEFAULTS = {"doc_stride": 128, "max_query_length": 64, "n_best_size": 20,
            "max_answer_length": 30}
SPAN_QA = registry.register(registry.TaskKind(
    name="span_qa", module=__name__, formats=(formats.SQUAD_FORMAT,),
    metrics=("f1", "exact_match"), official_metrics=("exact_match", "f1"),
    task_args=tuple(DEFAULTS), head="span_qa"))
# The answer spans are mapped through the tokenizer's character offsets, which tf-text's
# WordPiece gives (models/tasks/span_preprocessor.py).
TOKENIZER_KINDS = ("wordpiece",)


def _settings(task: dict) -> dict:
    return {key: int(task.get(key, default)) for key, default in DEFAULTS.items()}


def task_record(kind, finetuning: dict, source: dict) -> dict:
    args = {**DEFAULTS, **{k: v for k, v in finetuning.get("task_args", {}).items()
                           if k in DEFAULTS}}
    return {**kind.standard_record(finetuning, source),
            **{key: int(value) for key, value in args.items()}}


def check_recipe(check, recipe: dict, arch) -> None:
    del recipe
    if arch.tokenizer_kind not in TOKENIZER_KINDS:
        check.fail("finetuning.task", f"span_qa maps answers through WordPiece offsets; "
                                      f"{arch.name} tokenizes with {arch.tokenizer_kind}")
    check.positive_int("finetuning.sequence_length")
    check.source("data.task")
    check.choice("data.task.format", SPAN_QA.formats)


def _dataset(model, features: dict, labels: tuple, batch_size: int, shuffle: bool,
             seed: int) -> tf.data.Dataset:
    from lmfactory.models.tasks.span_finetune import model_inputs

    starts, ends = labels
    dataset = tf.data.Dataset.from_tensor_slices((
        model_inputs(model, features), {"start_positions": starts, "end_positions": ends}))
    if shuffle:
        dataset = dataset.shuffle(len(starts), seed=seed, reshuffle_each_iteration=True)
    return dataset.repeat().batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def tuned_threshold(scores: dict) -> float | None:
    """τ maximising F1 on the eval split (v2.0), as a finite number the serving graph can
    hold: -inf (always abstain) becomes a very negative τ."""
    threshold = scores["best_f1_threshold"]["threshold"]
    return float(threshold) if math.isfinite(threshold) else -1e30


def score(records, predictions, version_2: bool) -> dict:
    """Official EM / F1; for v2.0 also at the thresholds tuned on these records."""
    from lmfactory.components.evaluator import squad_metrics
    from lmfactory.models.tasks.span_decoding import answer

    gold = squad.gold_answers(records)
    ids = [r.id for r in records]
    result = {"v1_best_span": squad_metrics.evaluate(
        gold, {i: answer(p, None) for i, p in zip(ids, predictions)})}
    if version_2:
        margins = {i: p.null_margin for i, p in zip(ids, predictions)}
        spans = {i: p.text for i, p in zip(ids, predictions)}
        result["threshold_0"] = squad_metrics.evaluate(
            gold, {i: answer(p, 0.0) for i, p in zip(ids, predictions)})
        for metric in ("exact_match", "f1"):
            threshold, value = squad_metrics.best_no_answer_threshold(gold, spans, margins,
                                                                      metric)
            at = squad_metrics.evaluate(
                gold, {i: answer(p, threshold) for i, p in zip(ids, predictions)})
            result[f"best_{metric}_threshold"] = {"threshold": threshold, metric: value,
                                                  "exact_match": at["exact_match"],
                                                  "f1": at["f1"]}
    return result


def train(context) -> dict:
    from lmfactory import models
    from lmfactory.models.tasks.span_finetune import featurize, predict, training_labels
    from lmfactory.models.tasks.span_preprocessor import span_preprocessor

    context.require_base_model("a span extractor")
    config = context.config
    task = dict(config.task)
    settings = _settings(task)
    train_records = squad.read_examples(context.train_files)
    eval_records = squad.read_examples(context.eval_files)
    version_2 = any(record.is_impossible for record in train_records + eval_records)
    preprocessor = span_preprocessor(context.vocab_dir, task["sequence_length"],
                                     settings["doc_stride"], settings["max_query_length"])
    train_features = featurize(preprocessor, train_records)
    eval_features = featurize(preprocessor, eval_records)
    with context.strategy.scope():
        backbone = context.backbone()
        longest = backbone.get_config().get("max_sequence_length")
        if longest is not None and longest < task["sequence_length"]:
            raise ValueError(f"finetuning.sequence_length {task['sequence_length']} is longer "
                             f"than the backbone's max_sequence_length {longest}")
        model = models.get(config.architecture).head("span_qa")(backbone)
        model.compile(optimizer=context.optimizer(), jit_compile=config.jit_compile)
    read = dict(batch_size=config.batch_size, seed=config.seed)
    train_data = _dataset(model, train_features,
                          training_labels(preprocessor, train_features, train_records),
                          shuffle=True, **read)
    eval_data = _dataset(model, eval_features,
                         training_labels(preprocessor, eval_features, eval_records),
                         shuffle=False, **read)
    metrics = context.fit(model, train_data, eval_data)
    task.update(settings, version="2.0" if version_2 else "1.1", null_threshold=None)
    if version_2:  # §4.3: τ tuned on the eval (dev) split
        predictions = predict(model, eval_records, eval_features,
                              n_best_size=settings["n_best_size"],
                              max_answer_length=settings["max_answer_length"])
        task["null_threshold"] = tuned_threshold(score(eval_records, predictions, True))
    metrics.update(train_windows=len(train_features["example_index"]),
                   train_questions=len(train_records))
    return dict(task_model=model, backbone=backbone, vocab_dir=context.vocab_dir,
                metrics=metrics, task=task, preprocessor=preprocessor)


def export(task_model, preprocessor, vocab_dir: str, model_config: dict,
           export_dir: str) -> None:
    from lmfactory.models.tasks import span_serving

    del vocab_dir  # the preprocessor holds the tokenizer
    task = model_config["task"]
    settings = _settings(task)
    span_serving.export(preprocessor, task_model, export_dir, task.get("null_threshold"),
                        settings["n_best_size"], settings["max_answer_length"])


def evaluate(model_uri: str, file_pattern: str, task: dict, config: dict) -> dict:
    """Official EM / F1 (0-100) of the exported model's answers to the records' questions;
    for v2.0 also the HasAns / NoAns split and the best τ on these records (how far the
    exported τ is from it)."""
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops the SavedModel uses)

    from lmfactory.components.evaluator import squad_metrics
    from lmfactory.components.trainer.serving import serving_dir_of

    batch_size = config.get("batch_size", 64)
    serve = tf.saved_model.load(serving_dir_of(model_uri)).signatures["serving_default"]
    records = squad.read_examples(file_pattern)
    answers, spans, margins = {}, {}, {}
    for start in range(0, len(records), batch_size):
        chunk = records[start:start + batch_size]
        outputs = serve(question=tf.constant([r.question for r in chunk]),
                        context=tf.constant([r.context for r in chunk]))
        for record, answer, span, margin in zip(chunk, outputs["answer"].numpy(),
                                                outputs["span"].numpy(),
                                                outputs["null_margin"].numpy()):
            answers[record.id] = answer.decode("utf-8")
            spans[record.id] = span.decode("utf-8")
            margins[record.id] = float(margin)
    gold = squad.gold_answers(records)
    results = squad_metrics.evaluate(gold, answers)
    results["questions"] = results.pop("total")
    if task.get("version") == "2.0":
        for subset, keep in (("has_answer", lambda r: not r.is_impossible),
                             ("no_answer", lambda r: r.is_impossible)):
            ids = [r.id for r in records if keep(r)]
            if ids:
                part = squad_metrics.evaluate({i: gold[i] for i in ids}, answers)
                results[f"{subset}_exact_match"] = part["exact_match"]
                results[f"{subset}_f1"] = part["f1"]
        threshold, best = squad_metrics.best_no_answer_threshold(
            gold, spans, {i: m for i, m in margins.items() if np.isfinite(m)}, "f1")
        results.update(best_f1=best, best_f1_threshold=threshold,
                       null_threshold=task.get("null_threshold"))
        # Beside them, figures at thresholds that never saw the questions they score.
        results.update(squad_metrics.held_out_threshold_scores(
            gold, spans, {i: m for i, m in margins.items() if np.isfinite(m)}))
    return results
