"""Recipe YAML read safely: one-line errors, and no alias bomb expanded.

A recipe file and each ``--set`` value are YAML, read by YAML's safe loader. A YAML error
becomes one `RecipeError` line (what is wrong, and where). YAML aliases let a few KB of text
stand for millions of values ("billion laughs"); nothing in a recipe needs more than a few
hundred, so a document using more than `MAX_ALIASES` aliases, or expanding to more than
`MAX_RECIPE_VALUES` values, is refused before anything copies or walks the whole tree.
"""

from __future__ import annotations

import re

import yaml


class RecipeYamlError(ValueError):
    """YAML that is not a recipe's: ``field`` (the field or ``<file>``) and one line."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


# A recipe is a few hundred values: YAML aliases that expand it far beyond that (a "billion
# laughs" file of nested aliases is a few KB) are refused before anything copies the tree.
MAX_RECIPE_VALUES = 20_000
MAX_ALIASES = 200


class _RecipeLoader(yaml.SafeLoader):
    """YAML's safe loader that counts the aliases it resolves (at most `MAX_ALIASES`)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.events.AliasEvent):
            self.aliases = getattr(self, "aliases", 0) + 1
            if self.aliases > MAX_ALIASES:
                mark = self.peek_event().start_mark
                raise yaml.YAMLError(f"more than {MAX_ALIASES} aliases (line "
                                     f"{mark.line + 1})")
        return super().compose_node(parent, index)


# YAML 1.1, which PyYAML reads, takes a float in exponent notation only with a dot
# ("3.0e-5"); "3e-5", how learning rates are written, would be the string '3e-5' and fail
# the recipe's number checks. YAML 1.2 reads it as a float, and so does the recipe loader.
_RecipeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def _yaml_problem(error: yaml.YAMLError) -> str:
    """One line of a YAML error: what is wrong, and where."""
    problem = getattr(error, "problem", None) or str(error).strip().splitlines()[0]
    mark = getattr(error, "problem_mark", None)
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark else problem


def _count_values(value, budget: int) -> int:
    """How many values ``value`` holds once its aliases are expanded; stops counting past
    ``budget`` (an alias bomb is not walked to its end)."""
    count, stack = 0, [value]
    while stack and count <= budget:
        node = stack.pop()
        count += 1
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return count


def parse_yaml(text, what: str, source: str = ""):
    """``text`` (a string or a file) as YAML, through the safe loader; RecipeYamlError in one
    line (``what``: the field it is; ``source``: the file, named in the message) when it is
    not valid YAML or its aliases expand it past `MAX_RECIPE_VALUES` values."""
    prefix = f"{source}: " if source else ""
    try:
        value = yaml.load(text, Loader=_RecipeLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as error:
        raise RecipeYamlError(what, f"{prefix}not valid YAML: {_yaml_problem(error)}") from None
    if _count_values(value, MAX_RECIPE_VALUES) > MAX_RECIPE_VALUES:
        raise RecipeYamlError(what, f"{prefix}expands to more than {MAX_RECIPE_VALUES:,} values "
                                f"(YAML aliases); a recipe holds a few hundred")
    return value



__all__ = ["MAX_ALIASES", "MAX_RECIPE_VALUES", "RecipeYamlError", "parse_yaml"]
