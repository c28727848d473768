"""The whole recipe as typed sections (`Recipe`), checked section by section, and the
checks that span sections: which sections a run uses (pretraining from the corpus, from a
published checkpoint, or none), what the architecture's preset with its overrides can take,
the task kind's own fields, and the checkpoint choice against the runtime's validation.
"""

from __future__ import annotations

import dataclasses

from lmfactory.components import tasks as task_kinds
from lmfactory.components.evaluator import transfer
from lmfactory.recipe import knowledge, stages
from lmfactory.recipe.checker import Checker
from lmfactory.recipe.section import OMIT_IF_NONE, Section
from lmfactory.recipe.sections import Evaluation, Objective, Runtime, Serving, Tokenizer
from lmfactory.recipe.sources import DataSources
from lmfactory.recipe.stages import FinetuningStage, PretrainingStage, TrainingStage
from lmfactory.recipe.teacher import Teacher


@dataclasses.dataclass(frozen=True)
class Recipe(Section):
    """A checked recipe. ``pretraining`` is None for a backbone trained on the task from
    scratch; ``lm_finetuning``, ``knowledge_graph`` and ``teacher`` are None without them.
    ``to_dict()`` is the resolved mapping `load_recipe` returns."""

    name: str
    architecture: str
    data: DataSources
    description: str = ""
    preset: str = "tiny"
    overrides: dict = dataclasses.field(default_factory=dict)
    tokenizer: Tokenizer = dataclasses.field(default_factory=Tokenizer)
    objective: Objective = dataclasses.field(default_factory=Objective)
    pretraining: PretrainingStage | None = dataclasses.field(default_factory=PretrainingStage)
    finetuning: FinetuningStage = dataclasses.field(default_factory=FinetuningStage)
    lm_finetuning: TrainingStage | None = None
    knowledge_graph: knowledge.KnowledgeGraph | None = None
    evaluation: Evaluation = dataclasses.field(default_factory=Evaluation)
    serving: Serving = dataclasses.field(default_factory=Serving)
    runtime: Runtime = dataclasses.field(default_factory=Runtime)
    teacher: Teacher | None = dataclasses.field(default=None, metadata=OMIT_IF_NONE)

    @classmethod
    def defaults(cls) -> dict:
        values = super().defaults()
        del values["teacher"]  # given without a default
        return values

    @classmethod
    def from_dict(cls, recipe: dict) -> "Recipe":
        """The recipe of ``recipe``, a mapping with the defaults filled in, checked."""
        from lmfactory import models

        check = Checker(recipe)
        name = check.folder_name("name")
        architecture = check.choice("architecture", models.names())
        arch = models.get(architecture)
        preset = check.get("preset")
        if preset not in models.presets(architecture):
            check.fail("preset", f"must be one of {', '.join(models.presets(architecture))} "
                                 f"for {architecture}; got {preset!r}")
        if not isinstance(check.get("overrides"), dict):
            check.fail("overrides", "must be a mapping of backbone arguments")
        tokenizer, objective = _pretraining_data(check, recipe, arch)
        imported = _init_checkpoint(recipe) is not None
        # the objective the run pretrains, if any
        pretrained = None if recipe["pretraining"] is None or imported else objective.name
        if not imported:  # an imported checkpoint brings its own sizes
            _check_backbone_limits(check, recipe, arch, pretrained is not None)
        lm_finetuning = stages.lm_finetuning(check, recipe, pretrained)
        pretraining = (None if recipe["pretraining"] is None else
                       PretrainingStage.from_dict(recipe["pretraining"], "pretraining"))
        finetuning = FinetuningStage.from_dict(recipe["finetuning"], "finetuning")
        if lm_finetuning is not None:
            lm_finetuning = TrainingStage.from_dict(lm_finetuning, stages.LM_FINETUNING)
        teacher = Teacher.from_dict(recipe.get("teacher"), recipe, pretrained)
        kind = _task_kind(check)
        kind.check_recipe(check, recipe, arch)
        graph = knowledge.KnowledgeGraph.from_dict(recipe.get(knowledge.SECTION), arch)
        evaluation = Evaluation.from_dict(recipe["evaluation"], kind)
        transfer.check_recipe(check, recipe)
        serving = Serving.from_dict(recipe["serving"])
        runtime = Runtime.from_dict(recipe["runtime"])
        if finetuning.keep == "best" and not runtime.validate_checkpoints:
            check.fail("finetuning.keep", "best needs runtime.validate_checkpoints: true (the "
                                          "validation at each checkpoint)")
        return cls(name=name, architecture=architecture, preset=preset,
                   description=recipe["description"], overrides=recipe["overrides"],
                   data=DataSources.from_dict(recipe.get("data")), tokenizer=tokenizer,
                   objective=objective, pretraining=pretraining, finetuning=finetuning,
                   lm_finetuning=lm_finetuning, knowledge_graph=graph, evaluation=evaluation,
                   serving=serving, runtime=runtime, teacher=teacher)

    def stage(self, name: str) -> TrainingStage:
        """The training stage section ``name`` (pretraining, finetuning, lm_finetuning)."""
        return getattr(self, name)

    def trainer_config(self, stage: str, task: dict | None = None, teacher: bool = False,
                       serves: bool = False) -> dict:
        """The Trainer's custom_config of the stage ``stage`` (`TrainingStage.trainer_config`)
        of the recipe's model, or with ``teacher`` of the distillation teacher's."""
        model = self.teacher if teacher else self
        return model.stage(stage).trainer_config(model, self.runtime,
                                                 self.serving.generation.to_dict(), task,
                                                 serves)


