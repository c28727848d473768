"""Hiding the native libraries' log lines at the default verbosity (``-v`` shows them).

TensorFlow's C++ core honours ``TF_CPP_MIN_LOG_LEVEL`` (set before the import, see
``cli._configure_logging``), but XLA and gRPC log through absl's C++ logging, which writes
straight to file descriptor 2 before anything can configure it (``WARNING: All log messages
before absl::InitializeLog() is called are written to STDERR``, ``I0000 ... XLA service ...
initialized``). `native_stderr_hidden` points descriptor 2 at the null device for the
duration of a command, while Python's ``sys.stderr`` (this package's messages, errors,
tracebacks) keeps writing to the real one.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys


def _writes_to_descriptor_2(stream) -> bool:
    try:
        return stream.fileno() == 2
    except (AttributeError, OSError, io.UnsupportedOperation, ValueError):
        return False  # e.g. a test's capture object: left as it is


@contextlib.contextmanager
def native_stderr_hidden(enabled: bool = True):
    """Within the block, what native code writes to descriptor 2 is dropped; ``sys.stderr``
    still reaches the original destination. Restored on exit. No-op when not ``enabled``."""
    if not enabled:
        yield
        return
    with contextlib.suppress(AttributeError, OSError, ValueError):  # a closed or odd stream
        sys.stderr.flush()
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    original = sys.stderr
    rebound = None
    try:
        if _writes_to_descriptor_2(original):
            rebound = io.TextIOWrapper(os.fdopen(os.dup(saved), "wb", buffering=0),
                                       encoding=getattr(original, "encoding", None) or "utf-8",
                                       errors="backslashreplace", line_buffering=True)
            sys.stderr = rebound
            _rebind_handlers(original, rebound)
        os.dup2(null, 2)
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)
        if rebound is not None:
            _rebind_handlers(rebound, original)
            sys.stderr = original
            rebound.close()


def _rebind_handlers(old, new) -> None:
    """Points the logging handlers writing to ``old`` at ``new``."""
    import logging

    loggers = [logging.getLogger()] + [logging.getLogger(name) for name in
                                       list(logging.root.manager.loggerDict)]
    for logger in loggers:
        for handler in getattr(logger, "handlers", []):
            if isinstance(handler, logging.StreamHandler) and handler.stream is old:
                handler.setStream(new)
