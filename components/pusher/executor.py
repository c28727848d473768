"""TFX's Pusher, pushing atomically and only what is new.

The stock executor copies the blessed SavedModel straight into ``<base>/<unix time>``, so a
model server polling ``<base>`` can see a version folder holding some files and no
``saved_model.pb`` yet, and a cached re-run pushes a byte-identical second version. This
executor:

* copies into a hidden staging folder beside the versions
  (``<base>/.<version>.incomplete/model``; TF Serving ignores the name: not a number) and
  renames the copy to ``<base>/<version>`` when complete. The staging folder holds a marker
  file written before the copy starts; the next push removes the staging folders a killed
  push left behind, and only those: named ``.<digits>.incomplete`` and holding the marker,
  so nothing in ``<base>`` that a push did not create is ever deleted. On a
  local disk the rename is atomic; on object stores (GCS) a folder rename is a copy, and
  ``saved_model.pb`` is still copied last;
* compares the model with the newest pushed version (a digest of every file's relative path
  and bytes) and, when they are identical, pushes nothing and records that version as the
  push (``pushed`` = 1, ``pushed_version`` the existing one).

Before pushing, the model is checked for what it does when served: no op that reaches
outside the process (files, event writers, RPC: model_guard.py). Then for TF Serving: every
op of its graph must
be one the model server links (op_audit.py: TensorFlow's core ops and tensorflow_text's;
a model holding another op, or a Python callback, is refused with a one-line error naming
the ops, since the server could not load it), and a model without warm-up requests
(``assets.extra/tf_serving_warmup_requests``, written by the Trainer's export, warmup.py)
is pushed with a warning. Then the model server's own loader is tried (loader_check.py:
TensorFlow's C API loads the model in a process without TensorFlow's Python package and
runs every warm-up request by the SignatureDefs' tensor names, the outputs compared with
the responses Python gave, recorded in the warm-up file); a model it cannot load or run is refused with a one-line error naming the
signature. This is what TFX's InfraValidator does with a real model server, which needs
Docker or Kubernetes.

After a push, ``<base>/batching_parameters.pbtxt`` holds TF Serving's batching settings
for ``--enable_batching`` when every signature input has a batch dimension (batching.py).

Only the ``filesystem`` destination is supported, as with the stock executor.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
from typing import Any, Optional

from tfx.components.pusher import executor as tfx_pusher
from tfx.dsl.io import fileio
from tfx.proto import pusher_pb2
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import io_utils, proto_utils

STAGING_SUFFIX = ".incomplete"
# Written into a staging folder before anything else: what marks it as this Pusher's own.
STAGING_MARKER = ".lmfactory_push_staging"
STAGED_MODEL = "model"  # the copy inside the staging folder, renamed to <base>/<version>
_STAGING_NAME = re.compile(r"\.\d+" + re.escape(STAGING_SUFFIX))


def check_servable(model_path: str) -> tuple:
    """Raises ValueError when the SavedModel holds ops TF Serving cannot run, or when TF
    Serving's loader (the C API, loader_check.py) cannot load it or run one of its warm-up
    requests to Python's outputs; warns when it has no warm-up requests. The op set cannot
    be listed without tensorflow_text, nor the loader run without the C API library: then
    only a warning. Returns the model's `loader_check.ServingInterface`, read once."""
    from lmfactory.components.pusher import loader_check, model_guard, op_audit, warmup

    saved_model = op_audit.read_saved_model(model_path)  # one parse for every check
    try:
        problems = op_audit.audit_saved_model(model_path, saved_model)
    except RuntimeError as error:
        logging.warning("TF Serving op audit not run: %s", error)
        problems = {}
    if problems:
        raise ValueError(f"Pusher: {model_path} cannot be served by tensorflow/serving:"
                         f"{op_audit.TF_SERVING_VERSION}: " + "; ".join(
                             f"{op} is {reason}" for op, reason in problems.items()))
    found = model_guard.outside_ops(model_path, saved_model)
    if found:
        raise ValueError(f"Pusher: {model_path} is not pushed: its served graph runs ops that "
                         f"reach outside the process: {model_guard.describe(found)}")
    interface = loader_check.read_interface(model_path, saved_model)
    if not interface.requests:
        logging.warning("Pusher: %s has no %s/%s; TF Serving will load it without warm-up",
                        model_path, warmup.ASSETS_EXTRA, warmup.WARMUP_FILE)
    try:
        loader_check.check_before_push(model_path, interface)
    except RuntimeError as error:
        logging.warning("Pusher: TF Serving's loader not tried on %s: %s", model_path, error)
    return interface


