"""The tokenizer-kind registry: one `TokenizerKind` record per ``kind`` a vocabulary folder's
``tokenizer.json`` may name.

Each kind's module registers its record when imported (``wordpiece``, ``byte_level_bpe``,
``sentencepiece``, ``byte``, ``word``); importing ``lmfactory.models.tokenizers`` imports them all,
so every kind is registered before any folder is read. :func:`load_tokenizer`
(``config.py``) asks :func:`get_kind` for the record of a folder's kind.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Optional

from lmfactory.models.named_registry import NamedRegistry

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


_KINDS = NamedRegistry("tokenizer kind", unknown="Unknown tokenizer kind {name!r}; kinds: {names}")
register_kind = _KINDS.register  # each kind's module registers its record
get_kind = _KINDS.get
kind_names = _KINDS.names  # registration order


__all__ = ["TokenizerKind", "get_kind", "kind_names", "register_kind"]
