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

from lmfactory.models.classifier_preprocessor import classifier_preprocessor, select_inputs
from lmfactory.models.tokenizers import load_tokenizer, read_tokenizer_config

SERVING_SIGNATURE = "serving_default"


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
    """``serving_default(<text feature>...) -> {probabilities [B, C], label [B]}``."""

    def __init__(self, preprocessor, model, text_features):
        super().__init__(name="classifier_serving")
        self.preprocessor = preprocessor
        self.model = model
        self.text_features = list(text_features)

    def signature(self):
        specs = [_string_batch_spec(name) for name in self.text_features]

        @tf.function(input_signature=specs)
        def classify(*texts):
            texts = [_check_batch_of_strings(name, text)
                     for name, text in zip(self.text_features, texts)]
            packed = select_inputs(self.model, self.preprocessor(tuple(texts)))
            logits = self.model(packed, training=False)
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
        @tf.function(input_signature=[_string_batch_spec("text")])
        def encode(text):
            text = _check_batch_of_strings("text", text)
            packed = select_inputs(self.backbone, self.preprocessor(text))
            outputs = self.backbone(packed, training=False)
            return {name: tf.cast(value, tf.float32) for name, value in outputs.items()}

        return encode.get_concrete_function()


class GeneratorServing(tf.Module):
    """``serving_default(prompt) -> {generated_text [B]}``: each prompt followed by its
    continuation.

    Every prompt is prefixed with the end-of-text token (GPT-2's document separator, so the
    model sees a document start and an empty prompt is valid). Prompts longer than
    ``max_length - 1`` tokens keep their last tokens. Decoding settings (``max_length``,
    ``sampler``, ``k``, ``p``, ``temperature``) come from the recipe's ``generation`` block.
    Decoding uses the model's key/value cache (``GPT2CausalLM.generate_ids``).
    """

    def __init__(self, tokenizer, causal_lm, generation: dict, end_of_text: str):
        super().__init__(name="generator_serving")
        self.tokenizer = tokenizer
        self.causal_lm = causal_lm
        self.generation = dict(generation)
        self.end_token_id = int(tokenizer.token_to_id(end_of_text))

    def signature(self):
        settings = dict(self.generation)
        max_length = int(settings.pop("max_length", 64))
        sampler = settings.pop("sampler", "greedy")

        @tf.function(input_signature=[_string_batch_spec("prompt")])
        def generate(prompt):
            prompt = _check_batch_of_strings("prompt", prompt)
            token_ids = self.tokenizer(prompt)
            token_ids = token_ids[:, -(max_length - 1):]
            start = tf.fill([tf.shape(prompt)[0], 1], self.end_token_id)
            token_ids = tf.concat([tf.cast(start, token_ids.dtype), token_ids], axis=1)
            lengths = token_ids.row_lengths()
            output = self.causal_lm.generate_ids(
                token_ids.to_tensor(default_value=self.end_token_id),
                prompt_lengths=lengths, max_length=max_length, sampler=sampler,
                end_token_id=self.end_token_id, **settings)
            generated = tf.ragged.boolean_mask(output["token_ids"], output["padding_mask"])
            generated = generated[:, 1:]  # drop the start token
            is_text = tf.not_equal(generated, self.end_token_id)
            text = self.tokenizer.detokenize(tf.ragged.boolean_mask(generated, is_text))
            return {"generated_text": text}

        return generate.get_concrete_function()


def export_serving_model(task_model, vocab_dir: str, model_config: dict, export_dir: str,
                         preprocessor=None) -> None:
    task = model_config["task"]
    if task["kind"] == "classification":
        module = ClassifierServing(preprocessor, task_model, task["text_features"])
    elif task.get("objective") == "causal_lm":
        end_of_text = read_tokenizer_config(vocab_dir)["special_tokens"]["end_of_text"]
        module = GeneratorServing(load_tokenizer(vocab_dir), task_model,
                                  model_config.get("generation") or {}, end_of_text)
    else:
        backbone = getattr(task_model, "backbone", task_model)
        sequence_length = min(task.get("sequence_length", 128),
                              backbone.get_config().get("max_sequence_length", 512))
        module = EncoderServing(
            classifier_preprocessor(vocab_dir, model_config["architecture"], sequence_length),
            backbone)
    tf.saved_model.save(module, export_dir, signatures={SERVING_SIGNATURE: module.signature()})
    logging.info("Exported %s SavedModel to %s", type(module).__name__, export_dir)
