"""Run a SavedModel's signatures through TensorFlow's C API, with no TensorFlow Python.

TF Serving's model server loads a SavedModel with the C++ loader (the MetaGraphDef, its
variables restored by the saver ops, then ``Session::Run`` on the signature's tensors), never
with Python's object-graph loader (``tf.saved_model.load``). A model can pass the Python
loader and fail in the C++ one (an untracked variable, an op whose kernel lives in the
Python runtime, a custom op library the server lacks), so this script takes the server's
path: ``TF_LoadSessionFromSavedModel`` and ``TF_SessionRun`` through ``ctypes``, in a
process that imports only the standard library and numpy, after registering the custom op
libraries (tensorflow_text's ``_*.so``) with ``TF_LoadLibrary`` as the server links them.

Usage: ``python c_api_runner.py REQUEST_DIR``. ``REQUEST_DIR/spec.json`` names the model,
its tags, the libraries holding the C API (loaded in order, RTLD_GLOBAL), the op libraries
and the runs: feeds (``values``, a flat row-major list, or ``file``, a ``.npy`` in
REQUEST_DIR) and fetches, by graph tensor name ``op_name:index``, and optionally ``repeat``
(run it that many times: ``seconds`` is the first run's, ``repeat_seconds`` the others'; a
benchmark's latencies). A fetched tensor goes to
``REQUEST_DIR/<file>`` as ``.npy`` (bfloat16 as float32), a string one to ``<file>.json``
(``{"shape", "values"}``). ``result.json`` reports the load and each run; it is rewritten
after the load and after every run, so a crash inside TensorFlow leaves the runs done so
far on record. Exit status: 0 once result.json is written, 2 for a bad spec or usage.

Symbols: libtensorflow_cc.so.2 exports the whole C API and libtensorflow_framework.so.2 a
second copy of the tensor and status functions; each function comes from the LAST listed
library exporting it, so one copy of the code makes and reads every tensor and status.
String elements are 24-byte ``TF_TString``s; the ``TF_TString_*`` helpers are inline in the
header, so the exported ``TF_StringInit``/``Copy``/``GetDataPointer``/``GetSize``/``Dealloc``
serve instead. ``TF_DeleteTensor`` frees only the buffer of a ``TF_AllocateTensor`` tensor,
so input string elements are deallocated one by one after the run.
"""

import ctypes
import json
import os
import sys
import time

import numpy as np

TSTRING_SIZE = 24  # sizeof(TF_TString), tsl/platform/ctstring_internal.h

# spec dtype -> (TF_DataType code, numpy dtype of the tensor's bytes; None for strings)
DTYPES = {
    "float32": (1, np.float32), "float64": (2, np.float64), "int32": (3, np.int32),
    "uint8": (4, np.uint8), "int16": (5, np.int16), "int8": (6, np.int8),
    "string": (7, None), "complex64": (8, np.complex64), "int64": (9, np.int64),
    "bool": (10, np.bool_), "bfloat16": (14, np.uint16), "uint16": (17, np.uint16),
    "complex128": (18, np.complex128), "float16": (19, np.float16),
    "uint32": (22, np.uint32), "uint64": (23, np.uint64),
}
DTYPE_NAMES = {code: name for name, (code, _) in DTYPES.items()}


class TF_Output(ctypes.Structure):
    _fields_ = [("oper", ctypes.c_void_p), ("index", ctypes.c_int)]


