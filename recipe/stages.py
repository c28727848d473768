"""The recipe's training stage sections: ``pretraining``, ``finetuning``, the optional
``lm_finetuning`` (ULMFiT's target task LM fine-tuning, Howard & Ruder 2018 §3.2: a
causal-LM stage on ``data.target_corpus`` between the general-domain pretraining and the
task fine-tuning, whose settings default to ``pretraining``'s) and a distillation teacher's
own stages.

A stage's optimiser and schedule defaults and bounds are the Trainer's
(components/trainer/config.py: `TrainerConfig`'s field defaults, the ``*_RANGE`` bounds);
a stage turns itself and the runtime into the Trainer's ``custom_config``
(`TrainingStage.trainer_config`).
"""

from __future__ import annotations

import dataclasses

from lmfactory.components.trainer import config as trainer_config
from lmfactory.components.trainer.checkpoints import KEEP_CHOICES
from lmfactory.components.trainer.config import TrainerConfig
from lmfactory.components.trainer.optimization import DECAYS, OPTIMIZERS
from lmfactory.recipe.checker import Checker
from lmfactory.recipe.section import FLATTENED, NO_DEFAULT, OMIT_IF_NONE, Section

LM_FINETUNING = "lm_finetuning"
# Keys of ``pretraining`` a later stage does not take over (they say where the pretrained
# model comes from).
NOT_INHERITED = ("init_checkpoint", "tokenizer_dir")
# The stage settings the Trainer takes as they are, under the same names.
OPTIMIZER_KEYS = ("adam_beta_1", "adam_beta_2", "adam_epsilon", "clip_norm",
                  "learning_rate_decay", "final_learning_rate_fraction", "optimizer")


def _trainer(name: str):
    """`TrainerConfig`'s default of ``name``: the one home of a stage's optimiser default."""
    return dataclasses.field(default=TrainerConfig.__dataclass_fields__[name].default)


@dataclasses.dataclass(frozen=True)
class TrainingStage(Section):
    """One training stage: steps (the Trainer's train_args), eval_steps (its eval_args and
    the validation at each checkpoint), batch size, AdamW or another optimiser on a warmup
    schedule, and ``task_args`` (the stage's task model's constructor arguments).
    GPT-3 (Brown et al. 2020, Appendix B) sets adam_beta_2 0.95, adam_epsilon 1e-8,
    weight_decay 0.1, learning_rate_decay cosine, final_learning_rate_fraction 0.1."""

    steps: int = 1000
    batch_size: int = _trainer("batch_size")
    learning_rate: float = _trainer("learning_rate")
    warmup_fraction: float = _trainer("warmup_fraction")
    weight_decay: float = _trainer("weight_decay")
    eval_steps: int = 10
    # BERT's Adam moments and epsilon, global-norm clipping at 1.0, linear decay to zero
    adam_beta_1: float = _trainer("adam_beta_1")
    adam_beta_2: float = _trainer("adam_beta_2")
    adam_epsilon: float = _trainer("adam_epsilon")
    clip_norm: float = _trainer("clip_norm")
    learning_rate_decay: str = _trainer("learning_rate_decay")
    final_learning_rate_fraction: float = _trainer("final_learning_rate_fraction")
    # "sgd": plain SGD on the same schedule (word2vec.c, Mikolov et al. 2013); "adagrad":
    # accumulators from 1, clipped, no decay (ELMo's bilm-tf)
    optimizer: str = _trainer("optimizer")
    # None: not given (a teacher's stage, whose task model takes its own defaults)
    task_args: dict | None = dataclasses.field(default_factory=dict, metadata=OMIT_IF_NONE)

    @classmethod
    def from_dict(cls, values, at: str):
        """The stage of the resolved mapping ``values`` (section ``at``), checked."""
        check = Checker(values, at)
        check.positive_int("steps")
        check.positive_int("batch_size")
        check.positive_int("eval_steps")
        check.fraction("learning_rate", *trainer_config.LEARNING_RATE_RANGE)
        check.fraction("warmup_fraction", *trainer_config.WARMUP_FRACTION_RANGE)
        check.fraction("weight_decay", *trainer_config.WEIGHT_DECAY_RANGE)
        check.fraction("adam_beta_1", *trainer_config.ADAM_BETA_RANGE)
        check.fraction("adam_beta_2", *trainer_config.ADAM_BETA_RANGE)
        check.fraction("adam_epsilon", *trainer_config.ADAM_EPSILON_RANGE)
        check.fraction("clip_norm", *trainer_config.CLIP_NORM_RANGE)
        check.choice("learning_rate_decay", DECAYS)
        optimizer = check.choice("optimizer", OPTIMIZERS)
        if optimizer == "sgd" and (values["weight_decay"] or values["clip_norm"]):
            check.fail("optimizer", "sgd is plain SGD: set weight_decay and clip_norm to 0")
        if optimizer == "adagrad" and values["weight_decay"]:
            check.fail("optimizer", "adagrad has no weight decay: set weight_decay to 0")
        check.fraction("final_learning_rate_fraction",
                       *trainer_config.FINAL_LEARNING_RATE_FRACTION_RANGE)
        if not isinstance(values.get("task_args", {}), dict):
            check.fail("task_args", "must be a mapping of the task model's arguments")
        cls.check_own(check, values)
        return cls.from_values(values)

    @classmethod
    def check_own(cls, check: Checker, values: dict) -> None:
        """The checks of a stage kind's own fields."""

    @classmethod
    def from_values(cls, values: dict):
        return super().from_values({"task_args": None, **values})

    def checkpoints(self) -> dict:
        """Which weights the stage keeps: its last (a stage that watches no metric)."""
        return {"keep": TrainerConfig.keep, "monitor": TrainerConfig.monitor}

    def trainer_config(self, model, runtime, generation: dict, task: dict | None = None,
                       serves: bool = False) -> dict:
        """The Trainer's custom_config (`TrainerConfig`'s fields) of this stage.
        ``model``: what is trained (architecture, preset, overrides: the recipe, or a
        distillation teacher); ``runtime``: the recipe's `Runtime`; ``generation``:
        ``serving.generation``; ``task``: the task record. ``serves``: a stage whose model
        is evaluated (the FineTuner, which is also pushed, and the transfer control), which
        always gets its serving SavedModel; the other stages only with
        ``runtime.export_every_stage``."""
        return {
            "architecture": model.architecture,
            "preset": model.preset,
            "overrides": model.overrides,
            "task": task,
            "batch_size": self.batch_size,
            "learning_rate": self.learning_rate,
            "warmup_fraction": self.warmup_fraction,
            "weight_decay": self.weight_decay,
            **{key: getattr(self, key) for key in OPTIMIZER_KEYS},
            **runtime.trainer_settings(),
            **self.checkpoints(),
            "seed": runtime.seed,
            "generation": generation,
            "task_args": self.task_args if self.task_args is not None else {},
            "export_serving": bool(serves or runtime.export_every_stage),
        }