def write_batching_file(base: str, interface) -> None:
    """``<base>/batching_parameters.pbtxt`` for TF Serving's ``--enable_batching``, when the
    model's signatures can be batched as its warm-up requests call them (batching.py);
    ``interface``: the model's `loader_check.ServingInterface`."""
    from lmfactory.components.pusher import batching

    path = batching.write_batching_parameters(base, interface.signature_defs,
                                              list(interface.requests))
    if path:
        logging.info("Pusher: TF Serving batching parameters in %s (--enable_batching "
                     "--batching_parameters_file=%s)", path, path)


def directory_digest(path: str) -> str:
    """SHA-256 over every file under ``path``: its relative path and its bytes."""
    digest = hashlib.sha256()
    files = []
    for root, _, names in fileio.walk(path):
        files.extend(os.path.join(root, name) for name in names)
    for file in sorted(files):
        digest.update(os.path.relpath(file, path).encode("utf-8") + b"\0")
        with fileio.open(file, "rb") as f:
            digest.update(hashlib.sha256(f.read()).digest())
    return digest.hexdigest()


def pushed_versions(base: str) -> list[str]:
    """The complete versions under ``base`` (numeric folder names), oldest first."""
    if not fileio.exists(base):
        return []
    names = [name.rstrip("/") for name in fileio.listdir(base)]
    return sorted((name for name in names if name.isdigit()), key=int)


def remove_own_staging_folders(base: str) -> list[str]:
    """Removes the staging folders killed pushes left in ``base``: only the entries named
    ``.<digits>.incomplete`` that hold `STAGING_MARKER`; returns their names."""
    removed = []
    for entry in fileio.listdir(base):
        name = entry.rstrip("/")
        folder = os.path.join(base, name)
        if _STAGING_NAME.fullmatch(name) and fileio.exists(os.path.join(folder, STAGING_MARKER)):
            fileio.rmtree(folder)
            removed.append(name)
    return removed


def push_model(model_path: str, base: str, now: Optional[float] = None) -> tuple[str, bool]:
    """Pushes the SavedModel folder ``model_path`` as a new version under ``base``, unless it
    equals the newest one. Returns ``(version, newly_pushed)``."""
    versions = pushed_versions(base)
    if versions and directory_digest(os.path.join(base, versions[-1])) == \
            directory_digest(model_path):
        logging.info("Model identical to pushed version %s: not pushed again", versions[-1])
        return versions[-1], False
    version = int(now if now is not None else time.time())
    if versions:
        version = max(version, int(versions[-1]) + 1)
    fileio.makedirs(base)
    remove_own_staging_folders(base)  # a killed push's leftovers
    staging = os.path.join(base, f".{version}{STAGING_SUFFIX}")
    fileio.makedirs(staging)
    with fileio.open(os.path.join(staging, STAGING_MARKER), "w") as f:
        f.write("a model being pushed by lmfactory's Pusher\n")
    copy = os.path.join(staging, STAGED_MODEL)
    try:
        io_utils.copy_dir(model_path, copy, deny_regex_patterns=[r"saved_model\.pb"])
        saved_model = os.path.join(model_path, "saved_model.pb")
        if fileio.exists(saved_model):  # last: readers take it as "the model is complete"
            io_utils.copy_file(saved_model, os.path.join(copy, "saved_model.pb"))
    except Exception:
        # A failed copy (a full disk, most often) leaves the pushed versions as they were;
        # its own partial copy goes at once, which also gives back the space it took.
        try:
            fileio.rmtree(staging)
        except OSError as cleanup_error:
            logging.warning("Pusher: the staging folder %s stays until the next push: %s",
                            staging, cleanup_error)
        raise
    fileio.rename(copy, os.path.join(base, str(version)))
    fileio.rmtree(staging)
    logging.info("Model pushed to %s", os.path.join(base, str(version)))
    return str(version), True


class Executor(tfx_pusher.Executor):
    """`tfx.components.Pusher`'s executor with `push_model`'s atomic, de-duplicated push."""

    def Do(self, input_dict: dict, output_dict: dict, exec_properties: dict[str, Any]) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        model_push = artifact_utils.get_single_instance(
            output_dict[standard_component_specs.PUSHED_MODEL_KEY])
        if not self.CheckBlessing(input_dict):
            self._MarkNotPushed(model_push)
            return
        model_path = self.GetModelPath(input_dict)
        destination = pusher_pb2.PushDestination()
        proto_utils.json_to_proto(
            exec_properties[standard_component_specs.PUSH_DESTINATION_KEY], destination)
        if destination.WhichOneof("destination") != "filesystem":
            raise ValueError(f"Pusher: only a filesystem destination is supported, got "
                             f"{destination.WhichOneof('destination')!r}")
        base = destination.filesystem.base_directory
        interface = check_servable(model_path)
        version, _ = push_model(model_path, base)
        write_batching_file(base, interface)
        io_utils.copy_dir(model_path, model_push.uri)  # the artifact's archive copy
        self._MarkPushed(model_push, pushed_destination=os.path.join(base, version),
                         pushed_version=version)
