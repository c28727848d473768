"""The recipe's ``teacher`` section: knowledge distillation (DistilBERT, TinyBERT). The
teacher is an architecture, preset and overrides, the objective it is pretrained on, and
its own ``pretraining`` / ``finetuning`` settings, defaulting to the student's;
``task_distillation`` fine-tunes it on the task and distils the student against it there
too (TinyBERT §3.2). It is given exactly when the student's objective trains against a
teacher (the objective's pretrainer has ``needs_teacher``).
"""

from __future__ import annotations

import dataclasses

from lmfactory.recipe.checker import Checker
from lmfactory.recipe.section import Section, merge
from lmfactory.recipe.stages import NOT_INHERITED, FinetuningStage, TrainingStage

SECTION = "teacher"
KEYS = ("architecture", "preset", "overrides", "objective", "pretraining", "finetuning",
        "task_distillation")


@dataclasses.dataclass(frozen=True)
class Teacher(Section):
    architecture: str
    objective: str
    pretraining: TrainingStage
    finetuning: FinetuningStage
    preset: str = "tiny"
    overrides: dict = dataclasses.field(default_factory=dict)
    task_distillation: bool = False

    def stage(self, name: str) -> TrainingStage:
        """The teacher's training stage ``name`` (pretraining, finetuning)."""
        return getattr(self, name)

    @classmethod
    def from_dict(cls, teacher, recipe: dict, objective) -> "Teacher | None":
        """The section of the resolved recipe ``recipe`` whose student is pretrained on
        ``objective`` (None: not pretrained in the run), checked; None without one."""
        from lmfactory import models

        check = Checker({SECTION: teacher})
        architecture = recipe["architecture"]
        needs_teacher = objective is not None and getattr(
            models.get(architecture).pretrainer(objective), "needs_teacher", False)
        if not needs_teacher:
            if teacher:
                check.fail(SECTION, f"{architecture}'s {objective} objective trains no "
                                    f"student: remove the teacher section")
            return None
        if not isinstance(teacher, dict):
            check.fail(SECTION, f"{architecture} is trained by distillation: give a teacher "
                                f"(architecture, preset, objective)")
        # The student's task_args are its own task model's (distiller) arguments.
        student_pretraining = {key: value for key, value in recipe["pretraining"].items()
                               if key not in ("task_args",) + NOT_INHERITED}
        student_finetuning = {key: value for key, value in recipe["finetuning"].items()
                              if key != "task_args"}
        teacher = merge({"preset": "tiny", "overrides": {}, "pretraining": student_pretraining,
                         "finetuning": student_finetuning, "task_distillation": False},
                        teacher)
        check = Checker(teacher, SECTION)
        name = check.choice("architecture", models.names())
        if teacher["preset"] not in models.presets(name):
            check.fail("preset", f"must be one of {', '.join(models.presets(name))} for "
                                 f"{name}; got {teacher['preset']!r}")
        if not isinstance(teacher["overrides"], dict):
            check.fail("overrides", "must be a mapping of backbone arguments")
        own, student = models.get(name).tokenizer_kind, models.get(architecture).tokenizer_kind
        if own != student:
            check.fail("architecture", f"{name} tokenizes with {own}, the student with "
                                       f"{student}")
        check.choice("objective", models.get(name).objectives)
        if check.boolean("task_distillation"):
            if not models.get(architecture).has_head("classification_distillation"):
                check.fail("task_distillation", f"{architecture} has no task-specific "
                                                f"distillation")
            if recipe["finetuning"].get("task") != "classification":
                check.fail("task_distillation", "needs a classification task")
        return cls(architecture=name, objective=teacher["objective"],
                   preset=teacher["preset"], overrides=teacher["overrides"],
                   task_distillation=teacher["task_distillation"],
                   pretraining=TrainingStage.from_dict(teacher["pretraining"],
                                                       f"{SECTION}.pretraining"),
                   finetuning=FinetuningStage.from_dict(teacher["finetuning"],
                                                        f"{SECTION}.finetuning"))


__all__ = ["KEYS", "SECTION", "Teacher"]
