"""The value checks every recipe section uses, each raising one `RecipeError` line.

A `Checker` reads dotted fields of a mapping: a section's own values (``at`` is the
section's path, so ``Checker(values, "pretraining").positive_int("steps")`` names
``pretraining.steps``), or the whole recipe (``at`` empty), which is how the task kinds'
``check_recipe`` (components/tasks) and the transfer control read the fields they own.
"""

from __future__ import annotations

import re

from lmfactory.recipe.errors import RecipeError

# A recipe value that becomes one folder's name (the run's folder under --output-dir, the
# model's folder under the serving directory): one path component, so that everything a run
# writes stays under the folders it was given, and a name every file system and GCS take.
MAX_NAME_LENGTH = 100
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Checker:
    """Checks of the fields of ``recipe`` (a mapping), named under ``at``."""

    def __init__(self, recipe: dict, at: str = ""):
        self.recipe = recipe
        self.at = at

    def path(self, field: str) -> str:
        return f"{self.at}.{field}" if self.at else field

    def fail(self, field: str, message: str):
        raise RecipeError(self.path(field), message)

    def source(self, field: str) -> None:
        """A data source (``data.corpus``, ``data.task``, ...): its format and files."""
        from lmfactory.recipe.sources import check_source

        check_source(self, field)

    def get(self, field: str, required: bool = True):
        node = self.recipe
        for key in field.split("."):
            if not isinstance(node, dict) or key not in node or node[key] is None:
                if required:
                    self.fail(field, "is required")
                return None
            node = node[key]
        return node

    def choice(self, field, choices, required=True):
        value = self.get(field, required)
        if value is not None and value not in choices:
            self.fail(field, f"must be one of {', '.join(choices)}; got {value!r}")
        return value

    def positive_int(self, field, required=True):
        value = self.get(field, required)
        if value is not None and (not is_int(value) or value < 1):
            self.fail(field, f"must be a positive integer, got {value!r}")
        return value

    def non_negative_int(self, field, what: str = ""):
        value = self.get(field)
        if not is_int(value) or value < 0:
            self.fail(field, f"must be an integer >= 0{what}, got {value!r}")
        return value

    def fraction(self, field, low=0.0, high=1.0, required=True):
        value = self.get(field, required)
        if value is not None and (not is_number(value) or not low <= value <= high):
            self.fail(field, f"must be a number in [{low}, {high}], got {value!r}")
        return value

    def boolean(self, field):
        value = self.get(field)
        if not isinstance(value, bool):
            self.fail(field, f"must be true or false, got {value!r}")
        return value

    def mapping(self, field, message: str):
        value = self.get(field)
        if not isinstance(value, dict):
            self.fail(field, message)
        return value

    def folder_name(self, field):
        """A name that becomes one folder's name (`NAME_PATTERN`, at most
        `MAX_NAME_LENGTH` characters: never empty, ``.``, ``..`` or a path)."""
        value = self.get(field)
        if not isinstance(value, str) or len(value) > MAX_NAME_LENGTH \
                or not NAME_PATTERN.fullmatch(value):
            shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
            self.fail(field, f"must be a folder name: 1-{MAX_NAME_LENGTH} letters, digits, "
                             f"'.', '_' or '-', starting with a letter or digit; got {shown}")
        return value

    def string_list(self, field):
        value = self.get(field)
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            self.fail(field, f"must be a non-empty list of names, got {value!r}")
        return value


__all__ = ["Checker", "MAX_NAME_LENGTH", "NAME_PATTERN", "is_int", "is_number"]
