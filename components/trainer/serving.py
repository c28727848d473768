"""The serving modules of the SavedModel TF Serving loads: raw UTF-8 strings in, predictions out.

Tokenization runs inside the graph. The tokenizer, packer and Keras model are attributes of a
``tf.Module``, so ``models/saved_model.save`` finds every variable, lookup table and
vocabulary asset they own (the "untracked resource" export failure of keras-hub issues #2015 / #1629 comes from
tracing a tokenizer that no saved object owns). Loading needs ``import tensorflow_text`` for
its ops (TF Serving builds include them).
"""

from __future__ import annotations

import logging
import os

import tensorflow as tf

from lmfactory.models import saved_model
from lmfactory.models.classifier_preprocessor import select_inputs
from lmfactory.models.request_length import call_on_longest, serving_multiple

SERVING_SIGNATURE = "serving_default"
SERVING_DIR = "Format-Serving"  # the SavedModel's folder in a Model artifact (CONTRACTS §4)


def serving_dir_of(model_uri: str) -> str:
    """The exported SavedModel of a Model artifact."""
    return os.path.join(model_uri, SERVING_DIR)


def _string_batch_spec(name: str) -> tf.TensorSpec:
    # Unknown rank on purpose: a loaded signature does not enforce its declared shape, and a
    # declared [None] would let TensorFlow fold the rank check below away.
    return tf.TensorSpec(None, tf.string, name=name)


def _check_batch_of_strings(name: str, values):
    """Fails a request whose input is not a 1-D batch, with a message saying so."""
    check = tf.debugging.assert_rank(
        values, 1, message=f"serving_default: {name!r} must be a 1-D batch of UTF-8 strings")
    with tf.control_dependencies([check]):
        # reshape, not ensure_shape: a shape error at graph instantiation would pre-empt
        # the message above.
        return tf.reshape(values, [-1])


class ClassifierServing(tf.Module):
    """``serving_default(<text feature>...) -> {probabilities [B, C], label [B]}``, and
    ``label_name`` [B] (the label's word) when the task has a ``label_vocabulary``; for a
    ``regression`` task (one output, e.g. STS-B's similarity) ``-> {score [B]}``.

    ``preprocessor``: the architecture's classifier preprocessor (raw strings -> model
    inputs); ``model`` returns the logits [B, C] or a dict holding them under ``logits``
    (a functional model's other outputs, e.g. GPT-1's ``lm_logits``, are not computed)."""

    def __init__(self, preprocessor, model, text_features, kind: str = "classification",
                 label_vocabulary=None):
        import keras

        super().__init__(name="classifier_serving")
        if kind not in ("classification", "regression"):
            raise ValueError(f"kind must be classification or regression, got {kind!r}")
        self.preprocessor = preprocessor
        # each request runs at its longest row's length (models/request_length.py)
        self.length_multiple = serving_multiple(model)
        try:  # a functional model's output structure (a subclassed one has none)
            outputs = model.output
        except (AttributeError, ValueError):
            outputs = None
        if isinstance(outputs, dict):  # the same layers and weights, logits only
            model = keras.Model(model.input, outputs["logits"])
        self.model = model
        self.text_features = list(text_features)
        self.kind = kind
        self.label_vocabulary = list(label_vocabulary or [])

    def _outputs(self, logits) -> dict:
        logits = tf.cast(logits, tf.float32)
        if self.kind == "regression":
            return {"score": tf.reshape(logits, [-1])}
        probabilities = tf.nn.softmax(logits, axis=-1)
        outputs = {"probabilities": probabilities,
                   "label": tf.argmax(probabilities, axis=-1, output_type=tf.int64)}
        if self.label_vocabulary:
            outputs["label_name"] = tf.gather(tf.constant(self.label_vocabulary),
                                              outputs["label"])
        return outputs

    def signature(self):
        specs = [_string_batch_spec(name) for name in self.text_features]

        @tf.function(input_signature=specs, autograph=False)
        def classify(*texts):
            texts = [_check_batch_of_strings(name, text)
                     for name, text in zip(self.text_features, texts)]
            packed = select_inputs(self.model, self.preprocessor(tuple(texts)))
            logits = call_on_longest(self.model, packed, self.length_multiple)
            if isinstance(logits, dict):  # e.g. GPT-1's {logits, lm_logits}
                logits = logits["logits"]
            return self._outputs(logits)

        return classify.get_concrete_function()


class MultiLabelServing(ClassifierServing):
    """``serving_default(<text feature>...) -> {probabilities [B, K], labels [B]}`` of a
    multi-label classifier (entity typing): a sigmoid per label, and the names of the labels
    whose probability is above ``threshold`` (0.5: a logit above 0, as the released ERNIE
    typing code decides), most probable first, separated by spaces ("" when none is)."""

    def __init__(self, preprocessor, model, text_features, label_vocabulary,
                 threshold: float = 0.5):
        if not label_vocabulary:
            raise ValueError("a multi-label classifier needs its label_vocabulary")
        super().__init__(preprocessor, model, text_features, label_vocabulary=label_vocabulary)
        self.threshold = float(threshold)

    def _outputs(self, logits) -> dict:
        probabilities = tf.sigmoid(tf.cast(logits, tf.float32))
        order = tf.argsort(probabilities, axis=-1, direction="DESCENDING", stable=True)
        names = tf.gather(tf.constant(self.label_vocabulary), order)
        above = tf.gather(probabilities, order, batch_dims=1) > self.threshold
        labels = tf.strings.reduce_join(tf.ragged.boolean_mask(names, above), axis=-1,
                                        separator=" ")
        return {"probabilities": probabilities, "labels": labels}


class EncoderServing(tf.Module):
    """``serving_default(text) -> {pooled_output [B, H], sequence_output [B, L, H]}``: every
    output of the backbone, at the packed length L (the per-position outputs are the
    signature's result, so they keep it)."""

    def __init__(self, preprocessor, backbone):
        super().__init__(name="encoder_serving")
        self.preprocessor = preprocessor
        self.backbone = backbone

    def signature(self):
        @tf.function(input_signature=[_string_batch_spec("text")], autograph=False)
        def encode(text):
            text = _check_batch_of_strings("text", text)
            packed = select_inputs(self.backbone, self.preprocessor(text))
            outputs = self.backbone(packed, training=False)
            return {name: tf.cast(value, tf.float32) for name, value in outputs.items()}

        return encode.get_concrete_function()


def save_serving_module(module, export_dir: str) -> None:
    """Saves a serving ``tf.Module`` whose ``signature()`` is its ``serving_default``."""
    saved_model.save(module, export_dir, {SERVING_SIGNATURE: module.signature()})
    logging.info("Exported %s SavedModel to %s", type(module).__name__, export_dir)
