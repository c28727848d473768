"""The recipe's key tree, so that a key the format does not have (a typo such as
``pretrainng`` would otherwise leave the defaults in force) is refused, naming the closest
known key. The tree is the sections' fields: their defaults plus the keys given without
one."""

from __future__ import annotations

import difflib

from lmfactory.recipe import knowledge, teacher
from lmfactory.recipe.errors import RecipeError
from lmfactory.recipe.sections import Evaluation, Objective, Serving, Tokenizer
from lmfactory.recipe.stages import LM_FINETUNING, NOT_INHERITED, FinetuningStage

# A section whose keys are not a fixed set: ``data`` sources (checked by their format's
# reader), ``overrides`` (backbone arguments) and ``task_args`` (the task model's arguments).
OPEN = "open"
_OPEN_KEYS = ("data", "overrides", "task_args")


def _keys_without_default() -> dict:
    """Section path -> the keys a recipe gives that have no default (required, or optional
    without one)."""
    return {"": ("name", "architecture", "data", "teacher"),
            "tokenizer": Tokenizer.keys_without_default(),
            "objective": Objective.keys_without_default(),
            "finetuning": FinetuningStage.keys_without_default(),
            "evaluation": Evaluation.keys_without_default(),
            "serving": Serving.keys_without_default()}


def known_keys(defaults: dict) -> dict:
    """The recipe's key tree: ``defaults`` (with the task kind's own finetuning defaults)
    plus the keys without a default; `OPEN` marks a section of free keys, None a leaf."""
    def tree(node):
        if not isinstance(node, dict):
            return None
        return {key: OPEN if key in _OPEN_KEYS else tree(value) for key, value in node.items()}

    schema = tree(defaults)
    for section, keys in _keys_without_default().items():
        target = schema if not section else schema[section]
        target.update({key: OPEN if key in _OPEN_KEYS else None for key in keys
                       if key not in target})
    schema[LM_FINETUNING] = {key: value for key, value in schema["pretraining"].items()
                             if key not in NOT_INHERITED}
    schema[knowledge.SECTION] = knowledge.schema()
    # A teacher's pretraining is trained on the recipe's corpus, never imported.
    stages = {"pretraining": schema[LM_FINETUNING], "finetuning": schema["finetuning"]}
    schema[teacher.SECTION] = {key: stages.get(key, OPEN if key in _OPEN_KEYS else None)
                               for key in teacher.KEYS}
    return schema


def check_known_keys(values: dict, schema: dict, prefix: str = "") -> None:
    """Refuses a key the recipe format does not have, naming the closest known key."""
    for key, value in values.items():
        field = f"{prefix}{key}"
        if key not in schema:
            close = difflib.get_close_matches(str(key), [str(k) for k in schema], n=1,
                                              cutoff=0.6)
            hint = f"; did you mean {prefix}{close[0]}?" if close else \
                f"; known keys here: {', '.join(sorted(map(str, schema)))}"
            raise RecipeError(field, f"unknown key{hint}")
        if isinstance(value, dict) and isinstance(schema[key], dict):
            check_known_keys(value, schema[key], f"{field}.")


__all__ = ["OPEN", "check_known_keys", "known_keys"]
