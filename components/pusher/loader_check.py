"""The model server's loader, tried before a push: every signature of a SavedModel run
through TensorFlow's C API on the model's own warm-up requests, its outputs compared with
Python's.

TFX's InfraValidator does this job by starting TF Serving in Docker or Kubernetes and
sending it requests; neither is available where this pipeline runs its tests, and the part
that fails in practice is the C++ loader itself (a variable the restore op does not fill,
an op without a kernel in the server), not the server's RPC layer. So the check runs the
loader the server links, ``TF_LoadSessionFromSavedModel`` of the installed wheel's
``libtensorflow_cc``, with tensorflow_text's kernels registered by ``TF_LoadLibrary``, in a
subprocess that never imports TensorFlow's Python package (c_api_runner.py), and feeds each
warm-up request to its SignatureDef by tensor name.

An output is compared with what the same signature answered in Python (at most ``ATOL``
apart, strings equal): the response recorded beside each warm-up request when the Trainer
wrote it (warmup.py), or, for a request logged without one, the signature run by
``tf.saved_model.load``. A sampling signature draws other tokens on every call: an output
two Python calls disagree on (left out of the recorded response) is checked for its
SignatureDef's dtype and the request's batch size only. A model without warm-up requests is
only loaded.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import os
import subprocess
import sys
import tempfile

import numpy as np
import tensorflow as tf

from lmfactory.components.pusher import op_audit, warmup

RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "c_api_runner.py")
ATOL = 1e-5
TIMEOUT_SECONDS = 600
_C_API_LIBRARIES = ("libtensorflow_framework.so.2", "libtensorflow_cc.so.2")
_NUMERIC = {"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
            "bool"}


@dataclasses.dataclass(frozen=True)
class SignatureCheck:
    """One warm-up request run through the C API: ``error`` is None when it ran and every
    output matched; ``max_abs_diff`` over the compared numeric outputs; ``sampled`` the
    outputs compared by dtype and shape only."""
    signature: str
    error: str | None
    max_abs_diff: float = 0.0
    sampled: tuple = ()
    seconds: float = 0.0


@dataclasses.dataclass(frozen=True)
class LoaderReport:
    export_dir: str
    load_error: str | None
    load_seconds: float
    checks: tuple

    @property
    def problems(self) -> dict:
        """``{"<load>" or signature: one-line error}``; empty when the model serves."""
        if self.load_error:
            return {"<load>": self.load_error}
        return {check.signature: check.error for check in self.checks if check.error}


def c_api_libraries() -> list:
    """The installed wheel's libraries holding TensorFlow's C API, found without importing
    anything new; RuntimeError when the wheel has none."""
    spec = importlib.util.find_spec("tensorflow")
    folder = os.path.dirname(spec.origin) if spec and spec.origin else ""
    paths = [os.path.join(folder, name) for name in _C_API_LIBRARIES]
    missing = [path for path in paths if not os.path.exists(path)]
    if missing:
        raise RuntimeError(f"TensorFlow's C API libraries are not installed: {missing}")
    return paths


def read_signature_defs(export_dir: str, saved_model=None) -> dict:
    """The SignatureDefs of the MetaGraph tagged ``serve``, read from saved_model.pb
    (``saved_model``: its proto, if already read)."""
    saved_model = saved_model or op_audit.read_saved_model(export_dir)
    for meta_graph in saved_model.meta_graphs:
        if "serve" in meta_graph.meta_info_def.tags:
            return dict(meta_graph.signature_def)
    raise ValueError(f"{export_dir} has no MetaGraph tagged 'serve'")


def _feed(name: str, value: np.ndarray, folder: str, file: str) -> dict:
    if value.dtype.kind in "OSU":
        values = [v.decode("utf-8") if isinstance(v, bytes) else str(v)
                  for v in value.reshape(-1)]
        return {"tensor": name, "dtype": "string", "shape": list(value.shape),
                "values": values}
    if value.dtype.name not in _NUMERIC:
        raise ValueError(f"Input {name} has dtype {value.dtype.name}, which the loader check "
                         f"does not feed")
    np.save(os.path.join(folder, file), value.copy(order="C"), allow_pickle=False)
    return {"tensor": name, "dtype": value.dtype.name, "shape": list(value.shape),
            "file": file}


def _spec(export_dir: str, requests: list, signature_defs: dict, folder: str,
          repeat: int = 1) -> dict:
    runs = []
    for index, request in enumerate(requests):
        name = request.model_spec.signature_name or "serving_default"
        if name not in signature_defs:
            raise ValueError(f"Warm-up request {index} names signature {name!r}, which the "
                             f"SavedModel lacks")
        signature = signature_defs[name]
        feeds = [_feed(signature.inputs[key].name, tf.make_ndarray(proto), folder,
                       f"in_{index}_{position}.npy")
                 for position, (key, proto) in enumerate(sorted(request.inputs.items()))]
        keys = sorted(signature.outputs)
        runs.append({"name": name, "keys": keys, "inputs": feeds, "repeat": int(repeat),
                     "outputs": [{"tensor": signature.outputs[key].name,
                                  "file": f"out_{index}_{position}.npy"}
                                 for position, key in enumerate(keys)]})
    return {"export_dir": os.path.abspath(export_dir), "tags": ["serve"],
            "libraries": c_api_libraries(), "op_libraries": op_audit._op_libraries(),
            "runs": runs}


def run_c_api(export_dir: str, requests: list, signature_defs: dict, folder: str,
              repeat: int = 1) -> tuple:
    """Runs ``requests`` through c_api_runner.py (each ``repeat`` times); returns
    ``(spec, result)``."""
    spec = _spec(export_dir, requests, signature_defs, folder, repeat)
    with open(os.path.join(folder, "spec.json"), "w", encoding="utf-8") as f:
        json.dump(spec, f)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, RUNNER, folder], capture_output=True, text=True,
                          env=env, timeout=TIMEOUT_SECONDS, check=False)
    result_path = os.path.join(folder, "result.json")
    if done.returncode != 0 or not os.path.exists(result_path):
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"The C API runner exited with status {done.returncode}: "
                           f"{tail[0]}")
    with open(result_path, encoding="utf-8") as f:
        return spec, json.load(f)


def c_api_latencies(export_dir: str, requests: list, repeat: int) -> list:
    """Seconds of ``repeat`` timed ``TF_SessionRun`` calls of each request, in one process
    of TF Serving's loader, after an untimed first call (the version's warm-up); a
    benchmark's figures. RuntimeError when a request fails."""
    with tempfile.TemporaryDirectory(prefix="lmfactory_loader_latency_") as folder:
        _, result = run_c_api(export_dir, requests, read_signature_defs(export_dir), folder,
                              repeat + 1)
    if not result["loaded"]:
        raise RuntimeError(f"The C API cannot load {export_dir}: {result['load_error']}")
    failed = [run["error"] for run in result["runs"] if not run["ok"]]
    if failed:
        raise RuntimeError(f"A request failed in the C API: {failed[0]}")
    return [run["repeat_seconds"] for run in result["runs"]]


