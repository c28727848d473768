"""The task-kind registry (see the package docstring): `TaskKind` records, registered by
the module of each kind."""

from __future__ import annotations

import dataclasses
import importlib
from typing import Optional

from lmfactory.models.named_registry import NamedRegistry


@dataclasses.dataclass(frozen=True)
class TaskKind:
    """One task kind; its steps live in ``module`` (module-level functions ``train``,
    ``export``, ``evaluate`` and optionally ``task_record`` and ``check_recipe``)."""

    name: str  # the task record's ``kind`` (CONTRACTS §4)
    module: str
    metrics: tuple  # evaluation.metric choices; the first is the task's official metric
    official_metrics: tuple
    formats: tuple = ()  # data.task formats; () = the generic text formats (tsv, csv, ...)
    task_args: Optional[tuple] = ()  # finetuning.task_args keys; None = the head's own
    head: Optional[str] = None  # the `Architecture.head` it fine-tunes
    recipe_task: Optional[str] = None  # finetuning.task value when it is not ``name``
    data_section: str = "task"  # data.<section> its fine-tuning records come from
    in_recipes: bool = True  # False: a kind only written by a component (an import)
    # Recipe ``finetuning`` defaults the kind brings (the recipe's own values win).
    finetuning_defaults: tuple = ()  # (key, value) pairs
    # The task record fields the Trainer needs (checked by TrainerConfig).
    required_record_keys: tuple = ("kind", "sequence_length")
    # Pretraining objectives whose trained models this kind exports and evaluates (the
    # Pretrainer's `language_model` record defers to it, see `serving_kind`).
    objectives: tuple = ()

    @property
    def recipe_name(self) -> str:
        return self.recipe_task or self.name

    def _implementation(self):
        return importlib.import_module(self.module)

    def train(self, context) -> dict:
        return self._implementation().train(context)

    def export(self, task_model, preprocessor, vocab_dir: str, model_config: dict,
               export_dir: str) -> None:
        return self._implementation().export(task_model, preprocessor, vocab_dir,
                                             model_config, export_dir)

    def evaluate(self, model_uri: str, file_pattern: str, task: dict, config: dict) -> dict:
        return self._implementation().evaluate(model_uri, file_pattern, task, config)

    def task_record(self, finetuning: dict, source: dict) -> dict:
        """The task record (CONTRACTS §4 ``task``) of a recipe's ``finetuning`` section and
        data source; ``train`` completes it from the data (e.g. the tag set)."""
        return self._implementation().task_record(self, finetuning, source)

    def standard_record(self, finetuning: dict, source: dict) -> dict:
        """kind, data format, sequence length and official metrics: the record fields of a
        kind with a data format of its own."""
        return {"kind": self.name, "format": source["format"],
                "sequence_length": finetuning["sequence_length"],
                "official_metrics": list(self.official_metrics)}

    def check_recipe(self, check, recipe: dict, arch) -> None:
        """Validates the recipe fields of this kind; ``check`` is the recipe checker
        (``get``, ``choice``, ``positive_int``, ..., ``fail(field, message)``)."""
        if self.head is not None and not arch.has_head(self.head):
            check.fail("finetuning.task", self.missing_head_message(arch))
        own = getattr(self._implementation(), "check_recipe", None)
        if own is not None:
            own(check, recipe, arch)
        if self.task_args is not None:
            allowed = set(self.task_args)
            unknown = sorted(set(recipe["finetuning"].get("task_args", {})) - allowed)
            if unknown:
                check.fail("finetuning.task_args", f"{self.recipe_name} takes "
                                                   f"{sorted(allowed)} for {arch.name}; got "
                                                   f"{unknown}")

    def parts(self) -> dict:
        """Where each of the kind's parts lives: ``{part: [dotted name under lmfactory]}`` of
        the ``Parts:`` section of its module's docstring (`PARTS` names the parts)."""
        return parse_parts(self._implementation().__doc__ or "")

    def missing_head_message(self, arch) -> str:
        if arch.links_entities and arch.family == "encoder":
            return (f"{self.recipe_name} fine-tuning packs no linked entities, which "
                    f"{arch.name}'s inputs carry; its heads: {list(arch.task_kinds)}")
        return (f"{self.recipe_name} fine-tuning needs an encoder or an architecture with "
                f"its own {self.head} head; {arch.name} is a {arch.family} with heads "
                f"{list(arch.task_kinds)}")


# The parts every kind's module lists in the ``Parts:`` section of its docstring, each as
# ``<part>: <name>, <name>`` (names under ``lmfactory.``, modules or their attributes;
# continuation lines indented deeper), so a kind is found from its module:
PARTS = ("record parsing", "head", "preprocessor", "training step", "serving export",
         "metrics")


def parse_parts(docstring: str) -> dict:
    """``{part: [names]}`` of a docstring's ``Parts:`` section ({} when it has none)."""
    lines = docstring.splitlines()
    if "Parts:" not in lines:
        return {}
    parts, current = {}, None
    for line in lines[lines.index("Parts:") + 1:]:
        if not line.strip():
            break
        text = line.strip()
        if line.startswith("    ") and not line.startswith("     ") and ":" in text:
            current, text = (piece.strip() for piece in text.split(":", 1))
            parts[current] = []
        parts[current] += [name.strip() for name in text.split(",") if name.strip()]
    return parts


_KINDS = NamedRegistry("task kind")
register = _KINDS.register  # each kind's module registers its record
unregister = _KINDS.unregister
registered = _KINDS.registered
get = _KINDS.get  # the kind of a task record (``task["kind"]``)
names = _KINDS.names


def serving_kind(objective: str | None) -> Optional[TaskKind]:
    """The kind that exports and evaluates models trained on ``objective`` (e.g.
    ``word_vectors`` for ``skipgram`` / ``cbow``), or None."""
    for kind in _KINDS.records():
        if objective and objective in kind.objectives:
            return kind
    return None


def for_recipe(task: str) -> TaskKind:
    """The kind a recipe's ``finetuning.task`` names."""
    for kind in _KINDS.records():
        if kind.in_recipes and kind.recipe_name == task:
            return kind
    raise ValueError(f"Unknown finetuning.task {task!r}; expected one of {recipe_tasks()}")


def recipe_tasks() -> tuple:
    """The ``finetuning.task`` values recipes may use."""
    return tuple(kind.recipe_name for kind in _KINDS.records() if kind.in_recipes)
