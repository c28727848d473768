"""The one DAG every recipe runs: raw text -> vocabulary -> pretraining examples -> pretrain
-> fine-tune -> evaluate (blessing gate) -> push a TF Serving SavedModel.

    CorpusExampleGen -> VocabularyGen -> PretrainingExampleGen -> Pretrainer ─┐
      (or CheckpointImporter: published weights, recipe pretraining.init_checkpoint)
      (or, with recipe pretraining: null, VocabularyGen -> BackboneInitializer)
      (or, with a recipe teacher: TeacherExampleGen -> TeacherPretrainer -> Distiller;
       task_distillation: TeacherFineTuner -> TaskDistiller replaces FineTuner)
      (lm_finetuning: LMFineTuningExampleGen -> ... -> TargetLMFineTuner, ULMFiT §3.2)
    TaskExampleGen (classification, regression, GLUE presets; tagging, span_qa,
      multiple_choice: CoNLL / SQuAD / CommonsenseQA / SWAG files) ─────────── FineTuner
      or TargetExampleGen -> TargetLMExampleGen (causal LM fine-tuning) ──────┘    │
    LatestBlessedModelResolver ──────────────────────────────── LMEvaluator <───────┤
                                                                  └──> Pusher <────┘
    (recipe knowledge_graph: KnowledgeGraphGen -> KGEmbeddingTrainer, pipelines/knowledge.py;
     an architecture with links_entities: CorpusEntityLinker / TaskEntityLinker annotate the
     examples and the Pretrainer / FineTuner are KnowledgeTrainers fed the embeddings)
"""

from __future__ import annotations

import os

# TFX's modules, not its `tfx.v1` facade: importing that loads every extension (the Vertex
# AI client library among them, ~4 s) whatever the pipeline uses.
from tfx.components.pusher.component import Pusher
from tfx.components.trainer.component import Trainer
from tfx.dsl.components.base import executor_spec
from tfx.dsl.components.common.resolver import Resolver
from tfx.dsl.input_resolution.strategies.latest_blessed_model_strategy import (
    LatestBlessedModelStrategy)
from tfx.orchestration import metadata as tfx_metadata
from tfx.orchestration import pipeline as tfx_pipeline
from tfx.proto import pusher_pb2, trainer_pb2
from tfx.types import standard_artifacts
from tfx.types.channel import Channel

from lmfactory import models
from lmfactory.components import tasks as task_kinds
from lmfactory.components.checkpoint_import.component import CheckpointImporter
from lmfactory.components.distiller.component import Distiller
from lmfactory.components.evaluator.component import LMEvaluator
from lmfactory.components.example_gen import glue
from lmfactory.components.example_gen.component import TextExampleGen
from lmfactory.components.knowledge_graph.trainer_component import KnowledgeTrainer
from lmfactory.components.evaluator.transfer import CONTROL_FROM_SCRATCH
from lmfactory.components.model_init.component import BackboneInitializer
from lmfactory.components.pretraining_data.component import PretrainingExampleGen
from lmfactory.components.pusher import executor as pusher_executor
from lmfactory.components.trainer.checkpoints import DEFAULT_MONITOR
from lmfactory.components.vocabulary.component import VocabularyGen
from lmfactory.pipelines import knowledge, remote_data
from lmfactory.recipe import DEFAULTS, OPTIMIZER_DEFAULTS, beam_pipeline_args

RUN_FN = "lmfactory.components.trainer.run_fn.run_fn"
# The recipe's objective settings PretrainingExampleGen takes as they are (its ``seed`` is
# the component's ``random_seed``).
OBJECTIVE_KEYS = tuple(key for key in DEFAULTS["objective"] if key != "seed")
# Optimiser settings of a recipe stage passed to the Trainer as they are (TrainerConfig).
OPTIMIZER_KEYS = tuple(OPTIMIZER_DEFAULTS)


def _resolve_path(path: str) -> str:
    """A relative local path made absolute (against the working directory); URLs stay."""
    return path if "://" in path else os.path.abspath(path)  # gs://, pkg://: as given


