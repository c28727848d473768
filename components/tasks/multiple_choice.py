"""Multiple choice (CommonsenseQA, SWAG) in the DAG: question records (``context``,
``choices``, ``label``) -> a model that picks one of C raw choices for a raw context.

BERT §4.4: one ``[CLS] context [SEP] choice [SEP]`` sequence per choice, each scored from
its pooled [CLS] vector by one dense layer, a softmax across the C choices
(``models/tasks/multiple_choice_head.py``). C comes from the format: CommonsenseQA 5, SWAG 4.

An architecture with its own task input transformations (a registry ``multiple_choice``
head and preprocessor: GPT-1, Radford et al. 2018 §3.3 "Question Answering and
Commonsense Reasoning") packs ``start z $ a_k extract`` per answer and fine-tunes its own
classifier with ``task: multiple_choice`` (the extract token's state scored by W_y, a
softmax across the answers, plus λ times the auxiliary LM loss; ``task_args.lm_weight``).

Parts:
    record parsing: components.example_gen.multiple_choice_readers
    head: models.tasks.multiple_choice_head.MultipleChoice,
        models.tasks.fold_choices.FoldChoices
    preprocessor: models.tasks.multiple_choice_preprocessor.MultipleChoicePreprocessor
    training step: components.tasks.multiple_choice.train,
        components.tasks.multiple_choice_data.make_multiple_choice_dataset
    serving export: components.tasks.multiple_choice.export,
        components.tasks.multiple_choice_serving.export_multiple_choice_model
    metrics: components.tasks.multiple_choice.evaluate,
        components.tasks.multiple_choice_data.choice_accuracy
"""

from __future__ import annotations


import numpy as np
import tensorflow as tf

from lmfactory.components.evaluator.report import CONFUSION_KEY
from lmfactory.components.example_gen import formats
from lmfactory.components.tasks import registry
from lmfactory.components.trainer.task_data import read_records

NUM_CHOICES = {formats.COMMONSENSEQA_FORMAT: 5, formats.SWAG_FORMAT: 4}
MULTIPLE_CHOICE = registry.register(registry.TaskKind(
    name="multiple_choice", module=__name__,
    formats=(formats.COMMONSENSEQA_FORMAT, formats.SWAG_FORMAT), metrics=("accuracy",),
    official_metrics=("accuracy",), task_args=None, head="multiple_choice"))


def task_record(kind, finetuning: dict, source: dict) -> dict:
    return {**kind.standard_record(finetuning, source),
            "num_choices": NUM_CHOICES[source["format"]]}


def check_recipe(check, recipe: dict, arch) -> None:
    """The kind's data format; ``task_args``: ``dropout`` for the encoders' head, plus
    ``lm_weight`` (the auxiliary LM loss) for an architecture with its own §3.3 packing, or
    the head's ``RECIPE_TASK_ARGS`` where it lists them (KagNet)."""
    check.positive_int("finetuning.sequence_length")
    check.source("data.task")
    check.choice("data.task.format", MULTIPLE_CHOICE.formats)
    allowed = {"dropout"} | ({"lm_weight"} if arch.preprocessor("multiple_choice") else set())
    # A head with settings of its own lists them (KagNet's graph sizes and path search).
    allowed = set(getattr(arch.head("multiple_choice"), "RECIPE_TASK_ARGS", allowed))
    unknown = sorted(set(recipe["finetuning"].get("task_args", {})) - allowed)
    if unknown:
        check.fail("finetuning.task_args", f"multiple_choice takes {sorted(allowed)} for "
                                           f"{arch.name}; got {unknown}")
    problem = getattr(arch.head("multiple_choice"), "task_args_problem", None)
    problem = problem(recipe["finetuning"].get("task_args", {})) if problem else None
    if problem:
        check.fail(f"finetuning.task_args.{problem[0]}", problem[1])


