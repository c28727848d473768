"""Every task kind's module is its home: its docstring's ``Parts:`` section names where each
part of the kind lives (record parsing, head, preprocessor, training step, serving export,
metrics), and every name there imports, so the listing cannot rot."""

import importlib
import os

import pytest

from lmfactory.components import tasks
from lmfactory.components.tasks import registry

TRAINER_DIR = os.path.join(os.path.dirname(tasks.__file__), os.pardir, "trainer")


def resolve(name: str):
    """The module or attribute a dotted name under ``lmfactory.`` names (ImportError or
    AttributeError when it names nothing)."""
    pieces = f"lmfactory.{name}".split(".")
    for split in range(len(pieces), 1, -1):
        try:
            value = importlib.import_module(".".join(pieces[:split]))
        except ModuleNotFoundError as error:
            if not ".".join(pieces[:split]).startswith(error.name or "\0"):
                raise
            continue
        for attribute in pieces[split:]:
            value = getattr(value, attribute)
        return value
    raise ImportError(f"{name!r} names no module under lmfactory")


@pytest.mark.parametrize("name", registry.names())
def test_every_kind_lists_every_part(name):
    kind = registry.get(name)
    parts = kind.parts()
    assert list(parts) == list(registry.PARTS), (
        f"{kind.module}'s Parts: section lists {list(parts)}, expected {list(registry.PARTS)}")
    for part, names in parts.items():
        assert names, f"{kind.module}: {part} names nothing"


@pytest.mark.parametrize("name", registry.names())
def test_every_named_part_imports(name):
    kind = registry.get(name)
    for part, names in kind.parts().items():
        for dotted in names:
            try:
                resolve(dotted)
            except (ImportError, AttributeError) as error:
                pytest.fail(f"{kind.module} {part}: {dotted!r} does not import ({error})")


@pytest.mark.parametrize("name", registry.names())
def test_training_step_and_serving_export_are_the_kinds_own(name):
    kind = registry.get(name)
    parts = kind.parts()
    assert f"{kind.module.removeprefix('lmfactory.')}.train" in parts["training step"]
    assert f"{kind.module.removeprefix('lmfactory.')}.export" in parts["serving export"]


def test_parse_parts_reads_continuation_lines():
    doc = ("Title.\n\nParts:\n    head: models.a.B,\n        models.c\n    metrics: x.y\n\n"
           "Later: text\n")
    assert registry.parse_parts(doc) == {"head": ["models.a.B", "models.c"],
                                         "metrics": ["x.y"]}
    assert registry.parse_parts("No parts here.") == {}


def test_trainer_holds_no_kind_specific_module():
    """The Trainer's folder is the kind-independent fit loop, checkpoints, optimisation and
    export machinery; a kind's data, serving and metrics modules sit beside its home."""
    kinds = set(registry.names()) | {"multiple_choice", "tagging", "translation", "generation",
                                     "word_vector"}
    for filename in os.listdir(TRAINER_DIR):
        stem = filename.removesuffix(".py")
        assert not any(stem.startswith(kind) for kind in kinds), filename
        assert not (stem.endswith("_serving") and stem != "serving"), filename
