"""Fine-tuning and evaluating a token tagger (NER) on CoNLL-format data, e.g. WNUT-17.

`fine_tune_and_evaluate` runs the whole recipe outside the TFX DAG: learn a WordPiece
vocabulary on the training sentences (``components/vocabulary/wordpiece.py``), build an
encoder from the registry, fine-tune a `TokenClassifier` with first-sub-token labels (BERT
§4.3) and report entity-level precision / recall / F1 on the dev file with conlleval /
seqeval chunking (``components/evaluator/entity_metrics.py``; `evaluate_tagger`). The
model-side pieces it shares with the DAG (`tagging_dataset`, `predict_tags`) are in
``models/tasks/ner_training.py``.

Command line (WNUT-17, a randomly initialised BERT-tiny, ~10 min on 2 CPU cores)::

    python -m lmfactory.components.trainer.ner_finetune \\
        --train ../shared/data/wnut17/wnut17train.conll \\
        --dev ../shared/data/wnut17/emerging.dev.conll --work-dir /tmp/wnut17 --steps 600
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time

import keras

from lmfactory.components.evaluator.entity_metrics import entity_scores
from lmfactory.components.example_gen import conll
from lmfactory.models.tasks.ner_training import covered_words, predict_tags, tagging_dataset
from lmfactory.models.tasks.token_classification_preprocessor import (
    token_classification_preprocessor)
from lmfactory.models.tasks.token_classifier import TokenClassifier


def learn_wordpiece_vocabulary(sentences, vocab_dir: str, vocab_size: int = 8000,
                               lowercase: bool = False, min_frequency: int = 2) -> str:
    """A WordPiece vocabulary folder learned from word-tokenized sentences; cased by default:
    BERT's authors recommend the cased model for NER, where capitalisation is a cue."""
    from lmfactory.components.vocabulary import wordpiece

    return wordpiece.learn_vocabulary_folder(
        (" ".join(words) for words in sentences), vocab_dir, vocab_size,
        lowercase=lowercase, min_frequency=min_frequency)


def evaluate_tagger(model, preprocessor, data: conll.ConllFile, batch_size: int = 64) -> dict:
    """Entity-level micro precision / recall / F1 (conlleval / seqeval chunking) of the
    model's tags on ``data``, plus the per-type scores and the word coverage."""
    predicted = predict_tags(model, preprocessor, data.tokens, batch_size=batch_size)
    scores = entity_scores(data.tags, predicted)
    covered, total = covered_words(preprocessor, data.tokens)
    scores.update({"sentences": len(data.sentences), "words": total,
                   "words_without_prediction": total - covered})
    return scores


