"""Loading a backbone from a Keras ``.weights.h5`` file and its config, with the checks Keras
leaves out.

Keras assigns each stored array to its variable with a cast and no word: an int8 or boolean
array where a float weight belongs is loaded as numbers, a float64 1e300 becomes inf, and
NaN goes in as it is. A size of 0 or -1 in the config fails deep inside Keras' functional
graph ("inputs not connected to outputs") without naming the field. Both come from files
users download or hand-edit (`models.load_checkpoint`, a Model artifact), so they are refused
here in one line naming the tensor or the field.
"""

from __future__ import annotations

import io

import h5py
import numpy as np

from lmfactory.models.hf_utils import as_float32_weight, positive_int

# The backbone sizes every architecture's config names when it has them; each must be a
# positive integer.
SIZE_FIELDS = ("vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim",
               "max_sequence_length")


def check_backbone_config(config, source: str) -> dict:
    """``config`` (a backbone's ``get_config()``) when it is an object whose sizes are
    positive integers; ValueError naming ``source`` and the field otherwise."""
    if not isinstance(config, dict):
        raise ValueError(f"{source}: the backbone config must be a JSON object, got a "
                         f"{type(config).__name__}")
    for field in SIZE_FIELDS:
        if field in config:
            positive_int(config, field, source)
    return config


def _datasets(group, prefix: str = ""):
    for key, item in group.items():
        name = f"{prefix}/{key}" if prefix else key
        if isinstance(item, h5py.Dataset):
            yield name, item
        else:
            yield from _datasets(item, name)


def check_weights_file(path: str, model) -> None:
    """Fails (ValueError naming the tensor) when the Keras weights file ``path`` holds a
    non-finite float, or more non-float arrays than ``model`` has non-float variables (each
    of those would be cast into a float weight)."""
    import tensorflow as tf

    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"No weights file at {path}")
    expected_other = sum(1 for weight in model.weights if "float" not in str(weight.dtype))
    source = path
    if "://" in path:  # h5py reads local files only; a remote file is read into memory
        with tf.io.gfile.GFile(path, "rb") as f:
            source = io.BytesIO(f.read())
    try:
        handle = h5py.File(source, "r")
    except OSError as error:
        raise ValueError(f"{path}: not a Keras weights file ({error})") from None
    other = []
    with handle:
        for name, dataset in _datasets(handle):
            value = dataset[()]
            if np.asarray(value).dtype.kind == "f":
                as_float32_weight(f"{path}:{name}", value)
            else:
                other.append((name, np.asarray(value).dtype))
    if len(other) > expected_other:
        name, dtype = other[expected_other] if expected_other else other[0]
        raise ValueError(f"Checkpoint tensor {path}:{name} is {dtype}, where a floating-point "
                         f"weight is expected")


def load_backbone(backbone_cls, config, weights_path: str, source: str):
    """``backbone_cls.from_config(config)`` with the weights of ``weights_path``, both
    checked first (`check_backbone_config`, `check_weights_file`)."""
    backbone = backbone_cls.from_config(check_backbone_config(config, source))
    check_weights_file(weights_path, backbone)
    backbone.load_weights(weights_path)
    return backbone


__all__ = ["SIZE_FIELDS", "check_backbone_config", "check_weights_file", "load_backbone"]
