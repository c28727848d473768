"""A published checkpoint is read as it is or refused in one line naming the tensor or field:
no integer or boolean tensor cast into a weight, no NaN, inf or float64 value beyond
float32's range loaded, no config that is not an object or has no layers."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from lmfactory import models

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "hf" / "bert"
WEIGHT = "embeddings.word_embeddings.weight"


def _copy(tmp_path, change=None, config_change=None):
    folder = tmp_path / "checkpoint"
    shutil.copytree(FIXTURE, folder)
    weights = load_file(str(folder / "model.safetensors"))
    name = next(k for k in weights if k.endswith(WEIGHT))
    if change:
        weights[name] = change(weights[name])
        save_file(weights, str(folder / "model.safetensors"))
    if config_change:
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps(config_change(config)))
    return folder, name


# A weight array changed into what must be refused, and the refusal's words.
WRONG_KINDS = [
    (lambda w: w.astype(np.int8), "is int8, where a floating-point weight is expected"),
    (lambda w: w > 0, "is bool, where a floating-point weight is expected"),
    (lambda w: np.where(np.arange(w.size).reshape(w.shape) == 3, 1e300, w).astype(np.float64),
     "non-finite values"),
    (lambda w: np.where(np.arange(w.size).reshape(w.shape) == 3, np.nan, w), "non-finite"),
]


@pytest.mark.parametrize("checkpoint_format", ["huggingface", "lmfactory"])
@pytest.mark.parametrize("change, message", WRONG_KINDS)
def test_a_weight_of_the_wrong_kind_is_refused_naming_it(tmp_path, change, message,
                                                         checkpoint_format):
    write = _copy if checkpoint_format == "huggingface" else _own_checkpoint
    folder, name = write(tmp_path, change)
    with pytest.raises(ValueError, match=message) as error:
        models.load_checkpoint("bert", folder)
    assert name in str(error.value) and "\n" not in str(error.value)


def test_float16_and_float64_weights_in_range_load(tmp_path):
    reference = models.load_checkpoint("bert", FIXTURE).get_weights()
    for dtype in (np.float16, np.float64):
        folder, _ = _copy(tmp_path / dtype.__name__, lambda w, d=dtype: w.astype(d))
        loaded = models.load_checkpoint("bert", folder).get_weights()
        assert all(np.allclose(a, b, atol=1e-2) for a, b in zip(loaded, reference))


@pytest.mark.parametrize("config_change, message", [
    (lambda c: [c], "must hold a JSON object, got a list"),
    (lambda c: dict(c, num_hidden_layers=0), "'num_hidden_layers' must be a positive integer"),
    (lambda c: dict(c, num_hidden_layers=-1), "'num_hidden_layers' must be a positive integer"),
])
def test_a_config_that_cannot_describe_a_model_is_one_line(tmp_path, config_change, message):
    folder, _ = _copy(tmp_path, config_change=config_change)
    with pytest.raises(ValueError, match=message) as error:
        models.load_checkpoint("bert", folder)
    assert "\n" not in str(error.value)


# --- the project's own format (config.json + model.weights.h5, models.save_checkpoint) ---
def _own_checkpoint(tmp_path, change=None, config_change=None):
    """A saved tiny BERT backbone with one array of its weights file, or its config, changed;
    returns the folder and the changed array's name in the file."""
    import h5py

    folder = tmp_path / "own"
    models.save_checkpoint(models.build("bert", "tiny", vocabulary_size=50, num_layers=1,
                                        hidden_dim=8, num_heads=2, intermediate_dim=16,
                                        max_sequence_length=16), folder)
    name = None
    with h5py.File(folder / models.CHECKPOINT_WEIGHTS, "r+") as weights:
        arrays = []
        weights.visititems(lambda key, item: arrays.append(key)
                           if isinstance(item, h5py.Dataset) else None)
        name = next(key for key in arrays if len(weights[key].shape) == 2)
        if change:
            value = change(weights[name][()])
            del weights[name]
            weights[name] = value
    if config_change:
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps(config_change(config)))
    return folder, name


@pytest.mark.parametrize("config_change, message", [
    (lambda c: [c], "must hold a JSON object, got a list"),
    (lambda c: dict(c, config=dict(c["config"], num_layers=0)),
     "'num_layers' must be a positive integer"),
    (lambda c: dict(c, config=dict(c["config"], num_layers=-1)),
     "'num_layers' must be a positive integer"),
    (lambda c: dict(c, config=[1]), "the backbone config must be a JSON object"),
])
def test_own_format_config_that_cannot_describe_a_model_is_one_line(tmp_path, config_change,
                                                                      message):
    folder, _ = _own_checkpoint(tmp_path, config_change=config_change)
    with pytest.raises(ValueError, match=message) as error:
        models.load_checkpoint("bert", folder)
    assert "\n" not in str(error.value)


def test_own_format_round_trip_still_loads(tmp_path):
    folder, _ = _own_checkpoint(tmp_path)
    backbone = models.load_checkpoint("bert", folder)
    assert backbone.num_layers == 1
