"""The TFX Trainer ``run_fn`` for every architecture and stage.

One entry point; the stage's task kind (components/tasks) trains it:

* pretraining records (their artifact holds ``pretraining_config.json``, CONTRACTS §3): the
  ``language_model`` kind trains the architecture's task model of the records' objective
  (BERT MLM+NSP, GPT-2 next-token, a distillation). With a ``base_model`` this is continued
  LM training (GPT-2 fine-tuning on a target corpus).
* raw task records (CONTRACTS §1): the kind of the task record (``classification``,
  ``regression``, ``tagging``, ``span_qa``, ``multiple_choice``) fine-tunes its head
  warm-started from ``base_model``.

Each kind's ``train`` gets a `StageContext`: the stage's settings and the steps every stage
shares (warm-started backbone, optimiser, checkpointed fit). Use it as
``tfx.components.Trainer(run_fn="lmfactory.components.trainer.run_fn.run_fn",
custom_config=..., base_model=...)``.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import os
import tempfile

import keras
import tensorflow as tf

from lmfactory import models
from lmfactory.components import tasks as task_kinds
from lmfactory.components.trainer.export import write_model_artifact
from lmfactory.components.trainer.model_artifact import (
    keras_dir_of, load_model_backbone, load_task_model, vocabulary_dir_of)
from lmfactory.components.trainer import fit_loop, training_curve
from lmfactory.components.trainer.config import TrainerConfig
from lmfactory.components.trainer.optimization import make_optimizer
from lmfactory.components.trainer.precision import precision_policy
from lmfactory.components.trainer.strategy import is_chief, make_strategy
from lmfactory.models.tokenizers import load_tokenizer

TRAINING_CURVE = "training_curve.json"  # in the Model artifact's keras/ folder
PRETRAINING_CONFIG = "pretraining_config.json"
LANGUAGE_MODEL = "language_model"  # the task kind that trains on pretraining records


def examples_uri_of(file_pattern: str) -> str:
    """``<uri>/Split-train/*`` -> ``<uri>``."""
    return os.path.dirname(os.path.dirname(file_pattern.rstrip("/")))


def run_fn(fn_args) -> None:
    config = TrainerConfig.from_dict(fn_args.custom_config or {})
    keras.utils.set_random_seed(config.seed)
    examples_uri = examples_uri_of(fn_args.train_files[0])
    strategy = make_strategy(config.strategy, config.tpu)
    task_kind = (config.task or {}).get("kind")  # a task record's kind wins (word_vectors)
    if task_kind is None and tf.io.gfile.exists(os.path.join(examples_uri, PRETRAINING_CONFIG)):
        task_kind = LANGUAGE_MODEL
    kind = task_kinds.get(task_kind or "classification")
    scratch = None
    if not is_chief(strategy):  # a non-chief worker: same steps, outputs in a scratch folder
        config = dataclasses.replace(config, checkpoint_dir=_checkpoint_dir(fn_args, config))
        fn_args, scratch = _scratch_outputs(fn_args)
    try:
        context = StageContext(fn_args, config, strategy, examples_uri)
        # The stage's models are built, trained and exported under runtime.precision.
        with precision_policy(config.precision):
            trained = kind.train(context)
            trained["vocab_dir"] = context.knowledge_vocabulary(trained["vocab_dir"])
            _write_outputs(fn_args, config, **trained)
    finally:
        if scratch:
            tf.io.gfile.rmtree(scratch)


def _scratch_outputs(fn_args):
    """``fn_args`` with the model and run folders in a temporary folder (a non-chief worker
    of a multi-worker run: only the chief writes the artifact), and that folder."""
    scratch = tempfile.mkdtemp(prefix="lmfactory-worker-outputs-")
    fn_args = copy.copy(fn_args)
    fn_args.serving_model_dir = os.path.join(scratch, "model", "Format-Serving")
    fn_args.model_run_dir = os.path.join(scratch, "model_run")
    return fn_args, scratch


class StageContext:
    """What a task kind's ``train`` (components/tasks) gets from the Trainer: the TFX
    ``fn_args``, the stage's `TrainerConfig`, the distribution strategy, the examples'
    folder, and the stage's shared steps (warm-started backbone, optimiser, checkpointed
    fit, the teacher of a distillation)."""

    def __init__(self, fn_args, config: TrainerConfig, strategy, examples_uri: str):
        self.fn_args, self.config, self.strategy = fn_args, config, strategy
        self.examples_uri = examples_uri

    def require_base_model(self, what: str) -> None:
        if not self.fn_args.base_model:
            raise ValueError(f"Fine-tuning {what} needs a base_model (the pretrained Model).")

    @property
    def vocab_dir(self) -> str:
        """The vocabulary of the base model (a fine-tuning stage); with a knowledge graph, a
        copy holding the graph's entities and linking settings (`knowledge_vocabulary`)."""
        return self.knowledge_vocabulary(vocabulary_dir_of(self.fn_args.base_model))

    @property
    def train_files(self) -> str:
        return self.fn_args.train_files[0]

    @property
    def eval_files(self) -> str:
        return self.fn_args.eval_files[0]

    def backbone(self, vocabulary_size: int | None = None):
        """The backbone (call inside ``strategy.scope()``): the base model's, warm-started,
        or a fresh one of the recipe's preset with ``vocabulary_size`` tokens."""
        base_model = self.fn_args.base_model
        if base_model:
            backbone, base_config = load_model_backbone(base_model)
            if base_config["architecture"] != self.config.architecture:
                raise ValueError(f"base_model is a {base_config['architecture']!r} model, the "
                                 f"recipe trains {self.config.architecture!r}")
            logging.info("Warm-started %s backbone from %s", self.config.architecture,
                         base_model)
            return backbone
        if vocabulary_size is None:
            vocabulary_size = load_tokenizer(self.vocab_dir).vocabulary_size()
        return models.build(self.config.architecture, self.config.preset,
                            **self.backbone_overrides(vocabulary_size))

    def backbone_overrides(self, vocabulary_size: int) -> dict:
        """A fresh backbone's arguments; with knowledge-graph embeddings, a backbone that
        takes ``entity_vocabulary_size`` / ``entity_dim`` gets their shape."""
        overrides = {**self.config.overrides, "vocabulary_size": vocabulary_size}
        embeddings = self.kg_embeddings
        if embeddings is not None:
            arguments = models.backbone_arguments(self.config.architecture)
            shape = dict(zip(("entity_vocabulary_size", "entity_dim"),
                             map(int, embeddings[0].shape)))
            overrides.update({key: value for key, value in shape.items()
                              if key in arguments})
        return overrides

    def optimizer(self):
        return _optimizer(self.config, self.fn_args.train_steps)

    def fit(self, task_model, train_data, eval_data) -> dict:
        return _fit(task_model, train_data, eval_data, self.fn_args, self.config)

    def teacher(self, student: str | None = None):
        """The teacher's trained task model (the Distiller component passes its Model
        artifact as ``custom_config["teacher_model"]``)."""
        if not self.config.teacher_model:
            raise ValueError(f"{student or self.config.architecture} distils a teacher: run "
                             f"it with the Distiller component (components/distiller), which "
                             f"takes the teacher Model artifact")
        return load_task_model(self.config.teacher_model)

    @property
    def kg_embeddings(self):
        """``(entity_embeddings [E, d], relation_embeddings [R, d])`` of the stage's
        knowledge-graph embeddings (the KnowledgeTrainer component passes the KGEmbeddings
        folder as ``custom_config["kg_embeddings"]``), or None without them."""
        if not self.config.kg_embeddings:
            return None
        if not hasattr(self, "_kg_embeddings"):
            from lmfactory.components.knowledge_graph.embedding_component import (
                load_embeddings)

            self._kg_embeddings = load_embeddings(self.config.kg_embeddings)
        return self._kg_embeddings

    @property
    def knowledge_graph(self):
        """The stage's `KnowledgeGraph` (``custom_config["knowledge_graph"]``, set by the
        KnowledgeTrainer component when it is given the graph), or None."""
        if not self.config.knowledge_graph:
            return None
        if not hasattr(self, "_knowledge_graph"):
            from lmfactory.components.knowledge_graph.graph import KnowledgeGraph

            self._knowledge_graph = KnowledgeGraph.load(self.config.knowledge_graph)
        return self._knowledge_graph

    def knowledge_vocabulary(self, vocab_dir: str) -> str:
        """``vocab_dir`` itself without a knowledge graph; with one, a copy of it (in the
        run's folder) plus the graph's entities and linking settings
        (models/knowledge `ENTITIES_FILE`, `LINKING_FILE`), so the model's preprocessing
        and the exported model link text as its training data was linked."""
        if not self.config.knowledge_graph:
            return vocab_dir
        from lmfactory.components.knowledge_graph.graph import add_linking_files

        destination = os.path.join(self.fn_args.model_run_dir, "knowledge_vocabulary")
        if os.path.normpath(vocab_dir) != os.path.normpath(destination):
            add_linking_files(vocab_dir, self.config.knowledge_graph, destination)
        return destination

    def knowledge_init(self, model) -> None:
        """Calls the architecture's ``knowledge_init(model, entity_embeddings,
        relation_embeddings)`` on a freshly built pretrainer or head when the stage has
        knowledge-graph embeddings (and the architecture registers one); otherwise does
        nothing."""
        init = models.get(self.config.architecture).knowledge_init
        embeddings = self.kg_embeddings if init is not None else None
        if embeddings is not None:
            init(model, embeddings[0], embeddings[1])
            logging.info("Initialised %s from the knowledge-graph embeddings in %s",
                         type(model).__name__, self.config.kg_embeddings)


def _optimizer(config, total_steps: int):
    """The recipe stage's optimiser (optimization.py): AdamW, warmup then linear or cosine
    decay, global-norm clipping."""
    return make_optimizer(
        config.learning_rate, total_steps, config.warmup_fraction, config.weight_decay,
        config.clip_norm, beta_1=config.adam_beta_1, beta_2=config.adam_beta_2,
        epsilon=config.adam_epsilon, decay=config.learning_rate_decay,
        final_learning_rate_fraction=config.final_learning_rate_fraction,
        optimizer=config.optimizer)


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
    """The checkpointed fit (fit_loop.py): exactly ``train_steps`` steps, validation at each
    checkpoint, progress lines, the best checkpoint kept when the recipe asks."""
    settings = fit_loop.FitSettings(
        total_steps=fn_args.train_steps, steps_per_checkpoint=config.steps_per_checkpoint,
        eval_steps=max(1, fn_args.eval_steps or 1), batch_size=config.batch_size,
        validate_checkpoints=config.validate_checkpoints, keep=config.keep,
        monitor=config.monitor, progress_seconds=config.progress_seconds)
    metrics, curve = fit_loop.fit_checkpointed(
        task_model, train_data, eval_data, settings, _checkpoint_dir(fn_args, config),
        log_dir=fn_args.model_run_dir)
    training_curve.save_curve(curve, os.path.join(
        keras_dir_of(fn_args.serving_model_dir), TRAINING_CURVE))
    return metrics


def _write_outputs(fn_args, config, task_model, backbone, vocab_dir, metrics, task,
                   preprocessor=None) -> None:
    """Writes the Model artifact (CONTRACTS §4) and the run's metrics."""
    with tf.io.gfile.GFile(os.path.join(fn_args.model_run_dir, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2, sort_keys=True)
    # TF Serving warm-up requests (from the eval records) for the models of stages that
    # start from a base model: the fine-tuning stages, whose model the Pusher pushes.
    warmup_files = (fn_args.eval_files or [None])[0] if fn_args.base_model else None
    write_model_artifact(
        fn_args.serving_model_dir, task_model, backbone, vocab_dir,
        {"preset": config.preset, "task": task, "train_metrics": metrics,
         "generation": config.generation}, preprocessor=preprocessor,
        eval_files=warmup_files, export=config.export_serving)


__all__ = ["run_fn", "examples_uri_of", "keras_dir_of", "load_model_backbone",
           "load_task_model"]
