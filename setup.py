"""Package list of the wheel (metadata: pyproject.toml).

The repository root is the package ``lmfactory``; every folder below it with an
``__init__.py`` is one of its sub-packages, so a new model folder (``models/<arch>/``) or
component ships without an edit here or in pyproject.toml."""

from setuptools import find_packages, setup

NOT_SHIPPED = ("tests", "tests.*", "benchmarks", "benchmarks.*")

setup(packages=["lmfactory"] + [f"lmfactory.{package}" for package in
                                find_packages(".", exclude=NOT_SHIPPED)])
