"""The DirectRunner mode policy of every Beam stage: small inputs run in this process.

``direct_running_mode=multi_processing`` starts ``direct_num_workers`` SDK worker processes
for each Beam stage; each imports Beam and then whatever the stage's steps import (for most
stages TensorFlow), seconds of start-up whatever the input size (9.4 s measured on the
shared 2-core test machine for a 10-line corpus), while ``in_memory`` runs the
same steps in this process, which has them imported already. Below a size the start-up
costs more than the parallel work saves.

The recipe's default ``runtime.beam.direct_running_mode: auto`` asks for the policy:
:func:`policy_args` adds :data:`POLICY_FLAG` (the size threshold) to the Beam arguments,
and each Beam executor calls :func:`resolve_args` with the size of its stage's input files:

* below the threshold: ``--direct_running_mode=in_memory --direct_num_workers=1``;
* at or above it (or when the size is unknown): the arguments as given
  (``multi_processing`` with the recipe's ``direct_num_workers``).

An explicit mode (the recipe naming ``in_memory``, ``multi_threading`` or
``multi_processing``, or a ``--direct_running_mode`` among ``runtime.beam.extra_args``)
adds no policy flag, so it is used as written; other runners (Dataflow, Flink, Spark, ...)
are left alone. The policy flag is always removed before Beam reads the arguments.
"""

from __future__ import annotations

import logging
import os
from typing import Iterable, Sequence

AUTO = "auto"
POLICY_FLAG = "--lmfactory_in_memory_below_bytes"
# Input bytes (as stored: GZIP TFRecords, or the raw files an ingestion reads) below which a
# stage runs in_memory. Two workers save at most half of the single-process work; at the
# vocabulary counting rates of docs/benchmarks/report.md (0.5 s per MB of TFRecords for
# WordPiece, 0.85 s for BPE, one process) that half equals the 9.5 s worker start-up at 20 to
# 40 MB. On the 2-core test machine in_memory was the faster mode at every measured size (up
# to the 16x corpus, 6.1 MB).
DEFAULT_IN_MEMORY_BELOW_BYTES = 32 * 1024 * 1024
_DIRECT_RUNNERS = (None, "DirectRunner", "direct", "SwitchingDirectRunner",
                   "BundleBasedDirectRunner")


def _flag_value(args: Sequence[str], flag: str) -> str | None:
    """The last value of ``--flag=value`` or ``--flag value`` in ``args`` (None: absent)."""
    value = None
    for index, arg in enumerate(args):
        if arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
        elif arg == flag and index + 1 < len(args):
            value = args[index + 1]
    return value


def _without_flag(args: Sequence[str], flag: str) -> list[str]:
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == flag:
            skip = True
        elif not arg.startswith(flag + "="):
            kept.append(arg)
    return kept


def policy_args(mode: str, num_workers: int, extra_args: Sequence[str],
                in_memory_below_bytes: int = DEFAULT_IN_MEMORY_BELOW_BYTES) -> list[str]:
    """The Beam arguments of a recipe's ``runtime.beam``: an explicit ``mode`` is written as
    given; ``auto`` means ``multi_processing`` with the size policy, unless ``extra_args``
    name a running mode or a runner themselves (then they decide)."""
    extra_args = list(extra_args)
    if mode != AUTO:
        return [f"--direct_running_mode={mode}", f"--direct_num_workers={num_workers}",
                *extra_args]
    args = ["--direct_running_mode=multi_processing", f"--direct_num_workers={num_workers}"]
    if (_flag_value(extra_args, "--direct_running_mode") is None
            and _flag_value(extra_args, "--runner") in _DIRECT_RUNNERS):
        args.append(f"{POLICY_FLAG}={int(in_memory_below_bytes)}")
    return args + extra_args


def resolve_args(args: Iterable[str] | None, input_bytes: int | None,
                 stage: str = "Beam stage") -> list[str]:
    """The Beam arguments a stage runs with, its input being ``input_bytes`` bytes (None:
    unknown). Without :data:`POLICY_FLAG` they pass unchanged."""
    args = [str(arg) for arg in (args or [])]
    threshold = _flag_value(args, POLICY_FLAG)
    if threshold is None:
        return args
    args = _without_flag(args, POLICY_FLAG)
    if _flag_value(args, "--runner") not in _DIRECT_RUNNERS:
        return args
    if input_bytes is not None and input_bytes < int(threshold):
        args = _without_flag(_without_flag(args, "--direct_running_mode"),
                             "--direct_num_workers")
        args += ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
        logging.info("%s: input of %d bytes < %s: Beam DirectRunner in_memory (no worker "
                     "processes to start)", stage, input_bytes, threshold)
    else:
        logging.info("%s: input of %s bytes: Beam DirectRunner as configured (%s)", stage,
                     "unknown" if input_bytes is None else input_bytes,
                     _flag_value(args, "--direct_running_mode"))
    return args


def input_size(patterns: Iterable[str]) -> int | None:
    """Total bytes of the files matching ``patterns`` (globs, files or folders, whose files
    are counted recursively); None when a size cannot be read (the policy then keeps the
    configured mode)."""
    import tensorflow as tf

    total = 0
    try:
        for pattern in patterns:
            if tf.io.gfile.isdir(pattern):
                for root, _, files in tf.io.gfile.walk(pattern):
                    total += sum(tf.io.gfile.stat(os.path.join(root, name)).length
                                 for name in files)
            else:
                total += sum(tf.io.gfile.stat(path).length
                             for path in tf.io.gfile.glob(pattern))
    except (tf.errors.OpError, OSError) as error:
        logging.warning("Beam mode policy: cannot size the input (%s); mode as configured",
                        error)
        return None
    return total


def executor_pipeline(executor, input_bytes: int | None):
    """A TFX Beam executor's ``_make_beam_pipeline``, its arguments resolved for an input of
    ``input_bytes`` bytes (a pipeline factory given to the executor is used as it is)."""
    executor._beam_pipeline_args = resolve_args(executor._beam_pipeline_args, input_bytes,
                                                type(executor).__module__)
    return executor._make_beam_pipeline


__all__ = ["AUTO", "DEFAULT_IN_MEMORY_BELOW_BYTES", "POLICY_FLAG", "executor_pipeline",
           "input_size", "policy_args", "resolve_args"]
