"""What a recipe needs before it can run on Vertex AI / Kubeflow Pipelines v2.

Every task of the compiled pipeline runs in a container on a worker that sees Cloud Storage
and nothing of the machine that compiled it. So:

- :func:`local_data_paths` lists the recipe's data fields that name local files (no URL
  scheme); :func:`refuse_local_data` fails on the first in one line naming the field;
- :func:`stage_local_data` copies them under ``<pipeline_root>/staged_data/`` with
  ``tf.io.gfile`` (any filesystem TensorFlow reads: ``gs://``, or a local folder in tests) and
  returns the recipe with the paths rewritten;
- :func:`vertex_beam_args` completes a recipe's Beam runner flags: with
  ``--runner=DataflowRunner`` in ``runtime.beam.extra_args`` the Beam stages of each task
  (ingestion, vocabulary counting, example generation) run on Dataflow, whose workers need
  ``--project``, ``--region``, a ``gs://`` ``--temp_location`` and the lmfactory image
  (``--sdk_container_image``, defaulted to the pipeline's image).
"""

from __future__ import annotations

import copy
import glob as local_glob
import hashlib
import os
from typing import Iterator

from lmfactory.pipelines.remote_data import DATA_SECTIONS, PATH_KEYS
from lmfactory.recipe import RecipeError

STAGED_DATA_DIR = "staged_data"
# Recipe fields outside ``data`` that name files a task reads.
PRETRAINING_PATH_KEYS = ("init_checkpoint", "tokenizer_dir")
_GLOB_CHARS = "*?["


def _is_local(path: str) -> bool:
    return "://" not in path  # gs://, s3://, pkg:// (an installed package): not local


def data_paths(recipe: dict) -> Iterator[tuple[tuple[str, ...], str]]:
    """``(key path in the recipe, path)`` of every file or folder field a task reads."""
    for section in DATA_SECTIONS:
        source = recipe.get("data", {}).get(section) or {}
        if not isinstance(source, dict):
            continue
        for key in PATH_KEYS:
            if isinstance(source.get(key), str):
                yield ("data", section, key), source[key]
        for split, path in (source.get("splits") or {}).items():
            if isinstance(path, str):
                yield ("data", section, "splits", split), path
    pretraining = recipe.get("pretraining") or {}
    for key in PRETRAINING_PATH_KEYS:
        if isinstance(pretraining.get(key), str):
            yield ("pretraining", key), pretraining[key]


def local_data_paths(recipe: dict) -> list[tuple[str, str]]:
    """``(recipe field, path)`` of each data path a Vertex worker cannot read."""
    return [(".".join(keys), path) for keys, path in data_paths(recipe) if _is_local(path)]


def refuse_local_data(recipe: dict) -> None:
    """RecipeError naming the first local data path of the recipe, if any."""
    for field, path in local_data_paths(recipe):
        raise RecipeError(field, f"{os.path.abspath(path)} is a local path; Vertex workers "
                                 f"cannot read it (use gs:// or --stage-data)")


def _split_glob(pattern: str) -> tuple[str, str]:
    """``(folder without wildcards, rest of the pattern)``."""
    parts = pattern.split(os.sep)
    fixed = []
    for part in parts[:-1]:
        if any(char in part for char in _GLOB_CHARS):
            break
        fixed.append(part)
    return os.sep.join(fixed) or os.sep, os.sep.join(parts[len(fixed):])


def _copy_tree(source: str, target: str) -> int:
    """Copies a local file or folder to ``target`` (any tf.io.gfile filesystem); returns the
    number of files copied."""
    import tensorflow as tf

    if os.path.isfile(source):
        tf.io.gfile.makedirs(os.path.dirname(target))
        tf.io.gfile.copy(source, target, overwrite=True)
        return 1
    copied = 0
    for folder, _, files in os.walk(source):
        relative = os.path.relpath(folder, source)
        for name in files:
            copied += _copy_tree(os.path.join(folder, name),
                                 os.path.normpath(os.path.join(target, relative, name)))
    return copied


