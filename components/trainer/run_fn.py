"""The TFX Trainer ``run_fn`` for every architecture and stage.

One entry point, two stages told apart by the input ``Examples``:

* pretraining records (their artifact holds ``pretraining_config.json``, CONTRACTS §3): train
  the architecture's language-model objective (BERT MLM+NSP, GPT-2 next-token). With a
  ``base_model`` this is continued LM training (GPT-2 fine-tuning on a target corpus).
* raw task records (CONTRACTS §1): fine-tune a classifier (or, for a ``regression`` task,
  its one-output form on the mean squared error) warm-started from ``base_model``;
  a task of another kind (``tagging``, ``span_qa``, ``multiple_choice``) is trained by its
  kind's ``train`` (components/tasks) through a `StageContext`.

Use it as ``tfx.components.Trainer(run_fn="lmfactory.components.trainer.run_fn.run_fn",
custom_config=..., base_model=...)``.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import math
import os

import keras
import tensorflow as tf

from lmfactory import models
from lmfactory.components.pretraining_data import features as pretraining_features
from lmfactory.components.trainer.model_artifact import (
    keras_dir_of, load_model_backbone, load_task_model, vocabulary_dir_of, write_model_artifact)
from lmfactory.components.trainer import task_data, training_curve
from lmfactory.components.trainer.config import TrainerConfig
from lmfactory.components.trainer.optimization import make_optimizer
from lmfactory.components.trainer.strategy import make_strategy
from lmfactory.components import tasks as task_kinds
from lmfactory.models.classifier_preprocessor import classifier_preprocessor
from lmfactory.models.tokenizers import load_tokenizer

VOCABULARY_DIR = "vocabulary"
TRAINING_CURVE = "training_curve.json"  # in the Model artifact's keras/ folder
PRETRAINING_CONFIG = "pretraining_config.json"


def examples_uri_of(file_pattern: str) -> str:
    """``<uri>/Split-train/*`` -> ``<uri>``."""
    return os.path.dirname(os.path.dirname(file_pattern.rstrip("/")))


def run_fn(fn_args) -> None:
    config = TrainerConfig.from_dict(fn_args.custom_config or {})
    keras.utils.set_random_seed(config.seed)
    examples_uri = examples_uri_of(fn_args.train_files[0])
    strategy = make_strategy(config.strategy, config.tpu)
    if tf.io.gfile.exists(os.path.join(examples_uri, PRETRAINING_CONFIG)):
        trained = _train_language_model(fn_args, config, examples_uri, strategy)
    elif (config.task or {}).get("kind") in task_kinds.names():
        trained = task_kinds.get(config.task["kind"]).train(
            StageContext(fn_args, config, strategy))
    else:
        trained = _train_classifier(fn_args, config, strategy)
    _write_outputs(fn_args, config, **trained)


class StageContext:
    """What a task kind's ``train`` (components/tasks) gets from the Trainer: the TFX
    ``fn_args``, the stage's `TrainerConfig`, the distribution strategy, and the stage's
    shared steps (warm-started backbone, optimiser, checkpointed fit)."""

    def __init__(self, fn_args, config: TrainerConfig, strategy):
        self.fn_args, self.config, self.strategy = fn_args, config, strategy
        if not fn_args.base_model:
            raise ValueError(f"Fine-tuning a {config.task['kind']} task needs a base_model "
                             f"(the pretrained Model).")
        self.vocab_dir = vocabulary_dir_of(fn_args.base_model)

    @property
    def train_files(self) -> str:
        return self.fn_args.train_files[0]

    @property
    def eval_files(self) -> str:
        return self.fn_args.eval_files[0]

    def backbone(self):
        """The pretrained backbone (call inside ``strategy.scope()``)."""
        return _backbone(self.config, load_tokenizer(self.vocab_dir).vocabulary_size(),
                         self.fn_args.base_model)

    def optimizer(self):
        return _optimizer(self.config, self.fn_args.train_steps)

    def fit(self, task_model, train_data, eval_data) -> dict:
        return _fit(task_model, train_data, eval_data, self.fn_args, self.config)


def _train_language_model(fn_args, config, examples_uri, strategy) -> dict:
    data_config = pretraining_features.read_pretraining_config(examples_uri)
    vocab_dir = os.path.join(examples_uri, VOCABULARY_DIR)
    task_cls = models.get(config.architecture).pretrainer(data_config["objective"])
    vocabulary_size = load_tokenizer(vocab_dir).vocabulary_size()
    with strategy.scope():
        if getattr(task_cls, "needs_teacher", False):
            task_model, backbone = _distiller(task_cls, config, vocabulary_size)
        else:
            backbone = _backbone(config, vocabulary_size, fn_args.base_model)
            task_model = task_cls(backbone, **_schedule_args(task_cls, config.task_args,
                                                             fn_args.train_steps))
        task_model.compile(optimizer=_optimizer(config, fn_args.train_steps),
                           jit_compile=config.jit_compile)
    batch = dict(batch_size=config.batch_size, seed=config.seed)
    train_data = pretraining_features.make_dataset(
        fn_args.train_files[0], data_config, shuffle=True, repeat=True, **batch)
    eval_data = pretraining_features.make_dataset(
        fn_args.eval_files[0], data_config, shuffle=False, repeat=True, **batch)
    metrics = _fit(task_model, train_data, eval_data, fn_args, config)
    return dict(task_model=task_model, backbone=backbone, vocab_dir=vocab_dir, metrics=metrics,
                task={"kind": "language_model", "objective": data_config["objective"],
                      "sequence_length": data_config["max_seq_length"]})


def _schedule_args(task_cls, task_args: dict, train_steps: int) -> dict:
    """``task_args`` plus ``total_steps`` = the trainer's step count for a task model whose
    loss follows the training's progress (e.g. `CharTransformerLM`'s intermediate losses,
    phased out over training, Al-Rfou et al. 2018 §2.2), unless the recipe sets it."""
    if "total_steps" in inspect.signature(task_cls.__init__).parameters:
        return {"total_steps": int(train_steps), **task_args}
    return dict(task_args)


def _distiller(task_cls, config, vocabulary_size: int):
    """A distillation task model: a fresh student (this recipe's architecture and preset)
    taught by the trained task model of the teacher Model artifact (any architecture; e.g. a
    `BertPretrainer`, whose masked-LM head gives the soft targets)."""
    teacher = _teacher(config, task_cls.__name__)
    teacher_vocabulary = backbone_vocabulary_size(teacher.backbone)
    if teacher_vocabulary != vocabulary_size:
        raise ValueError(f"The teacher's vocabulary ({teacher_vocabulary} tokens) differs "
                         f"from the examples' ({vocabulary_size})")
    student = models.build(config.architecture, config.preset,
                           **_backbone_overrides(config, vocabulary_size))
    if hasattr(task_cls, "initialize_student"):
        task_cls.initialize_student(student, teacher.backbone)
    return task_cls(student, teacher=teacher, **config.task_args), student


def _teacher(config, student: str):
    """The teacher's trained task model (the Distiller component passes its Model artifact
    as ``custom_config["teacher_model"]``)."""
    if not config.teacher_model:
        raise ValueError(f"{student} distils a teacher: run it with the Distiller component "
                         f"(components/distiller), which takes the teacher Model artifact")
    return load_task_model(config.teacher_model)


def _train_classifier(fn_args, config, strategy) -> dict:
    """Fine-tunes the architecture's classifier on raw task records. Its inputs come from
    the architecture's preprocessor (`models.classifier_preprocessor`: cls/sep packing, or
    an architecture's own, like GPT-1's §3.3 transformations); the recipe's
    ``finetuning.task_args`` go to the classifier (e.g. GPT-1's ``lm_weight``) and to its
    preprocessor. A classifier with its own ``compute_loss`` (GPT-1's L2 + λ L1) trains on
    it; any other on the cross-entropy of its logits.

    A ``regression`` task (GLUE's STS-B) trains the same classifier with one output
    (``num_classes=1``) on the mean squared error between it and the float label."""
    if not fn_args.base_model:
        raise ValueError("Fine-tuning a classifier needs a base_model (the pretrained Model).")
    task = config.task
    regression = task.get("kind") == task_data.REGRESSION
    num_outputs = 1 if regression else task["num_classes"]
    architecture = models.get(config.architecture)
    if architecture.classifier_cls is None:
        raise ValueError(f"Architecture {config.architecture!r} has no classifier head")
    vocab_dir = vocabulary_dir_of(fn_args.base_model)
    preprocessor = classifier_preprocessor(
        vocab_dir, config.architecture, task["sequence_length"],
        num_text_features=len(task["text_features"]),
        task_args=None if config.teacher_model else config.task_args)
    with strategy.scope():
        backbone = _backbone(config, load_tokenizer(vocab_dir).vocabulary_size(),
                             fn_args.base_model)
        optimizer = _optimizer(config, fn_args.train_steps)
        if config.teacher_model:
            # Task-specific distillation (TinyBERT §3.2): the task model trains the student
            # against the fine-tuned teacher; its `classifier` is what gets exported.
            if regression:
                raise ValueError("Task-specific distillation trains classifiers; a regression "
                                 "task cannot use it")
            if architecture.classifier_distiller_cls is None:
                raise ValueError(f"Architecture {config.architecture!r} has no task-specific "
                                 f"distillation")
            task_model = architecture.classifier_distiller_cls(
                backbone, teacher=_teacher(config, config.architecture),
                num_classes=task["num_classes"], **config.task_args)
            task_model.compile(optimizer=optimizer, jit_compile=config.jit_compile)
            classifier = task_model.classifier
        else:
            task_model = classifier = architecture.classifier_cls(
                backbone, num_classes=num_outputs, **config.task_args)
            if regression and computes_own_loss(classifier):
                raise ValueError(f"The {config.architecture} classifier computes its own "
                                 f"classification loss; it cannot fine-tune a regression task")
            if regression:
                task_model.compile(
                    optimizer=optimizer, loss=keras.losses.MeanSquaredError(),
                    metrics=[keras.metrics.MeanAbsoluteError(name="mae")],
                    jit_compile=config.jit_compile)
            elif computes_own_loss(classifier):
                task_model.compile(optimizer=optimizer, jit_compile=config.jit_compile)
            else:
                task_model.compile(
                    optimizer=optimizer,
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                    metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
                    jit_compile=config.jit_compile)
    read = dict(preprocessor=preprocessor, text_features=task["text_features"],
                batch_size=config.batch_size, seed=config.seed,
                input_names=list(classifier.input.keys()),
                label_reader=task_data.LabelReader.for_task(task))
    train_data = task_data.make_classification_dataset(
        fn_args.train_files[0], shuffle=True, repeat=True, **read)
    eval_data = task_data.make_classification_dataset(
        fn_args.eval_files[0], shuffle=False, repeat=True, **read)
    metrics = _fit(task_model, train_data, eval_data, fn_args, config)
    return dict(task_model=classifier, backbone=backbone, vocab_dir=vocab_dir, metrics=metrics,
                task=dict(task), preprocessor=preprocessor)


def computes_own_loss(model) -> bool:
    """Whether ``model`` overrides Keras's ``compute_loss`` (computes its whole loss and
    metrics itself, so it is compiled with an optimizer and no loss)."""
    return type(model).compute_loss is not keras.Model.compute_loss


def _optimizer(config, total_steps: int):
    """The recipe stage's optimiser (optimization.py): AdamW, warmup then linear or cosine
    decay, global-norm clipping."""
    return make_optimizer(
        config.learning_rate, total_steps, config.warmup_fraction, config.weight_decay,
        config.clip_norm, beta_1=config.adam_beta_1, beta_2=config.adam_beta_2,
        epsilon=config.adam_epsilon, decay=config.learning_rate_decay,
        final_learning_rate_fraction=config.final_learning_rate_fraction)


def _backbone(config, vocabulary_size: int, base_model: str | None):
    """Builds the backbone; warm-starts it from ``base_model`` when one is given."""
    if base_model:
        backbone, base_config = load_model_backbone(base_model)
        if base_config["architecture"] != config.architecture:
            raise ValueError(f"base_model is a {base_config['architecture']!r} model, the recipe "
                             f"trains {config.architecture!r}")
        logging.info("Warm-started %s backbone from %s", config.architecture, base_model)
        return backbone
    return models.build(config.architecture, config.preset, **_backbone_overrides(
        config, vocabulary_size))


def _backbone_overrides(config, vocabulary_size: int) -> dict:
    return {**config.overrides, "vocabulary_size": vocabulary_size}


def _checkpoint_dir(fn_args, config) -> str:
    """A folder that survives a killed run, so the re-run resumes from the last checkpoint.

    TFX gives each execution fresh output folders; the backup lives beside them, keyed by the
    training inputs and settings, so only a re-run of the same training resumes from it.
    """
    if config.checkpoint_dir:
        return config.checkpoint_dir
    key = json.dumps({"train": fn_args.train_files, "base": fn_args.base_model,
                      "steps": fn_args.train_steps, "config": fn_args.custom_config},
                     sort_keys=True, default=str)
    component_dir = os.path.dirname(os.path.dirname(fn_args.model_run_dir.rstrip("/")))
    return os.path.join(component_dir, "backup", hashlib.sha256(key.encode()).hexdigest()[:16])


def _fit(task_model, train_data, eval_data, fn_args, config) -> dict:
    # One Keras "epoch" per checkpoint interval; the step count is kept as close to the
    # requested one as whole intervals allow.
    epochs = math.ceil(fn_args.train_steps / config.steps_per_checkpoint)
    steps_per_epoch = math.ceil(fn_args.train_steps / epochs)
    backup_dir = _checkpoint_dir(fn_args, config)
    # The curve is saved beside the checkpoint (before it at each epoch end), so a resumed
    # run continues it; it ends up in the Model artifact for the Evaluator's report.
    curve = training_curve.TrainingCurve(
        training_curve.default_interval(epochs * steps_per_epoch),
        state_path=os.path.join(backup_dir, TRAINING_CURVE))
    callbacks = [
        curve,
        keras.callbacks.BackupAndRestore(backup_dir),
        keras.callbacks.TensorBoard(log_dir=fn_args.model_run_dir, update_freq="epoch"),
    ]
    logging.info("Training %d steps (%d checkpoints of %d steps), global batch %d",
                 epochs * steps_per_epoch, epochs, steps_per_epoch, config.batch_size)
    task_model.fit(train_data, epochs=epochs, steps_per_epoch=steps_per_epoch,
                   callbacks=callbacks, verbose=2)
    training_curve.save_curve(curve.curve, os.path.join(
        keras_dir_of(fn_args.serving_model_dir), TRAINING_CURVE))
    eval_steps = max(1, fn_args.eval_steps or 1)
    metrics = task_model.evaluate(eval_data, steps=eval_steps, return_dict=True, verbose=0)
    metrics = {name: float(value) for name, value in metrics.items()}
    logging.info("Evaluation after training: %s", metrics)
    return metrics


def _write_outputs(fn_args, config, task_model, backbone, vocab_dir, metrics, task,
                   preprocessor=None) -> None:
    """Writes the Model artifact (CONTRACTS §4) and the run's metrics."""
    with tf.io.gfile.GFile(os.path.join(fn_args.model_run_dir, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2, sort_keys=True)
    write_model_artifact(
        fn_args.serving_model_dir, task_model, backbone, vocab_dir,
        {"preset": config.preset, "task": task, "train_metrics": metrics,
         "generation": config.generation}, preprocessor=preprocessor)


def backbone_vocabulary_size(backbone) -> int:
    return int(backbone.get_config()["vocabulary_size"])


__all__ = ["run_fn", "examples_uri_of", "keras_dir_of", "load_model_backbone",
           "load_task_model"]