def _read_output(folder: str, output: dict) -> np.ndarray:
    path = os.path.join(folder, output["file"])
    if output["format"] == "json":
        with open(path, encoding="utf-8") as f:
            stored = json.load(f)
        return np.array(stored["values"], dtype=object).reshape(stored["shape"])
    return np.load(path, allow_pickle=False)


def _strings_as_text(value: np.ndarray) -> np.ndarray:
    if value.dtype.kind in "OS" and value.size:
        return np.vectorize(lambda v: v.decode("utf-8", "backslashreplace")
                            if isinstance(v, bytes) else v, otypes=[object])(value)
    return value


def _compare(key: str, served: np.ndarray, expected: np.ndarray) -> tuple:
    """``(error or None, max abs diff)`` of the served output against Python's."""
    if served.shape != expected.shape:
        return f"output {key} has shape {served.shape}, Python gives {expected.shape}", 0.0
    if expected.dtype == object:
        equal = np.array_equal(served.astype(object), expected)
        return (None if equal else f"output {key} differs from Python's"), 0.0
    if expected.size == 0:
        return None, 0.0
    diff = float(np.max(np.abs(served.astype(np.float64) - expected.astype(np.float64))))
    if not diff <= ATOL:
        return f"output {key} is {diff:.3g} away from Python's (at most {ATOL})", diff
    return None, diff


def _check_sampled(key: str, served: np.ndarray, signature_def, request) -> str | None:
    """A sampled output: its SignatureDef's dtype, and one row per row of the request."""
    dtype = tf.dtypes.as_dtype(signature_def.outputs[key].dtype)
    if (dtype == tf.string) != (served.dtype.kind in "OSU"):
        return f"output {key} is {served.dtype}, its SignatureDef declares {dtype.name}"
    rows = {tf.make_ndarray(proto).shape[0] for proto in request.inputs.values()
            if len(proto.tensor_shape.dim)}
    if served.ndim and rows and served.shape[0] not in rows:
        return f"output {key} has {served.shape[0]} rows for a request of {sorted(rows)}"
    return None


