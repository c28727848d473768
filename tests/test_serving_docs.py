"""docs/SERVING.md: the committed page is the generator's output, each signature
it describes is the one its task kind exports, and every REST body and gRPC request on the
page runs through that signature (the REST body read as TF Serving's REST API reads it),
in Python and through TF Serving's loader (the C API) with the same outputs.
The models are tiny untrained exports of each kind (tests/serving_models.py)."""

import json
import re

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (the SavedModels' tokenizer ops)
from google.protobuf import text_format
from tensorflow_serving.apis import predict_pb2
from tensorflow_serving.config import model_server_config_pb2

from lmfactory.components.pusher import loader_check, op_audit, signature_docs, warmup

import serving_models

DOCS = {doc.id: doc for doc in signature_docs.SIGNATURES}


@pytest.fixture(scope="module")
def page():
    with open(signature_docs.DOC_PATH, encoding="utf-8") as f:
        return f.read()


def _export(doc) -> str:
    architecture = serving_models.example_case(doc.kind)
    export_dir, _ = serving_models.exported(architecture, doc.kind, doc.variant)
    # the documented models (regression and single-feature ones too) pass the op audit
    assert op_audit.unservable_ops(op_audit.saved_model_ops(export_dir)) == {}
    return export_dir


def _block(page, mark, language):
    found = re.search(re.escape(mark) + r"\n```" + language + r"\n(.*?)\n```", page, re.S)
    assert found, f"{mark} has no {language} block in docs/SERVING.md"
    return found.group(1)


def test_committed_page_is_the_generated_one(page):
    assert page == signature_docs.render(), \
        "docs/SERVING.md is stale: run python -m lmfactory.components.pusher.signature_docs"
    assert signature_docs.main(["--check"]) == 0


def test_every_task_kind_is_documented():
    from lmfactory.components import tasks as task_kinds

    served = {kind for _, kind in serving_models.serving_cases()} | {"regression"}
    assert served <= {doc.kind for doc in signature_docs.SIGNATURES} <= set(task_kinds.names())
    variants = {doc.variant for doc in signature_docs.SIGNATURES if doc.kind ==
                "classification"}
    assert variants == {"single", "pair_labelled"}  # one and two text features


@pytest.mark.parametrize("doc_id", list(DOCS))
def test_page_requests_run_through_the_signature(doc_id, page):
    doc = DOCS[doc_id]
    export_dir = _export(doc)
    signature = serving_models.loaded(export_dir).signatures[doc.signature]
    specs = signature.structured_input_signature[1]
    # the documented inputs and outputs are the exported ones
    assert {p.name: p.dtype for p in doc.inputs} == {n: s.dtype.name for n, s in specs.items()}
    outputs = signature.structured_outputs
    assert {p.name: p.dtype for p in doc.outputs} == {n: s.dtype.name
                                                      for n, s in outputs.items()}
    # the REST body of the page, read as the model server reads it
    body = json.loads(_block(page, signature_docs.REST_MARK.format(id=doc.id), "json"))
    assert body["signature_name"] == doc.signature
    rest_inputs = signature_docs.rest_tensors(body, specs)
    rest = signature(**rest_inputs)
    batch = len(next(iter(doc.example.values())))
    # the gRPC request of the page, built by its own code
    namespace = {"tf": tf, "predict_pb2": predict_pb2}
    exec(_block(page, signature_docs.GRPC_MARK.format(id=doc.id), "python"), namespace)
    request = namespace["request"]
    assert (request.model_spec.name, request.model_spec.signature_name) == \
        (doc.model_name, doc.signature)
    grpc = signature(**warmup.request_tensors(request))
    for port in doc.outputs:
        assert rest[port.name].shape[0] == batch, f"{doc.id}: {port.name}"
        assert rest[port.name].shape.rank == len(port.shape.split(",")), \
            f"{doc.id}: {port.name} is {rest[port.name].shape}, documented {port.shape}"
        if doc.columnar:  # sampled: the same shapes, not the same tokens
            assert grpc[port.name].shape[0] == batch
        else:
            np.testing.assert_array_equal(grpc[port.name].numpy(), rest[port.name].numpy())
    # the REST body through TF Serving's loader (the C API, loader_check.py): the outputs
    # Python gives for it (two calls agreeing: a sampled output by dtype and batch size)
    request = warmup.predict_request(doc.signature, {name: value.numpy() for name, value in
                                                     rest_inputs.items()})
    interface = loader_check.ServingInterface(
        loader_check.read_signature_defs(export_dir), (request,),
        (warmup.recorded_response(signature, request),))
    report = loader_check.check_saved_model(export_dir, interface)
    assert not report.problems, f"{doc.id}: {report.problems}"
    assert [check.signature for check in report.checks] == [doc.signature]
    assert doc.columnar or not report.checks[0].sampled  # only a generator samples


def test_rest_reader_follows_the_model_servers_rules():
    specs = {"sentence1": tf.TensorSpec(None, tf.string),
             "sentence2": tf.TensorSpec(None, tf.string)}
    rows = signature_docs.rest_tensors(
        {"instances": [{"sentence1": "a", "sentence2": {"b64": "Yg=="}},
                       {"sentence1": "c", "sentence2": "d"}]}, specs)
    assert rows["sentence2"].numpy().tolist() == [b"b", b"d"]
    columns = signature_docs.rest_tensors({"inputs": {"sentence1": ["a"],
                                                      "sentence2": ["b"]}}, specs)
    assert columns["sentence1"].numpy().tolist() == [b"a"]
    single = {"k": tf.TensorSpec(None, tf.int32)}
    assert signature_docs.rest_tensors({"inputs": 7}, single)["k"].numpy() == 7
    assert signature_docs.rest_tensors({"instances": [1, 2]}, single)["k"].dtype == tf.int32
    bad = [
        ({"instances": [{"sentence1": "a"}], "inputs": {}}, "exactly one"),
        ({"instances": [{"sentence1": "a"}]}, "missing"),
        ({"instances": [{"sentence1": "a", "sentence2": "b"}, {"sentence1": "c"}]},
         "same inputs"),
        ({"inputs": {"sentence1": [["a", "b"], ["c"]], "sentence2": ["x", "y"]}},
         "different lengths"),
        ({"instances": ["a", "b"]}, "must be objects"),
    ]
    for body, message in bad:
        with pytest.raises(ValueError, match=message):
            signature_docs.rest_tensors(body, specs)


def test_models_config_serves_several_models_and_versions(page):
    text = signature_docs.read_models_config()
    assert text.rstrip("\n") in page
    config = text_format.Parse(text, model_server_config_pb2.ModelServerConfig())
    models = config.model_config_list.config
    assert len(models) >= 3 and len({m.name for m in models}) == len(models)
    policies = set()
    for model in models:
        assert model.base_path == f"/models/{model.name}" and model.model_platform == \
            "tensorflow"
        policy = model.model_version_policy.WhichOneof("policy_choice")
        policies.add(policy)
        if model.version_labels:  # a label must name a version the policy serves
            assert policy == "specific"
            assert set(model.version_labels.values()) <= \
                set(model.model_version_policy.specific.versions)
    assert policies == {"specific", "latest", "all"}
    assert f"tensorflow/serving:{signature_docs.TF_SERVING_VERSION}" in page
    assert "--model_config_file=/models/models.config" in page
