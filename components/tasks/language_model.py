"""Language-model training in the DAG: pretraining records (CONTRACTS §3) -> the task model
the architecture trains on the records' objective (`Architecture.pretrainer`): BERT's
MLM+NSP, RoBERTa's MLM, ELECTRA's replaced-token detection, a distillation from a teacher,
GPT's next-token loss. The same kind is the recipe task ``causal_lm``: continued next-token
training of a pretrained decoder on a target corpus.

A model trained on a causal objective (left-to-right next-token targets) is exported as a
generator (``serving_default`` with sampling inputs, and ``generate_default``) and
evaluated by perplexity (and bits per character on a byte vocabulary) on held-out records;
a model of an objective another kind owns (`registry.serving_kind`, e.g. ``skipgram`` /
``cbow`` -> ``word_vectors``) is exported and evaluated by that kind; any other language
model, and a bare imported backbone (kind ``encoder``), is exported as an encoder
(``serving_default(text) -> pooled_output, sequence_output``) and has no evaluation of its
own.

Parts:
    record parsing: components.pretraining_data.features,
        components.pretraining_data.objectives
    head: models.registry.Architecture.pretrainer
    preprocessor: models.tokenizers.load_tokenizer,
        models.classifier_preprocessor.classifier_preprocessor
    training step: components.tasks.language_model.train
    serving export: components.tasks.language_model.export,
        components.tasks.language_model_serving.export_generator,
        components.trainer.serving.EncoderServing
    metrics: components.tasks.language_model.evaluate_language_model,
        components.evaluator.metrics.perplexity
"""

from __future__ import annotations

import inspect
import os

import tensorflow as tf

from lmfactory.components.evaluator import metrics as metric_lib
from lmfactory.components.pretraining_data import features as pretraining_features
from lmfactory.components.pretraining_data import objectives
from lmfactory.components.tasks import registry

LANGUAGE_MODEL = registry.register(registry.TaskKind(
    name="language_model", recipe_task="causal_lm", module=__name__,
    metrics=("perplexity", "bits_per_character"), official_metrics=(), task_args=None,
    data_section="target_corpus"))
# A bare backbone (an imported checkpoint, CheckpointImporter): served as an encoder.
ENCODER = registry.register(registry.TaskKind(
    name="encoder", module=__name__, metrics=(), official_metrics=(), in_recipes=False))


def is_causal(objective: str | None) -> bool:
    """Whether records of ``objective`` train left-to-right next-token prediction (the
    objective registry's ``causal``); False for a model without an objective."""
    return bool(objective) and objectives.get(objective).causal


def task_record(kind, finetuning: dict, source: dict) -> None:
    """A language model's task record is written by `train` from its records' objective."""
    del kind, finetuning, source
    return None


def check_recipe(check, recipe: dict, arch) -> None:
    objective = (recipe.get("objective") or {}).get("name")
    if not arch.has_head("causal_lm") or recipe["pretraining"].get("init_checkpoint") \
            or not is_causal(objective):
        check.fail("finetuning.task", "causal_lm fine-tuning needs a decoder")
    check.source("data.target_corpus")


def _schedule_args(task_cls, task_args: dict, train_steps: int) -> dict:
    """``task_args`` plus ``total_steps`` = the trainer's step count for a task model whose
    loss follows the training's progress (e.g. `CharTransformerLM`'s intermediate losses,
    phased out over training, Al-Rfou et al. 2018 §2.2), unless the recipe sets it."""
    if "total_steps" in inspect.signature(task_cls.__init__).parameters:
        return {"total_steps": int(train_steps), **task_args}
    return dict(task_args)


def _corpus_args(task_cls, data_config: dict) -> dict:
    """``token_counts`` (the corpus count of each id, recorded by the objective, e.g. for a
    negative-sampling noise distribution) for a task model that takes them."""
    if "token_counts" in inspect.signature(task_cls.__init__).parameters \
            and "token_counts" in data_config:
        return {"token_counts": data_config["token_counts"]}
    return {}


