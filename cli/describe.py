"""The one-line description of the model a recipe builds, for ``lmfactory run``'s first line.

A recipe that starts from published weights (``pretraining.init_checkpoint``) gets its size
from the checkpoint, not from ``preset`` (which it ignores): the line then names the
checkpoint and the sizes its config file declares (an lmfactory ``config.json``, a Hugging
Face ``config.json`` or an original TensorFlow checkpoint's ``*config.json``), instead of the
unused preset (which would read ``Running recipe ... (bert/tiny)`` for a 6 x 384 model).
"""

from __future__ import annotations

import glob
import json
import os

# Config keys that hold a size, across the formats the converters read.
_SIZE_KEYS = (("layers", ("num_layers", "num_hidden_layers", "n_layer")),
              ("hidden", ("hidden_dim", "hidden_size", "n_embd", "d_model")),
              ("heads", ("num_heads", "num_attention_heads", "n_head")),
              ("vocabulary", ("vocabulary_size", "vocab_size")))


def checkpoint_sizes(folder: str) -> dict:
    """``{"layers", "hidden", "heads", "vocabulary"}`` (those found) of the checkpoint
    folder's config file; {} when it has none readable."""
    candidates = [os.path.join(folder, "config.json")] + sorted(
        glob.glob(os.path.join(folder, "*config.json")))
    for path in candidates:
        try:
            with open(path, encoding="utf-8") as f:
                config = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(config.get("config"), dict):  # lmfactory: the backbone's own config
            config = config["config"]
        sizes = {}
        for size, keys in _SIZE_KEYS:
            value = next((config[k] for k in keys if isinstance(config.get(k), int)), None)
            if value is not None:
                sizes[size] = value
        if sizes:
            return sizes
    return {}


def describe_model(recipe: dict) -> str:
    """``bert/tiny``, or for an imported checkpoint ``bert from checkpoint <path>: 6 layers,
    hidden 384, 12 heads, vocabulary 30522``."""
    checkpoint = (recipe.get("pretraining") or {}).get("init_checkpoint")
    if not checkpoint:
        return f"{recipe['architecture']}/{recipe['preset']}"
    from lmfactory.components.checkpoint_import.executor import resolve_checkpoint_path

    try:
        folder = resolve_checkpoint_path(checkpoint)
    except FileNotFoundError:
        folder = checkpoint
    sizes = checkpoint_sizes(folder)
    shown = ", ".join(f"{value} {size}" if size in ("layers", "heads") else f"{size} {value}"
                      for size, value in sizes.items())
    return (f"{recipe['architecture']} from checkpoint {checkpoint}"
            + (f": {shown}" if shown else " (sizes from its config)"))