@dataclasses.dataclass(frozen=True)
class PretrainingStage(TrainingStage):
    """``pretraining``: the stage on the objective's examples, or ``init_checkpoint`` (a
    published checkpoint folder, with its tokenizer in ``tokenizer_dir`` when apart)."""

    init_checkpoint: str | None = None
    tokenizer_dir: str | None = None

    @classmethod
    def check_own(cls, check: Checker, values: dict) -> None:
        for key in NOT_INHERITED:
            if values.get(key) is not None and not isinstance(values[key], str):
                check.fail(key, "must be the path of a checkpoint folder")


@dataclasses.dataclass(frozen=True)
class FinetuningStage(TrainingStage):
    """``finetuning``: the task stage. ``task`` is a task kind (components/tasks), which
    checks the task's own fields (``check_recipe``) and may bring fields of its own
    (`TaskKind.finetuning_defaults`, kept in ``kind_settings``)."""

    learning_rate: float = 5e-5
    task: str | None = dataclasses.field(default=None, metadata=NO_DEFAULT)
    sequence_length: int = 128
    text_features: tuple = ("sentence",)
    num_classes: int = 2
    # keep: "last" or "best" (the checkpoint with the best validation `monitor`, a metric
    # the task model logs: loss, accuracy, ...)
    keep: str = TrainerConfig.keep
    monitor: str = TrainerConfig.monitor
    kind_settings: dict = dataclasses.field(default_factory=dict, metadata=FLATTENED)

    @classmethod
    def check_own(cls, check: Checker, values: dict) -> None:
        check.choice("keep", KEEP_CHOICES)
        if not isinstance(check.get("monitor"), str):
            check.fail("monitor", "must be the name of a validation metric, e.g. loss or "
                                  "accuracy")

    @classmethod
    def from_values(cls, values: dict):
        names = {field.name for field in dataclasses.fields(cls)} - {"kind_settings"}
        stage = super().from_values({key: value for key, value in values.items()
                                     if key in names})
        return dataclasses.replace(stage, kind_settings={
            key: value for key, value in values.items() if key not in names})

    def to_dict(self) -> dict:
        values = super().to_dict()
        values.update(values.pop("kind_settings", {}))
        return values

    def checkpoints(self) -> dict:
        return {"keep": self.keep, "monitor": self.monitor}


def lm_finetuning(check: Checker, recipe: dict, objective) -> dict | None:
    """The resolved ``lm_finetuning`` mapping (``pretraining``'s settings under the
    section's own) after checking where it fits, or None without the section. ``check``
    reads the whole recipe ``recipe``; ``objective``: the objective pretrained, if any."""
    section = recipe.get(LM_FINETUNING)
    if not section:
        return None
    if not isinstance(section, dict):
        check.fail(LM_FINETUNING, "must be a mapping of training settings (steps, "
                                  "learning_rate, ...)")
    from lmfactory.components.tasks.language_model import is_causal

    if objective is None or not is_causal(objective):
        check.fail(LM_FINETUNING, "target LM fine-tuning continues a causal LM pretrained in "
                                  "the recipe (objective.name causal_lm)")
    if recipe["finetuning"].get("task") == "causal_lm":
        check.fail(LM_FINETUNING, "finetuning.task causal_lm already fine-tunes the LM; drop "
                                  "one")
    check.source("data.target_corpus")
    inherited = {key: value for key, value in recipe["pretraining"].items()
                 if key not in NOT_INHERITED}
    return {**inherited, **section}


__all__ = ["FinetuningStage", "LM_FINETUNING", "NOT_INHERITED", "OPTIMIZER_KEYS",
           "PretrainingStage", "TrainingStage", "lm_finetuning"]
