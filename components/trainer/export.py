"""Writes the SavedModel that TF Serving loads: raw UTF-8 strings in, predictions out.

Tokenization runs inside the graph. The tokenizer, packer and Keras model are attributes of a
``tf.Module``, so ``tf.saved_model.save`` tracks every lookup table and vocabulary constant
they own (the "untracked resource" export failure of keras-hub issues #2015 / #1629 comes from
tracing a tokenizer that no saved object owns). Loading needs ``import tensorflow_text`` for
its ops (TF Serving builds include them).
"""

from __future__ import annotations

import logging

import tensorflow as tf

from lmfactory.models.classifier_preprocessor import ClassifierPreprocessor
from lmfactory.models.tokenizers import load_tokenizer

SERVING_SIGNATURE = "serving_default"


class ClassifierServing(tf.Module):
    """``serving_default(<text feature>...) -> {probabilities [B, C], label [B]}``."""

    def __init__(self, preprocessor, model, text_features):
        super().__init__(name="classifier_serving")
        self.preprocessor = preprocessor
        self.model = model
        self.text_features = list(text_features)

    def signature(self):
        specs = [tf.TensorSpec([None], tf.string, name=name) for name in self.text_features]

        @tf.function(input_signature=specs)
        def classify(*texts):
            logits = self.model(self.preprocessor(tuple(texts)), training=False)
            probabilities = tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1)
            return {"probabilities": probabilities,
                    "label": tf.argmax(probabilities, axis=-1, output_type=tf.int64)}

        return classify.get_concrete_function()


class EncoderServing(tf.Module):
    """``serving_default(text) -> {pooled_output [B, H], sequence_output [B, L, H]}``."""

    def __init__(self, preprocessor, backbone):
        super().__init__(name="encoder_serving")
        self.preprocessor = preprocessor
        self.backbone = backbone

    def signature(self):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
        def encode(text):
            outputs = self.backbone(self.preprocessor(text), training=False)
            return {name: tf.cast(value, tf.float32) for name, value in outputs.items()}

        return encode.get_concrete_function()


class GeneratorServing(tf.Module):
    """``serving_default(prompt) -> {generated_text [B]}``: prompt continuation.

    Decoding settings (``max_length``, ``sampler``, ``k``, ``p``, ``temperature``) come from the
    recipe's ``generation`` block and are fixed in the exported graph.
    """

    def __init__(self, tokenizer, causal_lm, generation: dict):
        super().__init__(name="generator_serving")
        self.tokenizer = tokenizer
        self.causal_lm = causal_lm
        self.generation = dict(generation)

    def signature(self):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="prompt")])
        def generate(prompt):
            return {"generated_text": self.causal_lm.generate_text(
                prompt, self.tokenizer, **self.generation)}

        return generate.get_concrete_function()


def export_serving_model(task_model, vocab_dir: str, model_config: dict, export_dir: str,
                         preprocessor=None) -> None:
    task = model_config["task"]
    if task["kind"] == "classification":
        module = ClassifierServing(preprocessor, task_model, task["text_features"])
    elif task.get("objective") == "causal_lm":
        module = GeneratorServing(load_tokenizer(vocab_dir), task_model,
                                  model_config.get("generation") or {})
    else:
        sequence_length = task.get("sequence_length", 128)
        module = EncoderServing(
            ClassifierPreprocessor(load_tokenizer(vocab_dir), sequence_length=sequence_length),
            task_model.backbone)
    tf.saved_model.save(module, export_dir, signatures={SERVING_SIGNATURE: module.signature()})
    logging.info("Exported %s SavedModel to %s", type(module).__name__, export_dir)