def _init_checkpoint(recipe: dict):
    return (recipe["pretraining"] or {}).get("init_checkpoint")


def _task_kind(check: Checker):
    """The task kind (components/tasks) of ``finetuning.task``."""
    return task_kinds.for_recipe(check.choice("finetuning.task", task_kinds.recipe_tasks()))


def _pretraining_data(check: Checker, recipe: dict, arch) -> tuple:
    """The tokenizer and objective sections, checked against the architecture where the run
    uses them: a recipe that pretrains learns its vocabulary from ``data.corpus`` and trains
    one of the architecture's objectives; one without pretraining (``pretraining: null``, a
    fresh backbone trained on a task with its own data) still learns its vocabulary; a
    published checkpoint (``pretraining.init_checkpoint``) brings both."""
    init_checkpoint = _init_checkpoint(recipe)
    pretraining = recipe["pretraining"]
    if pretraining is not None and init_checkpoint is not None:
        PretrainingStage.check_own(Checker(pretraining, "pretraining"), pretraining)
        if _task_kind(check).data_section != "task":
            check.fail("pretraining.init_checkpoint", "starting from a published checkpoint "
                                                      "is supported for encoder tasks, not "
                                                      "causal_lm fine-tuning")
        return (Tokenizer.from_dict(recipe["tokenizer"]),
                Objective.from_dict(recipe["objective"]))
    tokenizer = Tokenizer.from_dict(recipe["tokenizer"], arch)
    for source in tokenizer.learn_from[1:]:
        check.source(f"data.{source}")
    objective = Objective.from_dict(recipe["objective"],
                                    arch if pretraining is not None else None)
    check.source("data.corpus")
    if pretraining is None and _task_kind(check).data_section != "task":
        check.fail("pretraining", "pretraining: null needs a task with its own data "
                                  "(data.task), not language-model fine-tuning")
    return tokenizer, objective


def _check_backbone_limits(check: Checker, recipe: dict, arch, pretrains: bool) -> None:
    """What the preset with its ``overrides`` can take: known backbone arguments, sequence
    lengths within its positions (``max_sequence_length``), a width the heads divide."""
    from lmfactory import models

    architecture = arch.name
    unknown = sorted(set(recipe["overrides"]) - set(models.backbone_arguments(architecture)))
    if unknown:
        check.fail("overrides", f"{architecture} backbones take no {unknown}; they take "
                                f"{', '.join(models.backbone_arguments(architecture))}")
    config = {**models.presets(architecture)[recipe["preset"]], **recipe["overrides"]}
    hidden, heads = config.get("hidden_dim"), config.get("num_heads")
    if (isinstance(hidden, int) and isinstance(heads, int) and heads > 0
            and config.get("head_dim") is None and hidden % heads):
        check.fail("overrides", f"hidden_dim {hidden} is not divisible by num_heads {heads}")
    # Constraints of a backbone's own (e.g. widths in whole quaternions): its optional
    # classmethod ``check_arguments(config)`` raises ValueError with the reason.
    check_arguments = getattr(arch.backbone_cls, "check_arguments", None)
    if check_arguments is not None:
        try:
            check_arguments(config)
        except ValueError as error:
            check.fail("overrides", f"{architecture} preset {recipe['preset']!r}: {error}")
    limit = config.get("max_sequence_length")
    if not isinstance(limit, int):
        return
    # finetuning.sequence_length packs a task's own data; continued LM training (data from
    # data.target_corpus) reads the objective's windows instead.
    fields = (["objective.max_seq_length"] if pretrains else []) + (
        ["finetuning.sequence_length"] if _task_kind(check).data_section == "task" else [])
    for field in fields:
        length = check.get(field, required=False)
        if isinstance(length, int) and not isinstance(length, bool) and length > limit:
            check.fail(field, f"{length} is longer than the {limit} positions of "
                              f"{architecture} preset {recipe['preset']!r} "
                              f"(max_sequence_length; set overrides.max_sequence_length to "
                              f"train longer positions)")


__all__ = ["Recipe"]
