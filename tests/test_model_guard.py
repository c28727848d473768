"""The untrusted-model guard (components/pusher/model_guard.py): a SavedModel whose served
graph reads or writes files is refused by the Pusher and by ``lmfactory predict`` /
``evaluate`` (unless ``--trust-model``), naming the ops; a model that only computes, with
its saver's SaveV2 / RestoreV2, passes."""

import json

import pytest
import tensorflow as tf
from tensorflow.core.framework import op_def_pb2
from tensorflow.python.client import pywrap_tf_session as session

from lmfactory import cli
from lmfactory.components.pusher import executor as pusher
from lmfactory.components.pusher import model_guard


def _registered_ops() -> set:
    ops = op_def_pb2.OpList()
    ops.ParseFromString(session.TF_GetBuffer(session.TF_GetAllOpList()))
    return {op.name for op in ops.op}


def test_every_listed_op_is_one_tensorflow_registers():
    assert model_guard.OUTSIDE_OPS <= _registered_ops()
    assert {"ReadFile", "WriteFile", "MatchingFiles", "SaveV2", "RestoreV2"} <= \
        model_guard.OUTSIDE_OPS


class _Model(tf.Module):
    """A variable and one signature: ``behaviour`` says what the signature also does."""

    def __init__(self, behaviour: str, secret: str, written: str):
        super().__init__()
        self.scale = tf.Variable(2.0)
        self.behaviour, self.secret, self.written = behaviour, secret, written

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="sentence")])
    def serve(self, sentence):
        length = tf.cast(tf.strings.length(sentence), tf.float32) * self.scale
        outputs = {"score": length}
        if self.behaviour == "reads":
            outputs["text"] = tf.strings.join([tf.io.read_file(self.secret), sentence])
        elif self.behaviour == "writes":
            with tf.control_dependencies([tf.io.write_file(self.written, sentence[0])]):
                outputs["score"] = tf.identity(length)
        elif self.behaviour == "lists":
            outputs["text"] = tf.strings.reduce_join(tf.io.matching_files(self.secret + "*"))
            outputs["text"] = tf.fill(tf.shape(sentence), outputs["text"])
        elif self.behaviour == "prints":
            with tf.control_dependencies([tf.print(sentence, output_stream="file://"
                                                   + self.written)]):
                outputs["score"] = tf.identity(length)
        return outputs


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("guard")
    secret = root / "secret.txt"
    secret.write_text("the contents of a private file")
    written = root / "written.txt"
    saved = {}
    for behaviour in ("computes", "reads", "writes", "lists", "prints"):
        module = _Model(behaviour, str(secret), str(written))
        saved[behaviour] = str(root / behaviour)
        tf.saved_model.save(module, saved[behaviour],
                            signatures={"serving_default": module.serve})
    return saved, written


def test_served_ops_that_reach_outside_are_found_and_the_saver_is_not(models):
    saved, _ = models
    assert model_guard.outside_ops(saved["computes"]) == {}
    assert model_guard.outside_ops(saved["reads"]) == {"ReadFile": "reads files"}
    assert model_guard.outside_ops(saved["writes"]) == {"WriteFile": "writes files"}
    assert model_guard.outside_ops(saved["lists"]) == {"MatchingFiles": "reads files"}
    assert set(model_guard.outside_ops(saved["prints"])) == {"PrintV2"}


def test_predict_refuses_an_untrusted_model_unless_told_to_trust_it(models, capsys):
    saved, written = models
    for behaviour in ("reads", "writes", "lists", "prints"):
        assert cli.main(["predict", saved[behaviour], "hello"]) == 2, behaviour
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "--trust-model" in err, err
    assert not written.exists()  # nothing ran
    assert cli.main(["predict", saved["computes"], "hello"]) == 0
    assert json.loads(capsys.readouterr().out)["score"] == 10.0
    assert cli.main(["predict", saved["reads"], "hello", "--trust-model"]) == 0
    assert "private file" in json.loads(capsys.readouterr().out)["text"]


def test_the_pusher_refuses_an_untrusted_model(models):
    saved, written = models
    with pytest.raises(ValueError, match=r"reach outside the process: WriteFile"):
        pusher.check_servable(saved["writes"])
    assert not written.exists()
