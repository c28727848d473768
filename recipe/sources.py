"""The recipe's ``data`` section: named sources (``corpus``, ``task``, ``target_corpus``),
each read by its format's reader (components/example_gen), so their keys are the format's
own; checked here are the format, the files and a named GLUE task's fit with
``finetuning``. A named task source also brings recipe defaults (`task_preset_defaults`).
"""

from __future__ import annotations

import dataclasses

from lmfactory.components import tasks as task_kinds
from lmfactory.components.example_gen import formats as ingest_formats
from lmfactory.recipe.errors import RecipeError
from lmfactory.recipe.section import Section

FORMATS = ingest_formats.ALL_FORMATS  # text, tsv, csv, jsonl, tfds and the task formats


def check_source(check, field: str) -> None:
    """``field`` (``data.<name>`` of the whole recipe a `Checker` ``check`` reads): a GLUE
    task, or a format with its files (``path`` with ``eval_fraction``, or ``splits``)."""
    if "train_examples" in (check.get(field) or {}):  # a label budget (example_gen/sampling.py)
        if field != "data.task":
            check.fail(f"{field}.train_examples", "a label budget goes in data.task")
        check.positive_int(f"{field}.train_examples")
    if "glue" in (check.get(field) or {}):
        _check_glue_source(check, field)
        return
    check.choice(f"{field}.format", FORMATS)
    source = check.get(field)
    if source["format"] == "tfds":
        check.get(f"{field}.name")
    elif "path" not in source and "splits" not in source:
        check.fail(f"{field}.path", "give 'path' (with eval_fraction) or 'splits'")
    if "eval_fraction" in source:
        check.fraction(f"{field}.eval_fraction", 0.0, 0.9)


def _check_glue_source(check, field: str) -> None:
    """A GLUE task named by ``glue`` (components/example_gen/glue.py) in the folder ``dir``:
    the task's train/dev files, columns and label come from the preset."""
    from lmfactory.components.example_gen import glue

    source = check.get(field)
    check.choice(f"{field}.glue", tuple(glue.TASKS))
    directory = source.get("dir")
    if not isinstance(directory, str) or not directory:
        check.fail(f"{field}.dir", f"must be the folder holding the GLUE task's train/dev "
                                   f"files, got {directory!r}")
    unknown = sorted(set(source) - {"glue", "dir", "train_examples"})
    if unknown:
        check.fail(field, f"a GLUE task source takes 'glue' and 'dir' only (and a label "
                          f"budget, 'train_examples'), got {unknown}")
    task = glue.get(source["glue"])
    finetuning = check.recipe["finetuning"]
    if finetuning.get("task") != task.kind:
        check.fail("finetuning.task", f"GLUE {task.name} is a {task.kind} task, got "
                                      f"{finetuning.get('task')!r}")
    features = finetuning.get("text_features")
    if not isinstance(features, list) or not set(features) <= set(task.text_features):
        check.fail("finetuning.text_features", f"GLUE {task.name}'s text features are "
                                               f"{list(task.text_features)}; got {features!r}")
    if finetuning.get("num_classes") != task.num_classes:
        check.fail("finetuning.num_classes", f"GLUE {task.name} has {task.num_classes} "
                                             f"output(s), got {finetuning.get('num_classes')!r}")


def task_preset_defaults(raw: dict) -> dict:
    """The defaults a named task source brings (``data.task: {glue: CoLA, dir: ...}``): the
    task kind, text features and number of classes of ``finetuning`` and the task's official
    ``evaluation.metric``; without one, the ``finetuning`` defaults of the task kind the raw
    recipe names (`TaskKind.finetuning_defaults`). The recipe's own values win."""
    source = (raw.get("data") or {}).get("task") if isinstance(raw.get("data"), dict) else None
    if not isinstance(source, dict) or "glue" not in source:
        finetuning = raw.get("finetuning")
        task = finetuning.get("task") if isinstance(finetuning, dict) else None
        if task in task_kinds.recipe_tasks():
            return {"finetuning": dict(task_kinds.for_recipe(task).finetuning_defaults)}
        return {}
    from lmfactory.components.example_gen import glue

    try:
        return glue.finetuning_defaults(source["glue"])
    except ValueError as error:
        raise RecipeError("data.task.glue", str(error)) from error


@dataclasses.dataclass(frozen=True)
class DataSources(Section):
    """``data``: source name -> the source's settings (its format reader's keys)."""

    sources: dict

    @classmethod
    def from_dict(cls, values) -> "DataSources":
        if not isinstance(values, dict):
            raise RecipeError("data", "must be a mapping of data sources (corpus, task, ...)")
        return cls(dict(values))

    def get(self, name: str) -> dict | None:
        return self.sources.get(name)

    def to_dict(self) -> dict:
        return dict(self.sources)


__all__ = ["DataSources", "FORMATS", "check_source", "task_preset_defaults"]