_P, _INT, _SIZE, _STR = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_char_p
_OUTS = ctypes.POINTER(TF_Output)
_SIGNATURES = {  # name: (restype, argtypes), as declared in tensorflow/c/*.h
    "TF_NewStatus": (_P, []), "TF_DeleteStatus": (None, [_P]),
    "TF_GetCode": (_INT, [_P]), "TF_Message": (_STR, [_P]),
    "TF_LoadLibrary": (_P, [_STR, _P]),
    "TF_NewGraph": (_P, []), "TF_DeleteGraph": (None, [_P]),
    "TF_NewSessionOptions": (_P, []), "TF_DeleteSessionOptions": (None, [_P]),
    "TF_LoadSessionFromSavedModel": (
        _P, [_P, _P, _STR, ctypes.POINTER(_STR), _INT, _P, _P, _P]),
    "TF_CloseSession": (None, [_P, _P]), "TF_DeleteSession": (None, [_P, _P]),
    "TF_GraphOperationByName": (_P, [_P, _STR]),
    "TF_OperationNumOutputs": (_INT, [_P]),
    "TF_SessionRun": (None, [_P, _P, _OUTS, ctypes.POINTER(_P), _INT, _OUTS,
                             ctypes.POINTER(_P), _INT, _P, _INT, _P, _P]),
    "TF_AllocateTensor": (_P, [_INT, ctypes.POINTER(ctypes.c_int64), _INT, _SIZE]),
    "TF_DeleteTensor": (None, [_P]), "TF_TensorType": (_INT, [_P]),
    "TF_NumDims": (_INT, [_P]), "TF_Dim": (ctypes.c_int64, [_P, _INT]),
    "TF_TensorData": (_P, [_P]), "TF_TensorByteSize": (_SIZE, [_P]),
    "TF_StringInit": (None, [_P]), "TF_StringCopy": (None, [_P, _STR, _SIZE]),
    "TF_StringGetDataPointer": (_P, [_P]), "TF_StringGetSize": (_SIZE, [_P]),
    "TF_StringDealloc": (None, [_P]),
}


class SpecError(Exception):
    """spec.json is missing, malformed or asks for something unsupported."""


class CApi:
    """The C API functions, bound from the given shared libraries (``api.SessionRun``...)."""

    def __init__(self, libraries):
        libs = [ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL) for path in libraries]
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = next((getattr(lib, name) for lib in reversed(libs) if hasattr(lib, name)), None)
            if fn is None:
                raise OSError(f"{name} is exported by none of {libraries}")
            fn.restype, fn.argtypes = restype, argtypes
            setattr(self, name[3:], fn)

    def check(self, status, what=""):
        if self.GetCode(status) != 0:
            message = (self.Message(status) or b"").decode("utf-8", "replace")
            raise RuntimeError(what + _one_line(message or f"TF_Code {self.GetCode(status)}"))


def _one_line(text):
    return next((line.strip() for line in str(text).splitlines() if line.strip()), "")


def _error(e):
    """One line; TensorFlow's own message (a RuntimeError here) without a type name."""
    return _one_line(e) if isinstance(e, RuntimeError) else f"{type(e).__name__}: {_one_line(e)}"


def _require(condition, message):
    if not condition:
        raise SpecError(message)


def _read_spec(request_dir):
    try:
        with open(os.path.join(request_dir, "spec.json"), encoding="utf-8") as f:
            spec = json.load(f)
        spec.setdefault("tags", ["serve"])
        spec.setdefault("op_libraries", [])
        _require(isinstance(spec["export_dir"], str), "export_dir is not a string")
        for key in ("tags", "libraries", "op_libraries"):
            _require(all(isinstance(v, str) for v in spec[key]), f"{key} holds a non-string")
        _require(spec["libraries"], "no libraries")
        for run in spec["runs"]:
            _require(isinstance(run["name"], str), "a run's name is not a string")
            _require(isinstance(run.get("repeat", 1), int) and run.get("repeat", 1) >= 1,
                     "a run's repeat is not a positive integer")
            for feed in run["inputs"]:
                _require(feed["dtype"] in DTYPES, f"unsupported dtype {feed['dtype']!r}")
                _require(isinstance(feed["tensor"], str) and isinstance(feed["shape"], list),
                         "an input's tensor or shape is malformed")
                _require("values" in feed or (feed["dtype"] != "string" and "file" in feed),
                         f"input {feed['tensor']} has neither values nor a .npy file")
            for fetch in run["outputs"]:
                _require(isinstance(fetch["tensor"], str) and isinstance(fetch["file"], str),
                         "an output's tensor or file is not a string")
    except SpecError as e:
        raise SpecError(f"bad spec.json: {e}") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise SpecError(f"bad spec.json: {type(e).__name__}: {_one_line(e)}") from None
    return spec


