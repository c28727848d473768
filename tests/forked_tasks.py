"""Python command lines run in forked interpreters that have the heavy imports done.

A Vertex AI or Kubeflow container task, a training the tests kill and resume, a worker of a
multi-worker strategy: each is a fresh interpreter, which spends most of a tiny run
importing TensorFlow, Keras, Beam and TFX. The tests that start such processes start them
from a fork server (multiprocessing's ``forkserver``) that has imported those libraries
once. Each command line still gets a new process, forked from an interpreter that has run
no TensorFlow (no eager context, no device set up: a process may still configure its
logical devices), and runs as the interpreter would run it: ``-m MODULE`` and a script path
through ``runpy`` as ``__main__``, ``-c CODE`` by ``exec``, with its own ``sys.argv``,
environment, working folder, stdout and stderr, and exit status (``SystemExit``'s code; 1
after an uncaught exception, whose traceback goes to the output). Nothing but the imports is
shared: the module or script, the executor it names and the project's code are imported in
the new process.
"""

from __future__ import annotations

import multiprocessing
import os
import runpy
import sys
import tempfile
import time

# What the processes the tests start import before they do anything: the libraries
# kubeflow_v2_run_executor imports (TFX's Evaluator executor brings TFMA) and those the
# project's trainers and executors import. Not an entry-point module itself: runpy runs it
# as __main__.
PRELOAD = ("tensorflow", "tensorflow_text", "keras", "keras_nlp", "apache_beam",
           "tfx.components.evaluator.executor", "tfx.dsl.components.base.base_beam_executor",
           "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_entrypoint_utils")


class CommandLineError(ValueError):
    """The command line is not a Python one this launcher runs."""


def _context():
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))
    return context


def _main(how: str, target: str, args: list, env: dict, cwd: str | None,
          output_path: str) -> None:
    """The new process: its output, environment and folder, then the program."""
    with open(output_path, "ab") as output:
        os.dup2(output.fileno(), 1)
        os.dup2(output.fileno(), 2)
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None  # TMPDIR as the environment sets it
    if cwd:
        os.chdir(cwd)
    if how == "-m":
        sys.argv = [target, *args]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    elif how == "-c":
        sys.argv = ["-c", *args]
        exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})  # noqa: S102
    else:
        sys.argv = [target, *args]
        sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
        runpy.run_path(target, run_name="__main__")


def _parse(line: list) -> tuple:
    if len(line) >= 3 and line[1] in ("-m", "-c"):
        return line[1], line[2], list(line[3:])
    if len(line) >= 2 and not line[1].startswith("-"):
        return "script", line[1], list(line[2:])
    raise CommandLineError(f"not a 'python -m MODULE', 'python -c CODE' or "
                           f"'python SCRIPT' command line: {line[:3]}")


class Forked:
    """A started command line (what ``subprocess.Popen`` gives, for the calls tests make)."""

    def __init__(self, line: list, output_path: str, env: dict | None = None,
                 cwd: str | None = None):
        how, target, args = _parse([str(part) for part in line])
        self.output_path = str(output_path)
        self._process = _context().Process(target=_main, args=(
            how, target, args, dict(os.environ if env is None else env),
            None if cwd is None else str(cwd), self.output_path))
        self._process.start()
        self.pid = self._process.pid

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        """The exit status; TimeoutError (the process is killed) after ``timeout`` s."""
        self._process.join(timeout)
        if self._process.exitcode is None:
            self.kill()
            raise TimeoutError(f"{self._process.name} ran past {timeout} s")
        return self._process.exitcode

    def kill(self) -> None:
        self._process.kill()
        self._process.join()

    def output(self) -> str:
        with open(self.output_path, encoding="utf-8", errors="replace") as f:
            return f.read()


def run(line: list, output_path: str, timeout: float, env: dict | None = None,
        cwd: str | None = None) -> tuple[int, str]:
    """Runs ``line`` to its end: ``(exit status, output)``. TimeoutError after ``timeout``
    seconds (the process is killed)."""
    started = time.monotonic()
    forked = Forked(line, output_path, env=env, cwd=cwd)
    status = forked.wait(max(timeout - (time.monotonic() - started), 0.0))
    return status, forked.output()