def _absolute_paths(source: dict) -> dict:
    """Resolves the relative local data paths of a data source."""
    resolve = _resolve_path
    source = dict(source)
    if "path" in source:
        source["path"] = resolve(source["path"])
    if "splits" in source:
        source["splits"] = {split: resolve(path) for split, path in source["splits"].items()}
    if source.get("data_dir"):
        source["data_dir"] = resolve(source["data_dir"])
    return source


def task_input_config(source: dict, num_classes: int | None = None, seed: int = 0) -> dict:
    """TextExampleGen's input_config of the recipe's ``data.task``: as given, or, for a named
    GLUE task (``{glue: CoLA, dir: ...}``), the preset's files and columns
    (components/example_gen/glue.py), whose first lines are checked now when they are local
    (a file of another shape fails here, naming the file and the columns it expected).
    With ``num_classes`` (a classification task's), an integer label column only takes the
    class ids [0, num_classes): another label is a malformed record, counted and skipped at
    ingestion. A label budget (``train_examples``) keeps that many train examples, drawn with
    ``seed`` (the run's)."""
    if "glue" not in source:
        config = _absolute_paths(source)
    else:
        directory = _resolve_path(source["dir"])
        if "://" not in directory:
            glue.check_files(source["glue"], directory)
        config = glue.input_config(source["glue"], directory)
        if source.get("train_examples"):
            config["train_examples"] = source["train_examples"]
    if config.get("train_examples"):
        config["seed"] = seed
    if (num_classes and num_classes > 1 and config.get("label_column", config.get(
            "label_feature")) and config.get("label_type", "int") == "int"):
        config.setdefault("num_classes", num_classes)
    return config


def task_record(recipe: dict) -> dict | None:
    """The fine-tuning task record (CONTRACTS §4 ``task``) of the recipe's task kind
    (components/tasks); None for continued language-model training, whose record the
    Trainer writes from the examples' objective."""
    finetuning = recipe["finetuning"]
    kind = task_kinds.for_recipe(finetuning["task"])
    return kind.task_record(finetuning, recipe["data"].get(kind.data_section) or {})


def _trainer_config(recipe: dict, settings: dict, task: dict | None,
                    model: dict | None = None, serves: bool = False) -> dict:
    """The Trainer's custom_config (components/trainer/config.py). ``model``: architecture,
    preset and overrides when they are not the recipe's own (a distillation teacher).
    ``serves``: a stage whose model is evaluated (the FineTuner, which is also pushed, and
    the transfer control), which always gets its serving SavedModel; the other stages only
    with ``runtime.export_every_stage``."""
    runtime = recipe["runtime"]
    model = model or recipe
    return {
        "architecture": model["architecture"],
        "preset": model["preset"],
        "overrides": model["overrides"],
        "task": task,
        "batch_size": settings["batch_size"],
        "learning_rate": settings["learning_rate"],
        "warmup_fraction": settings["warmup_fraction"],
        "weight_decay": settings["weight_decay"],
        **{key: settings[key] for key in OPTIMIZER_KEYS if key in settings},
        "strategy": runtime["strategy"],
        "tpu": runtime["tpu"],
        "jit_compile": runtime["jit_compile"],
        "precision": runtime["precision"],
        "steps_per_checkpoint": runtime["steps_per_checkpoint"],
        "validate_checkpoints": runtime["validate_checkpoints"],
        "progress_seconds": runtime["progress_seconds"],
        "keep": settings.get("keep", "last"),
        "monitor": settings.get("monitor", DEFAULT_MONITOR),
        "seed": runtime["seed"],
        "generation": recipe["serving"]["generation"],
        "task_args": settings.get("task_args", {}),
        "export_serving": bool(serves or runtime["export_every_stage"]),
    }


def _trainer(recipe: dict, stage: str, examples, task=None, base_model=None, model=None,
             kg_embeddings=None, graph=None, serves: bool = False):
    """A TFX Trainer running ``run_fn`` with the recipe section ``stage``'s settings
    (``model["pretraining"]`` for a teacher); with ``kg_embeddings`` (a KGEmbeddings
    channel) a KnowledgeTrainer (components/knowledge_graph) that hands them and the
    knowledge ``graph`` to run_fn."""
    settings = (model or recipe)[stage]
    arguments = dict(
        run_fn=RUN_FN,
        examples=examples,
        base_model=base_model,
        train_args=trainer_pb2.TrainArgs(num_steps=settings["steps"]),
        eval_args=trainer_pb2.EvalArgs(num_steps=settings["eval_steps"]),
        custom_config=_trainer_config(recipe, settings, task, model, serves),
    )
    if kg_embeddings is not None:
        return KnowledgeTrainer(kg_embeddings=kg_embeddings, knowledge_graph=graph,
                                **arguments)
    return Trainer(**arguments)


