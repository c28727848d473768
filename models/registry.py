"""The architecture registry: one `Architecture` record per model family.

Each model folder (``models/bert``, ``models/gpt2``, ...) registers itself when imported, so
the pipeline components find everything about an architecture by name: its backbone, the
task model of each pretraining objective, its tokenizer and special tokens, how it packs
sentence pairs, and the converters that load published checkpoints. A new architecture is
a new folder, not edits across the tree.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Optional

FAMILIES = ("encoder", "decoder")
TOKENIZER_KINDS = ("wordpiece", "bpe", "sentencepiece", "byte")
# How a classifier packs one or two segments (see models/classifier_preprocessor.py):
# "bert": [CLS] A [SEP] B [SEP]; "roberta": <s> A </s></s> B </s> (two separators between).
SEGMENT_LAYOUTS = ("bert", "roberta")
# Checkpoint formats a converter can read (see models/__init__.py `load_checkpoint`):
# "huggingface": a folder with config.json (model_type) + model.safetensors;
# "tf_checkpoint": an original TensorFlow checkpoint (e.g. google-research/bert's
# bert_config.json + bert_model.ckpt.*).
CHECKPOINT_FORMATS = ("huggingface", "tf_checkpoint")


@dataclasses.dataclass(frozen=True)
class Architecture:
    """What the pipeline needs to know about one pre-trained architecture.

    Attributes:
        name: registry key, e.g. ``"bert"``.
        family: ``"encoder"`` (bidirectional, fine-tuned with a classifier head) or
            ``"decoder"`` (left-to-right, used for generation).
        backbone_cls: the `keras.Model` subclass of the bare network.
        presets: preset name -> constructor kwargs of ``backbone_cls`` (plain dicts).
        tokenizer_kind: ``"wordpiece"``, ``"bpe"``, ``"sentencepiece"`` or ``"byte"``
            (see ``models/tokenizers.py``).
        pretrainers: pretraining objective (CONTRACTS §3 ``objective``) -> the task model
            trained on it, constructed as ``cls(backbone, **task_args)``. A class with
            ``needs_teacher = True`` (distillation) is constructed as
            ``cls(student_backbone, teacher=teacher_task_model, **task_args)``, where the
            teacher is the trained Keras task model of the Trainer's ``base_model`` (it has
            a ``.backbone``); an optional classmethod ``initialize_student(student_backbone,
            teacher_backbone)`` runs first (e.g. DistilBERT's every-other-layer init).
        classifier_cls: task model for sequence classification, ``cls(backbone,
            num_classes=K, **task_args)`` (``task_args``: the recipe's
            ``finetuning.task_args``), or None. Its output is the logits [B, K], or a dict
            with ``logits`` [B, K] (plus whatever its own loss needs, e.g. GPT-1's
            ``lm_logits``). A classifier that overrides ``compute_loss`` computes its whole
            loss and metrics (it is compiled with an optimizer only); any other is trained
            with sparse categorical cross-entropy on the logits.
        classifier_preprocessor: ``fn(vocab_dir, sequence_length, num_text_features,
            task_args) -> layer`` building the layer that maps a tuple of
            ``num_text_features`` batches of raw strings [B] to the classifier's input dict
            (run inside tf.data for fine-tuning and inside the exported SavedModel), for an
            architecture with its own input format (GPT-1's start / delimiter / extract
            packing); None = ``models/classifier_preprocessor.py``'s cls/sep packing in
            ``segment_layout``.
        causal_lm_cls: task model for generation, or None.
        classifier_distiller_cls: task-specific distillation of a classifier (TinyBERT
            §3.2), ``cls(student_backbone, teacher=teacher_classifier, num_classes=K,
            **task_args)`` with a ``classifier`` attribute (what is exported), or None.
        special_tokens: role -> token the vocabulary must reserve (roles: ``pad``, ``unk``,
            ``cls``, ``sep``, ``mask``, ``end_of_text``); None = the tokenizer kind's default.
        segment_layout: how sentence pairs are packed, one of ``SEGMENT_LAYOUTS``.
        converters: checkpoint format -> ``fn(path) -> backbone`` loading published weights.
        hf_model_types: the Hugging Face ``model_type`` values the "huggingface" converter
            reads (e.g. ``("bert",)``).
        paper: citation of the paper the implementation follows.
    """

    name: str
    family: str
    backbone_cls: type
    presets: Mapping
    tokenizer_kind: str
    pretrainers: Mapping
    classifier_cls: Optional[type] = None
    classifier_preprocessor: Optional[Callable] = None
    causal_lm_cls: Optional[type] = None
    classifier_distiller_cls: Optional[type] = None
    special_tokens: Optional[Mapping] = None
    segment_layout: str = "bert"
    converters: Mapping = dataclasses.field(default_factory=dict)
    hf_model_types: tuple = ()
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
        if not self.pretrainers:
            raise ValueError(f"Architecture {self.name!r} has no pretraining objective")
        if self.segment_layout not in SEGMENT_LAYOUTS:
            raise ValueError(f"Architecture {self.name!r}: segment_layout must be one of "
                             f"{SEGMENT_LAYOUTS}, got {self.segment_layout!r}")
        unknown = sorted(set(self.converters) - set(CHECKPOINT_FORMATS))
        if unknown:
            raise ValueError(f"Architecture {self.name!r}: unknown checkpoint format(s) "
                             f"{unknown}; known: {CHECKPOINT_FORMATS}")

    @property
    def objectives(self) -> tuple:
        """The pretraining objectives it trains, in registration order."""
        return tuple(self.pretrainers)

    def pretrainer(self, objective: str) -> type:
        if objective not in self.pretrainers:
            raise ValueError(f"Architecture {self.name!r} does not train objective "
                             f"{objective!r}; it trains {self.objectives}")
        return self.pretrainers[objective]

    def converter(self, checkpoint_format: str) -> Callable:
        if checkpoint_format not in self.converters:
            raise ValueError(f"Architecture {self.name!r} has no converter for "
                             f"{checkpoint_format!r} checkpoints; it reads "
                             f"{sorted(self.converters) or 'none'}")
        return self.converters[checkpoint_format]


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


def find_by_hf_model_type(model_type: str) -> list[Architecture]:
    """Architectures whose Hugging Face converter reads ``model_type``."""
    return [arch for arch in _REGISTRY.values() if model_type in arch.hf_model_types]
