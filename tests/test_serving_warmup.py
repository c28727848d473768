"""TF Serving warm-up records: every task kind's SavedModel gets
``assets.extra/tf_serving_warmup_requests`` built from eval records of its format; the
records parse as ``PredictionLog`` protos and each request runs through its signature; the
Pusher pushes them with the model and refuses a model whose ops the server cannot load.
The models are tiny untrained exports (tests/serving_models.py), shared with the other
serving tests."""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (the SavedModels' tokenizer ops)
from tensorflow_serving.apis import prediction_log_pb2
from tfx.types import standard_artifacts

from lmfactory.components.pusher import executor as pusher
from lmfactory.components.pusher import batching, loader_check, warmup
from lmfactory.components.trainer import export as export_lib

import serving_models

KINDS = sorted({kind for _, kind in serving_models.serving_cases()})


@pytest.mark.parametrize("kind", KINDS)
def test_warmup_requests_parse_and_run_through_every_signature(kind):
    """The Trainer's warm-up file of the kind's first architecture (the copy the loader
    check of tests/test_serving_ops.py also runs)."""
    architecture = serving_models.example_case(kind)
    export_dir, _ = serving_models.exported(architecture, kind)
    model_dir = serving_models.warmed(architecture, kind)
    summary = serving_models.warmup_summary(architecture, kind)
    loaded = serving_models.loaded(export_dir)  # the same graph (the copy adds assets)
    assert summary["skipped"] == {} and sorted(summary["signatures"]) == \
        sorted(loaded.signatures)
    records = list(tf.data.TFRecordDataset(warmup.warmup_path(model_dir)))
    assert len(records) == len(loaded.signatures)
    for record in records:  # TF Serving's format: PredictionLog with a predict_log
        log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
        assert log.WhichOneof("log_type") == "predict_log"
        request = log.predict_log.request
        signature = loaded.signatures[request.model_spec.signature_name]
        tensors = warmup.request_tensors(request)
        assert set(tensors) == set(signature.structured_input_signature[1])
        outputs = signature(**tensors)
        batched = [t for t in tensors.values() if t.shape.rank]
        assert batched and all(t.shape[0] >= 1 for t in batched)
        assert set(outputs) == set(signature.structured_outputs)
        # the recorded response: the outputs two calls agree on, as the signature gives them
        response = log.predict_log.response
        assert set(response.outputs) <= set(outputs) and response.outputs
        for key, proto in response.outputs.items():
            # recorded from the signatures the export traced, equal to the reloaded model's
            recorded, reloaded = tf.make_ndarray(proto), outputs[key].numpy()
            if reloaded.dtype.kind in "OSU":
                np.testing.assert_array_equal(recorded, reloaded, err_msg=key)
            else:
                np.testing.assert_allclose(recorded, reloaded, atol=1e-5, err_msg=key)


def test_saved_signatures_are_taken_once_and_only_from_the_last_save(tmp_path):
    from lmfactory.models import saved_model

    class Doubler(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def serve(self, x):
            return {"twice": 2.0 * x}

    module = Doubler()
    saved_model.save(module, str(tmp_path / "a"), {"serving_default": module.serve})
    saved_model.save(module, str(tmp_path / "b"), {"serving_default": module.serve})
    assert saved_model.take_saved_signatures(str(tmp_path / "a")) is None
    taken = saved_model.take_saved_signatures(str(tmp_path / "b"))
    signature = taken.signatures["serving_default"]
    assert list(signature.structured_input_signature[1]) == ["x"]
    np.testing.assert_allclose(signature(x=tf.constant([1.5]))["twice"], [3.0])
    assert saved_model.take_saved_signatures(str(tmp_path / "b")) is None


def test_records_without_the_inputs_give_no_requests_and_a_reason(tmp_path, caplog):
    architecture = serving_models.example_case("span_qa")
    export_dir, model_config = serving_models.exported(architecture, "span_qa")
    model_dir = str(tmp_path / "Format-Serving")
    shutil.copytree(export_dir, model_dir)
    pattern = serving_models.write_records(str(tmp_path / "Split-eval"),
                             [{"sentence": [s]} for s in serving_models.SENTENCES])
    summary = warmup.write_warmup_requests(model_dir, pattern, model_config)
    reason = summary["skipped"]["serving_default"]
    assert summary["requests"] == 0 and "No warm-up value for input" in reason
    assert "'question'" in reason or "'context'" in reason
    assert not os.path.exists(warmup.warmup_path(model_dir))
    # missing eval files: logged by the Trainer's export, never fatal
    assert export_lib.write_warmup(model_dir, str(tmp_path / "none" / "*"), model_config,
                                   None) is None
    assert "No TF Serving warm-up requests written" in caplog.text


def _push(tmp_path, model_uri):
    model = standard_artifacts.Model()
    model.uri = str(model_uri)
    blessing = standard_artifacts.ModelBlessing()
    blessing.uri = str(tmp_path / "blessing")
    blessing.set_int_custom_property("blessed", 1)
    pushed = standard_artifacts.PushedModel()
    pushed.uri = str(tmp_path / "pushed")
    destination = {"filesystem": {"base_directory": str(tmp_path / "serving")}}
    pusher.Executor().Do({"model": [model], "model_blessing": [blessing]},
                         {"pushed_model": [pushed]},
                         {"push_destination": json.dumps(destination)})
    return pushed


def test_pusher_pushes_warmup_and_refuses_unservable_models(tmp_path):
    architecture = serving_models.example_case("classification")
    export_dir, model_config = serving_models.exported(architecture, "classification")
    model_dir = tmp_path / "model" / "Format-Serving"
    shutil.copytree(export_dir, model_dir)
    pattern = serving_models.write_records(str(tmp_path / "Split-eval"),
                             serving_models.eval_rows("classification", architecture))
    export_lib.write_warmup(str(model_dir), pattern, model_config, None)
    pushed = _push(tmp_path, tmp_path / "model")
    version = pushed.get_string_custom_property("pushed_version")
    pushed_dir = tmp_path / "serving" / version
    assert warmup.read_warmup_requests(str(pushed_dir))[0].model_spec.signature_name == \
        "serving_default"
    # TF Serving's batching settings beside the versions: every input has a batch dimension
    assert (tmp_path / "serving" / batching.FILE_NAME).read_text() == \
        "max_batch_size { value: 32 }\nbatch_timeout_micros { value: 2000 }\n" \
        "num_batch_threads { value: 4 }\nmax_enqueued_batches { value: 100 }\n"

    class WithPython(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def serve(self, text):
            return {"upper": tf.py_function(tf.strings.upper, [text], tf.string)}

    module = WithPython()
    tf.saved_model.save(module, str(tmp_path / "py" / "Format-Serving"),
                        signatures={"serving_default": module.serve})
    with pytest.raises(ValueError, match="EagerPyFunc is a Python callback"):
        _push(tmp_path, tmp_path / "py")
    # nothing of the refused model was pushed: the first version and its batching file
    assert sorted(os.listdir(tmp_path / "serving")) == [version, batching.FILE_NAME]


def test_a_generator_with_scalar_settings_gets_no_batching_file(tmp_path):
    """TF Serving batches every input along dimension 0: a generator's scalar settings have
    none, so no batching file is written and the inputs are named."""
    architecture = serving_models.example_case("language_model")
    export_dir = serving_models.warmed(architecture, "language_model")
    signature_defs = loader_check.read_signature_defs(export_dir)
    requests = warmup.read_warmup_requests(export_dir)
    unbatchable = batching.unbatchable_inputs(signature_defs, requests)
    assert "serving_default.max_length" in unbatchable
    assert not [name for name in unbatchable if name.startswith("generate_default.")]
    assert batching.write_batching_parameters(str(tmp_path), signature_defs, requests) is None
    assert os.listdir(tmp_path) == []
    # without warm-up requests nothing shows how an unknown-rank input is sent
    assert batching.unbatchable_inputs(signature_defs, []) == ["generate_default.*",
                                                               "serving_default.*"]
    with pytest.raises(ValueError, match="max_batch_size must be a positive integer"):
        batching.BatchingParameters(max_batch_size=0)


def test_pusher_refuses_a_model_the_c_api_loader_cannot_run(tmp_path):
    """A Keras 3 model saved as an attribute of a plain tf.Module serves in Python but not in
    TF Serving's loader (the restore op fills other variables than the signature reads); the
    Pusher tries the loader, names the signature and pushes nothing."""
    import keras

    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(2, name="logits")(inputs))

    class Wrapped(tf.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def serve(self, x):
            return {"logits": self.model(x)}

    module = Wrapped()
    model_dir = str(tmp_path / "keras" / "Format-Serving")
    tf.saved_model.save(module, model_dir, signatures={"serving_default": module.serve})
    request = warmup.predict_request("serving_default", {"x": np.ones((2, 3), np.float32)})
    os.makedirs(os.path.dirname(warmup.warmup_path(model_dir)))
    with tf.io.TFRecordWriter(warmup.warmup_path(model_dir)) as writer:
        writer.write(prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(
            request=request)).SerializeToString())
    with pytest.raises(ValueError, match=r"does not serve in TF Serving's loader .* signature "
                                         r"serving_default: .*Could not find variable"):
        _push(tmp_path, tmp_path / "keras")
    assert not os.path.exists(tmp_path / "serving")


def test_the_loader_check_compares_with_the_recorded_responses(tmp_path):
    """The warm-up file records Python's answer beside each request; the loader check compares
    TF Serving's loader with it: a tampered response is caught, naming the output, and a
    request logged without a response is compared with the signature run in Python."""
    model_dir = str(tmp_path / "Format-Serving")
    shutil.copytree(serving_models.warmed(serving_models.example_case("classification"),
                                          "classification"), model_dir)
    logs = warmup.read_warmup_logs(model_dir)
    assert logs and all("probabilities" in log.response.outputs for log in logs)

    def rewrite(edit):
        with tf.io.TFRecordWriter(warmup.warmup_path(model_dir)) as writer:
            for log in logs:
                log = type(log).FromString(log.SerializeToString())
                edit(log)
                writer.write(prediction_log_pb2.PredictionLog(
                    predict_log=log).SerializeToString())

    def tamper(log):
        probabilities = tf.make_ndarray(log.response.outputs["probabilities"])
        log.response.outputs["probabilities"].CopyFrom(
            tf.make_tensor_proto(probabilities + 0.1))

    rewrite(tamper)
    report = loader_check.check_saved_model(model_dir)
    assert set(report.problems) == {log.request.model_spec.signature_name for log in logs}
    assert all("output probabilities is 0.1 away" in problem
               for problem in report.problems.values())

    rewrite(lambda log: log.ClearField("response"))
    interface = loader_check.read_interface(model_dir)
    assert interface.responses == (None,) * len(logs)
    report = loader_check.check_saved_model(model_dir, interface)
    assert not report.problems and report.checks
    assert all(check.max_abs_diff <= loader_check.ATOL for check in report.checks)
