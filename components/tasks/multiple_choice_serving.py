"""The SavedModel of a multiple-choice model: raw strings in, a distribution over choices out.

``serving_default(context [B] string, choices [B, C] string) -> {probabilities [B, C]
float32, label [B] int64}``: the in-graph `MultipleChoicePreprocessor` packs one
``[CLS] context [SEP] choice [SEP]`` sequence per choice, `MultipleChoice` scores them, and
the softmax across the C choices is returned (BERT §4.4). As in ``export.py``, the
preprocessor and the model are attributes of the ``tf.Module`` so the saved graph owns every
vocabulary table; loading needs ``import tensorflow_text``.
"""

from __future__ import annotations

import logging

import tensorflow as tf

from lmfactory.models import saved_model
from lmfactory.models.encoder_utils import model_inputs
from lmfactory.models.request_length import call_on_longest, serving_multiple

SERVING_SIGNATURE = "serving_default"


class MultipleChoiceServing(tf.Module):
    """``serving_default(context, choices) -> {probabilities [B, C], label [B]}``.

    Args:
        preprocessor: a `MultipleChoicePreprocessor` (raw strings -> [B, C, T] inputs), or
            an architecture's own packing of (context, choices) (GPT-1's §3.3 `start z $
            a_k extract`).
        model: a `MultipleChoice` task model (logits [B, C]), or a functional model whose
            dict output holds them under ``logits`` (GPT-1's classifier; its other outputs,
            the auxiliary LM logits, are not computed).
        num_choices: the number of choices every request must give (default: the model's
            ``num_choices``).
    """

    def __init__(self, preprocessor, model, num_choices=None):
        import keras

        super().__init__(name="multiple_choice_serving")
        self.preprocessor = preprocessor
        # each request runs at its longest choice's length (models/request_length.py)
        self.length_multiple = serving_multiple(model)
        if isinstance(getattr(model, "output", None), dict):  # the same weights, logits only
            num_choices = num_choices or model.num_classes
            model = keras.Model(model.input, model.output["logits"])
        self.model = model
        self.num_choices = int(num_choices or model.num_choices)

    def signature(self):
        num_choices = self.num_choices

        # Unknown rank on purpose: a loaded signature does not enforce declared shapes, so
        # the checks below give the message.
        @tf.function(input_signature=[tf.TensorSpec(None, tf.string, name="context"),
                                      tf.TensorSpec(None, tf.string, name="choices")],
                     autograph=False)
        def choose(context, choices):
            checks = [
                tf.debugging.assert_rank(context, 1, message=(
                    "serving_default: 'context' must be a 1-D batch of UTF-8 strings")),
                tf.debugging.assert_rank(choices, 2, message=(
                    "serving_default: 'choices' must be a [batch, num_choices] matrix of "
                    "UTF-8 strings")),
            ]
            with tf.control_dependencies(checks):
                checks = [
                    tf.debugging.assert_equal(tf.shape(choices)[-1], num_choices, message=(
                        f"serving_default: every question needs exactly {num_choices} "
                        f"choices (the model was trained with {num_choices})")),
                    tf.debugging.assert_equal(tf.size(context) * num_choices,
                                              tf.size(choices), message=(
                        "serving_default: 'context' and 'choices' must have the same "
                        "batch size")),
                ]
            with tf.control_dependencies(checks):
                context = tf.reshape(context, [-1])
                choices = tf.reshape(choices, [-1, num_choices])
            packed = model_inputs(self.model, self.preprocessor((context, choices)))
            logits = tf.cast(call_on_longest(self.model, packed, self.length_multiple),
                             tf.float32)
            probabilities = tf.nn.softmax(logits, axis=-1)
            return {"probabilities": probabilities,
                    "label": tf.argmax(probabilities, axis=-1, output_type=tf.int64)}

        return choose.get_concrete_function()


def export_multiple_choice_model(model, preprocessor, export_dir: str,
                                 num_choices=None) -> None:
    """Writes the serving SavedModel of ``model`` (a `MultipleChoice`, or GPT-1's classifier
    with ``num_choices``) with ``preprocessor`` to ``export_dir``."""
    module = MultipleChoiceServing(preprocessor, model, num_choices)
    saved_model.save(module, export_dir, {SERVING_SIGNATURE: module.signature()})
    logging.info("Exported MultipleChoiceServing SavedModel to %s", export_dir)


__all__ = ["MultipleChoiceServing", "SERVING_SIGNATURE", "export_multiple_choice_model"]