def _load(api, spec):
    """Registers the op libraries, then loads the SavedModel: (graph, session)."""
    status = api.NewStatus()
    try:
        for path in spec["op_libraries"]:
            api.LoadLibrary(path.encode(), status)
            api.check(status, f"op library {path}: ")
        graph, options = api.NewGraph(), api.NewSessionOptions()
        tags = [t.encode() for t in spec["tags"]]
        session = api.LoadSessionFromSavedModel(
            options, None, spec["export_dir"].encode(), (_STR * len(tags))(*tags), len(tags),
            graph, None, status)
        api.DeleteSessionOptions(options)
        if api.GetCode(status) != 0:
            api.DeleteGraph(graph)
            api.check(status)
        return graph, session
    finally:
        api.DeleteStatus(status)


def _port(api, graph, name):
    op_name, _, index = name.rpartition(":")
    if not op_name or not index.isdigit():
        op_name, index = name, "0"
    op = api.GraphOperationByName(graph, op_name.encode())
    if not op:
        raise LookupError(f"no operation {op_name!r} in the graph")
    if int(index) >= api.OperationNumOutputs(op):
        raise LookupError(f"operation {op_name!r} has no output {index}")
    return TF_Output(op, int(index))


def _feed_array(feed, request_dir):
    """The numeric feed as a C-contiguous array of the tensor's byte dtype."""
    shape, np_dtype = tuple(feed["shape"]), DTYPES[feed["dtype"]][1]
    src_dtype = np.float32 if feed["dtype"] == "bfloat16" else np_dtype
    if "file" in feed:
        array = np.load(os.path.join(request_dir, feed["file"]), allow_pickle=False)
        array = np.asarray(array, dtype=src_dtype)
    else:
        array = np.asarray(feed["values"], dtype=src_dtype).reshape(-1)
        if array.size != int(np.prod(shape)):
            raise ValueError(f"{feed['tensor']}: {array.size} values for shape {list(shape)}")
        array = array.reshape(shape)
    if array.shape != shape:
        raise ValueError(f"{feed['tensor']}: array shape {list(array.shape)} != {list(shape)}")
    if feed["dtype"] == "bfloat16":  # float32 -> bfloat16, rounding to nearest even
        bits = array.astype(np.float32).view(np.uint32).astype(np.uint64)
        array = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.ascontiguousarray(array)


def _make_tensor(api, feed, request_dir):
    """A new TF_Tensor holding the feed: (tensor, number of TF_TString elements)."""
    code, shape = DTYPES[feed["dtype"]][0], feed["shape"]
    dims = (ctypes.c_int64 * len(shape))(*shape)
    if feed["dtype"] == "string":
        items = [str(v).encode("utf-8") for v in feed["values"]]
        if len(items) != int(np.prod(shape)):
            raise ValueError(f"{feed['tensor']}: {len(items)} values for shape {shape}")
        tensor = api.AllocateTensor(code, dims, len(shape), len(items) * TSTRING_SIZE)
        data = api.TensorData(tensor)
        for i, item in enumerate(items):
            api.StringInit(data + i * TSTRING_SIZE)
            api.StringCopy(data + i * TSTRING_SIZE, item, len(item))
        return tensor, len(items)
    array = _feed_array(feed, request_dir)
    tensor = api.AllocateTensor(code, dims, len(shape), array.nbytes)
    if array.nbytes:
        ctypes.memmove(api.TensorData(tensor), array.ctypes.data, array.nbytes)
    return tensor, 0


def _save_output(api, tensor, file, request_dir):
    """Writes one fetched tensor; its entry for result.json."""
    code = api.TensorType(tensor)
    if code not in DTYPE_NAMES:
        raise TypeError(f"output {file}: unsupported TF_DataType {code}")
    dtype = DTYPE_NAMES[code]
    shape = [api.Dim(tensor, i) for i in range(api.NumDims(tensor))]
    data = api.TensorData(tensor)
    if dtype == "string":
        values = []
        for i in range(int(np.prod(shape))):
            element = data + i * TSTRING_SIZE
            raw = ctypes.string_at(api.StringGetDataPointer(element), api.StringGetSize(element))
            values.append(raw.decode("utf-8", "backslashreplace"))
        file += ".json"
        with open(os.path.join(request_dir, file), "w", encoding="utf-8") as f:
            json.dump({"shape": shape, "values": values}, f)
        return {"file": file, "format": "json", "dtype": dtype, "shape": shape}
    nbytes = api.TensorByteSize(tensor)
    raw = ctypes.string_at(data, nbytes) if nbytes else b""
    array = np.frombuffer(raw, dtype=DTYPES[dtype][1]).reshape(shape)
    if dtype == "bfloat16":
        array = (array.astype(np.uint32) << 16).view(np.float32)
    with open(os.path.join(request_dir, file), "wb") as f:
        np.save(f, array, allow_pickle=False)
    return {"file": file, "format": "npy", "dtype": dtype, "shape": shape}