def fine_tune_and_evaluate(train_path: str, dev_path: str, work_dir: str,
                           architecture: str = "bert", preset: str = "tiny",
                           overrides: dict | None = None, vocab_size: int = 8000,
                           lowercase: bool = False, sequence_length: int = 128,
                           batch_size: int = 32, steps: int = 600,
                           learning_rate: float = 5e-4, warmup_fraction: float = 0.1,
                           dropout: float = 0.1, seed: int = 0,
                           backbone_checkpoint: str | None = None,
                           vocab_dir: str | None = None,
                           export_dir: str | None = None,
                           feature_mode: str | None = None, lstm_units: int = 768) -> dict:
    """Fine-tunes a `TokenClassifier` on ``train_path`` and scores it on ``dev_path``.

    The encoder is ``models.build(architecture, preset, vocabulary_size=..., **overrides)``,
    randomly initialised, or loaded from ``backbone_checkpoint`` (``models.save_checkpoint``
    format) with the vocabulary folder ``vocab_dir`` it was trained with. Without
    ``vocab_dir`` a WordPiece vocabulary of ``vocab_size`` is learned on the training
    sentences into ``work_dir/vocab``. ``export_dir``: also write the serving SavedModel.
    ``feature_mode`` (e.g. ``"concat_last_four"``): train the feature-based
    `FeatureBasedTagger` (§5.3: frozen encoder, BiLSTM of ``lstm_units``) instead of
    fine-tuning a `TokenClassifier` (meaningful with a pre-trained ``backbone_checkpoint``).

    Returns the dev scores (`evaluate_tagger`) plus ``train_loss_first`` / ``train_loss_last``
    (mean loss over the first / last 10% of steps), ``steps``, ``seconds``, ``parameters``.
    """
    from lmfactory import models
    from lmfactory.components.trainer.optimization import make_optimizer

    keras.utils.set_random_seed(seed)
    train = conll.read_conll(train_path)
    dev = conll.read_conll(dev_path)
    for data in (train, dev):
        if data.malformed:
            logging.warning("%s", data.report())
    labels = conll.label_vocabulary(train.tags + dev.tags)
    if vocab_dir is None:
        vocab_dir = learn_wordpiece_vocabulary(train.tokens, os.path.join(work_dir, "vocab"),
                                               vocab_size=vocab_size, lowercase=lowercase)
    preprocessor = token_classification_preprocessor(vocab_dir, labels, sequence_length)
    if backbone_checkpoint:
        backbone = models.load_checkpoint(architecture, backbone_checkpoint)
    else:
        backbone = models.build(architecture, preset, **{
            "vocabulary_size": preprocessor.tokenizer.vocabulary_size(), **(overrides or {})})
    if feature_mode:
        from lmfactory.models.tasks.feature_based_tagger import FeatureBasedTagger

        model = FeatureBasedTagger(backbone, num_labels=len(labels), mode=feature_mode,
                                   lstm_units=lstm_units, dropout=dropout)
    else:
        model = TokenClassifier(backbone, num_labels=len(labels), dropout=dropout)
    model.compile(optimizer=make_optimizer(learning_rate, steps,
                                           warmup_fraction=warmup_fraction))

    records = [conll.sentence_example(tokens, tags).SerializeToString()
               for tokens, tags in zip(train.tokens, train.tags)]
    dataset = tagging_dataset(records, preprocessor, batch_size, shuffle=True, repeat=True,
                              seed=seed, input_names=list(model.input))
    losses = []
    loss_logger = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: losses.append(float(logs["token_loss"])))
    started = time.perf_counter()
    model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[loss_logger])
    seconds = time.perf_counter() - started
    # Keras logs running means over the epoch; recover the per-step losses from them.
    per_step = [losses[0]] + [(i + 1) * losses[i] - i * losses[i - 1]
                              for i in range(1, len(losses))]
    tenth = max(1, len(per_step) // 10)
    scores = evaluate_tagger(model, preprocessor, dev)
    scores.update({
        "train_loss_first": sum(per_step[:tenth]) / tenth,
        "train_loss_last": sum(per_step[-tenth:]) / tenth,
        "steps": steps, "seconds": round(seconds, 1),
        "parameters": int(model.count_params()), "labels": labels,
        "train_sentences": len(train.sentences), "vocab_dir": vocab_dir})
    if export_dir:
        from lmfactory.components.trainer.tagging_serving import export_tagger

        export_tagger(preprocessor, model, export_dir)
        scores["export_dir"] = export_dir
    return scores


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", required=True)
    parser.add_argument("--dev", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--architecture", default="bert")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=5e-4)
    parser.add_argument("--sequence-length", type=int, default=128)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--lowercase", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--export-dir")
    parser.add_argument("--backbone-checkpoint")
    parser.add_argument("--vocab-dir", help="the vocabulary folder of --backbone-checkpoint")
    parser.add_argument("--feature-mode", help="feature-based BiLSTM tagger (BERT §5.3)")
    args = parser.parse_args(argv)
    scores = fine_tune_and_evaluate(
        args.train, args.dev, args.work_dir, architecture=args.architecture,
        preset=args.preset, steps=args.steps, batch_size=args.batch_size,
        learning_rate=args.learning_rate, sequence_length=args.sequence_length,
        vocab_size=args.vocab_size, lowercase=args.lowercase, seed=args.seed,
        export_dir=args.export_dir, backbone_checkpoint=args.backbone_checkpoint,
        vocab_dir=args.vocab_dir, feature_mode=args.feature_mode)
    print(json.dumps(scores, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
