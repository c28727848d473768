"""The op audit: every op of every pushed SavedModel is one TF Serving's model
server links (tensorflow/serving 2.16.1: TensorFlow 2.16's core ops plus tensorflow_text's
op library, components/pusher/op_audit.py), for every architecture and every task kind it
serves. The SavedModels are the kinds' own exports of tiny untrained models
(tests/serving_models.py) of the (architecture, kind) pairs the registries give: by
default a covering subset (every architecture's backbone and tokenizer, every head class and
every kind's packing at least once, `serving_models.audit_cases`), every pair with
LMFACTORY_FULL_OP_AUDIT=1 (~2.5x the time)."""

import functools
import json
import os

import pytest
import tensorflow as tf

from lmfactory import models
from lmfactory.components.pusher import loader_check, model_guard, op_audit
import serving_models

CASES = serving_models.serving_cases()


@functools.lru_cache(maxsize=None)
def audited() -> tuple:
    """The audited pairs, chosen when a test first asks (choosing builds every pair's task
    model: collection, which every worker does, stays free of it)."""
    return tuple(serving_models.audit_cases(
        full=os.environ.get("LMFACTORY_FULL_OP_AUDIT") == "1"))


def test_model_server_op_set_is_core_plus_tensorflow_text():
    ops = op_audit.model_server_ops()
    assert op_audit.TF_SERVING_VERSION == "2.16.1" and tf.__version__.startswith("2.16.")
    assert ops["MatMul"] == op_audit.TENSORFLOW
    # tensorflow_text's tokenizers, listed from its .so files, not from this process
    assert ops["SentencepieceOp"] == op_audit.TENSORFLOW_TEXT
    assert ops["FastWordpieceTokenizeWithOffsets"] == op_audit.TENSORFLOW_TEXT
    assert not op_audit.PYTHON_ONLY_OPS & set(ops)


def test_op_set_is_listed_once_per_versions_and_cached(tmp_path, monkeypatch):
    """The first call lists the ops in a fresh interpreter and writes the cache file; later
    calls (other processes) read it; a damaged file is listed again; another TensorFlow
    version has another file. (The listing after the damage is counted and gives the first
    listing's ops again, without a second interpreter: what the interpreter lists does not
    change within a run.)"""
    monkeypatch.setenv("LMFACTORY_CACHE_DIR", str(tmp_path))
    op_audit.model_server_ops.cache_clear()
    listings, listed = [], []
    real_list = op_audit._list_ops

    def list_ops():
        listings.append(1)
        if not listed:
            listed.append(json.dumps(real_list()))
        return json.loads(listed[0])

    monkeypatch.setattr(op_audit, "_list_ops", list_ops)
    try:
        path = op_audit.op_set_cache_path()
        assert os.path.dirname(path) == str(tmp_path) and "2.16.2" in os.path.basename(path)
        first = op_audit.model_server_ops()
        assert listings == [1] and os.path.exists(path)
        assert not [name for name in os.listdir(tmp_path) if name.endswith(".incomplete")]
        op_audit.model_server_ops.cache_clear()
        assert op_audit.model_server_ops() == first and listings == [1]

        with open(path, "w", encoding="utf-8") as f:
            f.write('{"tensorflow": [')  # a half-written file
        op_audit.model_server_ops.cache_clear()
        assert op_audit.model_server_ops() == first and listings == [1, 1]

        real_version = op_audit._version
        monkeypatch.setattr(op_audit, "_version", lambda name: "9.9.9" if name ==
                            "tensorflow" else real_version(name))
        assert op_audit.op_set_cache_path() != path
    finally:
        op_audit.model_server_ops.cache_clear()