def _run(api, graph, session, run, request_dir):
    """One TF_SessionRun; its entry for result.json. Errors are recorded, not raised."""
    entry = {"name": run["name"], "ok": False, "error": None, "seconds": 0.0, "outputs": []}
    feeds, fetched = [], []
    status = api.NewStatus()
    try:
        in_ports = [_port(api, graph, feed["tensor"]) for feed in run["inputs"]]
        out_ports = [_port(api, graph, fetch["tensor"]) for fetch in run["outputs"]]
        for feed in run["inputs"]:
            feeds.append(_make_tensor(api, feed, request_dir))
        n_in, n_out = len(in_ports), len(out_ports)
        times = []
        for _ in range(int(run.get("repeat", 1))):
            for tensor in fetched:  # an earlier repetition's outputs
                api.DeleteTensor(tensor)
            out_values = (_P * n_out)()
            start = time.perf_counter()
            api.SessionRun(session, None, (TF_Output * n_in)(*in_ports),
                           (_P * n_in)(*[tensor for tensor, _ in feeds]), n_in,
                           (TF_Output * n_out)(*out_ports), out_values, n_out, None, 0, None,
                           status)
            times.append(round(time.perf_counter() - start, 6))
            fetched = [tensor for tensor in out_values if tensor]
            api.check(status)
        entry["seconds"] = times[0]
        if len(times) > 1:
            entry["repeat_seconds"] = times[1:]
        for fetch, tensor in zip(run["outputs"], out_values):
            entry["outputs"].append(_save_output(api, tensor, fetch["file"], request_dir))
        entry["ok"] = True
    except Exception as e:  # pylint: disable=broad-except  (a failed run ends only that run)
        entry["error"] = _error(e)
    finally:
        for tensor, n_strings in feeds:
            data = api.TensorData(tensor)
            for i in range(n_strings):
                api.StringDealloc(data + i * TSTRING_SIZE)
            api.DeleteTensor(tensor)
        for tensor in fetched:
            api.DeleteTensor(tensor)
        api.DeleteStatus(status)
    return entry


def _write_result(request_dir, result):
    path = os.path.join(request_dir, "result.json")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    os.replace(path + ".tmp", path)


def main(argv):
    if len(argv) != 2 or not os.path.isdir(argv[1]):
        print("usage: c_api_runner.py REQUEST_DIR (a directory holding spec.json)", file=sys.stderr)
        return 2
    request_dir = argv[1]
    try:
        spec = _read_spec(request_dir)
    except SpecError as e:
        print(f"c_api_runner: {e}", file=sys.stderr)
        return 2
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    result = {"loaded": False, "load_error": None, "load_seconds": 0.0, "runs": []}
    start = time.perf_counter()
    api = session = graph = None
    try:
        api = CApi(spec["libraries"])
        graph, session = _load(api, spec)
        result["loaded"] = True
    except Exception as e:  # pylint: disable=broad-except  (reported in result.json)
        result["load_error"] = _error(e)
    result["load_seconds"] = round(time.perf_counter() - start, 6)
    _write_result(request_dir, result)
    if session:
        for run in spec["runs"]:
            result["runs"].append(_run(api, graph, session, run, request_dir))
            _write_result(request_dir, result)
        status = api.NewStatus()
        api.CloseSession(session, status)
        api.DeleteSession(session, status)
        api.DeleteStatus(status)
        api.DeleteGraph(graph)
    assert "tensorflow" not in sys.modules, "the C API runner must not import TensorFlow Python"
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
