"""Which ops a SavedModel needs, and whether TF Serving's model server has them.

The model server (``tensorflow/serving:2.16.1``, the release matching TensorFlow 2.16)
links TensorFlow's core op library and tensorflow_text's op library
(``@org_tensorflow_text//tensorflow_text:ops_lib`` in tensorflow_serving/model_servers'
``SUPPORTED_TENSORFLOW_OPS``) and nothing else: no Python runtime, no other custom ops. A
graph holding an op outside that set fails to load ("Op type not registered"); a graph
holding a Python op (``tf.py_function`` / ``tf.numpy_function``) loads nowhere without
Python.

`model_server_ops` computes that set from the installed packages: TensorFlow's registered
ops in a fresh interpreter that has NOT imported tensorflow_text (importing keras-nlp does,
so this process's registry is not the core set), then the ops each of tensorflow_text's
op libraries (``tensorflow_text/python/ops/_*.so``) adds when loaded. `PYTHON_ONLY_OPS` are
registered by TensorFlow's core but their kernels live in the Python runtime.

The set depends only on the installed TensorFlow and tensorflow_text, so it is listed once
per pair of versions (a fresh interpreter importing TensorFlow: seconds) and kept as JSON in
a cache folder (``LMFACTORY_CACHE_DIR``, else ``$XDG_CACHE_HOME/lmfactory`` or
``~/.cache/lmfactory``): a push then reads a file instead of starting a process. The file's
name holds both versions and a digest of tensorflow_text's op libraries (name and size), so
an upgrade or a rebuilt wheel lists the ops again; a file that does not parse is listed
again and replaced. An unwritable cache folder only costs the listing each time.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import subprocess
import sys
import tempfile

TF_SERVING_VERSION = "2.16.1"  # tensorflow/serving release built on TensorFlow 2.16
TENSORFLOW = "tensorflow"
TENSORFLOW_TEXT = "tensorflow_text"
# Core op definitions whose kernels are Python callbacks (script_ops.cc): the model server
# has no Python interpreter to run them.
PYTHON_ONLY_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})

_LIST_OPS = r"""
import glob, importlib.util, json, os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf
from tensorflow.core.framework import op_def_pb2
from tensorflow.python.client import pywrap_tf_session as session

def registered():
    ops = op_def_pb2.OpList()
    ops.ParseFromString(session.TF_GetBuffer(session.TF_GetAllOpList()))
    return {op.name for op in ops.op}

if "tensorflow_text" in sys.modules:
    raise SystemExit("tensorflow_text was imported with tensorflow; cannot list core ops")
core = registered()
text = set()
spec = importlib.util.find_spec("tensorflow_text")
if spec is not None:
    for library in sorted(glob.glob(os.path.join(os.path.dirname(spec.origin), "python",
                                                 "ops", "_*.so"))):
        tf.load_op_library(library)
    text = registered() - core
print(json.dumps({"tensorflow": sorted(core), "tensorflow_text": sorted(text),
                  "tensorflow_version": tf.__version__,
                  "tensorflow_text_found": spec is not None}))
