"""Text-to-text fine-tuning (Raffel et al. 2020, §2.4 "Input and Output Format"): every
task is "feeding the model some text for context or conditioning and then asking it to
produce some output text"; a task prefix names the task, and a classification label is
the text of its word. SST-2: "sst2 sentence: it confirms fincher's status as a film
maker ..." -> "positive" (§2.4, the paper's own example). "If the model outputs text on
a text classification task that does not correspond to any of the possible labels ...
we would count the model's prediction as wrong" (§2.4): the metric is the exact match of
the generated text with the label word.

Records: the generic text formats (a TSV with ``finetuning.text_features`` and an int
``label``, as the classification kind ingests them). ``finetuning.task_args``:
``prefix`` (e.g. ``"sst2 sentence:"``; the prompt is prefix, a space, the text features
joined by spaces, each after its own ``"<name>: "`` when there are two), ``label_words``
(the target text of class 0, 1, ...), ``num_beams`` (1: greedy, the paper's decoding for
classification). The architecture's ``seq2seq_lm`` head trains by teacher forcing on
(prompt, label word) pairs with the `Seq2SeqPreprocessor` of the translation kind (source
and target ending in the end token, the decoder starting from the ``start`` token); the
exported SavedModel takes raw prompt strings and returns the generated text
(``serving_default(text) -> {"output": text}``), and the Evaluator scores exact match
through it.

The kind also serves the models pretrained on ``span_corruption`` (§3.1.4 is a
text-to-text task too): the Pretrainer exports the same module (corrupted text in, the
predicted spans out; sentinels are control pieces and detokenize to nothing), and their
evaluation is the perplexity of the targets on held-out records.

Parts:
    record parsing: components.example_gen.formats.parse_table_row,
        components.tasks.text_to_text.make_dataset
    head: models.tasks.seq2seq_lm.Seq2SeqLM
    preprocessor: models.tasks.seq2seq_preprocessor.Seq2SeqPreprocessor
    training step: components.tasks.text_to_text.train
    serving export: components.tasks.text_to_text.export,
        components.tasks.text_to_text.TextToTextServing
    metrics: components.tasks.text_to_text.evaluate
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from lmfactory.components.tasks import registry
from lmfactory.components.tasks.translation import END_ROLE, START_ROLE
from lmfactory.components.trainer import task_data
from lmfactory.components.tasks.translation_serving import TranslationServing

TEXT_TO_TEXT = registry.register(registry.TaskKind(
    name="text_to_text", module=__name__, metrics=("exact_match",),
    official_metrics=("exact_match",), task_args=("prefix", "label_words", "num_beams"),
    head="seq2seq_lm", objectives=("span_corruption",),
    required_record_keys=("kind", "sequence_length", "text_features", "prefix",
                          "label_words")))
OUTPUT_KEY = "output"


def task_record(kind, finetuning: dict, source: dict) -> dict:
    args = finetuning.get("task_args", {})
    return {"kind": kind.name, "text_features": list(finetuning["text_features"]),
            "sequence_length": finetuning["sequence_length"],
            "prefix": str(args["prefix"]), "label_words": list(args["label_words"]),
            "num_beams": int(args.get("num_beams", 1)),
            "label_feature": "label", "official_metrics": list(kind.official_metrics)}


def check_recipe(check, recipe: dict, arch) -> None:
    check.string_list("finetuning.text_features")
    if len(recipe["finetuning"]["text_features"]) > 2:
        check.fail("finetuning.text_features", "one or two text features")
    check.positive_int("finetuning.sequence_length")
    if not isinstance(check.get("finetuning.task_args.prefix"), str):
        check.fail("finetuning.task_args.prefix", "the task prefix, a string")
    check.string_list("finetuning.task_args.label_words")
    check.positive_int("finetuning.task_args.num_beams", required=False)
    if not {START_ROLE, END_ROLE} <= set(arch.special_tokens or {}):
        check.fail("architecture", f"{arch.name} reserves no start / end tokens")
    check.source("data.task")


def prompts(texts: dict, task: dict):
    """The prompt strings [B] of a batch of text features (graph ops)."""
    features = task["text_features"]
    if len(features) == 1:
        body = texts[features[0]]
    else:
        body = tf.strings.join([tf.strings.join([f"{name}:", texts[name]], " ")
                                for name in features], " ")
    return tf.strings.strip(tf.strings.join([task["prefix"], body], " "))


def preprocessor_for(vocab_dir: str, sequence_length: int):
    """A `Seq2SeqPreprocessor` over the vocabulary's start / end tokens, no punctuation
    splitting (the prompt is SentencePiece text)."""
    from lmfactory.models.tasks.seq2seq_preprocessor import Seq2SeqPreprocessor
    from lmfactory.models.tokenizers import load_tokenizer, read_tokenizer_config

    specials = read_tokenizer_config(vocab_dir).get("special_tokens", {})
    missing = [role for role in (START_ROLE, END_ROLE) if role not in specials]
    if missing:
        raise ValueError(f"Vocabulary {vocab_dir!r} reserves no {missing} token(s); a "
                         f"text-to-text model needs start and end_of_text")
    return Seq2SeqPreprocessor(load_tokenizer(vocab_dir), sequence_length,
                               specials[START_ROLE], specials[END_ROLE])


def _examples(file_pattern: str, task: dict) -> tf.data.Dataset:
    """(prompt, label word, label id) of each record."""
    reader = task_data.LabelReader(task_data.CLASSIFICATION, task.get("label_feature",
                                                                      "label"))
    spec = {name: tf.io.FixedLenFeature([], tf.string) for name in task["text_features"]}
    spec.update(reader.spec)
    words = tf.constant(task["label_words"])

    def parse(record):
        parsed = tf.io.parse_single_example(record, spec)
        label = reader(parsed)
        return prompts(parsed, task), tf.gather(words, label), label

    return task_data.read_records(file_pattern).map(parse)


def make_dataset(file_pattern: str, task: dict, preprocessor, batch_size: int,
                 shuffle: bool, repeat: bool, seed: int = 0) -> tf.data.Dataset:
    """(inputs, targets, weights) batches of (prompt, label word) pairs (teacher forcing)."""
    data = _examples(file_pattern, task)
    if shuffle:
        data = data.shuffle(10_000, seed=seed)
    if repeat:
        data = data.repeat()
    data = data.batch(batch_size).map(
        lambda prompt, word, _: preprocessor.training_inputs(prompt, word))
    return data.prefetch(tf.data.AUTOTUNE)


def train(context) -> dict:
    """Fine-tunes the architecture's seq2seq_lm head from the pretrained backbone."""
    from lmfactory import models

    context.require_base_model("a text-to-text model")
    config, task = context.config, context.config.task
    preprocessor = preprocessor_for(context.vocab_dir, task["sequence_length"])
    with context.strategy.scope():
        backbone = context.backbone()
        model = models.get(config.architecture).head("seq2seq_lm")(backbone)
        model.compile(optimizer=context.optimizer(), jit_compile=config.jit_compile)
    read = dict(task=task, preprocessor=preprocessor, batch_size=config.batch_size,
                seed=config.seed)
    train_data = make_dataset(context.train_files, shuffle=True, repeat=True, **read)
    eval_data = make_dataset(context.eval_files, shuffle=False, repeat=True, **read)
    metrics = context.fit(model, train_data, eval_data)
    return dict(task_model=model, backbone=backbone, vocab_dir=context.vocab_dir,
                metrics=metrics, task=dict(task), preprocessor=preprocessor)


