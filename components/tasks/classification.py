"""Sentence (pair) classification and regression in the DAG: raw task records (CONTRACTS §1:
one or two text features and a label) -> the architecture's classification head
(`Architecture.head("classification")`) warm-started from the pretrained backbone -> a
SavedModel that classifies raw strings.

The head's inputs come from the architecture's preprocessor (`models.classifier_preprocessor`:
cls/sep packing, or an architecture's own, like GPT-1's §3.3 transformations); the recipe's
``finetuning.task_args`` go to the head (e.g. GPT-1's ``lm_weight``) and to its
preprocessor. A head with its own ``compute_loss`` (GPT-1's L2 + λ L1) trains on it; any
other on the cross-entropy of its logits. A ``regression`` task (GLUE's STS-B) trains the
same head with one output (``num_classes=1``) on the mean squared error against the float
label. With a teacher (TinyBERT §3.2 task-specific distillation) the architecture's
``classification_distillation`` head trains the student against the fine-tuned teacher.

Evaluation runs through the exported ``serving_default`` on the raw strings, so the figure is
the one the pushed model gives: accuracy, F1 of class 1, macro-F1 and Matthews correlation,
or Pearson, Spearman and MSE for regression (a GLUE source adds its official metrics).

Parts:
    record parsing: components.example_gen.formats.parse_table_row,
        components.example_gen.glue, components.trainer.task_data.LabelReader
    head: models.registry.Architecture.head, models.bert.BertClassifier
    preprocessor: models.classifier_preprocessor.classifier_preprocessor
    training step: components.tasks.classification.train,
        components.trainer.task_data.make_classification_dataset
    serving export: components.tasks.classification.export,
        components.trainer.serving.ClassifierServing
    metrics: components.tasks.classification.evaluate_classifier,
        components.evaluator.metrics.classification_metrics,
        components.evaluator.metrics.regression_metrics
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from lmfactory.components.tasks import registry
from lmfactory.components.evaluator import metrics as metric_lib
from lmfactory.components.evaluator import report as report_lib
from lmfactory.components.example_gen import glue
from lmfactory.components.trainer import task_data

RECORD_KEYS = ("text_features", "num_classes", "sequence_length")
CLASSIFICATION = registry.register(registry.TaskKind(
    name=task_data.CLASSIFICATION, module=__name__,
    metrics=("accuracy", "f1", "macro_f1", "matthews_corrcoef"), official_metrics=(),
    task_args=None, head="classification", required_record_keys=RECORD_KEYS))
REGRESSION = registry.register(registry.TaskKind(
    name=task_data.REGRESSION, module=__name__, metrics=("pearson", "spearman", "mse"),
    official_metrics=(), task_args=None, head="classification",
    finetuning_defaults=(("num_classes", 1),),  # one output
    required_record_keys=RECORD_KEYS))


def task_record(kind, finetuning: dict, source: dict) -> dict:
    """kind, text features, outputs and sequence length; a GLUE source adds its label fields
    and official metrics."""
    record = {"kind": kind.name, "text_features": finetuning["text_features"],
              "num_classes": finetuning["num_classes"],
              "sequence_length": finetuning["sequence_length"]}
    if "glue" in source:
        record.update(glue.task_record(source["glue"]))
    return record


def check_recipe(check, recipe: dict, arch) -> None:
    del arch
    finetuning = recipe["finetuning"]
    check.string_list("finetuning.text_features")
    if len(finetuning["text_features"]) > 2:
        check.fail("finetuning.text_features", "one or two text features")
    check.positive_int("finetuning.num_classes")
    if finetuning["task"] == task_data.REGRESSION and finetuning["num_classes"] != 1:
        check.fail("finetuning.num_classes", f"a regression task has one output, got "
                                             f"{finetuning['num_classes']}")
    check.positive_int("finetuning.sequence_length")
    check.source("data.task")


def computes_own_loss(model) -> bool:
    """Whether ``model`` overrides Keras's ``compute_loss`` (computes its whole loss and
    metrics itself, so it is compiled with an optimizer and no loss)."""
    return type(model).compute_loss is not keras.Model.compute_loss


def _compile(model, optimizer, regression: bool, jit_compile: bool, architecture: str):
    if regression and computes_own_loss(model):
        raise ValueError(f"The {architecture} classifier computes its own classification "
                         f"loss; it cannot fine-tune a regression task")
    if regression:
        model.compile(optimizer=optimizer, loss=keras.losses.MeanSquaredError(),
                      metrics=[keras.metrics.MeanAbsoluteError(name="mae")],
                      jit_compile=jit_compile)
    elif computes_own_loss(model):
        model.compile(optimizer=optimizer, jit_compile=jit_compile)
    else:
        model.compile(optimizer=optimizer,
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
                      jit_compile=jit_compile)


def _distillation_head(context, architecture, backbone, optimizer, task: dict, regression):
    """Task-specific distillation (TinyBERT §3.2): the task model trains the student against
    the fine-tuned teacher; its ``classifier`` is what gets exported."""
    config = context.config
    if regression:
        raise ValueError("Task-specific distillation trains classifiers; a regression "
                         "task cannot use it")
    if not architecture.has_head("classification_distillation"):
        raise ValueError(f"Architecture {config.architecture!r} has no task-specific "
                         f"distillation")
    task_model = architecture.head("classification_distillation")(
        backbone, teacher=context.teacher(), num_classes=task["num_classes"],
        **config.task_args)
    task_model.compile(optimizer=optimizer, jit_compile=config.jit_compile)
    return task_model, task_model.classifier


def train(context) -> dict:
    """Fine-tunes the architecture's classification head on raw task records."""
    from lmfactory import models
    from lmfactory.models.classifier_preprocessor import classifier_preprocessor

    context.require_base_model("a classifier")
    config = context.config
    task = config.task
    regression = task.get("kind") == task_data.REGRESSION
    architecture = models.get(config.architecture)
    preprocessor = classifier_preprocessor(
        context.vocab_dir, config.architecture, task["sequence_length"],
        num_text_features=len(task["text_features"]),
        task_args=None if config.teacher_model else config.task_args)
    with context.strategy.scope():
        backbone = context.backbone()
        optimizer = context.optimizer()
        if config.teacher_model:
            task_model, classifier = _distillation_head(context, architecture, backbone,
                                                        optimizer, task, regression)
        else:
            task_model = classifier = architecture.head("classification")(
                backbone, num_classes=1 if regression else task["num_classes"],
                **config.task_args)
            context.knowledge_init(classifier)
            _compile(classifier, optimizer, regression, config.jit_compile,
                     config.architecture)
    read = dict(preprocessor=preprocessor, text_features=task["text_features"],
                batch_size=config.batch_size, seed=config.seed,
                input_names=list(classifier.input.keys()),
                label_reader=task_data.LabelReader.for_task(task))
    train_data = task_data.make_classification_dataset(
        context.train_files, shuffle=True, repeat=True, **read)
    eval_data = task_data.make_classification_dataset(
        context.eval_files, shuffle=False, repeat=True, **read)
    metrics = context.fit(task_model, train_data, eval_data)
    return dict(task_model=classifier, backbone=backbone, vocab_dir=context.vocab_dir,
                metrics=metrics, task=dict(task), preprocessor=preprocessor)


