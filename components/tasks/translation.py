"""Translation in the DAG (Bahdanau et al. 2015 §4): parallel sentence pairs (the
``parallel`` format, components/example_gen/parallel.py) -> the architecture's
``seq2seq_lm`` head trained by teacher forcing (the mean negative log-likelihood of each
reference word given the source and the reference prefix, §2.1) -> a SavedModel that
translates raw sentences (components/tasks/translation_serving.py) -> corpus BLEU with
sacreBLEU (Post 2018; default 13a tokenization) of the served translations against the
references (punctuation attached again, as the served text has it), plus one
sentence's attention weights (the paper's Figure 3 heat map) in the evaluation report.

Shared by every encoder-decoder (RNNsearch, the Transformer, T5): the model only needs the
``seq2seq_lm`` head (`models/tasks/seq2seq_lm.Seq2SeqLM`: ``translate_ids``), and the
attention figure is drawn when the backbone outputs ``attention_weights`` [B, T, S].
Vocabulary: one joint vocabulary over both languages (the records' ``text`` feature), of
words or subwords (e.g. the ``sentencepiece`` kind: the served text is the detokenised
pieces, punctuation attached again), with the architecture's ``start`` and ``end_of_text``
special tokens.

Recipe: ``finetuning.sequence_length`` bounds source and target (tokens, end token
included); ``finetuning.task_args``: ``num_beams`` (default 4) and ``alpha`` (the length
penalty exponent, default 1.0) of the served beam search.

Parts:
    record parsing: components.example_gen.parallel.iter_examples,
        components.tasks.translation.make_dataset
    head: models.tasks.seq2seq_lm.Seq2SeqLM
    preprocessor: models.tasks.seq2seq_preprocessor.Seq2SeqPreprocessor
    training step: components.tasks.translation.train
    serving export: components.tasks.translation.export,
        components.tasks.translation_serving.TranslationServing
    metrics: components.tasks.translation.evaluate, components.tasks.translation.corpus_bleu
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from lmfactory.components.evaluator import report as report_lib
from lmfactory.components.example_gen import formats, parallel
from lmfactory.components.tasks import registry
from lmfactory.components.trainer import task_data

TRANSLATION = registry.register(registry.TaskKind(
    name="translation", module=__name__, metrics=("bleu",), official_metrics=("bleu",),
    formats=(formats.PARALLEL_FORMAT,), task_args=("num_beams", "alpha"),
    head="seq2seq_lm"))
GENERATION_DEFAULTS = {"num_beams": 4, "alpha": 1.0}
START_ROLE, END_ROLE = "start", "end_of_text"


def task_record(kind, finetuning: dict, source: dict) -> dict:
    record = kind.standard_record(finetuning, source)
    record["languages"] = list(source.get("column_names") or [])
    record.update({key: finetuning.get("task_args", {}).get(key, value)
                   for key, value in GENERATION_DEFAULTS.items()})
    return record


def check_recipe(check, recipe: dict, arch) -> None:
    check.choice("data.task.format", TRANSLATION.formats)
    languages = check.get("data.task.column_names")
    if not isinstance(languages, list) or len(languages) != 2:
        check.fail("data.task.column_names", f"the two languages [source, target], got "
                                             f"{languages!r}")
    check.positive_int("finetuning.sequence_length")
    check.positive_int("finetuning.task_args.num_beams", required=False)
    check.fraction("finetuning.task_args.alpha", 0.0, 10.0, required=False)
    if not {START_ROLE, END_ROLE} <= set(arch.special_tokens or {}):
        check.fail("architecture", f"{arch.name} reserves no start / end tokens")
    check.source("data.task")


def preprocessor_for(vocab_dir: str, sequence_length: int):
    """The `Seq2SeqPreprocessor` of a vocabulary folder (its start and end tokens)."""
    from lmfactory.models.tasks.seq2seq_preprocessor import Seq2SeqPreprocessor
    from lmfactory.models.tokenizers import load_tokenizer, read_tokenizer_config

    specials = read_tokenizer_config(vocab_dir).get("special_tokens", {})
    missing = [role for role in (START_ROLE, END_ROLE) if role not in specials]
    if missing:
        raise ValueError(f"Vocabulary {vocab_dir!r} reserves no {missing} token(s); a "
                         f"translation model needs start and end_of_text")
    return Seq2SeqPreprocessor(load_tokenizer(vocab_dir), sequence_length,
                               specials[START_ROLE], specials[END_ROLE],
                               punctuation=parallel.PUNCTUATION)


def _pairs(file_pattern: str) -> tf.data.Dataset:
    spec = {name: tf.io.FixedLenFeature([], tf.string)
            for name in (parallel.SOURCE_FEATURE, parallel.TARGET_FEATURE)}
    return task_data.read_records(file_pattern).map(
        lambda record: tf.io.parse_single_example(record, spec))


def make_dataset(file_pattern: str, preprocessor, batch_size: int, shuffle: bool,
                 repeat: bool, seed: int = 0) -> tf.data.Dataset:
    """(inputs, targets, weights) batches of the sentence pairs (teacher forcing)."""
    data = _pairs(file_pattern)
    if shuffle:
        data = data.shuffle(10_000, seed=seed)
    if repeat:
        data = data.repeat()
    data = data.batch(batch_size).map(lambda pair: preprocessor.training_inputs(
        pair[parallel.SOURCE_FEATURE], pair[parallel.TARGET_FEATURE]))
    return data.prefetch(tf.data.AUTOTUNE)


def train(context) -> dict:
    """Trains the architecture's seq2seq_lm head from the (possibly fresh) base model."""
    from lmfactory import models

    context.require_base_model("a translation model")
    config, task = context.config, context.config.task
    preprocessor = preprocessor_for(context.vocab_dir, task["sequence_length"])
    with context.strategy.scope():
        backbone = context.backbone()
        model = models.get(config.architecture).head("seq2seq_lm")(backbone)
        model.compile(optimizer=context.optimizer(), jit_compile=config.jit_compile)
    read = dict(preprocessor=preprocessor, batch_size=config.batch_size, seed=config.seed)
    train_data = make_dataset(context.train_files, shuffle=True, repeat=True, **read)
    eval_data = make_dataset(context.eval_files, shuffle=False, repeat=True, **read)
    metrics = context.fit(model, train_data, eval_data)
    return dict(task_model=model, backbone=backbone, vocab_dir=context.vocab_dir,
                metrics=metrics, task=dict(task), preprocessor=preprocessor)