def _stage_one(field: str, path: str, stage_root: str) -> tuple[str, int]:
    """Copies what the local ``path`` (a file, a folder or a glob) names under ``stage_root``;
    returns the path that names the copy and the number of files copied."""
    path = os.path.abspath(path)
    # One folder per source path: two fields naming files of the same name stay apart, and
    # staging again overwrites the same copy.
    key = hashlib.sha256(path.encode("utf-8")).hexdigest()[:12]
    folder, rest = _split_glob(path)
    target_folder = f"{stage_root.rstrip('/')}/{key}"
    if any(char in rest for char in _GLOB_CHARS):
        matches = sorted(local_glob.glob(path))
        if not matches:
            raise RecipeError(field, f"{path} matches no file; nothing to stage")
        copied = sum(_copy_tree(match, f"{target_folder}/{os.path.relpath(match, folder)}")
                     for match in matches)
        return f"{target_folder}/{rest}", copied
    if not os.path.exists(path):
        raise RecipeError(field, f"{path} does not exist; nothing to stage")
    target = f"{target_folder}/{os.path.basename(path)}"
    return target, _copy_tree(path, target)


def stage_local_data(recipe: dict, pipeline_root: str) -> tuple[dict, list[str]]:
    """Copies the recipe's local data under ``<pipeline_root>/staged_data/`` and returns the
    recipe with those paths rewritten, plus one line per staged field for the user."""
    recipe = copy.deepcopy(recipe)
    stage_root = f"{pipeline_root.rstrip('/')}/{STAGED_DATA_DIR}"
    report = []
    for keys, path in list(data_paths(recipe)):
        if not _is_local(path):
            continue
        field = ".".join(keys)
        staged, files = _stage_one(field, path, stage_root)
        node = recipe
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = staged
        report.append(f"{field}: {path} -> {staged} ({files} file{'s' * (files != 1)})")
    return recipe, report


def _flag_value(args: list[str], name: str) -> str | None:
    """The value of the last ``--name=value`` (or ``--name value``) in ``args``."""
    value = None
    for index, arg in enumerate(args):
        if arg.startswith(f"--{name}="):
            value = arg.split("=", 1)[1]
        elif arg == f"--{name}" and index + 1 < len(args):
            value = args[index + 1]
    return value


def vertex_beam_args(recipe: dict, image: str, pipeline_root: str,
                     project: str | None = None, region: str | None = None) -> list[str]:
    """The recipe's ``runtime.beam.extra_args`` completed for a Vertex run.

    Without ``--runner`` (or with ``DirectRunner``) each task runs its Beam stages in its own
    container, whose environment the image is: ``--sdk_container_image`` says so, which also
    keeps TFX from packaging itself for remote workers before each stage (3.5 s; the
    DirectRunner ignores the flag, it runs its workers from the task's own interpreter). With ``--runner=DataflowRunner`` the missing ``--project`` and
    ``--region`` come from the command line, ``--temp_location`` defaults to
    ``<pipeline_root>/beam_tmp`` and ``--sdk_container_image`` to ``image`` (Dataflow's
    workers must import lmfactory with the same pins); a flag still missing is a one-line
    RecipeError naming ``runtime.beam.extra_args``."""
    args = list(recipe["runtime"]["beam"]["extra_args"])
    runner = _flag_value(args, "runner")
    if runner not in ("DataflowRunner", "dataflow"):
        if runner in (None, "DirectRunner", "direct") and not _flag_value(
                args, "sdk_container_image"):
            args.append(f"--sdk_container_image={image}")
        return args
    defaults = {"project": project, "region": region,
                "temp_location": (f"{pipeline_root.rstrip('/')}/beam_tmp"
                                  if pipeline_root.startswith("gs://") else None),
                "sdk_container_image": image}
    for name, value in defaults.items():
        if _flag_value(args, name) is None and value:
            args.append(f"--{name}={value}")
    for name in ("project", "region", "temp_location"):
        if not _flag_value(args, name):
            raise RecipeError("runtime.beam.extra_args",
                              f"DataflowRunner needs --{name}=... (in the recipe, or "
                              f"lmfactory's --project/--region/a gs:// --pipeline-root)")
    if not _flag_value(args, "temp_location").startswith("gs://"):
        raise RecipeError("runtime.beam.extra_args", "DataflowRunner's --temp_location must "
                                                     "be a gs:// path")
    return args


def with_beam_args(recipe: dict, args: list[str]) -> dict:
    """A copy of ``recipe`` whose ``runtime.beam.extra_args`` are ``args``."""
    recipe = copy.deepcopy(recipe)
    recipe["runtime"]["beam"]["extra_args"] = list(args)
    return recipe
