"""Beam DirectRunner workers that die with the process running the pipeline.

In ``direct_running_mode=multi_processing`` the DirectRunner starts each SDK worker with
``subprocess.Popen(command, shell=True)`` (``apache_beam.runners.portability.
local_job_service.SubprocessSdkWorker.run``). When the pipeline's process is killed with
SIGKILL nothing of it runs again, so those workers (~200 MB each) are left behind, reparented
to init. Only the kernel can clean up after a SIGKILL: :func:`install` makes Beam
start every worker with ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` and ``exec`` (the shell replaces
itself by the worker, which keeps the death signal), so a worker is killed as soon as the
thread that started it is gone. That thread is Beam's ``run_worker`` thread, which waits on
the worker for its whole life, so the signal fires only when the parent process dies.

Linux only (``PR_SET_PDEATHSIG``); elsewhere :func:`install` does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import signal
import subprocess
import sys
import types

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_prctl = None


def _die_with_parent() -> None:
    """Runs in the forked child before ``exec``: the kernel sends it SIGKILL when the
    parent thread that forked it exits."""
    _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


class _PopenDyingWithParent(subprocess.Popen):
    """`subprocess.Popen` whose child gets SIGKILL when the parent dies (shell commands are
    ``exec``-ed so the signal reaches the command itself, not only the shell)."""

    def __init__(self, args, *positional, shell=False, preexec_fn=None, **keywords):
        if preexec_fn is not None:  # Beam passes none; keep any caller's own
            raise ValueError("beam_workers: a preexec_fn is already set")
        if shell and isinstance(args, str):
            args = f"exec {args}"
        super().__init__(args, *positional, shell=shell, preexec_fn=_die_with_parent,
                         **keywords)


def install() -> bool:
    """Makes the DirectRunner's SDK worker processes die with this process. Idempotent;
    returns whether it is active (False off Linux)."""
    global _prctl
    if not sys.platform.startswith("linux"):
        return False
    from apache_beam.runners.portability import local_job_service

    if getattr(local_job_service.subprocess, "dies_with_parent", False):
        return True
    # Resolved here, in the parent: the child only calls it between fork and exec.
    _prctl = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True).prctl
    shim = types.ModuleType("subprocess")
    shim.__dict__.update(vars(subprocess))
    shim.Popen = _PopenDyingWithParent
    shim.dies_with_parent = True
    local_job_service.subprocess = shim
    return True


__all__ = ["install"]
