"""The one error a recipe check raises: the field's dotted path and a one-line message."""

from __future__ import annotations


class RecipeError(ValueError):
    """A recipe value is missing or wrong; the message names the field."""

    def __init__(self, field: str, message: str):
        super().__init__(f"recipe field {field!r}: {message}")
        self.field = field


__all__ = ["RecipeError"]