def _distiller(recipe: dict, stage: str, examples, teacher_model, task=None, base_model=None,
               serves: bool = False):
    """A Distiller (components/distiller): the Trainer's settings plus a teacher."""
    settings = recipe[stage]
    return Distiller(
        examples=examples, teacher_model=teacher_model, base_model=base_model, run_fn=RUN_FN,
        train_args=trainer_pb2.TrainArgs(num_steps=settings["steps"]),
        eval_args=trainer_pb2.EvalArgs(num_steps=settings["eval_steps"]),
        custom_config=_trainer_config(recipe, settings, task, serves=serves))


def _lm_example_gen(recipe: dict, examples, vocabulary, objective_name: str | None = None):
    objective = recipe["objective"]
    return PretrainingExampleGen(examples=examples, vocabulary=vocabulary,
                                 objective=objective_name or objective["name"],
                                 random_seed=objective["seed"],
                                 **{key: objective[key] for key in OBJECTIVE_KEYS})


def _target_corpus_gen(recipe: dict):
    """The one TextExampleGen of ``data.target_corpus`` (its text trains the target LM,
    ULMFiT §3.2, or the causal-LM task; the vocabulary may count it too), or None."""
    if not recipe["data"].get("target_corpus"):
        return None
    component_id = "LMFineTuningExampleGen" if recipe.get("lm_finetuning") else "TargetExampleGen"
    return TextExampleGen(input_config=_absolute_paths(recipe["data"]["target_corpus"])
                          ).with_id(component_id)


def _pretraining_stage(recipe: dict, target_gen=None, graph=None, kg_embeddings=None):
    """The components that produce the model fine-tuning starts from: learned from the
    corpus (vocabulary, examples, Pretrainer) or imported from a published checkpoint.
    Returns ``(components, model channel, vocabulary channel or None)``; ``target_gen``
    (`_target_corpus_gen`) is among the components when the vocabulary counts its text.
    With a knowledge ``graph`` (an architecture that links entities), the corpus goes
    through the EntityLinker before the pretraining examples, and the Pretrainer is a
    KnowledgeTrainer fed ``kg_embeddings``."""
    pretraining = recipe["pretraining"] or {}
    if pretraining.get("init_checkpoint"):
        importer = CheckpointImporter(
            architecture=recipe["architecture"],
            checkpoint=_resolve_path(pretraining["init_checkpoint"]),
            tokenizer_dir=(_resolve_path(pretraining["tokenizer_dir"])
                           if pretraining.get("tokenizer_dir") else None),
            sequence_length=recipe["finetuning"]["sequence_length"],
            export_serving=recipe["runtime"]["export_every_stage"])
        return [importer], importer.outputs["model"], None, None
    corpus_gen = TextExampleGen(
        input_config=_absolute_paths(recipe["data"]["corpus"])).with_id("CorpusExampleGen")
    tokenizer = recipe["tokenizer"]
    counted = [corpus_gen]
    if "target_corpus" in tokenizer.get("learn_from", ()):
        counted.append(target_gen)
    vocabulary_gen = VocabularyGen(
        examples=corpus_gen.outputs["examples"], kind=tokenizer["kind"],
        vocab_size=tokenizer["vocab_size"], lowercase=tokenizer["lowercase"],
        strip_accents=tokenizer["strip_accents"], min_frequency=tokenizer["min_frequency"],
        special_tokens=models.get(recipe["architecture"]).special_tokens,
        extra_examples=counted[1].outputs["examples"] if len(counted) > 1 else None)
    if recipe["pretraining"] is None:  # trained from scratch on the task (e.g. RNNsearch)
        initializer = BackboneInitializer(
            vocabulary_gen.outputs["vocabulary"], recipe["architecture"], recipe["preset"],
            recipe["overrides"], recipe["runtime"]["seed"])
        return ([*counted, vocabulary_gen, initializer], initializer.outputs["model"],
                vocabulary_gen.outputs["vocabulary"], None)
    corpus = corpus_gen.outputs["examples"]
    linked = []
    if graph is not None:
        linked = [knowledge.entity_linker(corpus, graph, ["text"], "CorpusEntityLinker")]
        corpus = linked[0].outputs["examples"]
    pretraining_gen = _lm_example_gen(recipe, corpus, vocabulary_gen.outputs["vocabulary"])
    components = [*counted, vocabulary_gen, *linked, pretraining_gen]
    examples = pretraining_gen.outputs["pretraining_examples"]
    if not recipe.get("teacher"):
        pretrainer = _trainer(recipe, "pretraining", examples,
                              kg_embeddings=kg_embeddings, graph=graph).with_id("Pretrainer")
        return (components + [pretrainer], pretrainer.outputs["model"],
                vocabulary_gen.outputs["vocabulary"], None)
    teacher_components = _teacher_stage(recipe, corpus_gen.outputs["examples"],
                                        vocabulary_gen.outputs["vocabulary"])
    teacher = teacher_components[-1].outputs["model"]
    distiller = _distiller(recipe, "pretraining", examples, teacher).with_id("Distiller")
    return (components + teacher_components + [distiller], distiller.outputs["model"],
            vocabulary_gen.outputs["vocabulary"], teacher)