def export(task_model, preprocessor, vocab_dir: str, model_config: dict,
           export_dir: str) -> None:
    from lmfactory.components.trainer.serving import save_serving_module
    from lmfactory.components.tasks.translation_serving import TranslationServing

    task = model_config["task"]
    if preprocessor is None:
        preprocessor = preprocessor_for(vocab_dir, task["sequence_length"])
    max_length = min(task["sequence_length"] + 1,
                     int(task_model.backbone.max_sequence_length))
    save_serving_module(TranslationServing(
        preprocessor, task_model, max_length,
        num_beams=task.get("num_beams", GENERATION_DEFAULTS["num_beams"]),
        alpha=task.get("alpha", GENERATION_DEFAULTS["alpha"])), export_dir)


def corpus_bleu(hypotheses: list[str], references: list[str]) -> float:
    """sacreBLEU corpus BLEU (0-100) with its default 13a tokenization, one reference each."""
    import sacrebleu

    return float(sacrebleu.corpus_bleu(hypotheses, [references]).score)


def evaluate(model_uri: str, file_pattern: str, task: dict, config: dict) -> dict:
    """BLEU of the served translations of the records' sources; plus the attention heat map
    of the first sentence (`attention_heatmap`)."""
    import tensorflow_text  # noqa: F401  (ops of the SavedModel's tokenizer)

    from lmfactory.components.trainer.serving import serving_dir_of

    serve = tf.saved_model.load(serving_dir_of(model_uri)).signatures["serving_default"]
    batch_size = config.get("batch_size", 64)
    sources, references, hypotheses = [], [], []
    for step, batch in enumerate(_pairs(file_pattern).batch(batch_size)):
        if config.get("max_batches") is not None and step >= config["max_batches"]:
            break
        sources += [text.decode("utf-8") for text in batch[parallel.SOURCE_FEATURE].numpy()]
        references += [parallel.join_punctuation(text.decode("utf-8"))
                       for text in batch[parallel.TARGET_FEATURE].numpy()]
        hypotheses += [text.decode("utf-8") for text in serve(
            text=batch[parallel.SOURCE_FEATURE])["translation"].numpy()]
    if not sources:
        raise ValueError(f"No sentence pairs in {file_pattern!r}")
    results = {"bleu": corpus_bleu(hypotheses, references), "sentences": len(sources),
               "examples": [{"source": s, "reference": r, "translation": h}
                            for s, r, h in list(zip(sources, references, hypotheses))[:3]]}
    heatmap = attention_heatmap(model_uri, sources[0], task)
    if heatmap is not None:
        results[report_lib.ATTENTION_KEY] = heatmap
    return results


def attention_heatmap(model_uri: str, source: str, task: dict) -> dict | None:
    """The attention heat map (`attention_of`) of the Model artifact's Keras model."""
    from lmfactory.components.trainer.model_artifact import (load_task_model,
                                                             vocabulary_dir_of)

    preprocessor = preprocessor_for(vocabulary_dir_of(model_uri), task["sequence_length"])
    return attention_of(load_task_model(model_uri), preprocessor, source)


def attention_of(model, preprocessor, source: str) -> dict | None:
    """The attention weights alpha_ij of ``model``'s greedy translation of ``source``
    (target words x source words, the paper's Figure 3): ``{"source": words, "target":
    words, "weights": [target][source]}``, or None for a backbone that outputs no
    ``attention_weights``."""
    inputs = preprocessor.source_inputs(tf.constant([source]))
    max_length = min(preprocessor.sequence_length + 1,
                     int(model.backbone.max_sequence_length))
    output = model.translate_ids(inputs["encoder_token_ids"], inputs["encoder_padding_mask"],
                                 preprocessor.start_token_id, preprocessor.end_token_id,
                                 max_length=max_length)
    ids = output["token_ids"].numpy()[0]
    length = int(output["padding_mask"].numpy()[0].sum())
    decoder_ids = tf.constant(ids[None, :length], tf.int32)
    outputs = model.backbone(dict(inputs, decoder_token_ids=decoder_ids,
                                  decoder_padding_mask=tf.ones_like(decoder_ids)))
    if "attention_weights" not in outputs:
        return None
    source_length = int(inputs["encoder_padding_mask"].numpy()[0].sum())
    tokenizer = preprocessor.tokenizer
    source_ids = inputs["encoder_token_ids"].numpy()[0, :source_length]
    weights = np.asarray(outputs["attention_weights"])[0, :, :source_length]
    # Row i is the attention while predicting word i + 1 (fed word i): labelled with the
    # word it predicted; the last fed position predicts nothing kept.
    return {"source": [tokenizer.id_to_token(int(i)) for i in source_ids],
            "target": [tokenizer.id_to_token(int(i)) for i in ids[1:length]],
            "weights": np.round(weights[:length - 1], 4).tolist()}