"""


def cache_dir() -> str:
    """The folder of lmfactory's per-machine caches (see the module docstring)."""
    if os.environ.get("LMFACTORY_CACHE_DIR"):
        return os.environ["LMFACTORY_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "lmfactory")


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def _op_libraries() -> list:
    """tensorflow_text's op libraries (``python/ops/_*.so``), found without importing it."""
    spec = importlib.util.find_spec(TENSORFLOW_TEXT)
    if spec is None or not spec.origin:
        return []
    return sorted(glob.glob(os.path.join(os.path.dirname(spec.origin), "python", "ops",
                                         "_*.so")))


def op_set_cache_path() -> str:
    """The cache file of the installed versions' op set (see the module docstring)."""
    libraries = hashlib.sha256()
    for library in _op_libraries():
        libraries.update(f"{os.path.basename(library)}:{os.path.getsize(library)};".encode())
    name = (f"tf_serving_ops-tensorflow-{_version('tensorflow')}-tensorflow_text-"
            f"{_version('tensorflow-text')}-{libraries.hexdigest()[:12]}.json")
    return os.path.join(cache_dir(), name)


def _list_ops() -> dict:
    """The registered ops of a fresh interpreter (``_LIST_OPS``'s JSON)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-c", _LIST_OPS], capture_output=True, text=True,
                          env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"Listing TensorFlow's registered ops failed: "
                           f"{done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _read_cached(path: str) -> dict | None:
    """The cached listing at ``path``; None when there is none or it does not parse (a
    damaged file is then listed again and replaced)."""
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            listed = json.load(f)
        if isinstance(listed.get(TENSORFLOW), list) and listed[TENSORFLOW] and \
                isinstance(listed.get(TENSORFLOW_TEXT), list):
            return listed
    except (OSError, ValueError, AttributeError) as error:
        logging.warning("TF Serving op set cache %s unreadable (%s): listing again", path, error)
        return None
    logging.warning("TF Serving op set cache %s holds no op lists: listing again", path)
    return None


def _write_cached(path: str, listed: dict) -> None:
    """Writes ``listed`` to ``path`` atomically (a reader never sees half a file)."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, staging = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".incomplete")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(listed, f)
        os.replace(staging, path)
    except OSError as error:
        logging.warning("TF Serving op set not cached at %s: %s", path, error)


@functools.lru_cache(maxsize=1)
def model_server_ops() -> dict:
    """``{op type: "tensorflow" | "tensorflow_text"}``: the ops the model server links (see
    the module docstring), Python-only ops left out. Read from the cache file of the
    installed versions, else listed in a fresh interpreter and cached. Raises RuntimeError
    when tensorflow_text is not installed (its op library is half of the set)."""
    path = op_set_cache_path()
    listed = _read_cached(path)
    if listed is None:
        listed = _list_ops()
        if listed["tensorflow_text_found"]:
            _write_cached(path, listed)
    if not listed["tensorflow_text_found"]:
        raise RuntimeError("tensorflow_text is not installed: its op library (linked by the "
                           "model server) cannot be listed")
    ops = {name: TENSORFLOW for name in listed[TENSORFLOW] if name not in PYTHON_ONLY_OPS}
    ops.update({name: TENSORFLOW_TEXT for name in listed[TENSORFLOW_TEXT]})
    return ops


def graph_def_ops(graph_def) -> set:
    """The op types of a GraphDef: its nodes and every function of its library (the bodies
    of tf.functions, while loops and conditionals)."""
    ops = {node.op for node in graph_def.node}
    for function in graph_def.library.function:
        ops.update(node.op for node in function.node_def)
    return ops


def read_saved_model(export_dir: str):
    """The ``SavedModel`` proto of ``export_dir/saved_model.pb``: read once by the Pusher and
    handed to each of its checks."""
    from tensorflow.core.protobuf import saved_model_pb2
    import tensorflow as tf

    saved_model = saved_model_pb2.SavedModel()
    with tf.io.gfile.GFile(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
        saved_model.ParseFromString(f.read())
    return saved_model


def saved_model_ops(export_dir: str, saved_model=None) -> set:
    """The op types of every meta graph of the SavedModel in ``export_dir``
    (``saved_model``: its proto, if already read)."""
    saved_model = saved_model or read_saved_model(export_dir)
    ops = set()
    for meta_graph in saved_model.meta_graphs:
        ops |= graph_def_ops(meta_graph.graph_def)
    return ops


def unservable_ops(ops, server_ops: dict | None = None) -> dict:
    """``{op: reason}`` for each op of ``ops`` the model server cannot run."""
    server_ops = model_server_ops() if server_ops is None else server_ops
    problems = {}
    for op in sorted(ops):
        if op in PYTHON_ONLY_OPS:
            problems[op] = "a Python callback (tf.py_function / numpy_function): the model " \
                           "server has no Python"
        elif op not in server_ops:
            problems[op] = f"registered by neither TensorFlow nor tensorflow_text (the ops " \
                           f"tensorflow/serving:{TF_SERVING_VERSION} links)"
    return problems


def audit_saved_model(export_dir: str, saved_model=None) -> dict:
    """`unservable_ops` of the SavedModel in ``export_dir`` (empty: servable)."""
    problems = unservable_ops(saved_model_ops(export_dir, saved_model))
    for op, reason in problems.items():
        logging.error("SavedModel %s: op %s is %s", export_dir, op, reason)
    return problems


__all__ = ["PYTHON_ONLY_OPS", "TF_SERVING_VERSION", "audit_saved_model", "cache_dir",
           "graph_def_ops", "model_server_ops", "op_set_cache_path", "read_saved_model",
           "saved_model_ops",
           "unservable_ops"]