@dataclasses.dataclass(frozen=True)
class ServingInterface:
    """How a SavedModel is called: its SignatureDefs, and its warm-up requests with the
    responses recorded beside them (``None`` for a request logged without one)."""
    signature_defs: dict
    requests: tuple = ()
    responses: tuple = ()


def read_interface(export_dir: str, saved_model=None) -> ServingInterface:
    """The SavedModel's `ServingInterface` (no requests when it has no warm-up file;
    ``saved_model``: its proto, if already read)."""
    logs = (warmup.read_warmup_logs(export_dir)
            if tf.io.gfile.exists(warmup.warmup_path(export_dir)) else [])
    return ServingInterface(
        read_signature_defs(export_dir, saved_model), tuple(log.request for log in logs),
        tuple(log.response if log.HasField("response") else None for log in logs))


def check_saved_model(export_dir: str, interface: ServingInterface | None = None
                      ) -> LoaderReport:
    """Loads ``export_dir`` through the C API and runs its warm-up requests (module
    docstring). ``interface``: `read_interface` of it, if already read. RuntimeError when
    the C API cannot be run at all (no library, the runner crashed)."""
    interface = interface or read_interface(export_dir)
    with tempfile.TemporaryDirectory(prefix="lmfactory_loader_check_") as folder:
        spec, result = run_c_api(export_dir, list(interface.requests),
                                 interface.signature_defs, folder)
        if not result["loaded"]:
            return LoaderReport(export_dir, result["load_error"] or "not loaded",
                                result.get("load_seconds", 0.0), ())
        python = _PythonAnswers(export_dir)
        checks = []
        for index, (run, served) in enumerate(zip(spec["runs"], result["runs"])):
            request = interface.requests[index]
            response = (interface.responses[index] if index < len(interface.responses)
                        else None)
            expected = (_recorded(response) if response is not None
                        else python.answers(run["name"], request))
            checks.append(_check_run(run, served, request, expected,
                                     interface.signature_defs[run["name"]], folder))
    return LoaderReport(export_dir, None, result["load_seconds"], tuple(checks))


def _recorded(response) -> dict:
    return {key: _strings_as_text(tf.make_ndarray(proto))
            for key, proto in response.outputs.items()}


class _PythonAnswers:
    """Python's outputs for a request logged without a response: the signature, loaded
    once by ``tf.saved_model.load``, called twice (outputs the calls disagree on are left
    out, as in a recorded response)."""

    def __init__(self, export_dir: str):
        self.export_dir = export_dir
        self.loaded = None

    def answers(self, name: str, request) -> dict:
        import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)

        if self.loaded is None:
            self.loaded = tf.saved_model.load(self.export_dir)
        return _recorded(warmup.recorded_response(self.loaded.signatures[name], request))


def _check_run(run: dict, served: dict, request, expected: dict, signature_def,
               folder: str) -> SignatureCheck:
    if not served["ok"]:
        return SignatureCheck(run["name"], served["error"] or "failed",
                              seconds=served["seconds"])
    errors, sampled, worst = [], [], 0.0
    for key, output in zip(run["keys"], served["outputs"]):
        value = _read_output(folder, output)
        if key in expected:
            error, diff = _compare(key, value, expected[key])
        else:
            sampled.append(key)
            error, diff = _check_sampled(key, value, signature_def, request), 0.0
        worst = max(worst, diff)
        if error:
            errors.append(error)
    return SignatureCheck(run["name"], "; ".join(errors) or None, worst, tuple(sampled),
                          served["seconds"])


def check_before_push(export_dir: str, interface: ServingInterface | None = None) -> None:
    """Raises ValueError, in one line naming the signature and the error, when the model
    server's loader cannot serve ``export_dir``; logs the check's figures otherwise."""
    report = check_saved_model(export_dir, interface=interface)
    if report.problems:
        name, error = next(iter(report.problems.items()))
        raise ValueError(f"Pusher: {export_dir} does not serve in TF Serving's loader (the C "
                         f"API): signature {name}: {error}")
    logging.info("TF Serving's loader serves %s: loaded in %.2f s; %s", export_dir,
                 report.load_seconds, ", ".join(
                     f"{c.signature} ok (max |diff| {c.max_abs_diff:.2g}"
                     f"{', sampled ' + '/'.join(c.sampled) if c.sampled else ''})"
                     for c in report.checks) or "no warm-up requests to run")


__all__ = ["ATOL", "LoaderReport", "ServingInterface", "SignatureCheck", "c_api_latencies",
           "c_api_libraries", "check_before_push",
           "check_saved_model", "read_interface", "read_signature_defs", "run_c_api"]
