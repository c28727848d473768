"""Multiple-choice fine-tuning and evaluation (BERT §4.4) as a library: data, training,
accuracy, export.

* `make_multiple_choice_dataset`: `MultipleChoiceExample` records (or TFRecords of
  ``components/example_gen/multiple_choice.py``'s `to_tf_example`) -> ``(inputs [B, C, T],
  label [B])`` batches, packed in tf.data by a `MultipleChoicePreprocessor`.
* `choice_accuracy`: the fraction of questions whose highest-scoring choice is the answer.
* `learn_wordpiece_vocabulary`: a WordPiece vocabulary folder (CONTRACTS §2) learned with
  the project's learner (``components/vocabulary/wordpiece.py``) from texts.
* `fine_tune_and_evaluate`: a fresh encoder of the registry (default BERT ``tiny``) with a
  `MultipleChoice` head trained on a train file and scored on an eval file (CommonsenseQA
  JSONL or SWAG CSV), exporting the serving SavedModel. Run it as
  ``python -m lmfactory.components.trainer.multiple_choice --train ... --eval ...``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf

from lmfactory.components.example_gen.multiple_choice import NO_LABEL, read_multiple_choice


def _examples_tensors(examples) -> dict:
    examples = list(examples)
    if not examples:
        raise ValueError("No multiple-choice examples to read")
    widths = {len(e.choices) for e in examples}
    if len(widths) != 1:
        raise ValueError(f"Every question needs the same number of choices, got {sorted(widths)}")
    return {"context": tf.constant([e.context for e in examples]),
            "choices": tf.constant([list(e.choices) for e in examples]),
            "label": tf.constant([e.label for e in examples], dtype=tf.int64)}


def make_multiple_choice_dataset(source, preprocessor, batch_size: int, shuffle: bool = False,
                                 repeat: bool = False, seed: Optional[int] = None,
                                 num_choices: Optional[int] = None,
                                 input_names: Optional[Sequence[str]] = None,
                                 drop_remainder: Optional[bool] = None) -> tf.data.Dataset:
    """``(packed inputs, label)`` batches; tokenization runs in the input pipeline.

    Args:
        source: a sequence of `MultipleChoiceExample` (e.g. a `MultipleChoiceSplit`), or a
            file pattern of GZIP TFRecords of `to_tf_example` records (then ``num_choices``
            is required: the ``choices`` feature is read as a fixed-length list).
        preprocessor: a `MultipleChoicePreprocessor`, or an architecture's own; one with
            ``record_features(num_choices)`` (KagNet's) reads those int64 features from the
            TFRecords too and packs with ``from_records``.
        input_names: keep only these packed inputs (the model's input names).
        drop_remainder: default: True when ``repeat``.
    """
    records = {}
    if isinstance(source, (str, os.PathLike)):
        if num_choices is None:
            raise ValueError("Reading TFRecords needs num_choices")
        files = tf.io.gfile.glob(os.fspath(source))
        if not files:
            raise FileNotFoundError(f"No multiple-choice records match {source!r}")
        spec = {"context": tf.io.FixedLenFeature([], tf.string),
                "choices": tf.io.FixedLenFeature([num_choices], tf.string),
                "label": tf.io.FixedLenFeature([], tf.int64)}
        # Features a knowledge stage computed offline for the preprocessor (KagNet's
        # schema graphs, components/concept_paths): read and handed to `from_records`.
        if hasattr(preprocessor, "record_features"):
            records = preprocessor.record_features(num_choices)
            spec.update({name: tf.io.FixedLenFeature([int(np.prod(shape))], tf.int64)
                         for name, shape in records.items()})
        dataset = tf.data.TFRecordDataset(sorted(files), compression_type="GZIP")
        parse = lambda serialized: tf.io.parse_example(serialized, spec)  # noqa: E731
    else:
        dataset = tf.data.Dataset.from_tensor_slices(_examples_tensors(source))
        parse = None

    def to_model_inputs(batch):
        if parse is not None:
            batch = parse(batch)
        if records:
            packed = preprocessor.from_records((batch["context"], batch["choices"]),
                                               {name: batch[name] for name in records})
        else:
            packed = preprocessor((batch["context"], batch["choices"]))
        if input_names is not None:
            packed = {name: packed[name] for name in input_names}
        return packed, batch["label"]

    if shuffle:
        dataset = dataset.shuffle(20_000, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    dataset = dataset.batch(batch_size, drop_remainder=repeat if drop_remainder is None
                            else drop_remainder)
    dataset = dataset.map(to_model_inputs, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.prefetch(tf.data.AUTOTUNE)


def choice_accuracy(model, dataset) -> dict:
    """Accuracy of ``model``'s arg-max choice over a finite ``dataset`` of ``(inputs,
    label)`` batches (every question counted once; questions without an answer are an
    error)."""
    correct = total = 0
    predict = tf.function(lambda inputs: tf.argmax(model(inputs, training=False), axis=-1))
    for inputs, labels in dataset:
        labels = labels.numpy()
        if (labels == NO_LABEL).any():
            raise ValueError("choice_accuracy needs the answer of every question; the data "
                             "hold unlabeled questions")
        correct += int((predict(inputs).numpy() == labels).sum())
        total += len(labels)
    if not total:
        raise ValueError("choice_accuracy: the dataset is empty")
    return {"accuracy": correct / total, "examples": total}


def learn_wordpiece_vocabulary(texts: Sequence[str], vocab_dir: str, vocab_size: int,
                               lowercase: bool = True, strip_accents: bool = True) -> str:
    """A WordPiece vocabulary folder of at most ``vocab_size`` tokens learned on ``texts``."""
    from lmfactory.components.vocabulary import wordpiece

    return wordpiece.learn_vocabulary_folder(texts, vocab_dir, vocab_size,
                                             lowercase=lowercase, strip_accents=strip_accents)


def fine_tune_and_evaluate(train_path: str, eval_path: str, output_dir: str,
                           architecture: str = "bert", preset: str = "tiny",
                           overrides: Optional[dict] = None, vocab_dir: Optional[str] = None,
                           vocab_size: int = 4000, sequence_length: int = 64,
                           batch_size: int = 16, steps: int = 600,
                           learning_rate: float = 1e-4, warmup_fraction: float = 0.1,
                           weight_decay: float = 0.01, dropout: float = 0.1, seed: int = 0,
                           export: bool = True) -> dict:
    """Fine-tunes a FRESH ``architecture`` backbone (no pretraining) with a `MultipleChoice`
    head on ``train_path`` and reports accuracy on ``eval_path`` (CommonsenseQA JSONL or
    SWAG CSV, `read_multiple_choice`).

    Without ``vocab_dir`` a WordPiece vocabulary of ``vocab_size`` tokens is learned from
    the train file's texts (contexts and choices) into ``output_dir/vocabulary``. Training:
    ``steps`` AdamW steps of ``batch_size`` questions, linear warmup over
    ``warmup_fraction`` then linear decay (``components/trainer/optimization.py``). Writes
    ``output_dir/results.json`` and, with ``export``, the serving SavedModel to
    ``output_dir/serving``. Returns the results: dev ``accuracy``, ``examples``, the chance
    level ``1 / num_choices``, the train and eval malformed-line counts, the last training
    loss / accuracy, parameter count and seconds.
    """
    import keras

    from lmfactory import models
    from lmfactory.components.trainer.multiple_choice_serving import (
        export_multiple_choice_model)
    from lmfactory.components.trainer.optimization import make_optimizer
    from lmfactory.models.tasks.multiple_choice import MultipleChoice
    from lmfactory.models.tasks.multiple_choice_preprocessor import MultipleChoicePreprocessor
    from lmfactory.models.tokenizers import load_tokenizer

    started = time.perf_counter()
    tf.io.gfile.makedirs(output_dir)
    train = read_multiple_choice(train_path)
    evaluation = read_multiple_choice(eval_path)
    if train.num_choices != evaluation.num_choices:
        raise ValueError(f"{train_path} has {train.num_choices} choices a question, "
                         f"{eval_path} {evaluation.num_choices}")
    if vocab_dir is None:
        vocab_dir = learn_wordpiece_vocabulary(
            [e.context for e in train] + [c for e in train for c in e.choices],
            os.path.join(output_dir, "vocabulary"), vocab_size)
    keras.utils.set_random_seed(seed)
    preprocessor = MultipleChoicePreprocessor.from_vocabulary(vocab_dir, architecture,
                                                              sequence_length)
    backbone = models.build(architecture, preset,
                            vocabulary_size=load_tokenizer(vocab_dir).vocabulary_size(),
                            **(overrides or {}))
    model = MultipleChoice(backbone, num_choices=train.num_choices, dropout=dropout)
    model.compile(optimizer=make_optimizer(learning_rate, steps, warmup_fraction,
                                           weight_decay))
    names = list(model.input)
    train_data = make_multiple_choice_dataset(train, preprocessor, batch_size, shuffle=True,
                                              repeat=True, seed=seed, input_names=names)
    history = model.fit(train_data, steps_per_epoch=steps, epochs=1, verbose=2)
    eval_data = make_multiple_choice_dataset(evaluation, preprocessor, 64, input_names=names)
    results = choice_accuracy(model, eval_data)
    results.update({
        "architecture": architecture, "preset": preset, "train_file": train_path,
        "eval_file": eval_path, "train_examples": len(train),
        "num_choices": train.num_choices, "chance": 1.0 / train.num_choices,
        "train_malformed": len(train.malformed), "eval_malformed": len(evaluation.malformed),
        "steps": steps, "batch_size": batch_size, "sequence_length": sequence_length,
        "vocabulary_size": backbone.get_config()["vocabulary_size"],
        "parameters": int(model.count_params()),
        "final_train_loss": float(history.history["loss"][-1]),
        "final_train_accuracy": float(history.history["accuracy"][-1]),
    })
    if export:
        export_multiple_choice_model(model, preprocessor, os.path.join(output_dir, "serving"))
    results["seconds"] = round(time.perf_counter() - started, 1)
    with tf.io.gfile.GFile(os.path.join(output_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=2, sort_keys=True)
    logging.info("Multiple choice: %s", results)
    return results


__all__ = ["choice_accuracy", "fine_tune_and_evaluate", "learn_wordpiece_vocabulary",
           "main", "make_multiple_choice_dataset"]


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=fine_tune_and_evaluate.__doc__.split("\n")[0])
    parser.add_argument("--train", required=True)
    parser.add_argument("--eval", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--architecture", default="bert")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--vocab-size", type=int, default=4000)
    parser.add_argument("--sequence-length", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    results = fine_tune_and_evaluate(
        args.train, args.eval, args.output, architecture=args.architecture,
        preset=args.preset, vocab_size=args.vocab_size, sequence_length=args.sequence_length,
        batch_size=args.batch_size, steps=args.steps, learning_rate=args.learning_rate,
        seed=args.seed)
    print(json.dumps(results, indent=2, sort_keys=True))
    return results


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    main()
