"""Token tagging (NER) in the DAG: CoNLL records (``tokens`` / ``tags``) -> a tagger that tags
raw sentences, scored with entity-level precision / recall / F1 (conlleval / seqeval).

BERT §4.3: fine-tuned `TokenClassifier`, the first sub-token of each word labelled
(``models/tasks/token_classifier.py``); with ``finetuning.task_args.feature_mode`` (e.g.
``concat_last_four``) the §5.3 feature-based `FeatureBasedTagger` (frozen encoder -> BiLSTM)
instead. The tag set is read from the ingested train and eval records (``O`` first), so a
recipe never lists it; it is stored in the task record as ``label_vocabulary``.

Parts:
    record parsing: components.example_gen.conll.parse_conll_sentence,
        models.tasks.ner_training.tagging_dataset
    head: models.tasks.heads.tagger, models.tasks.token_classifier.TokenClassifier,
        models.tasks.feature_based_tagger.FeatureBasedTagger
    preprocessor: models.tasks.token_classification_preprocessor
    training step: components.tasks.tagging.train
    serving export: components.tasks.tagging.export,
        components.tasks.tagging_serving.export_tagger
    metrics: components.tasks.tagging.evaluate,
        components.evaluator.entity_metrics.entity_scores
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from lmfactory.components.evaluator.report import CONFUSION_KEY
from lmfactory.components.example_gen import conll, formats
from lmfactory.components.tasks import registry
from lmfactory.components.trainer.task_data import read_records

TAGGING = registry.register(registry.TaskKind(
    name="tagging", module=__name__, formats=(formats.CONLL_FORMAT,),
    metrics=("entity_f1", "entity_precision", "entity_recall"),
    official_metrics=("entity_f1", "entity_precision", "entity_recall"),
    task_args=("dropout", "feature_mode", "lstm_units", "num_lstm_layers"), head="tagging"))


def task_record(kind, finetuning: dict, source: dict) -> dict:
    return kind.standard_record(finetuning, source)


def check_recipe(check, recipe: dict, arch) -> None:
    del recipe, arch
    check.positive_int("finetuning.sequence_length")
    check.source("data.task")
    check.choice("data.task.format", TAGGING.formats)


def read_sentences(file_pattern: str, batch_size: int = 256) -> tuple[list, list]:
    """(tokens, tags) of every ingested sentence, as lists of lists of strings."""
    from lmfactory.models.tasks.ner_training import EXAMPLE_SPEC

    tokens, tags = [], []
    for batch in read_records(file_pattern).batch(batch_size):
        parsed = tf.io.parse_example(batch, EXAMPLE_SPEC)
        for name, out in ((conll.TOKENS_FEATURE, tokens), (conll.TAGS_FEATURE, tags)):
            out.extend([[value.decode("utf-8") for value in row]
                        for row in parsed[name].to_list()])
    return tokens, tags


def tag_vocabulary(*file_patterns: str) -> list[str]:
    """The tag set of the records (``O`` first, then by entity type and prefix)."""
    return conll.label_vocabulary(tag for pattern in file_patterns
                                  for tag in read_sentences(pattern)[1])


def train(context) -> dict:
    from lmfactory.models.tasks.ner_training import tagging_dataset
    from lmfactory.models.tasks.token_classification_preprocessor import (
        token_classification_preprocessor)

    from lmfactory import models

    context.require_base_model("a tagger")
    config = context.config
    task = dict(config.task)
    labels = tag_vocabulary(context.train_files, context.eval_files)
    task["label_vocabulary"] = labels
    packing = (models.get(config.architecture).preprocessor("tagging")
               or token_classification_preprocessor)
    preprocessor = packing(context.vocab_dir, labels, task["sequence_length"])
    with context.strategy.scope():
        backbone = context.backbone()
        model = models.get(config.architecture).head("tagging")(
            backbone, num_labels=len(labels), **config.task_args)
        context.knowledge_init(model)
        model.compile(optimizer=context.optimizer(), jit_compile=config.jit_compile)
    read = dict(preprocessor=preprocessor, batch_size=config.batch_size, seed=config.seed,
                input_names=list(model.input))
    train_data = tagging_dataset(read_records(context.train_files), shuffle=True, repeat=True,
                                 **read)
    eval_data = tagging_dataset(read_records(context.eval_files), shuffle=False, repeat=True,
                                **read)
    metrics = context.fit(model, train_data, eval_data)
    return dict(task_model=model, backbone=backbone, vocab_dir=context.vocab_dir,
                metrics=metrics, task=task, preprocessor=preprocessor)


def export(task_model, preprocessor, vocab_dir: str, model_config: dict,
           export_dir: str) -> None:
    from lmfactory.components.tasks.tagging_serving import export_tagger

    del vocab_dir, model_config  # the preprocessor holds the tokenizer and the tag set
    export_tagger(preprocessor, task_model, export_dir)


def tag_confusion(gold: list, predicted: list, labels: list) -> np.ndarray:
    """Word-level [gold tag, predicted tag] counts over ``labels``."""
    index = {label: i for i, label in enumerate(labels)}
    matrix = np.zeros((len(labels), len(labels)), dtype=np.int64)
    for gold_sentence, predicted_sentence in zip(gold, predicted):
        for gold_tag, predicted_tag in zip(gold_sentence, predicted_sentence):
            matrix[index[gold_tag], index[predicted_tag]] += 1
    return matrix


def evaluate(model_uri: str, file_pattern: str, task: dict, config: dict) -> dict:
    """Entity precision / recall / F1 (micro, and per type) of the exported tagger on the
    records' sentences, each given to ``serving_default`` as its tokens joined by spaces.
    A sentence whose tokens the serving split does not give back one for one (a token
    holding whitespace) is counted in ``misaligned_sentences`` and scored on its first
    words, the rest tagged ``O``."""
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops the SavedModel uses)

    from lmfactory.components.evaluator.entity_metrics import entity_scores
    from lmfactory.components.trainer.serving import serving_dir_of

    batch_size = config.get("batch_size", 64)
    serve = tf.saved_model.load(serving_dir_of(model_uri)).signatures["serving_default"]
    tokens, gold = read_sentences(file_pattern)
    if not tokens:
        raise ValueError(f"No sentences to evaluate in {file_pattern!r}")
    predicted, misaligned = [], 0
    for start in range(0, len(tokens), batch_size):
        chunk = tokens[start:start + batch_size]
        outputs = serve(sentences=tf.constant([" ".join(words) for words in chunk]))
        rows, lengths = outputs["tags"].numpy(), outputs["lengths"].numpy()
        for words, row, length in zip(chunk, rows, lengths):
            tags = [tag.decode("utf-8") for tag in row[:length]]
            if len(tags) != len(words):
                misaligned += 1
                tags = (tags + ["O"] * len(words))[:len(words)]
            predicted.append(tags)
    scores = entity_scores(gold, predicted)
    labels = list(task.get("label_vocabulary") or conll.label_vocabulary(gold + predicted))
    labels += [tag for tag in conll.label_vocabulary(gold) if tag not in labels]
    return {"entity_f1": scores["f1"], "entity_precision": scores["precision"],
            "entity_recall": scores["recall"], "per_type": scores["per_type"],
            "sentences": len(tokens), "words": sum(len(words) for words in tokens),
            "misaligned_sentences": misaligned,
            CONFUSION_KEY: {"labels": labels,
                            "matrix": tag_confusion(gold, predicted, labels).tolist()}}
