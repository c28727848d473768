"""The names ``lmfactory list`` prints, found without importing TensorFlow.

Importing ``lmfactory.models`` registers every architecture but imports TensorFlow and Keras
(seconds, and their start-up warnings). ``lmfactory list`` instead reads the same facts from
the source files:

* architectures: every model folder (a sub-package of ``models/``, the folders
  ``models._import_model_folders`` imports) is parsed with `ast`, and each call
  ``Architecture(name="...", ...)`` (``registry.Architecture``) with a literal name is one
  registered architecture. Nothing is generated, so a new folder is listed without a step
  to forget; a registration this reader cannot see (a computed name) makes
  ``tests/test_cli_list.py`` fail, as it compares these names with the live registry's.
* recipes: the ``*.yaml`` files of the ``lmfactory.recipes`` package (what
  ``recipe.recipe_names`` lists; ``lmfactory.recipe`` itself imports the components).
"""

from __future__ import annotations

import ast
import os
from importlib import resources

RECIPE_SUFFIX = ".yaml"
_MODELS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "models")


def _registered_names(source: str) -> list[str]:
    """``name`` of every ``Architecture(name=<literal>, ...)`` call in ``source``."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        callee = node.func
        called = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", "")
        if called != "Architecture":
            continue
        for keyword in node.keywords:
            if keyword.arg == "name" and isinstance(keyword.value, ast.Constant) \
                    and isinstance(keyword.value.value, str):
                names.append(keyword.value.value)
    return names


def architecture_names(models_dir: str = _MODELS_DIR) -> list[str]:
    """The architectures the model folders register, sorted."""
    found = set()
    for folder in sorted(os.listdir(models_dir)):
        path = os.path.join(models_dir, folder)
        if not os.path.isfile(os.path.join(path, "__init__.py")):
            continue  # not a package: not imported by models/__init__.py
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")))
            for file in sorted(files):
                if file.endswith(".py"):
                    with open(os.path.join(root, file), encoding="utf-8") as f:
                        found.update(_registered_names(f.read()))
    return sorted(found)


def recipe_names() -> list[str]:
    """The registered recipes (the YAML files shipped in ``lmfactory/recipes``), sorted."""
    folder = resources.files("lmfactory.recipes")
    return sorted(entry.name[: -len(RECIPE_SUFFIX)] for entry in folder.iterdir()
                  if entry.name.endswith(RECIPE_SUFFIX))
