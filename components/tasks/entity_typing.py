"""Entity typing in the DAG (ERNIE, Zhang et al. 2019 §3.5 and §4.1): records of a sentence,
one entity mention in it and the entity's types, several at once (built from KG-linked
text by components/knowledge_graph/typing_data.py) -> a multi-label classifier of raw
(text, mention).

§3.5 / Figure 3: the mention is highlighted by the mark token [ENT]
(models/tasks/relation_marking.py `EntityMarkingPreprocessor` writes it as one
single-token character of the vocabulary on both sides of the mention, as the released
code/run_typing.py does) and the sequence is classified from its [CLS] vector. The released
model (code/knowledge_bert/modeling.py ``BertForEntityTyping``) puts a linear layer on the
pooled [CLS] output and trains one sigmoid per type with binary cross-entropy
(``BCEWithLogitsLoss``); a type is predicted when its logit is above 0 (probability 0.5).
Here that is the architecture's ordinary ``classification`` head (dropout and a dense layer
on the pooled [CLS] vector) with K outputs trained on the binary cross-entropy of the
multi-hot types, so BERT and ERNIE fine-tune the same head on the same marked sequence
(ERNIE's preprocessor also links the marked text's entities to the KG). A head that
computes its own (softmax) loss cannot be trained so and is refused with a one-line error.
An architecture may register its own ``entity_typing`` preprocessor
(`Architecture.preprocessors`).

The type set is read from the ingested records (train's most frequent first) and stored in
the task record as ``label_vocabulary``. Metrics (through the exported SavedModel on the raw
strings): strict accuracy, loose macro-F1 and loose micro-F1 of Ling & Weld (2012), the
figures of ERNIE's Tables 2-3 (`metrics.typing_metrics`), with their precisions and recalls.

Parts:
    record parsing: components.knowledge_graph.typing_data.build,
        components.tasks.entity_typing.MultiHotLabels
    head: components.tasks.entity_typing.typing_head, models.registry.Architecture.head
    preprocessor: models.tasks.relation_marking.EntityMarkingPreprocessor
    training step: components.tasks.entity_typing.train,
        components.tasks.relation_classification.fit_marked_text
    serving export: components.tasks.entity_typing.export,
        components.trainer.serving.MultiLabelServing
    metrics: components.tasks.entity_typing.evaluate,
        components.evaluator.metrics.typing_metrics
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from lmfactory.components.evaluator import metrics as metric_lib
from lmfactory.components.tasks import classification, registry
from lmfactory.components.tasks.relation_classification import (
    check_marked_text_recipe, fit_marked_text, label_vocabulary, marked_text_record,
    marking_preprocessor)
from lmfactory.components.trainer import task_data

MARKER_ARG = "entity_marker"
THRESHOLD = 0.5  # a type is predicted above this probability (logit 0)
ENTITY_TYPING = registry.register(registry.TaskKind(
    name="entity_typing", module=__name__,
    metrics=("loose_micro_f1", "loose_macro_f1", "strict_accuracy"), official_metrics=(),
    task_args=None, head="classification",
    required_record_keys=("kind", "sequence_length", "text_features", "label_feature")))


def task_record(kind, finetuning: dict, source: dict) -> dict:
    del source
    return marked_text_record(kind, finetuning, "types")


def check_recipe(check, recipe: dict, arch) -> None:
    del arch
    check_marked_text_recipe(check, recipe, "the text, the entity mention", (MARKER_ARG,))


def typing_preprocessor(vocab_dir: str, architecture: str, sequence_length: int,
                        task_args: dict):
    """The architecture's own ``entity_typing`` preprocessor, else the mention-marking
    layer over its one-segment classification preprocessor."""
    from lmfactory.models.tasks.relation_marking import (DEFAULT_ENTITY_MARKER,
                                                         EntityMarkingPreprocessor)

    return marking_preprocessor(ENTITY_TYPING.name, vocab_dir, architecture, sequence_length,
                                task_args, {MARKER_ARG: DEFAULT_ENTITY_MARKER},
                                EntityMarkingPreprocessor, 2)


def typing_head(architecture: str, backbone, num_types: int, task_args: dict):
    """The architecture's classification head with one output per type; a head computing its
    own loss (a softmax objective) cannot take the sigmoid loss: a one-line ValueError."""
    from lmfactory import models

    head_args = {k: v for k, v in task_args.items() if k != MARKER_ARG}
    model = models.get(architecture).head("classification")(backbone, num_classes=num_types,
                                                            **head_args)
    if classification.computes_own_loss(model):
        raise ValueError(f"The {architecture} classification head computes its own loss; "
                         f"entity typing trains a sigmoid per type (binary cross-entropy)")
    return model


class MultiHotLabels:
    """Parses the types of a batch of records: ``spec`` and ``__call__(parsed)`` -> float32
    [B, K] multi-hot over ``label_vocabulary`` (types separated by whitespace; a type outside
    the vocabulary fails the input pipeline with a message naming it)."""

    def __init__(self, label_feature: str, label_vocabulary):
        self.label_feature = label_feature
        self.label_vocabulary = list(label_vocabulary)
        self.spec = {label_feature: tf.io.FixedLenFeature([], tf.string)}
        self._table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(self.label_vocabulary),
                tf.range(len(self.label_vocabulary), dtype=tf.int64)), default_value=-1)

    def __call__(self, parsed: dict):
        ids = self._table.lookup(tf.strings.split(tf.strings.strip(
            parsed[self.label_feature])))
        check = tf.debugging.assert_non_negative(
            ids.flat_values, message=f"a {self.label_feature!r} type is not one of the "
                                     f"label_vocabulary {self.label_vocabulary}")
        with tf.control_dependencies([check]):
            hot = tf.one_hot(ids, len(self.label_vocabulary), dtype=tf.float32)
            return tf.minimum(tf.reduce_sum(hot, axis=1), 1.0)


def train(context) -> dict:
    """Fine-tunes the classification head's K sigmoid outputs on the marked sentences."""
    context.require_base_model("an entity typer")
    config = context.config
    task = dict(config.task)
    labels = label_vocabulary([context.train_files, context.eval_files],
                              task["label_feature"], multi_label=True, what="entity typing")
    task.update(label_vocabulary=labels, num_classes=len(labels))
    preprocessor = typing_preprocessor(context.vocab_dir, config.architecture,
                                       task["sequence_length"], dict(config.task_args))
    with context.strategy.scope():
        backbone = context.backbone()
        model = typing_head(config.architecture, backbone, len(labels),
                            dict(config.task_args))
        context.knowledge_init(model)
        model.compile(optimizer=context.optimizer(),
                      loss=keras.losses.BinaryCrossentropy(from_logits=True),
                      metrics=[keras.metrics.BinaryAccuracy(name="binary_accuracy",
                                                            threshold=0.0)],
                      jit_compile=config.jit_compile)
    return fit_marked_text(context, config, task, model, backbone, preprocessor,
                           MultiHotLabels(task["label_feature"], labels))