def train(context) -> dict:
    from lmfactory.components.tasks.multiple_choice_data import make_multiple_choice_dataset
    from lmfactory.models.tasks.multiple_choice_preprocessor import MultipleChoicePreprocessor

    from lmfactory import models
    from lmfactory.models.classifier_preprocessor import classifier_preprocessor

    context.require_base_model("a multiple-choice head")
    config = context.config
    task = dict(config.task)
    architecture = models.get(config.architecture)
    head_args = dict(config.task_args)
    if architecture.preprocessor("multiple_choice") is not None:  # GPT-1 §3.3, KagNet
        preprocessor_args = config.task_args
        if architecture.concept_paths:  # KagNet §3.1: the concept graph it searches
            from lmfactory.components.concept_paths.training import concept_graph_task_args

            preprocessor_args = concept_graph_task_args(context, config.task_args)
        preprocessor = classifier_preprocessor(
            context.vocab_dir, config.architecture, task["sequence_length"],
            num_text_features=2, task_args=preprocessor_args, task_kind="multiple_choice")
        if hasattr(preprocessor, "head_arguments"):  # the graph's sizes, KagNet
            head_args = preprocessor.head_arguments(config.task_args)
    else:
        preprocessor = MultipleChoicePreprocessor.from_vocabulary(
            context.vocab_dir, config.architecture, task["sequence_length"])
    with context.strategy.scope():
        backbone = context.backbone()
        model = architecture.head("multiple_choice")(
            backbone, num_choices=task["num_choices"], **head_args)
        context.knowledge_init(model)
        model.compile(optimizer=context.optimizer(), jit_compile=config.jit_compile)
    read = dict(preprocessor=preprocessor, batch_size=config.batch_size, seed=config.seed,
                num_choices=task["num_choices"], input_names=list(model.input))
    train_data = make_multiple_choice_dataset(context.train_files, shuffle=True, repeat=True,
                                              **read)
    eval_data = make_multiple_choice_dataset(context.eval_files, shuffle=False, repeat=True,
                                             **read)
    metrics = context.fit(model, train_data, eval_data)
    return dict(task_model=model, backbone=backbone, vocab_dir=context.vocab_dir,
                metrics=metrics, task=task, preprocessor=preprocessor)


def export(task_model, preprocessor, vocab_dir: str, model_config: dict,
           export_dir: str) -> None:
    from lmfactory.components.tasks.multiple_choice_serving import (
        export_multiple_choice_model)

    del vocab_dir  # the preprocessor holds the tokenizer
    export_multiple_choice_model(task_model, preprocessor, export_dir,
                                 num_choices=model_config["task"]["num_choices"])


def evaluate(model_uri: str, file_pattern: str, task: dict, config: dict) -> dict:
    """Accuracy of the exported model's choice on the records' questions, and the
    [answer position, chosen position] confusion matrix (a position bias shows in it)."""
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops the SavedModel uses)

    from lmfactory.components.trainer.serving import serving_dir_of

    batch_size = config.get("batch_size", 64)
    num_choices = int(task["num_choices"])
    serve = tf.saved_model.load(serving_dir_of(model_uri)).signatures["serving_default"]
    spec = {"context": tf.io.FixedLenFeature([], tf.string),
            "choices": tf.io.FixedLenFeature([num_choices], tf.string),
            "label": tf.io.FixedLenFeature([], tf.int64)}
    labels, chosen = [], []
    for batch in read_records(file_pattern).batch(batch_size).map(lambda serialized: tf.io.parse_example(serialized, spec)):
        outputs = serve(context=batch["context"], choices=batch["choices"])
        labels.append(batch["label"].numpy())
        chosen.append(outputs["label"].numpy())
    labels, chosen = np.concatenate(labels), np.concatenate(chosen)
    matrix = np.zeros((num_choices, num_choices), dtype=np.int64)
    np.add.at(matrix, (labels, chosen), 1)
    return {"accuracy": float(np.mean(labels == chosen)), "examples": int(len(labels)),
            "chance": 1.0 / num_choices,
            CONFUSION_KEY: {"labels": [f"choice {i}" for i in range(num_choices)],
                            "matrix": matrix.tolist()}}
