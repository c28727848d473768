"""Beam DirectRunner workers that die with the process running the pipeline.

In ``direct_running_mode=multi_processing`` the DirectRunner starts each SDK worker with
``subprocess.Popen(command, shell=True)`` (``apache_beam.runners.portability.
local_job_service.SubprocessSdkWorker.run``). When the pipeline's process is killed with
SIGKILL nothing of it runs again, so those workers (~200 MB each) are left behind, reparented
to init. Only the kernel can clean up after a SIGKILL: :func:`install` makes Beam start every
worker through a small launcher that sets ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` on itself and
then ``exec``-s the worker's command (the death signal survives ``exec``). The kernel sends it
when the thread that started the launcher is gone; that thread is Beam's ``run_worker``
thread, which waits on the worker for its whole life, so the signal fires only when the parent
process dies.

The launcher is a separate interpreter on purpose: a ``preexec_fn`` would run Python in the
forked child of a process full of threads (gRPC's among them) and can deadlock there before
``exec``, leaving a pipeline that waits forever for a worker that never starts.

Linux only (``PR_SET_PDEATHSIG``); elsewhere :func:`install` does nothing.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import types

# Run by the launcher, a fresh interpreter started without site-packages: ask for SIGKILL when
# the parent dies, give up if the parent is already gone (the request would come too late),
# then replace itself by the shell running the worker's command.
_LAUNCHER = (
    "import ctypes, ctypes.util, os, sys\n"
    "libc = ctypes.CDLL(ctypes.util.find_library('c'), use_errno=True)\n"
    "if libc.prctl(1, 9, 0, 0, 0) != 0:\n"  # PR_SET_PDEATHSIG, SIGKILL
    "    sys.exit('beam_workers: prctl(PR_SET_PDEATHSIG) failed')\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit('beam_workers: the pipeline process exited before its worker started')\n"
    "os.execv('/bin/sh', ['/bin/sh', '-c', 'exec ' + sys.argv[2]])\n"
)


def launcher_command(command: str) -> str:
    """The shell command that runs ``command`` as a worker dying with this process."""
    return " ".join(["exec", shlex.quote(sys.executable), "-S", "-c", shlex.quote(_LAUNCHER),
                     str(os.getpid()), shlex.quote(command)])


class _PopenDyingWithParent(subprocess.Popen):
    """`subprocess.Popen` whose shell command runs through the launcher, so the command gets
    SIGKILL when the parent dies."""

    def __init__(self, args, *positional, shell=False, **keywords):
        if not (shell and isinstance(args, str)):
            raise ValueError("beam_workers: Beam's SDK workers are expected to start as a "
                             f"shell command, got {args!r}")
        super().__init__(launcher_command(args), *positional, shell=True, **keywords)


def install() -> bool:
    """Makes the DirectRunner's SDK worker processes die with this process. Idempotent;
    returns whether it is active (False off Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    from apache_beam.runners.portability import local_job_service

    if getattr(local_job_service.subprocess, "dies_with_parent", False):
        return True
    shim = types.ModuleType("subprocess")
    shim.__dict__.update(vars(subprocess))
    shim.Popen = _PopenDyingWithParent
    shim.dies_with_parent = True
    local_job_service.subprocess = shim
    return True


__all__ = ["install", "launcher_command"]