def _teacher_stage(recipe: dict, corpus, vocabulary) -> list:
    """Knowledge distillation (DistilBERT, TinyBERT): the teacher is pretrained on the same
    corpus and vocabulary with its own objective; the Distiller then trains the recipe's
    student against it."""
    teacher = recipe["teacher"]
    examples = _lm_example_gen(recipe, corpus, vocabulary, teacher["objective"]
                               ).with_id("TeacherExampleGen")
    trainer = _trainer(recipe, "pretraining", examples.outputs["pretraining_examples"],
                       model=teacher).with_id("TeacherPretrainer")
    return [examples, trainer]


def _target_lm_stage(recipe: dict, vocabulary, pretrained_model, target_gen) -> list:
    """ULMFiT §3.2: the pretrained LM fine-tuned on the target task's text
    (``data.target_corpus``, ingested by ``target_gen``) with the ``lm_finetuning`` settings
    before the task fine-tuning; the FineTuner starts from the last component's model."""
    target_lm_gen = _lm_example_gen(recipe, target_gen.outputs["examples"], vocabulary
                                    ).with_id("LMFineTuningLMExampleGen")
    return [target_lm_gen, _trainer(
        recipe, "lm_finetuning", target_lm_gen.outputs["pretraining_examples"],
        base_model=pretrained_model).with_id("TargetLMFineTuner")]


