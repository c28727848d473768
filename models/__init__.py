"""Model architectures: registry, construction from presets, and backbone checkpoints.

Importing this package registers every architecture: each model folder (any sub-package of
``models/``) registers itself in its ``__init__`` and is found by `_import_model_folders`.

    from lmfactory import models
    backbone = models.build("bert", "base", vocabulary_size=32000)
    models.save_checkpoint(backbone, "/tmp/ckpt")
    backbone = models.load_checkpoint("bert", "/tmp/ckpt")
"""

from __future__ import annotations

import inspect
import json
import os

import importlib
import pkgutil

from lmfactory.models import backend, registry
from lmfactory.models.registry import Architecture, get, names, register


def _import_model_folders() -> None:
    """Imports every sub-package of ``models/``: each architecture folder registers its
    `Architecture`, ``tasks`` the encoder family's default heads, ``tokenizers`` the tokenizer
    kinds. A new folder is found without editing this file."""
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if module.ispkg:
            importlib.import_module(f"{__name__}.{module.name}")


_import_model_folders()

CHECKPOINT_FORMAT = "lmfactory.backbone"
CHECKPOINT_CONFIG = "config.json"
CHECKPOINT_WEIGHTS = "model.weights.h5"

def presets(name: str) -> dict:
    """Preset name -> backbone constructor kwargs of architecture ``name`` (a copy)."""
    return {preset: dict(config) for preset, config in get(name).presets.items()}


def backbone_arguments(name: str) -> list[str]:
    """The constructor arguments of ``name``'s backbone that `build` accepts as overrides."""
    signature = inspect.signature(get(name).backbone_cls.__init__)
    arguments = [p.name for p in signature.parameters.values()
                 if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    return arguments + ["name"]


def build(name: str, preset: str = "tiny", **overrides):
    """A freshly initialised backbone of architecture ``name`` at size ``preset``, with
    constructor arguments in ``overrides`` replacing the preset's (e.g. vocabulary_size)."""
    arch = get(name)
    arch.check_backend(backend.name())
    if preset not in arch.presets:
        raise ValueError(f"Unknown preset {preset!r} for {name!r}; "
                         f"presets: {sorted(arch.presets)}")
    allowed = backbone_arguments(name)
    unknown = sorted(set(overrides) - set(allowed))
    if unknown:
        raise ValueError(f"Unknown override(s) {unknown} for {name!r}; "
                         f"allowed: {sorted(allowed)}")
    config = {**arch.presets[preset], **overrides}
    return arch.backbone_cls(**config)


def _join(path, filename):
    return os.path.join(os.fspath(path), filename)


def save_checkpoint(backbone, path, preset: str | None = None) -> None:
    """Writes ``backbone`` to the folder ``path``: ``config.json`` (architecture, preset
    name if known, the backbone's config) and ``model.weights.h5``."""
    import tensorflow as tf

    arch = registry.find_by_backbone(backbone)
    tf.io.gfile.makedirs(os.fspath(path))
    with tf.io.gfile.GFile(_join(path, CHECKPOINT_CONFIG), "w") as f:
        json.dump({
            "format": CHECKPOINT_FORMAT,
            "architecture": arch.name,
            "backbone_class": type(backbone).__name__,
            "preset": preset,
            "config": backbone.get_config(),
        }, f, indent=2, sort_keys=True)
    backbone.save_weights(_join(path, CHECKPOINT_WEIGHTS))


def checkpoint_format(path) -> str:
    """What kind of checkpoint folder ``path`` is: ``"lmfactory"`` (written by
    `save_checkpoint`), ``"huggingface"`` (``config.json`` with a ``model_type``) or
    ``"tf_checkpoint"`` (an original TensorFlow checkpoint: a ``*.ckpt*.index`` file)."""
    import tensorflow as tf

    path = os.fspath(path)
    if not tf.io.gfile.isdir(path):
        raise FileNotFoundError(f"Checkpoint folder {path!r} does not exist")
    config_path = _join(path, CHECKPOINT_CONFIG)
    if tf.io.gfile.exists(config_path):
        from lmfactory.models.hf_utils import json_object

        with tf.io.gfile.GFile(config_path, "r") as f:
            config = json_object(f.read(), config_path)
        if config.get("format") == CHECKPOINT_FORMAT:
            return "lmfactory"
        if "model_type" in config:
            return "huggingface"
    if tf.io.gfile.glob(_join(path, "*.index")):
        return "tf_checkpoint"
    raise ValueError(f"{path!r} is not a checkpoint folder lmfactory reads: expected an "
                     f"lmfactory {CHECKPOINT_CONFIG}, a Hugging Face {CHECKPOINT_CONFIG} with "
                     f"'model_type', or a TensorFlow checkpoint (*.index)")


def load_checkpoint(name: str, path):
    """Loads a backbone of architecture ``name`` from the folder ``path``.

    Reads folders written by `save_checkpoint`, and published checkpoints through the
    architecture's converters (`Architecture.converters`): a Hugging Face folder
    (``config.json`` + ``model.safetensors``) or an original TensorFlow checkpoint.
    """
    import tensorflow as tf

    from lmfactory.models import hf_utils, weights_file

    arch = get(name)
    kind = checkpoint_format(path)
    if kind != "lmfactory":
        return arch.converter(kind)(os.fspath(path))
    config_path = _join(path, CHECKPOINT_CONFIG)
    with tf.io.gfile.GFile(config_path, "r") as f:
        config = hf_utils.json_object(f.read(), config_path)
    if config.get("architecture") != name:
        raise ValueError(f"{path!r} holds a {config.get('architecture')!r} checkpoint, "
                         f"not {name!r}")
    # The sizes and the stored arrays are checked before Keras builds and casts them.
    return weights_file.load_backbone(arch.backbone_cls, config.get("config"),
                                      _join(path, CHECKPOINT_WEIGHTS), config_path)


__all__ = [
    "Architecture",
    "backbone_arguments",
    "build",
    "checkpoint_format",
    "get",
    "load_checkpoint",
    "names",
    "presets",
    "register",
    "save_checkpoint",
]