def _stream_args(task_cls, objective: str, batch_size: int) -> dict:
    """``stream_batch_size`` = the batch size for a task model that carries state across the
    batches of an objective declaring ``ordered_streams`` (row b of batch k + 1 continues
    row b of batch k, e.g. a segment-level recurrence memory)."""
    if objectives.get(objective).ordered_streams and \
            "stream_batch_size" in inspect.signature(task_cls.__init__).parameters:
        return {"stream_batch_size": int(batch_size)}
    return {}


def _distiller(context, task_cls, vocabulary_size: int):
    """A distillation task model: a fresh student (this recipe's architecture and preset)
    taught by the trained task model of the teacher Model artifact (any architecture; e.g. a
    `BertPretrainer`, whose masked-LM head gives the soft targets)."""
    from lmfactory import models

    config = context.config
    teacher = context.teacher(task_cls.__name__)
    teacher_vocabulary = int(teacher.backbone.get_config()["vocabulary_size"])
    if teacher_vocabulary != vocabulary_size:
        raise ValueError(f"The teacher's vocabulary ({teacher_vocabulary} tokens) differs "
                         f"from the examples' ({vocabulary_size})")
    student = models.build(config.architecture, config.preset,
                           **context.backbone_overrides(vocabulary_size))
    if hasattr(task_cls, "initialize_student"):
        task_cls.initialize_student(student, teacher.backbone)
    return task_cls(student, teacher=teacher, **config.task_args), student


def _carry_task_weights(context, task_model, objective: str) -> None:
    """Continued training on the objective the base model was trained on (a causal LM on a
    target corpus, ULMFiT's target-task LM fine-tuning): the whole task model carries over,
    its own weights beyond the backbone's too (e.g. AWD-LSTM's output bias), not only the
    backbone that ``context.backbone`` restores (a non-trainable weight of another shape,
    a state per stream of another batch size, stays as built). A base model trained on
    another objective, or whose task model differs in class or trainable weights, leaves the
    task model as built (the backbone restored, the rest fresh) and says so in the log."""
    from absl import logging

    from lmfactory.components.trainer.model_artifact import load_task_model, read_model_config

    base = context.fn_args.base_model
    if not base or (read_model_config(base).get("task") or {}).get("objective") != objective:
        return
    trained = load_task_model(base)

    def shapes(weights):
        return [tuple(w.shape) for w in weights]

    if type(trained) is not type(task_model) or len(trained.weights) != len(task_model.weights) \
            or shapes(trained.trainable_weights) != shapes(task_model.trainable_weights):
        logging.warning("Continued %s training: the base model's task model (%s) does not "
                        "match %s; only its backbone is restored", objective,
                        type(trained).__name__, type(task_model).__name__)
        return
    # A state kept per stream (e.g. an LSTM's carried state, [stream_batch_size, units])
    # differs with the batch size; it is reset when the streams start, so it stays as built.
    for target, source in zip(task_model.weights, trained.weights):
        if tuple(target.shape) == tuple(source.shape):
            target.assign(source)


def train(context) -> dict:
    """Trains the architecture's task model of the records' objective (with a ``base_model``:
    continued training, e.g. a decoder on a target corpus)."""
    from lmfactory import models
    from lmfactory.models.tokenizers import load_tokenizer

    config, fn_args = context.config, context.fn_args
    data_config = pretraining_features.read_pretraining_config(context.examples_uri)
    vocab_dir = pretraining_features.vocabulary_dir(context.examples_uri)
    task_cls = models.get(config.architecture).pretrainer(data_config["objective"])
    vocabulary_size = load_tokenizer(vocab_dir).vocabulary_size()
    with context.strategy.scope():
        if getattr(task_cls, "needs_teacher", False):
            task_model, backbone = _distiller(context, task_cls, vocabulary_size)
        else:
            backbone = context.backbone(vocabulary_size)
            task_model = task_cls(backbone, **_schedule_args(task_cls, config.task_args,
                                                             fn_args.train_steps),
                                  **_corpus_args(task_cls, data_config),
                                  **_stream_args(task_cls, data_config["objective"],
                                                 config.batch_size))
            _carry_task_weights(context, task_model, data_config["objective"])
            context.knowledge_init(task_model)
        task_model.compile(optimizer=context.optimizer(), jit_compile=config.jit_compile)
    batch = dict(batch_size=config.batch_size, seed=config.seed)
    ordered = objectives.get(data_config["objective"]).ordered_streams  # keep stream order
    train_data = pretraining_features.make_dataset(
        context.train_files, data_config, shuffle=not ordered, repeat=True, training=True,
        **batch)
    eval_data = pretraining_features.make_dataset(
        context.eval_files, data_config, shuffle=False, repeat=True, **batch)
    metrics = context.fit(task_model, train_data, eval_data)
    return dict(task_model=task_model, backbone=backbone, vocab_dir=vocab_dir, metrics=metrics,
                task={"kind": LANGUAGE_MODEL.name, "objective": data_config["objective"],
                      "sequence_length": data_config["max_seq_length"]})


