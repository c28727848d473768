"""The architecture registry: one `Architecture` record per model family.

Each model folder (``models/bert``, ``models/gpt2``) registers itself when imported, so the
pipeline components find architectures by name (``"bert"``, ``"gpt2"``) without importing
model code directly.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

FAMILIES = ("encoder", "decoder")
TOKENIZER_KINDS = ("wordpiece", "bpe")


@dataclasses.dataclass(frozen=True)
class Architecture:
    """What the pipeline needs to know about one pre-trained architecture.

    Attributes:
        name: registry key, e.g. ``"bert"``.
        family: ``"encoder"`` (bidirectional, fine-tuned with a classifier head) or
            ``"decoder"`` (left-to-right, used for generation).
        backbone_cls: the `keras.Model` subclass of the bare network.
        presets: preset name -> constructor kwargs of ``backbone_cls`` (plain dicts).
        tokenizer_kind: ``"wordpiece"`` or ``"bpe"`` (see ``models/tokenizers.py``).
        objectives: pretraining objectives it supports (CONTRACTS §3 ``objective``).
        pretrainer_cls: the task model trained on those objectives.
        classifier_cls: task model for sequence classification, or None.
        causal_lm_cls: task model for generation, or None.
        paper: citation of the paper the implementation follows.
    """

    name: str
    family: str
    backbone_cls: type
    presets: dict
    tokenizer_kind: str
    objectives: tuple
    pretrainer_cls: type
    classifier_cls: Optional[type] = None
    causal_lm_cls: Optional[type] = None
    paper: str = ""

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"Architecture {self.name!r}: family must be one of {FAMILIES}, "
                             f"got {self.family!r}")
        if self.tokenizer_kind not in TOKENIZER_KINDS:
            raise ValueError(f"Architecture {self.name!r}: tokenizer_kind must be one of "
                             f"{TOKENIZER_KINDS}, got {self.tokenizer_kind!r}")
        if not self.presets:
            raise ValueError(f"Architecture {self.name!r} has no presets")


_REGISTRY: dict[str, Architecture] = {}


def register(arch: Architecture) -> Architecture:
    """Adds ``arch`` under ``arch.name``; re-registering the same record is a no-op."""
    existing = _REGISTRY.get(arch.name)
    if existing is not None and existing != arch:
        raise ValueError(f"Architecture {arch.name!r} is already registered "
                         f"(backbone {existing.backbone_cls.__name__})")
    _REGISTRY[arch.name] = arch
    return arch


def get(name: str) -> Architecture:
    if name not in _REGISTRY:
        raise ValueError(f"Unknown architecture {name!r}; known architectures: {names()}")
    return _REGISTRY[name]


def names() -> list[str]:
    return sorted(_REGISTRY)


def find_by_backbone(backbone) -> Architecture:
    """The architecture whose ``backbone_cls`` built ``backbone`` (an instance or class)."""
    cls = backbone if isinstance(backbone, type) else type(backbone)
    for arch in _REGISTRY.values():
        if cls is arch.backbone_cls:
            return arch
    for arch in _REGISTRY.values():
        if issubclass(cls, arch.backbone_cls):
            return arch
    raise ValueError(f"{cls.__name__} is not the backbone of a registered architecture "
                     f"({names()})")