def export(task_model, preprocessor, vocab_dir: str, model_config: dict,
           export_dir: str) -> None:
    from lmfactory.components.trainer.serving import ClassifierServing, save_serving_module

    del vocab_dir  # the preprocessor holds the tokenizer
    task = model_config["task"]
    save_serving_module(ClassifierServing(preprocessor, task_model, task["text_features"],
                                          kind=task["kind"],
                                          label_vocabulary=task.get("label_vocabulary")),
                        export_dir)


def evaluate(model_uri: str, file_pattern: str, task: dict, config: dict) -> dict:
    return evaluate_classifier(model_uri, file_pattern, task["text_features"],
                               config.get("batch_size", 64), task=task)


def evaluate_classifier(model_uri: str, file_pattern: str, text_features: list[str],
                        batch_size: int = 64, task: dict | None = None) -> dict:
    """Scores a classifier (or a regression model: ``task["kind"] == "regression"``) through
    its exported ``serving_default`` on the raw strings of the records. Labels are read as the
    task record says (task_data.LabelReader: int64 ``label``, a word through the
    ``label_vocabulary``, or a float score). Classification reports accuracy, F1 of class 1,
    macro-F1 and Matthews correlation; regression Pearson, Spearman and MSE."""
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops the SavedModel uses)

    from lmfactory.components.trainer.serving import serving_dir_of

    task = dict(task or {"kind": task_data.CLASSIFICATION})
    regression = task.get("kind") == task_data.REGRESSION
    label_reader = task_data.LabelReader.for_task(task)
    serve = tf.saved_model.load(serving_dir_of(model_uri)).signatures["serving_default"]
    spec = {name: tf.io.FixedLenFeature([], tf.string) for name in text_features}
    spec.update(label_reader.spec)
    labels, predictions = [], []
    for batch in task_data.read_records(file_pattern).batch(batch_size).map(
            lambda s: tf.io.parse_example(s, spec)):
        outputs = serve(**{name: batch[name] for name in text_features})
        labels.append(label_reader(batch).numpy())
        predictions.append(outputs["score" if regression else "label"].numpy())
    labels, predictions = np.concatenate(labels), np.concatenate(predictions)
    if regression:
        return metric_lib.regression_metrics(labels, predictions)
    results = metric_lib.classification_metrics(labels, predictions)
    num_classes = int(task.get("num_classes") or 1 + max(labels.max(), predictions.max()))
    names = task.get("label_vocabulary") or [str(i) for i in range(num_classes)]
    results[report_lib.CONFUSION_KEY] = {
        "labels": list(names),
        "matrix": report_lib.confusion_matrix(labels, predictions, num_classes).tolist()}
    return results