def export(task_model, preprocessor, vocab_dir: str, model_config: dict,
           export_dir: str) -> None:
    """A causal LM: the generation signatures (language_model_serving.py); any other: the
    backbone's encodings of raw text through the architecture's packing."""
    from lmfactory.components.tasks.language_model_serving import export_generator
    from lmfactory.components.trainer.serving import EncoderServing, save_serving_module
    from lmfactory.models.classifier_preprocessor import classifier_preprocessor

    task = model_config["task"]
    owner = registry.serving_kind(task.get("objective"))
    if owner is not None:  # e.g. word vectors: served as the owning kind serves them
        owner.export(task_model, preprocessor, vocab_dir, model_config, export_dir)
        return
    del preprocessor
    if is_causal(task.get("objective")):
        export_generator(task_model, vocab_dir, model_config, export_dir)
        return
    backbone = getattr(task_model, "backbone", task_model)
    sequence_length = min(task.get("sequence_length", 128),
                          backbone.get_config().get("max_sequence_length", 512))
    save_serving_module(EncoderServing(classifier_preprocessor(
        vocab_dir, model_config["architecture"], sequence_length), backbone), export_dir)


def evaluate(model_uri: str, file_pattern: str, task: dict, config: dict) -> dict:
    owner = registry.serving_kind(task.get("objective"))
    if owner is not None:
        return owner.evaluate(model_uri, file_pattern, task, config)
    if not is_causal(task.get("objective")):
        raise ValueError(f"No evaluation defined for task {task}")
    return evaluate_language_model(model_uri, file_pattern, config.get("batch_size", 16),
                                   config.get("max_batches"))


def evaluate_language_model(model_uri: str, file_pattern: str, batch_size: int = 16,
                            max_batches: int | None = None) -> dict:
    """Perplexity (and bits per character on a byte vocabulary) of the trained Keras model on
    held-out pretraining-format records."""
    import lmfactory.models  # noqa: F401  (registers the serialised classes)
    from lmfactory.components.trainer.model_artifact import KERAS_DIR, TASK_MODEL, load_keras_file

    examples_uri = os.path.dirname(os.path.dirname(file_pattern))
    data_config = pretraining_features.read_pretraining_config(examples_uri)
    model = load_keras_file(os.path.join(model_uri, KERAS_DIR, TASK_MODEL))
    # A model that carries its state across the ordered streams' batches (e.g. an LSTM's
    # state over the whole held-out stream) reads as many streams as it was built for.
    batch_size = getattr(model, "stream_batch_size", None) or batch_size
    dataset = pretraining_features.make_dataset(file_pattern, data_config,
                                                batch_size=batch_size, shuffle=False,
                                                repeat=False)
    total_nll, total_tokens = 0.0, 0.0
    for step, (x, y, weight) in enumerate(dataset):
        if max_batches is not None and step >= max_batches:
            break
        logits = tf.cast(model(x, training=False), tf.float32)
        nll = tf.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        weight = tf.cast(weight, tf.float32)
        total_nll += float(tf.reduce_sum(nll * weight))
        total_tokens += float(tf.reduce_sum(weight))
    results = {"perplexity": metric_lib.perplexity(total_nll, total_tokens),
               "nll": total_nll / max(total_tokens, 1.0), "tokens": int(total_tokens)}
    if data_config.get("tokenizer_kind") == "byte":  # a token is a character (byte)
        results["bits_per_character"] = metric_lib.bits_per_character(total_nll, total_tokens)
    return results
