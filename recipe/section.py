"""What every typed recipe section shares: its defaults as a plain mapping, and the plain
mapping it resolves to (`Section.to_dict`), the form the pipeline's readers and
``lmfactory validate --print`` see.

A field declared with ``metadata=NO_DEFAULT`` is one the recipe gives without a default
(``tokenizer.kind``, ``finetuning.task``, ...): it is absent from the defaults, and from the
resolved mapping while it is None (as is an ``OMIT_IF_NONE`` field). Tuples (frozen lists)
resolve to lists, sections to their mappings.
"""

from __future__ import annotations

import copy
import dataclasses

NO_DEFAULT = {"no_default": True, "omit_if_none": True}
# A field whose None means "not given": absent from the resolved mapping while None.
OMIT_IF_NONE = {"omit_if_none": True}
# A mapping field whose keys are the section's own keys in the recipe (flattened into it).
FLATTENED = {"no_default": True, "flattened": True}


def plain(value):
    """``value`` as YAML / JSON would hold it: sections as mappings, tuples as lists."""
    if isinstance(value, Section):
        return value.to_dict()
    if isinstance(value, tuple):
        return [plain(item) for item in value]
    if isinstance(value, list):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    return value


def merge(defaults: dict, values: dict) -> dict:
    """``values`` over ``defaults``: a mapping given for a non-empty mapping default is
    merged key by key; anything else replaces the default."""
    merged = copy.deepcopy(defaults)
    for key, value in values.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict) and merged[key]:
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


class Section:
    """Base of the frozen dataclass sections."""

    @classmethod
    def field_default(cls, name: str):
        field = next(field for field in dataclasses.fields(cls) if field.name == name)
        if field.default_factory is not dataclasses.MISSING:
            return field.default_factory()
        return field.default

    @classmethod
    def defaults(cls) -> dict:
        """The section's defaults, as the recipe's mapping holds them."""
        return {field.name: plain(cls.field_default(field.name))
                for field in dataclasses.fields(cls)
                if not field.metadata.get("no_default")
                and (field.default is not dataclasses.MISSING
                     or field.default_factory is not dataclasses.MISSING)}

    @classmethod
    def keys_without_default(cls) -> tuple:
        return tuple(field.name for field in dataclasses.fields(cls)
                     if field.metadata.get("no_default") and not field.metadata.get("flattened"))

    def to_dict(self) -> dict:
        return {field.name: plain(getattr(self, field.name))
                for field in dataclasses.fields(self)
                if not (field.metadata.get("omit_if_none") and getattr(self, field.name) is None)}

    @classmethod
    def from_values(cls, values: dict):
        """The section of a mapping that holds its fields (no checks)."""
        names = {field.name for field in dataclasses.fields(cls)}
        return cls(**{key: tuple(value) if isinstance(value, list) else value
                      for key, value in values.items() if key in names})


__all__ = ["FLATTENED", "NO_DEFAULT", "OMIT_IF_NONE", "Section", "merge", "plain"]
