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
from lmfactory.components.vocabulary.component import VocabularyGen
from lmfactory.pipelines import knowledge, remote_data
from lmfactory.recipe import Objective, Recipe, Runtime, beam_pipeline_args

RUN_FN = "lmfactory.components.trainer.run_fn.run_fn"


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


def trainer_config(recipe: dict, stage: str, task: dict | None = None,
                   serves: bool = False) -> dict:
    """The Trainer's custom_config of the training stage ``stage`` of the resolved
    ``recipe`` mapping (`Recipe.trainer_config`)."""
    return Recipe.from_dict(recipe).trainer_config(stage, task, serves=serves)


def _train_args(recipe: Recipe, stage: str, task=None, teacher: bool = False,
                serves: bool = False) -> dict:
    """The Trainer arguments of the stage ``stage`` (the teacher's with ``teacher``): its
    steps, eval steps and custom_config."""
    settings = (recipe.teacher if teacher else recipe).stage(stage)
    return dict(run_fn=RUN_FN,
                train_args=trainer_pb2.TrainArgs(num_steps=settings.steps),
                eval_args=trainer_pb2.EvalArgs(num_steps=settings.eval_steps),
                custom_config=recipe.trainer_config(stage, task, teacher, serves))


def _trainer(recipe: Recipe, stage: str, examples, task=None, base_model=None,
             teacher: bool = False, kg_embeddings=None, graph=None, serves: bool = False):
    """A TFX Trainer running ``run_fn`` with the recipe's training stage ``stage`` (the
    teacher's with ``teacher``); with ``kg_embeddings`` (a KGEmbeddings channel) a
    KnowledgeTrainer (components/knowledge_graph) that hands them and the knowledge
    ``graph`` to run_fn."""
    arguments = dict(examples=examples, base_model=base_model,
                     **_train_args(recipe, stage, task, teacher, serves))
    if kg_embeddings is not None:
        return KnowledgeTrainer(kg_embeddings=kg_embeddings, knowledge_graph=graph,
                                **arguments)
    return Trainer(**arguments)


def _distiller(recipe: Recipe, stage: str, examples, teacher_model, task=None, base_model=None,
               serves: bool = False):
    """A Distiller (components/distiller): the Trainer's settings plus a teacher."""
    return Distiller(examples=examples, teacher_model=teacher_model, base_model=base_model,
                     **_train_args(recipe, stage, task, serves=serves))


def _lm_example_gen(objective: Objective, examples, vocabulary,
                    objective_name: str | None = None):
    return PretrainingExampleGen(examples=examples, vocabulary=vocabulary,
                                 objective=objective_name or objective.name,
                                 random_seed=objective.seed,
                                 **objective.example_gen_settings())


def _target_corpus_gen(recipe: Recipe):
    """The one TextExampleGen of ``data.target_corpus`` (its text trains the target LM,
    ULMFiT §3.2, or the causal-LM task; the vocabulary may count it too), or None."""
    if not recipe.data.get("target_corpus"):
        return None
    component_id = "LMFineTuningExampleGen" if recipe.lm_finetuning else "TargetExampleGen"
    return TextExampleGen(input_config=_absolute_paths(recipe.data.get("target_corpus"))
                          ).with_id(component_id)


def _pretraining_stage(recipe: Recipe, target_gen=None, graph=None, kg_embeddings=None):
    """The components that produce the model fine-tuning starts from: learned from the
    corpus (vocabulary, examples, Pretrainer) or imported from a published checkpoint.
    Returns ``(components, model channel, vocabulary channel or None)``; ``target_gen``
    (`_target_corpus_gen`) is among the components when the vocabulary counts its text.
    With a knowledge ``graph`` (an architecture that links entities), the corpus goes
    through the EntityLinker before the pretraining examples, and the Pretrainer is a
    KnowledgeTrainer fed ``kg_embeddings``."""
    pretraining = recipe.pretraining
    if pretraining is not None and pretraining.init_checkpoint:
        importer = CheckpointImporter(
            architecture=recipe.architecture,
            checkpoint=_resolve_path(pretraining.init_checkpoint),
            tokenizer_dir=(_resolve_path(pretraining.tokenizer_dir)
                           if pretraining.tokenizer_dir else None),
            sequence_length=recipe.finetuning.sequence_length,
            export_serving=recipe.runtime.export_every_stage)
        return [importer], importer.outputs["model"], None, None
    corpus_gen = TextExampleGen(
        input_config=_absolute_paths(recipe.data.get("corpus"))).with_id("CorpusExampleGen")
    tokenizer = recipe.tokenizer
    counted = [corpus_gen]
    if "target_corpus" in tokenizer.learn_from:
        counted.append(target_gen)
    vocabulary_gen = VocabularyGen(
        examples=corpus_gen.outputs["examples"], kind=tokenizer.kind,
        vocab_size=tokenizer.vocab_size, lowercase=tokenizer.lowercase,
        strip_accents=tokenizer.strip_accents, min_frequency=tokenizer.min_frequency,
        special_tokens=models.get(recipe.architecture).special_tokens,
        extra_examples=counted[1].outputs["examples"] if len(counted) > 1 else None)
    if pretraining is None:  # trained from scratch on the task (e.g. RNNsearch)
        initializer = BackboneInitializer(
            vocabulary_gen.outputs["vocabulary"], recipe.architecture, recipe.preset,
            recipe.overrides, recipe.runtime.seed)
        return ([*counted, vocabulary_gen, initializer], initializer.outputs["model"],
                vocabulary_gen.outputs["vocabulary"], None)
    corpus = corpus_gen.outputs["examples"]
    linked = []
    if graph is not None:
        linked = [knowledge.entity_linker(corpus, graph, ["text"], "CorpusEntityLinker")]
        corpus = linked[0].outputs["examples"]
    pretraining_gen = _lm_example_gen(recipe.objective, corpus,
                                      vocabulary_gen.outputs["vocabulary"])
    components = [*counted, vocabulary_gen, *linked, pretraining_gen]
    examples = pretraining_gen.outputs["pretraining_examples"]
    if recipe.teacher is None:
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


