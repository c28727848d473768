"""A local run's folder: one run at a time, and no output folders left by killed runs.

* `exclusive`: an advisory lock (``flock``) on ``<run folder>/.lock`` for the whole run; a
  second ``lmfactory run`` of the same recipe into the same output folder stops with one line
  instead of interleaving its executions with the first's. The kernel drops the lock when
  the holder dies, even on SIGKILL.
* `clean_incomplete_outputs`: TFX creates an execution's output folders
  (``<pipeline root>/<component>/<output>/<execution id>``) before the executor runs; a run
  killed there leaves them empty, never registered as artifacts. Under the lock no other
  execution is in progress, so the empty output folders of every execution that MLMD does
  not record as complete or cached are removed. Non-empty ones (e.g. the logs of a
  failed training) are kept for debugging and are never read as artifacts.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import logging
import os

from tfx.dsl.io import fileio

LOCK_FILE = ".lock"


class RunFolderBusy(BlockingIOError):
    """Another process holds the run folder's lock (the CLI reports it in one line)."""


@contextlib.contextmanager
def exclusive(run_dir: str):
    """Holds the run folder's lock for the ``with`` block; `RunFolderBusy` (one line) if
    another process holds it."""
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, LOCK_FILE)
    with open(path, "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise RunFolderBusy(f"Another lmfactory run (pid {holder}) is using {run_dir}; "
                               f"wait for it or choose another --output-dir") from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def incomplete_execution_ids(metadata_path: str) -> list[int]:
    """The MLMD executions that did not finish (NEW, RUNNING, FAILED, CANCELED)."""
    if not os.path.exists(metadata_path):
        return []
    from ml_metadata.metadata_store import metadata_store
    from ml_metadata.proto import metadata_store_pb2

    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = metadata_path
    config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
    finished = (metadata_store_pb2.Execution.COMPLETE, metadata_store_pb2.Execution.CACHED)
    return [execution.id for execution in metadata_store.MetadataStore(config).get_executions()
            if execution.last_known_state not in finished]


def clean_incomplete_outputs(pipeline_root: str, metadata_path: str) -> list[str]:
    """Removes the empty output folders of unfinished executions; returns them."""
    removed = []
    for execution_id in incomplete_execution_ids(metadata_path):
        for folder in glob.glob(os.path.join(pipeline_root, "*", "*", str(execution_id))):
            if os.path.isdir(folder) and not any(files for _, _, files in os.walk(folder)):
                fileio.rmtree(folder)
                removed.append(folder)
    if removed:
        logging.info("Removed %d empty output folder(s) of unfinished executions: %s",
                     len(removed), ", ".join(removed))
    return removed


__all__ = ["RunFolderBusy", "clean_incomplete_outputs", "exclusive",
           "incomplete_execution_ids"]
