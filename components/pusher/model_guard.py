"""What a SavedModel does besides computing: the guard against untrusted models.

A SavedModel is a program. Loading one runs its restore function (the variables, from its
own ``variables/`` folder) and its init op; calling a signature runs the signature's graph.
Neither needs Python, and the graph may hold ops that read, list or write files, write event
files, open record readers or databases, or talk to other processes. A model that computes
outputs from its inputs needs none of them: this project's exports hold none, and its
tokenizers keep their vocabularies inside the graph. So the ops that reach outside the
process (`OUTSIDE_OPS`, from TensorFlow's op registry, grouped by what they reach) are
refused in the parts of a SavedModel that run when it is served: the graphs reachable from
its SignatureDefs and from its init op. The restore function reads the variables of the
model's own folder by the path the loader gives it, and is what loading means; it is not
part of that set, so the ``SaveV2`` / ``RestoreV2`` of every SavedModel's saver pass, and
the same ops inside a signature are refused.

`PrintV2` is allowed unless its ``output_stream`` names a file (``file://...``), where it
is a write.

The Pusher refuses such a model (components/pusher/executor.py), and ``lmfactory predict`` /
``evaluate`` refuse to load one unless ``--trust-model`` is given; both name the ops found.
"""

from __future__ import annotations


# Ops that reach outside the process when they run, by what they reach (TensorFlow 2.16's
# op registry; tests/test_model_guard.py checks that every name is registered).
OUTSIDE_OPS_BY_KIND = {
    "reads files": (
        "ReadFile", "MatchingFiles", "MatchingFilesDataset", "ExperimentalMatchingFilesDataset",
        "ImmutableConst", "InitializeTableFromTextFile", "InitializeTableFromTextFileV2",
        "LoadAndRemapMatrix", "GenerateVocabRemapping",
        "Restore", "RestoreV2", "RestoreSlice", "DTensorRestoreV2"),
    "writes files": (
        "WriteFile", "Save", "SaveV2", "SaveSlices", "MergeV2Checkpoints",
        "DatasetToTFRecord", "ExperimentalDatasetToTFRecord", "SaveDataset", "SaveDatasetV2",
        "DistributedSave"),
    "opens file and database readers": (
        "TFRecordDataset", "TFRecordDatasetV2", "TextLineDataset", "FixedLengthRecordDataset",
        "FixedLengthRecordDatasetV2", "CSVDataset", "CSVDatasetV2", "ExperimentalCSVDataset",
        "LMDBDataset", "ExperimentalLMDBDataset", "SqlDataset", "ExperimentalSqlDataset",
        "LoadDataset", "SnapshotDataset", "SnapshotDatasetV2", "SnapshotDatasetReader",
        "SnapshotNestedDatasetReader", "SnapshotChunkDataset", "ListSnapshotChunksDataset",
        "CacheDataset", "CacheDatasetV2",
        "WholeFileReader", "WholeFileReaderV2", "TextLineReader", "TextLineReaderV2",
        "TFRecordReader", "TFRecordReaderV2", "FixedLengthRecordReader",
        "FixedLengthRecordReaderV2", "IdentityReader", "IdentityReaderV2", "LMDBReader",
        "RecordInput"),
    "writes event files and debug streams": (
        "CreateSummaryFileWriter", "CreateSummaryDbWriter", "SummaryWriter",
        "WriteSummary", "WriteScalarSummary", "WriteHistogramSummary", "WriteImageSummary",
        "WriteAudioSummary", "WriteGraphSummary", "WriteRawProtoSummary", "FlushSummaryWriter",
        "CloseSummaryWriter", "StatsAggregatorSetSummaryWriter",
        "DebugIdentity", "DebugIdentityV2", "DebugIdentityV3", "DebugNanCount",
        "DebugNumericSummary", "DebugNumericSummaryV2"),
    "configures file systems or talks to other processes": (
        "FileSystemSetConfiguration", "RpcServer", "RpcServerStart", "RpcServerRegister",
        "RpcClient", "RpcCall", "RemoteCall", "Send", "Recv"),
}
OUTSIDE_OPS = frozenset(op for ops in OUTSIDE_OPS_BY_KIND.values() for op in ops)
_KIND_OF = {op: kind for kind, ops in OUTSIDE_OPS_BY_KIND.items() for op in ops}
INIT_OP_KEYS = ("__saved_model_init_op", "saved_model_main_op", "legacy_init_op")


