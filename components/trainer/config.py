"""The trainer's settings, as the recipe passes them in the Trainer's ``custom_config``."""

from __future__ import annotations

import dataclasses

from lmfactory.components.trainer.strategy import STRATEGIES


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
    strategy: str = "auto"
    tpu: str | None = None
    jit_compile: bool = False
    steps_per_checkpoint: int = 200
    checkpoint_dir: str | None = None
    seed: int = 0
    generation: dict = dataclasses.field(default_factory=dict)
    # Extra constructor arguments of the objective's task model (e.g. ELECTRA's
    # generator size and RTD weight, a distiller's loss weights).
    task_args: dict = dataclasses.field(default_factory=dict)
    # The teacher Model artifact of a distillation (set by the Distiller component).
    teacher_model: str | None = None

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
        if not 0 < self.learning_rate < 1:
            raise ValueError(f"learning_rate must be in (0, 1), got {self.learning_rate}")
        if not 0 <= self.warmup_fraction < 1:
            raise ValueError(f"warmup_fraction must be in [0, 1), got {self.warmup_fraction}")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        if self.steps_per_checkpoint < 1:
            raise ValueError("steps_per_checkpoint must be >= 1")
        if self.task is not None:
            for key in ("text_features", "num_classes", "sequence_length"):
                if key not in self.task:
                    raise ValueError(f"task needs {key!r}")