class TextToTextServing(TranslationServing):
    """``serving_default(text [B] prompts) -> {"output": [B] generated text}``: the
    translation serving module's tokenizing, decoding and detokenizing under the
    text-to-text output name."""

    def signature(self):
        from lmfactory.components.trainer.serving import (_check_batch_of_strings,
                                                          _string_batch_spec)

        @tf.function(input_signature=[_string_batch_spec("text")], autograph=False)
        def serve(text):
            text = _check_batch_of_strings("text", text)
            return {OUTPUT_KEY: self.translate(text)}

        return serve.get_concrete_function()


def export(task_model, preprocessor, vocab_dir: str, model_config: dict,
           export_dir: str) -> None:
    from lmfactory.components.trainer.serving import save_serving_module

    task = model_config["task"]
    if preprocessor is None:
        preprocessor = preprocessor_for(vocab_dir, task["sequence_length"])
    max_length = min(task["sequence_length"] + 1,
                     int(task_model.backbone.max_sequence_length))
    save_serving_module(TextToTextServing(preprocessor, task_model, max_length,
                                          num_beams=task.get("num_beams", 1), alpha=0.0),
                        export_dir)


def evaluate(model_uri: str, file_pattern: str, task: dict, config: dict) -> dict:
    """Exact match of the served model's output text with the label word (§2.4: any
    other output counts as wrong), plus the share of outputs that are a label word."""
    import tensorflow_text  # noqa: F401  (ops of the SavedModel's tokenizer)

    from lmfactory.components.trainer.serving import serving_dir_of

    if task.get("objective"):  # a pretrained span-corruption model: target perplexity
        from lmfactory.components.tasks.language_model import evaluate_language_model

        return evaluate_language_model(model_uri, file_pattern,
                                       config.get("batch_size", 16), config.get("max_batches"))

    serve = tf.saved_model.load(serving_dir_of(model_uri)).signatures["serving_default"]
    batch_size = config.get("batch_size", 64)
    inputs, references, outputs = [], [], []
    for step, (prompt, word, _) in enumerate(
            _examples(file_pattern, task).batch(batch_size)):
        if config.get("max_batches") is not None and step >= config["max_batches"]:
            break
        inputs += [text.decode("utf-8") for text in prompt.numpy()]
        references += [text.decode("utf-8") for text in word.numpy()]
        outputs += [text.decode("utf-8").strip()
                    for text in serve(text=prompt)[OUTPUT_KEY].numpy()]
    if not inputs:
        raise ValueError(f"No records in {file_pattern!r}")
    matches = np.array([o == r for o, r in zip(outputs, references)])
    valid = np.mean([o in task["label_words"] for o in outputs])
    return {"exact_match": float(matches.mean()), "valid_label_rate": float(valid),
            "examples_evaluated": len(inputs),
            "examples": [{"input": i, "reference": r, "output": o}
                         for i, r, o in list(zip(inputs, references, outputs))[:3]]}