def create_components(recipe: dict, serving_dir: str) -> list:
    remote_data.check_credentials(recipe)  # before anything lists a gs:// file
    target_gen = _target_corpus_gen(recipe)
    kg_components, graph, kg_embeddings = knowledge.knowledge_stage(recipe)
    if not knowledge.uses_knowledge(recipe):
        graph = kg_embeddings = None  # the graph's stages run, the model does not use them
    linking = knowledge.links_entities(recipe)  # KagNet pretrains without the graph
    components, pretrained_model, vocabulary, teacher = _pretraining_stage(
        recipe, target_gen, graph if linking else None, kg_embeddings if linking else None)
    components = kg_components + components

    def ingested_target():  # the target corpus's examples, its ExampleGen added once
        if target_gen not in components:
            components.append(target_gen)
        return target_gen.outputs["examples"]

    if recipe.get("lm_finetuning"):
        ingested_target()
        components += _target_lm_stage(recipe, vocabulary, pretrained_model, target_gen)
        pretrained_model = components[-1].outputs["model"]
    task = task_record(recipe)
    if task_kinds.for_recipe(recipe["finetuning"]["task"]).data_section == "task":
        task_gen = TextExampleGen(input_config=task_input_config(
            recipe["data"]["task"], (task or {}).get("num_classes"),
            recipe["runtime"]["seed"])).with_id("TaskExampleGen")
        task_examples = task_gen.outputs["examples"]
        components.append(task_gen)
        if graph is not None:
            stage, task_examples = knowledge.task_knowledge_stage(
                recipe, task_examples, graph, kg_embeddings)
            components.extend(stage)
    else:
        target_lm_gen = _lm_example_gen(recipe, ingested_target(), vocabulary
                                        ).with_id("TargetLMExampleGen")
        task_examples = target_lm_gen.outputs["pretraining_examples"]
        components.append(target_lm_gen)

    teacher_finetuner = None
    if teacher is not None and recipe["teacher"]["task_distillation"]:
        # TinyBERT §3.2: the teacher is fine-tuned on the task, then the general student is
        # distilled on the task data against it.
        teacher_finetuner = _trainer(recipe, "finetuning", task_examples, task=task,
                                     base_model=teacher, model=recipe["teacher"]
                                     ).with_id("TeacherFineTuner")
        components.append(teacher_finetuner)

    def task_stage(base_model, trainer_id: str, distiller_id: str):
        """The stage that trains the task model from ``base_model`` (a Trainer, or with task
        distillation a Distiller); its serving model is evaluated."""
        if teacher_finetuner is not None:
            return _distiller(recipe, "finetuning", task_examples,
                              teacher_finetuner.outputs["model"], task=task,
                              base_model=base_model, serves=True).with_id(distiller_id)
        return _trainer(recipe, "finetuning", task_examples, task=task, base_model=base_model,
                        kg_embeddings=kg_embeddings, graph=graph, serves=True
                        ).with_id(trainer_id)

    finetuner = task_stage(pretrained_model, "FineTuner", "TaskDistiller")
    control = []
    if recipe["evaluation"].get("control") == CONTROL_FROM_SCRATCH:
        # The transfer control: the same task stage from a fresh backbone shaped like the
        # pretrained one (its configuration and vocabulary), evaluated beside it.
        initializer = BackboneInitializer(base_model=pretrained_model,
                                          seed=recipe["runtime"]["seed"]
                                          ).with_id("ControlInitializer")
        control = [initializer, task_stage(initializer.outputs["model"], "Control",
                                           "ControlTaskDistiller")]
    baseline = Resolver(
        strategy_class=LatestBlessedModelStrategy,
        model=Channel(type=standard_artifacts.Model),
        model_blessing=Channel(type=standard_artifacts.ModelBlessing),
    ).with_id("LatestBlessedModelResolver")
    evaluation = recipe["evaluation"]
    evaluator = LMEvaluator(
        model=finetuner.outputs["model"], examples=task_examples,
        baseline_model=baseline.outputs["model"], metric=evaluation["metric"],
        threshold=evaluation["threshold"], batch_size=evaluation["batch_size"],
        max_batches=evaluation["max_batches"],
        control_model=control[-1].outputs["model"] if control else None,
        require_transfer_gain=bool(evaluation.get("require_transfer_gain")))
    pusher = Pusher(
        model=finetuner.outputs["model"], model_blessing=evaluator.outputs["blessing"],
        custom_executor_spec=executor_spec.ExecutorClassSpec(pusher_executor.Executor),
        push_destination=pusher_pb2.PushDestination(
            filesystem=pusher_pb2.PushDestination.Filesystem(
                base_directory=os.path.join(serving_dir, recipe["serving"]["model_name"]))))
    return components + [finetuner, *control, baseline, evaluator, pusher]


def create_pipeline(recipe: dict, pipeline_root: str, serving_dir: str,
                    metadata_path: str | None = None, enable_cache: bool = True):
    """Builds the TFX pipeline for ``recipe``; ``metadata_path`` set -> local SQLite MLMD."""
    metadata = (tfx_metadata.sqlite_metadata_connection_config(metadata_path)
                if metadata_path else None)
    return tfx_pipeline.Pipeline(
        pipeline_name=recipe["name"].replace("_", "-"),
        pipeline_root=pipeline_root,
        components=create_components(recipe, serving_dir),
        enable_cache=enable_cache,
        metadata_connection_config=metadata,
        beam_pipeline_args=beam_pipeline_args(recipe),
    )
