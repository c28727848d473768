"""The one mechanism behind every registry of the project: records keyed by their ``name``.

Each domain keeps its own registry module with its record type and questions (architectures
in `models/registry.py`, tokenizer kinds in `models/tokenizers/kinds.py`, pretraining
objectives in `components/pretraining_data/registry.py`, task kinds in
`components/tasks/registry.py`); what they share — adding a record from the module that
defines it, refusing a second different record under the same name, looking one up with a
one-line error naming the known ones, and a temporary registration for tests — lives here.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator


class NamedRegistry:
    """Records with a ``name`` attribute, in registration order.

    Args:
        what: what a record is, for messages ("architecture", "task kind", ...).
        unknown: the message of `get` for an unknown name, formatted with ``what``,
            ``name`` and ``names`` (the registered names, sorted).
    """

    def __init__(self, what: str,
                 unknown: str = "Unknown {what} {name!r}; expected one of {names}"):
        self.what = what
        self._unknown = unknown
        self._records: dict[str, Any] = {}

    def register(self, record):
        """Adds ``record`` under ``record.name`` and returns it; registering the same record
        again is a no-op, a different one under a taken name a ValueError."""
        existing = self._records.get(record.name)
        if existing is not None and existing != record:
            raise ValueError(f"{self.what[0].upper()}{self.what[1:]} {record.name!r} is "
                             f"already registered")
        self._records[record.name] = record
        return record

    def unregister(self, name: str) -> None:
        """Removes ``name`` (e.g. what a test registered); an unknown name is a ValueError."""
        self.get(name)
        del self._records[name]

    @contextlib.contextmanager
    def registered(self, record) -> Iterator[Any]:
        """``record`` registered for the duration of a ``with`` block (tests, experiments)."""
        self.register(record)
        try:
            yield record
        finally:
            self.unregister(record.name)

    def get(self, name: str):
        if name not in self._records:
            raise ValueError(self._unknown.format(what=self.what, name=name,
                                                  names=tuple(sorted(self.names()))))
        return self._records[name]

    def __contains__(self, name) -> bool:
        return name in self._records

    def names(self) -> tuple:
        """The registered names, in registration order."""
        return tuple(self._records)

    def records(self) -> tuple:
        return tuple(self._records.values())


__all__ = ["NamedRegistry"]
