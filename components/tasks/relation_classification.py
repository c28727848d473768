"""Relation classification in the DAG (ERNIE, Zhang et al. 2019 §3.5 and §4.4): records of a
sentence, its head and tail entity mentions and the relation (built from KG-linked text by
components/knowledge_graph/relation_data.py) -> a classifier of raw (text, head, tail).

§3.5 / Figure 3: the two mentions are highlighted by mark tokens ([HD] around the head,
[TL] around the tail; models/tasks/relation_marking.py writes them as two single-token
characters of the vocabulary, as the released fine-tuning code does) and the sequence is
classified from its [CLS] vector: the architecture's ordinary ``classification`` head, so
BERT and ERNIE fine-tune the same head on the same marked sequence (ERNIE's preprocessor
also links the marked text's entities to the KG). An architecture may register its own
``relation_classification`` preprocessor (`Architecture.preprocessors`); the others get
`RelationMarkingPreprocessor` over their classification preprocessor.

The relation set is read from the ingested records (train's most frequent first), so the
recipe never lists it; it is stored in the task record as ``label_vocabulary``. Metrics
(through the exported SavedModel on the raw strings): accuracy and macro-F1 (TACRED's
and FewRel's figures are F1 / accuracy) and Matthews correlation.

Parts:
    record parsing: components.knowledge_graph.relation_data.build,
        components.trainer.task_data.make_classification_dataset
    head: models.registry.Architecture.head, models.ernie.ErnieClassifier
    preprocessor: models.tasks.relation_marking.RelationMarkingPreprocessor
    training step: components.tasks.relation_classification.train,
        components.tasks.relation_classification.fit_marked_text
    serving export: components.tasks.relation_classification.export,
        components.trainer.serving.ClassifierServing
    metrics: components.tasks.relation_classification.evaluate,
        components.tasks.classification.evaluate_classifier
"""

from __future__ import annotations

import collections

import tensorflow as tf

from lmfactory.components.tasks import classification, registry
from lmfactory.components.trainer import task_data

MARKER_ARGS = ("head_marker", "tail_marker")
RELATION_CLASSIFICATION = registry.register(registry.TaskKind(
    name="relation_classification", module=__name__,
    metrics=("macro_f1", "accuracy", "matthews_corrcoef"), official_metrics=(),
    task_args=None, head="classification",
    required_record_keys=("kind", "sequence_length", "text_features", "label_feature")))


def marked_text_record(kind, finetuning: dict, default_label: str) -> dict:
    """The task record of a kind whose inputs are a text and marked mentions of it (this kind
    and ``entity_typing``)."""
    return {"kind": kind.name, "text_features": list(finetuning["text_features"]),
            "label_feature": finetuning.get("label_feature", default_label),
            "sequence_length": finetuning["sequence_length"]}


def check_marked_text_recipe(check, recipe: dict, features: str, marker_args) -> None:
    """Checks a marked-text kind's recipe: ``features`` names the text features in order
    (their count is checked); each of ``marker_args`` in ``task_args`` is one character."""
    check.string_list("finetuning.text_features")
    expected = features.count(",") + 1
    if len(recipe["finetuning"]["text_features"]) != expected:
        count = {2: "two", 3: "three"}.get(expected, str(expected))
        check.fail("finetuning.text_features", f"{count} features: {features}")
    check.positive_int("finetuning.sequence_length")
    check.source("data.task")
    for name in marker_args:
        value = recipe["finetuning"].get("task_args", {}).get(name)
        if value is not None and (not isinstance(value, str) or len(value.strip()) != 1):
            check.fail(f"finetuning.task_args.{name}", f"one character, got {value!r}")


def task_record(kind, finetuning: dict, source: dict) -> dict:
    del source
    return marked_text_record(kind, finetuning, "relation")


def check_recipe(check, recipe: dict, arch) -> None:
    del arch
    check_marked_text_recipe(check, recipe, "the text, the head mention, the tail mention",
                             MARKER_ARGS)


def label_vocabulary(file_patterns, label_feature: str, batch_size: int = 512,
                     multi_label: bool = False, what: str = "relation classification",
                     ) -> list:
    """The labels of the records: those of the first pattern (the train split) most
    frequent first (ties by name), then any only the others hold (an eval label the train
    split lacks still gets a class, which the model never predicts). ``multi_label``: a
    value holds several labels separated by whitespace (entity typing's types)."""
    counts = []
    spec = {label_feature: tf.io.FixedLenFeature([], tf.string)}
    for pattern in file_patterns:
        counts.append(collections.Counter())
        for batch in task_data.read_records(pattern).batch(batch_size):
            parsed = tf.io.parse_example(batch, spec)
            for value in parsed[label_feature].numpy():
                value = value.decode("utf-8").strip()
                counts[-1].update(value.split() if multi_label else [value])
    if len(counts[0]) < 2:
        raise ValueError(f"{what} needs two labels or more in {file_patterns[0]}, got "
                         f"{sorted(counts[0])}")
    by_frequency = lambda count: [name for name, _ in sorted(  # noqa: E731
        count.items(), key=lambda item: (-item[1], item[0]))]
    labels = by_frequency(counts[0])
    for count in counts[1:]:
        labels += [name for name in by_frequency(count) if name not in labels]
    return labels


