"""Container command lines (``python -m MODULE ARGS``) run in forked interpreters.

A container task of Vertex AI or Kubeflow starts a fresh interpreter, which spends most of a
tiny task importing TensorFlow, Beam and TFX. The tests that run compiled tasks one by one
start them from a fork server (multiprocessing's ``forkserver``) that has imported those
libraries once: each task is a new process, forked from an interpreter that has run no
TensorFlow, and runs its module as ``python -m`` does (``runpy`` as ``__main__``, its own
``sys.argv``, the container's environment, stdout and stderr, exit status). Nothing but the
imports is shared: the module itself, the executor it names and the project's code are
imported in the task's process.
"""

from __future__ import annotations

import multiprocessing
import os
import runpy
import sys
import tempfile

# What every container task of the project imports before its executor runs: the libraries
# kubeflow_v2_run_executor imports (TFX's Evaluator executor brings TFMA) and the ones the
# project's executors import. Not the entry-point module itself: runpy runs it as __main__.
PRELOAD = ("tensorflow", "tensorflow_text", "keras", "keras_nlp", "apache_beam",
           "tfx.components.evaluator.executor", "tfx.dsl.components.base.base_beam_executor",
           "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_entrypoint_utils")


class CommandLineError(ValueError):
    """The command line is not one this launcher runs (``python -m MODULE ...``)."""


def _context():
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))
    return context


def _run_module(module: str, args: list, env: dict, output_path: str) -> None:
    """The task's process: its stdout/stderr to ``output_path``, its environment, then the
    module as ``__main__`` (SystemExit gives the exit status, an exception status 1)."""
    with open(output_path, "wb") as output:
        os.dup2(output.fileno(), 1)
        os.dup2(output.fileno(), 2)
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None  # TMPDIR as the container's environment sets it
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def run(line: list, env: dict, timeout: float, output_path: str) -> int:
    """Runs ``line`` (``[python, -m, MODULE, *ARGS]``) in a forked process with ``env``;
    its output goes to ``output_path``. Returns the exit status; TimeoutError after
    ``timeout`` seconds (the process is killed)."""
    if len(line) < 3 or line[1] != "-m":
        raise CommandLineError(f"not a 'python -m MODULE' command line: {line[:3]}")
    process = _context().Process(target=_run_module,
                                 args=(line[2], list(line[3:]), dict(env), output_path))
    process.start()
    process.join(timeout)
    if process.is_alive():
        process.kill()
        process.join()
        raise TimeoutError(f"{line[2]} ran past {timeout} s")
    return process.exitcode