def _teacher_stage(recipe: Recipe, corpus, vocabulary) -> list:
    """Knowledge distillation (DistilBERT, TinyBERT): the teacher is pretrained on the same
    corpus and vocabulary with its own objective; the Distiller then trains the recipe's
    student against it."""
    examples = _lm_example_gen(recipe.objective, corpus, vocabulary, recipe.teacher.objective
                               ).with_id("TeacherExampleGen")
    trainer = _trainer(recipe, "pretraining", examples.outputs["pretraining_examples"],
                       teacher=True).with_id("TeacherPretrainer")
    return [examples, trainer]


def _target_lm_stage(recipe: Recipe, vocabulary, pretrained_model, target_gen) -> list:
    """ULMFiT §3.2: the pretrained LM fine-tuned on the target task's text
    (``data.target_corpus``, ingested by ``target_gen``) with the ``lm_finetuning`` settings
    before the task fine-tuning; the FineTuner starts from the last component's model."""
    target_lm_gen = _lm_example_gen(recipe.objective, target_gen.outputs["examples"],
                                    vocabulary).with_id("LMFineTuningLMExampleGen")
    return [target_lm_gen, _trainer(
        recipe, "lm_finetuning", target_lm_gen.outputs["pretraining_examples"],
        base_model=pretrained_model).with_id("TargetLMFineTuner")]


def create_components(resolved: dict, serving_dir: str) -> list:
    """The DAG's components for the resolved recipe ``resolved`` (`load_recipe`'s)."""
    remote_data.check_credentials(resolved)  # before anything lists a gs:// file
    recipe = Recipe.from_dict(resolved)
    target_gen = _target_corpus_gen(recipe)
    kg_components, graph, kg_embeddings = knowledge.knowledge_stage(resolved)
    if not knowledge.uses_knowledge(resolved):
        graph = kg_embeddings = None  # the graph's stages run, the model does not use them
    linking = knowledge.links_entities(resolved)  # KagNet pretrains without the graph
    components, pretrained_model, vocabulary, teacher = _pretraining_stage(
        recipe, target_gen, graph if linking else None, kg_embeddings if linking else None)
    components = kg_components + components

    def ingested_target():  # the target corpus's examples, its ExampleGen added once
        if target_gen not in components:
            components.append(target_gen)
        return target_gen.outputs["examples"]

    if recipe.lm_finetuning is not None:
        ingested_target()
        components += _target_lm_stage(recipe, vocabulary, pretrained_model, target_gen)
        pretrained_model = components[-1].outputs["model"]
    task = task_record(resolved)
    if task_kinds.for_recipe(recipe.finetuning.task).data_section == "task":
        task_gen = TextExampleGen(input_config=task_input_config(
            recipe.data.get("task"), (task or {}).get("num_classes"),
            recipe.runtime.seed)).with_id("TaskExampleGen")
        task_examples = task_gen.outputs["examples"]
        components.append(task_gen)
        if graph is not None:
            stage, task_examples = knowledge.task_knowledge_stage(
                resolved, task_examples, graph, kg_embeddings)
            components.extend(stage)
    else:
        target_lm_gen = _lm_example_gen(recipe.objective, ingested_target(), vocabulary
                                        ).with_id("TargetLMExampleGen")
        task_examples = target_lm_gen.outputs["pretraining_examples"]
        components.append(target_lm_gen)

    teacher_finetuner = None
    if teacher is not None and recipe.teacher.task_distillation:
        # TinyBERT §3.2: the teacher is fine-tuned on the task, then the general student is
        # distilled on the task data against it.
        teacher_finetuner = _trainer(recipe, "finetuning", task_examples, task=task,
                                     base_model=teacher, teacher=True
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
    if recipe.evaluation.control == CONTROL_FROM_SCRATCH:
        # The transfer control: the same task stage from a fresh backbone shaped like the
        # pretrained one (its configuration and vocabulary), evaluated beside it.
        initializer = BackboneInitializer(base_model=pretrained_model,
                                          seed=recipe.runtime.seed
                                          ).with_id("ControlInitializer")
        control = [initializer, task_stage(initializer.outputs["model"], "Control",
                                           "ControlTaskDistiller")]
    baseline = Resolver(
        strategy_class=LatestBlessedModelStrategy,
        model=Channel(type=standard_artifacts.Model),
        model_blessing=Channel(type=standard_artifacts.ModelBlessing),
    ).with_id("LatestBlessedModelResolver")
    evaluation = recipe.evaluation
    evaluator = LMEvaluator(
        model=finetuner.outputs["model"], examples=task_examples,
        baseline_model=baseline.outputs["model"], metric=evaluation.metric,
        threshold=evaluation.threshold, batch_size=evaluation.batch_size,
        max_batches=evaluation.max_batches,
        control_model=control[-1].outputs["model"] if control else None,
        require_transfer_gain=bool(evaluation.require_transfer_gain))
    pusher = Pusher(
        model=finetuner.outputs["model"], model_blessing=evaluator.outputs["blessing"],
        custom_executor_spec=executor_spec.ExecutorClassSpec(pusher_executor.Executor),
        push_destination=pusher_pb2.PushDestination(
            filesystem=pusher_pb2.PushDestination.Filesystem(
                base_directory=os.path.join(serving_dir, recipe.serving.model_name))))
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
