"""The trainer's settings, as the recipe passes them in the Trainer's ``custom_config``."""

from __future__ import annotations

import dataclasses

from lmfactory.components.trainer.checkpoints import DEFAULT_MONITOR, KEEP_CHOICES
from lmfactory.components.trainer.optimization import DECAYS, OPTIMIZERS
from lmfactory.components.trainer.precision import check_precision
from lmfactory.components.trainer.strategy import STRATEGIES


# The bounds of a training stage's settings, closed intervals [low, high]: the Trainer
# checks them here and the recipe's training stage section (recipe/stages.py) with one-line
# errors naming the field, so a value the recipe accepts is one the Trainer accepts.
LEARNING_RATE_RANGE = (1e-8, 1.0)
WARMUP_FRACTION_RANGE = (0.0, 0.99)  # some steps after the warmup
WEIGHT_DECAY_RANGE = (0.0, 1.0)
ADAM_BETA_RANGE = (0.0, 0.999999)
ADAM_EPSILON_RANGE = (1e-12, 1.0)
CLIP_NORM_RANGE = (0.0, 1e9)  # 0: no clipping
FINAL_LEARNING_RATE_FRACTION_RANGE = (0.0, 1.0)
PROGRESS_SECONDS_RANGE = (0.001, 1e9)


def _out_of(value, bounds: tuple) -> bool:
    return not bounds[0] <= value <= bounds[1]


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    architecture: str
    preset: str = "tiny"
    overrides: dict = dataclasses.field(default_factory=dict)
    task: dict | None = None
    batch_size: int = 32  # global: split across replicas
    learning_rate: float = 1e-4
    warmup_fraction: float = 0.1
    weight_decay: float = 0.01
    clip_norm: float = 1.0
    # Adam's moments and epsilon, and the schedule after warmup (optimization.py): BERT's
    # defaults; GPT-3 (Appendix B) uses beta2 0.95, eps 1e-8, cosine decay to 10%.
    adam_beta_1: float = 0.9
    adam_beta_2: float = 0.999
    adam_epsilon: float = 1e-6
    learning_rate_decay: str = "linear"
    final_learning_rate_fraction: float = 0.0
    optimizer: str = "adamw"  # or "sgd" (optimization.py)
    strategy: str = "auto"
    tpu: str | None = None
    jit_compile: bool = False
    # float32 or mixed_bfloat16 (components/trainer/precision.py)
    precision: str = "float32"
    steps_per_checkpoint: int = 200
    checkpoint_dir: str | None = None
    # At each checkpoint: evaluate eval_steps eval batches (the validation curve), and keep
    # the last weights or those of the checkpoint with the best `monitor` (fit_loop.py).
    validate_checkpoints: bool = True
    keep: str = "last"
    monitor: str = DEFAULT_MONITOR
    progress_seconds: float | None = 30  # a progress line at least this often
    seed: int = 0
    generation: dict = dataclasses.field(default_factory=dict)
    # Whether the Model artifact gets its serving SavedModel (Format-Serving/). The pipeline
    # turns it off for a stage whose model only feeds a later stage (recipe
    # runtime.export_every_stage turns it back on): such a model is never pushed, and the
    # export (tracing, saving) is most of a small stage's fixed cost.
    export_serving: bool = True
    # Extra constructor arguments of the objective's task model (e.g. ELECTRA's
    # generator size and RTD weight, a distiller's loss weights).
    task_args: dict = dataclasses.field(default_factory=dict)
    # The teacher Model artifact of a distillation (set by the Distiller component).
    teacher_model: str | None = None
    # The KGEmbeddings folder of a knowledge stage (set by the KnowledgeTrainer component,
    # components/knowledge_graph/trainer_component.py).
    kg_embeddings: str | None = None
    knowledge_graph: str | None = None  # its KnowledgeGraph folder, when given

    @classmethod
    def from_dict(cls, values: dict) -> "TrainerConfig":
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"Unknown trainer setting(s) {unknown}; known: {sorted(known)}")
        if "architecture" not in values:
            raise ValueError("Trainer custom_config needs 'architecture'")
        config = cls(**values)
        config.validate()
        return config

    def validate(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        for name, bounds in (("learning_rate", LEARNING_RATE_RANGE),
                             ("warmup_fraction", WARMUP_FRACTION_RANGE),
                             ("weight_decay", WEIGHT_DECAY_RANGE),
                             ("adam_beta_1", ADAM_BETA_RANGE), ("adam_beta_2", ADAM_BETA_RANGE),
                             ("adam_epsilon", ADAM_EPSILON_RANGE),
                             ("final_learning_rate_fraction",
                              FINAL_LEARNING_RATE_FRACTION_RANGE)):
            if _out_of(getattr(self, name), bounds):
                raise ValueError(f"{name} must be in [{bounds[0]}, {bounds[1]}], got "
                                 f"{getattr(self, name)}")
        if self.clip_norm is not None and _out_of(self.clip_norm, CLIP_NORM_RANGE):
            raise ValueError(f"clip_norm must be in [{CLIP_NORM_RANGE[0]}, "
                             f"{CLIP_NORM_RANGE[1]}] (0 or None: no clipping), got "
                             f"{self.clip_norm}")
        if self.learning_rate_decay not in DECAYS:
            raise ValueError(f"learning_rate_decay must be one of {DECAYS}, got "
                             f"{self.learning_rate_decay!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        check_precision(self.precision)
        if self.steps_per_checkpoint < 1:
            raise ValueError("steps_per_checkpoint must be >= 1")
        if self.keep not in KEEP_CHOICES:
            raise ValueError(f"keep must be one of {KEEP_CHOICES}, got {self.keep!r}")
        if self.keep == "best" and not self.validate_checkpoints:
            raise ValueError("keep: best needs validate_checkpoints (the validation at each "
                             "checkpoint)")
        if self.progress_seconds is not None and _out_of(self.progress_seconds,
                                                         PROGRESS_SECONDS_RANGE):
            raise ValueError(f"progress_seconds must be in [{PROGRESS_SECONDS_RANGE[0]}, "
                             f"{PROGRESS_SECONDS_RANGE[1]}], got {self.progress_seconds}")
        if self.task is not None:
            from lmfactory.components import tasks as task_kinds

            kind = task_kinds.get(self.task.get("kind", "classification"))
            for key in kind.required_record_keys:
                if key not in self.task:
                    raise ValueError(f"task needs {key!r}")
