"""Recipes: plain YAML files that say what one pipeline run builds.

A recipe names the architecture and size preset, the tokenizer, the pretraining objective,
the data sources, the fine-tuning task, steps and batch sizes, the distribution strategy and
the Beam options. Each section is a frozen dataclass that holds its defaults and checks its
values (`sections`, `stages`, `sources`, `knowledge`, `teacher`); `document.Recipe` is the
whole recipe, with the checks that span sections. :func:`load` reads a recipe file into a
`Recipe`; :func:`load_recipe` returns its resolved mapping (`Recipe.to_dict`: every default
filled in), which the pipeline reads. A wrong value raises :class:`RecipeError` with a
one-line message naming the field (``recipe field 'pretraining.steps': must be a positive
integer, got -3``).
"""

from __future__ import annotations

import copy
import os
from importlib import resources

from lmfactory.recipe.checker import MAX_NAME_LENGTH, NAME_PATTERN, Checker
from lmfactory.recipe.document import Recipe
from lmfactory.recipe.errors import RecipeError
from lmfactory.recipe.keys import OPEN, check_known_keys, known_keys
from lmfactory.recipe.section import merge as _merge
from lmfactory.recipe.sections import (RUNNING_MODES, VOCABULARY_SOURCES, Beam, Evaluation,
                                       Generation, Objective, Runtime, Serving, Tokenizer)
from lmfactory.recipe.sources import FORMATS, DataSources, task_preset_defaults
from lmfactory.recipe.stages import (OPTIMIZER_KEYS, FinetuningStage, PretrainingStage,
                                     TrainingStage)
from lmfactory.recipe.teacher import Teacher
from lmfactory.recipe.yaml_io import RecipeYamlError
from lmfactory.recipe.yaml_io import parse_yaml as _parse_yaml

RECIPE_SUFFIX = ".yaml"
# A training stage's optimiser settings and their defaults (TrainerConfig's).
OPTIMIZER_DEFAULTS = {key: TrainingStage.defaults()[key] for key in OPTIMIZER_KEYS}
# Every section's defaults, as a recipe's mapping holds them.
DEFAULTS = Recipe.defaults()


def recipe_names() -> list[str]:
    folder = resources.files("lmfactory.recipes")
    return sorted(entry.name[: -len(RECIPE_SUFFIX)] for entry in folder.iterdir()
                  if entry.name.endswith(RECIPE_SUFFIX))


def recipe_path(name_or_path: str) -> str:
    if os.path.exists(name_or_path):
        return name_or_path
    path = resources.files("lmfactory.recipes") / f"{name_or_path}{RECIPE_SUFFIX}"
    if not path.is_file():
        raise FileNotFoundError(f"No recipe file or registered recipe named {name_or_path!r}; "
                                f"registered: {', '.join(recipe_names())}")
    return str(path)


def parse_yaml(text, what: str, source: str = ""):
    """yaml_io.parse_yaml, its errors as `RecipeError` naming ``what``."""
    try:
        return _parse_yaml(text, what, source)
    except RecipeYamlError as error:
        raise RecipeError(error.field, error.message) from None


def apply_overrides(values: dict, assignments: list[str]) -> dict:
    """Applies ``a.b.c=value`` assignments (value parsed as YAML) to a raw recipe dict."""
    values = copy.deepcopy(values)
    for assignment in assignments or []:
        if "=" not in assignment:
            raise RecipeError(assignment, "an override must look like field.path=value")
        path, raw = assignment.split("=", 1)
        node = values
        keys = path.split(".")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise RecipeError(path, f"{key!r} is not a section")
        node[keys[-1]] = parse_yaml(raw, path)
    return values


def load(name_or_path: str, overrides: list[str] | None = None) -> Recipe:
    """The checked `Recipe` of a registered recipe name or a YAML file, with ``overrides``
    (``field.path=value``) applied."""
    path = recipe_path(name_or_path)
    with open(path, encoding="utf-8") as f:
        raw = parse_yaml(f, "<file>", path) or {}
    if not isinstance(raw, dict):
        raise RecipeError("<file>", f"{path} must hold a mapping")
    raw.setdefault("name", os.path.splitext(os.path.basename(path))[0])
    raw = apply_overrides(raw, overrides)
    defaults = _merge(DEFAULTS, task_preset_defaults(raw))
    check_known_keys(raw, known_keys(defaults))
    return Recipe.from_dict(_merge(defaults, raw))


def load_recipe(name_or_path: str, overrides: list[str] | None = None) -> dict:
    """The resolved mapping (every default filled in) of `load`'s recipe."""
    return load(name_or_path, overrides).to_dict()


def validate(recipe: dict) -> dict:
    """The resolved mapping of ``recipe`` (a mapping with the defaults filled in), checked;
    a resolved mapping resolves to itself."""
    return Recipe.from_dict(recipe).to_dict()


def beam_pipeline_args(recipe: dict) -> list[str]:
    """The Beam arguments of every Beam stage (``runtime.beam``; ``auto`` adds the size
    policy of :mod:`lmfactory.components.beam_options`)."""
    return Beam.from_dict(recipe["runtime"]["beam"]).pipeline_args()


__all__ = ["Beam", "Checker", "DEFAULTS", "DataSources", "Evaluation", "FORMATS",
           "FinetuningStage", "Generation", "MAX_NAME_LENGTH", "NAME_PATTERN", "OPEN",
           "OPTIMIZER_DEFAULTS", "Objective", "PretrainingStage", "RECIPE_SUFFIX",
           "RUNNING_MODES", "Recipe", "RecipeError", "Runtime", "Serving", "Teacher",
           "Tokenizer", "TrainingStage", "VOCABULARY_SOURCES", "apply_overrides",
           "beam_pipeline_args", "check_known_keys", "known_keys", "load", "load_recipe",
           "parse_yaml", "recipe_names", "recipe_path", "validate"]
