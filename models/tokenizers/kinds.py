"""The tokenizer-kind registry: one `TokenizerKind` record per ``kind`` a vocabulary folder's
``tokenizer.json`` may name.

Each kind's module registers its record when imported (``wordpiece``, ``byte_level_bpe``,
``sentencepiece``, ``byte``); importing ``lmfactory.models.tokenizers`` imports them all,
so every kind is registered before any folder is read. :func:`load_tokenizer`
(``config.py``) asks :func:`get_kind` for the record of a folder's kind.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Optional

_KINDS: dict = {}


@dataclasses.dataclass(frozen=True)
class TokenizerKind:
    """A tokenizer kind.

    Attributes:
        name: the ``kind`` in ``tokenizer.json``.
        load: ``load(vocab_dir, config, sequence_length)`` -> the keras-nlp tokenizer of the
            folder ``vocab_dir`` whose ``tokenizer.json`` content is ``config``.
        default_special_tokens: role -> token the loader falls back on where the folder
            names none (None: the kind has no such default).
    """

    name: str
    load: Callable
    default_special_tokens: Optional[Mapping[str, str]] = None


def register_kind(kind: TokenizerKind) -> TokenizerKind:
    """Adds ``kind`` to the registry (a name registers once) and returns it."""
    if kind.name in _KINDS:
        raise ValueError(f"Tokenizer kind {kind.name!r} is already registered")
    _KINDS[kind.name] = kind
    return kind


def kind_names() -> tuple:
    """The registered kind names, in registration order."""
    return tuple(_KINDS)


def get_kind(name: str) -> TokenizerKind:
    """The record of kind ``name``; ValueError naming the registered kinds if none."""
    if name not in _KINDS:
        raise ValueError(f"Unknown tokenizer kind {name!r}; kinds: {kind_names()}")
    return _KINDS[name]


__all__ = ["TokenizerKind", "get_kind", "kind_names", "register_kind"]
