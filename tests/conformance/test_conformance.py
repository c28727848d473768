"""Every registered architecture through the conformance harness (harness.py).

The cases are collected from `models.names()` when this module is imported, so a newly
registered architecture (a new folder under models/) is tested with no edit here. One
tiny backbone per architecture is built once and shared by the read-only checks; the
training checks build their own.
"""

import pytest

from lmfactory import models

from . import harness

ARCHITECTURES = models.names()
CAUSAL = [name for name in ARCHITECTURES if harness.is_causal(name)]
GENERATORS = [name for name in ARCHITECTURES if harness.generation_kind(name)]
OBJECTIVES = [(name, objective) for name in ARCHITECTURES
              for objective in models.get(name).objectives]
CLASSIFIERS = [name for name in ARCHITECTURES if models.get(name).has_head("classification")]
HEADS = [(name, kind) for name in ARCHITECTURES for kind in models.get(name).task_kinds]

_BACKBONES = {}


def tiny_backbone(name):
    """The shared tiny backbone of ``name`` (built on first use; checks must not modify
    it)."""
    if name not in _BACKBONES:
        _BACKBONES[name] = harness.build_tiny(name)
    return _BACKBONES[name]


@pytest.fixture(scope="module", autouse=True)
def _release_backbones():
    yield
    _BACKBONES.clear()


def test_every_architecture_is_collected():
    assert ARCHITECTURES, "no architecture registered"
    assert set(ARCHITECTURES) == set(models.names())


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_tiny_overrides_are_constructor_arguments(name):
    overrides = harness.tiny_overrides(name)
    assert set(overrides) <= set(models.backbone_arguments(name))
    preset = models.get(name).presets[harness.smallest_preset(name)]
    assert set(overrides) <= set(preset), "overrides only the preset's own keys"


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_forward(name):
    harness.check_forward(name, tiny_backbone(name))


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_padding_invariance(name):
    harness.check_padding_invariance(name, tiny_backbone(name))


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_request_length(name):
    harness.check_request_length(name, tiny_backbone(name))


@pytest.mark.parametrize("name", CAUSAL)
def test_causal_mask(name):
    harness.check_causal_mask(name, tiny_backbone(name))


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_config_round_trip(name):
    harness.check_config_round_trip(name, tiny_backbone(name))


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_checkpoint_round_trip(name, tmp_path):
    harness.check_checkpoint_round_trip(name, tmp_path, tiny_backbone(name))


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_export(name, tmp_path):
    harness.check_export(name, tmp_path, tiny_backbone(name))


@pytest.mark.parametrize("name", GENERATORS)
def test_generation(name):
    harness.check_generation(name, tiny_backbone(name))


@pytest.mark.parametrize("name,kind", HEADS)
def test_head(name, kind):
    harness.check_head(name, kind, tiny_backbone(name))


@pytest.mark.parametrize("name,objective", OBJECTIVES)
def test_pretraining_lowers_loss(name, objective):
    harness.check_pretraining_objective(name, objective)


@pytest.mark.parametrize("name", CLASSIFIERS)
def test_classification_training_lowers_loss(name):
    harness.check_classification_training(name)