class UntrustedModelError(ValueError):
    """The SavedModel holds ops that reach outside the process; the message names them."""


def functions_called(node) -> list[str]:
    """The names of the functions a node calls (``f``, branches, loop bodies: any attr
    holding a function or a list of them)."""
    names = []
    for value in node.attr.values():
        if value.HasField("func"):
            names.append(value.func.name)
        names.extend(function.name for function in value.list.func)
    return names


def function_nodes(graph_def, names: list[str]) -> list:
    """Every node of the functions ``names`` of ``graph_def``'s library and of every
    function they call, transitively."""
    library = {function.signature.name: function for function in graph_def.library.function}
    pending, called, reached = list(names), set(), []
    while pending:
        name = pending.pop()
        if name in called or name not in library:
            continue
        called.add(name)
        for node in library[name].node_def:
            reached.append(node)
            pending.extend(functions_called(node))
    return reached


def _reachable_nodes(graph_def, outputs: list[str]):
    """The nodes that running ``outputs`` (tensor or node names of the top-level graph) can
    run: their inputs, transitively, and every node of every function they call."""
    nodes = {node.name: node for node in graph_def.node}
    stack = [name.lstrip("^").split(":")[0] for name in outputs]
    seen, functions, reached = set(), [], []
    while stack:
        name = stack.pop()
        if name in seen or name not in nodes:
            continue
        seen.add(name)
        node = nodes[name]
        reached.append(node)
        stack.extend(i.lstrip("^").split(":")[0] for i in node.input)
        functions.extend(functions_called(node))
    return reached + function_nodes(graph_def, functions)


def _served_outputs(meta_graph) -> list[str]:
    """What serving runs: every SignatureDef's output tensors and the init op."""
    outputs = [tensor.name for signature in meta_graph.signature_def.values()
               for tensor in signature.outputs.values()]
    for key in INIT_OP_KEYS:
        if key in meta_graph.signature_def:
            continue  # its outputs are listed above
        collection = meta_graph.collection_def.get(key)
        if collection is not None:
            outputs.extend(collection.node_list.value)
    return outputs


def outside_ops(export_dir: str, saved_model=None) -> dict:
    """``{op: what it reaches}`` of the ops that reach outside the process in the parts of
    the SavedModel in ``export_dir`` that run when it is served (module docstring;
    ``saved_model``: its proto, if already read)."""
    from lmfactory.components.pusher.op_audit import read_saved_model

    saved_model = saved_model or read_saved_model(export_dir)
    found = {}
    for meta_graph in saved_model.meta_graphs:
        for node in _reachable_nodes(meta_graph.graph_def, _served_outputs(meta_graph)):
            if node.op in OUTSIDE_OPS:
                found[node.op] = _KIND_OF[node.op]
            elif node.op == "PrintV2" and node.attr["output_stream"].s.startswith(b"file://"):
                found[node.op] = "writes files (output_stream file://)"
    return dict(sorted(found.items()))


def describe(found: dict) -> str:
    return ", ".join(f"{op} ({kind})" for op, kind in found.items())


def check_trusted(export_dir: str) -> None:
    """UntrustedModelError, in one line naming the ops, when the served parts of the
    SavedModel reach outside the process."""
    found = outside_ops(export_dir)
    if found:
        raise UntrustedModelError(
            f"the SavedModel {export_dir} runs ops that reach outside the process when "
            f"served: {describe(found)}")


__all__ = ["INIT_OP_KEYS", "OUTSIDE_OPS", "OUTSIDE_OPS_BY_KIND", "UntrustedModelError",
           "check_trusted", "describe", "function_nodes", "functions_called", "outside_ops"]
