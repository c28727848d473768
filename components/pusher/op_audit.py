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
"""

from __future__ import annotations

import functools
import json
import logging
import os
import subprocess
import sys

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


@functools.lru_cache(maxsize=1)
def model_server_ops() -> dict:
    """``{op type: "tensorflow" | "tensorflow_text"}``: the ops the model server links (see
    the module docstring), Python-only ops left out. Computed once per process (a fresh
    interpreter; a few seconds). Raises RuntimeError when tensorflow_text is not installed
    (its op library is half of the set)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-c", _LIST_OPS], capture_output=True, text=True,
                          env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"Listing TensorFlow's registered ops failed: "
                           f"{done.stderr.strip().splitlines()[-1:]}")
    listed = json.loads(done.stdout.strip().splitlines()[-1])
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


def saved_model_ops(export_dir: str) -> set:
    """The op types of every meta graph of the SavedModel in ``export_dir``."""
    from tensorflow.core.protobuf import saved_model_pb2
    import tensorflow as tf

    saved_model = saved_model_pb2.SavedModel()
    with tf.io.gfile.GFile(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
        saved_model.ParseFromString(f.read())
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


def audit_saved_model(export_dir: str) -> dict:
    """`unservable_ops` of the SavedModel in ``export_dir`` (empty: servable)."""
    problems = unservable_ops(saved_model_ops(export_dir))
    for op, reason in problems.items():
        logging.error("SavedModel %s: op %s is %s", export_dir, op, reason)
    return problems


__all__ = ["PYTHON_ONLY_OPS", "TF_SERVING_VERSION", "audit_saved_model", "graph_def_ops",
           "model_server_ops", "saved_model_ops", "unservable_ops"]