def export(task_model, preprocessor, vocab_dir: str, model_config: dict,
           export_dir: str) -> None:
    """``serving_default(text, mention) -> {probabilities, labels}``."""
    from lmfactory.components.trainer.serving import MultiLabelServing, save_serving_module

    del vocab_dir
    task = model_config["task"]
    save_serving_module(MultiLabelServing(preprocessor, task_model, task["text_features"],
                                          task["label_vocabulary"], THRESHOLD), export_dir)


def evaluate(model_uri: str, file_pattern: str, task: dict, config: dict) -> dict:
    """Scores the exported ``serving_default`` on the raw (text, mention) of the records:
    `metrics.typing_metrics` of its probabilities above 0.5 against the records' types (a
    type outside the model's vocabulary is a true type it never predicts: counted in
    ``types_outside_vocabulary``); the same figures with ``_at_least_one`` when the most
    probable type is always predicted too."""
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops the SavedModel uses)

    from lmfactory.components.trainer.serving import serving_dir_of

    serve = tf.saved_model.load(serving_dir_of(model_uri)).signatures["serving_default"]
    features, label_feature = task["text_features"], task["label_feature"]
    names = list(task["label_vocabulary"])
    spec = {name: tf.io.FixedLenFeature([], tf.string) for name in features + [label_feature]}
    true_sets, probabilities = [], []
    for batch in task_data.read_records(file_pattern).batch(config.get("batch_size", 64)).map(
            lambda s: tf.io.parse_example(s, spec)):
        outputs = serve(**{name: batch[name] for name in features})
        probabilities.append(outputs["probabilities"].numpy())
        true_sets += [set(value.decode("utf-8").split())
                      for value in batch[label_feature].numpy()]
    predicted = np.concatenate(probabilities) > THRESHOLD
    outside = sorted(set().union(*true_sets) - set(names))
    columns = names + outside  # the model never predicts the outside ones
    index = {name: i for i, name in enumerate(columns)}
    labels = np.zeros((len(true_sets), len(columns)), dtype=bool)
    for row, types in enumerate(true_sets):
        labels[row, [index[name] for name in types]] = True
    padded = np.zeros_like(labels)
    padded[:, :len(names)] = predicted
    results = metric_lib.typing_metrics(labels, padded)
    # Supplementary: the inference rule of Shimaoka et al. (2017), every mention gets at
    # least its most probable type (the line ERNIE's eval_typing.py leaves commented out).
    padded[np.arange(len(padded)), np.concatenate(probabilities).argmax(axis=1)] = True
    results.update({f"{name}_at_least_one": value for name, value in
                    metric_lib.typing_metrics(labels, padded).items()
                    if name in ENTITY_TYPING.metrics})
    results["types_outside_vocabulary"] = len(outside)
    return results