def marking_preprocessor(kind_name: str, vocab_dir: str, architecture: str,
                         sequence_length: int, task_args: dict, marker_args: dict,
                         marking_layer, num_segments: int):
    """The architecture's own preprocessor for the kind, else ``marking_layer`` (with the
    marks of ``task_args``, defaults ``marker_args``) over the architecture's one-segment
    classification preprocessor (the other ``task_args`` go to it)."""
    from lmfactory import models
    from lmfactory.models.classifier_preprocessor import classifier_preprocessor

    own = models.get(architecture).preprocessor(kind_name)
    if own is not None:
        return own(vocab_dir, sequence_length, num_segments, dict(task_args))
    markers = {name: task_args.get(name, default) for name, default in marker_args.items()}
    head_args = {k: v for k, v in task_args.items() if k not in marker_args}
    inner = classifier_preprocessor(vocab_dir, architecture, sequence_length,
                                    num_text_features=1, task_args=head_args)
    return marking_layer(inner, **markers)


def relation_preprocessor(vocab_dir: str, architecture: str, sequence_length: int,
                          task_args: dict):
    """The architecture's own ``relation_classification`` preprocessor, else the marking
    layer over its one-segment classification preprocessor."""
    from lmfactory.models.tasks.relation_marking import (DEFAULT_MARKERS,
                                                         RelationMarkingPreprocessor)

    return marking_preprocessor(RELATION_CLASSIFICATION.name, vocab_dir, architecture,
                                sequence_length, task_args,
                                {name: DEFAULT_MARKERS[name] for name in MARKER_ARGS},
                                RelationMarkingPreprocessor, 3)


def _classification_task(task: dict) -> dict:
    """The record as the classification helpers read it (label through the vocabulary)."""
    return {**task, "kind": task_data.CLASSIFICATION}


def train(context) -> dict:
    """Fine-tunes the architecture's classification head on the marked sentences."""
    from lmfactory import models

    context.require_base_model("a relation classifier")
    config = context.config
    task = dict(config.task)
    labels = label_vocabulary([context.train_files, context.eval_files],
                              task["label_feature"])
    task.update(label_vocabulary=labels, num_classes=len(labels))
    head_args = {k: v for k, v in config.task_args.items() if k not in MARKER_ARGS}
    preprocessor = relation_preprocessor(context.vocab_dir, config.architecture,
                                         task["sequence_length"], dict(config.task_args))
    with context.strategy.scope():
        backbone = context.backbone()
        model = models.get(config.architecture).head("classification")(
            backbone, num_classes=len(labels), **head_args)
        context.knowledge_init(model)
        classification._compile(model, context.optimizer(), False, config.jit_compile,
                                config.architecture)
    return fit_marked_text(context, config, task, model, backbone, preprocessor,
                           task_data.LabelReader.for_task(_classification_task(task)))


def fit_marked_text(context, config, task: dict, model, backbone, preprocessor,
                    label_reader) -> dict:
    """Fits a marked-text kind's compiled ``model`` on the task records (texts through
    ``preprocessor``, labels through ``label_reader``); the kind's ``train`` result."""
    read = dict(preprocessor=preprocessor, text_features=task["text_features"],
                batch_size=config.batch_size, seed=config.seed,
                input_names=list(model.input.keys()), label_reader=label_reader)
    train_data = task_data.make_classification_dataset(
        context.train_files, shuffle=True, repeat=True, **read)
    eval_data = task_data.make_classification_dataset(
        context.eval_files, shuffle=False, repeat=True, **read)
    metrics = context.fit(model, train_data, eval_data)
    return dict(task_model=model, backbone=backbone, vocab_dir=context.vocab_dir,
                metrics=metrics, task=task, preprocessor=preprocessor)


def export(task_model, preprocessor, vocab_dir: str, model_config: dict,
           export_dir: str) -> None:
    """``serving_default(text, head, tail) -> {probabilities, label, label_name}``."""
    from lmfactory.components.trainer.serving import ClassifierServing, save_serving_module

    del vocab_dir
    task = model_config["task"]
    save_serving_module(ClassifierServing(preprocessor, task_model, task["text_features"],
                                          label_vocabulary=task["label_vocabulary"]),
                        export_dir)


def evaluate(model_uri: str, file_pattern: str, task: dict, config: dict) -> dict:
    return classification.evaluate_classifier(
        model_uri, file_pattern, task["text_features"], config.get("batch_size", 64),
        task=_classification_task(task))