def test_audit_fails_on_python_and_unregistered_ops(tmp_path):
    """A py_function, and an op of a library the server does not link, are found."""

    class WithPython(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def serve(self, text):
            return {"upper": tf.py_function(lambda t: tf.strings.upper(t), [text], tf.string)}

    module = WithPython()
    tf.saved_model.save(module, str(tmp_path / "py"), signatures={"serving_default":
                                                                 module.serve})
    problems = op_audit.audit_saved_model(str(tmp_path / "py"))
    assert list(problems) == ["EagerPyFunc"] and "Python" in problems["EagerPyFunc"]

    graph = tf.compat.v1.GraphDef()
    graph.node.add(name="x", op="Const")
    graph.node.add(name="y", op="SomeCustomOpOfAnotherLibrary")
    graph.library.function.add().node_def.add(name="z", op="ReverseV2")
    graph.library.function.add().node_def.add(name="w", op="OtherLibraryInFunction")
    ops = op_audit.graph_def_ops(graph)
    assert ops == {"Const", "SomeCustomOpOfAnotherLibrary", "ReverseV2",
                   "OtherLibraryInFunction"}
    assert sorted(op_audit.unservable_ops(ops)) == ["OtherLibraryInFunction",
                                                    "SomeCustomOpOfAnotherLibrary"]


def test_cases_cover_every_architecture_and_served_kind():
    assert {name for name, _ in CASES} == set(models.names())
    kinds = {kind for _, kind in CASES}
    assert {"classification", "tagging", "span_qa", "multiple_choice", "language_model",
            "translation", "text_to_text", "word_vectors"} <= kinds
    # the audited pairs cover every backbone and every graph part of every buildable pair
    buildable = [case for case in CASES if not serving_models.refusal(*case)]
    assert {name for name, _ in audited()} == set(models.names())
    pieces = lambda cases: set().union(*(serving_models._pieces(*c) for c in cases))  # noqa
    assert pieces(buildable) == pieces(audited())


# Every architecture has audited pairs (test_cases_cover_every_architecture_and_served_kind).
@pytest.mark.parametrize("architecture", sorted(models.names()))
def test_every_op_of_every_pushed_model_is_served(architecture):
    server = op_audit.model_server_ops()
    found = {}
    for name, kind in audited():
        if name != architecture:
            continue
        export_dir, _ = serving_models.exported(name, kind)
        ops = op_audit.saved_model_ops(export_dir)
        assert len(ops) > 10, f"{name}/{kind}: no graph read"
        found[kind] = op_audit.unservable_ops(ops, server)
        # and nothing the untrusted-model guard refuses (a project export only computes)
        assert model_guard.outside_ops(export_dir) == {}, (name, kind)
    assert found, f"{architecture}: no servable task kind was exported"
    assert not any(found.values()), f"{architecture}: ops TF Serving " \
        f"{op_audit.TF_SERVING_VERSION} cannot run: {found}"


# The same pairs through the model server's loader (components/pusher/loader_check.py).
@pytest.mark.parametrize("architecture", sorted(models.names()))
def test_every_pushed_model_serves_in_the_c_api_loader(architecture):
    """Each audited pair, with its warm-up requests, loads through TensorFlow's C API in a
    process without TensorFlow's Python package, and every signature's outputs on those
    requests equal the responses Python gave, recorded beside them."""
    reports = {}
    for name, kind in audited():
        if name != architecture:
            continue
        report = loader_check.check_saved_model(serving_models.warmed(name, kind))
        assert report.checks, f"{name}/{kind}: no warm-up request was run"
        reports[kind] = report
    assert reports, f"{architecture}: no servable task kind was exported"
    problems = {kind: report.problems for kind, report in reports.items() if report.problems}
    assert not problems, f"{architecture}: TF Serving's loader fails: {problems}"
    for kind, report in reports.items():
        print(architecture, kind, f"load {report.load_seconds:.2f}s", "; ".join(
            f"{c.signature}: max |diff| {c.max_abs_diff:.2g}"
            f"{' sampled ' + '/'.join(c.sampled) if c.sampled else ''}"
            for c in report.checks))
