"""Fine-tune a span extractor on SQuAD-format data and score it with the official metrics
(Devlin et al. 2019 §4.2-4.3), as a library function and a command line.

Only the SQuAD v1.1 DEV file is available here (``../shared/data/squad/dev-v1.1.json``), so
`fine_tune_and_evaluate` uses a DEV-SPLIT protocol: the first ``train_fraction`` of the
articles (file order) train, the remaining articles are held out and scored with the
official EM / F1 (``components/evaluator/squad_metrics.py``). Figures from it are not
comparable with published SQuAD dev results. ``version="2.0"`` turns a fraction of the
questions of both parts unanswerable by pairing them with a paragraph of another article
(`components.example_gen.squad.make_unanswerable`), trains with those pointing at
``[CLS]``, and tunes the no-answer threshold τ on the held-out part
(``best_no_answer_threshold``), as §4.3 tunes it on dev. The model-side pieces it shares
with the DAG (`featurize`, `training_labels`, `model_inputs`, `predict`) are in
``models/tasks/span_finetune.py``; the scoring (`score`) is the span-QA task kind's
(``components/tasks/span_qa.py``).

    .venv/bin/python -m lmfactory.components.trainer.span_finetune \\
        --squad ../shared/data/squad/dev-v1.1.json --work-dir /tmp/squad_run [--version 2.0]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time

import numpy as np

from lmfactory.components.example_gen import squad as squad_reader
from lmfactory.components.tasks.span_qa import score
from lmfactory.models.tasks.span_finetune import (featurize, model_inputs, predict,
                                                  training_labels)


def build_vocabulary(texts, out_dir: str, vocab_size: int, lowercase: bool = True,
                     min_frequency: int = 2) -> str:
    """A WordPiece vocabulary folder learned on ``texts`` (CONTRACTS §2)."""
    from lmfactory.components.vocabulary import wordpiece

    return wordpiece.learn_vocabulary_folder(texts, out_dir, vocab_size, lowercase=lowercase,
                                             min_frequency=min_frequency)


def fine_tune_and_evaluate(squad_path: str, work_dir: str, version: str = "1.1",
                           train_fraction: float = 0.8, unanswerable_fraction: float = 0.33,
                           architecture: str = "bert", preset: str = "tiny",
                           overrides: dict | None = None, vocab_size: int = 8000,
                           sequence_length: int = 384, doc_stride: int = 128,
                           max_query_length: int = 64, epochs: float = 2.0,
                           batch_size: int = 32, learning_rate: float = 1e-3,
                           max_train_examples: int | None = None,
                           max_eval_examples: int | None = None, seed: int = 0,
                           export: bool = True, log_chunks: int = 10) -> dict:
    """Trains ``architecture``/``preset`` from scratch (no pretraining) on the train part of
    a DEV-SPLIT of ``squad_path`` and scores the held-out articles (see the module
    docstring). Returns (and writes to ``work_dir/results.json``) the figures; exports the
    serving SavedModel to ``work_dir/serving`` when ``export``."""
    import keras
    import tensorflow as tf

    from lmfactory import models
    from lmfactory.components.trainer.optimization import make_optimizer
    from lmfactory.models.tasks.span_extractor import SpanExtractor
    from lmfactory.models.tasks.span_preprocessor import span_preprocessor

    if version not in ("1.1", "2.0"):
        raise ValueError(f"version must be '1.1' or '2.0', got {version!r}")
    version_2 = version == "2.0"
    started = time.perf_counter()
    keras.utils.set_random_seed(seed)
    source = squad_reader.read_squad(squad_path, skip_malformed=True)
    train, held_out = squad_reader.split_by_article(source.records, train_fraction)
    if version_2:
        train = squad_reader.make_unanswerable(train, unanswerable_fraction, seed)
        held_out = squad_reader.make_unanswerable(held_out, unanswerable_fraction, seed + 1)
        os.makedirs(work_dir, exist_ok=True)
        for name, part in (("train", train), ("held_out", held_out)):
            with open(os.path.join(work_dir, f"{name}-v2.0.json"), "w") as f:
                json.dump(squad_reader.to_json(part, "v2.0"), f)
    if max_train_examples:
        train = train[:max_train_examples]
    if max_eval_examples:
        held_out = held_out[:max_eval_examples]

    print(f"{len(train)} training questions, {len(held_out)} held out; learning the "
          f"vocabulary", flush=True)
    vocab_dir = build_vocabulary(
        list(dict.fromkeys(r.context for r in train)) + [r.question for r in train],
        os.path.join(work_dir, "vocabulary"), vocab_size)
    preprocessor = span_preprocessor(vocab_dir, sequence_length, doc_stride, max_query_length)
    print(f"vocabulary learned in {time.perf_counter() - started:.0f}s; featurizing",
          flush=True)
    train_features = featurize(preprocessor, train)
    start_positions, end_positions = training_labels(preprocessor, train_features, train)
    eval_features = featurize(preprocessor, held_out)
    featurized = time.perf_counter()

    backbone = models.build(architecture, preset,
                            **{"vocabulary_size": len(preprocessor.tokenizer.get_vocabulary()),
                               "max_sequence_length": max(sequence_length, 512),
                               **(overrides or {})})
    model = SpanExtractor(backbone)
    windows = len(start_positions)
    steps = max(1, int(round(epochs * windows / batch_size)))
    model.compile(optimizer=make_optimizer(learning_rate, steps, warmup_fraction=0.1))
    dataset = tf.data.Dataset.from_tensor_slices((
        model_inputs(model, train_features),
        {"start_positions": start_positions, "end_positions": end_positions}))
    dataset = dataset.shuffle(windows, seed=seed).repeat().batch(batch_size, drop_remainder=True)
    chunks = max(1, min(log_chunks, steps))
    print(f"featurized in {featurized - started:.0f}s: {windows} training windows, "
          f"{steps} steps of {batch_size} in {chunks} chunks", flush=True)
    history = model.fit(dataset, steps_per_epoch=steps // chunks, epochs=chunks, verbose=2)
    steps = (steps // chunks) * chunks
    trained = time.perf_counter()

    predictions = predict(model, held_out, eval_features)
    results = score(held_out, predictions, version_2)
    results.update({
        "protocol": (f"DEV-SPLIT of {os.path.basename(squad_path)} (no SQuAD train file "
                     f"available): first {train_fraction:.0%} of articles train, the rest "
                     f"held out" + (f"; {unanswerable_fraction:.0%} of questions made "
                                    f"unanswerable by pairing with another article's "
                                    f"paragraph" if version_2 else "")),
        "version": version, "architecture": architecture, "preset": preset,
        "train_questions": len(train), "train_windows": windows,
        "held_out_questions": len(held_out), "held_out_windows": len(eval_features[
            "example_index"]),
        "train_articles": len({r.title for r in train}),
        "held_out_articles": len({r.title for r in held_out}),
        "vocabulary_size": len(preprocessor.tokenizer.get_vocabulary()),
        "parameters": int(model.count_params()), "steps": steps, "batch_size": batch_size,
        "learning_rate": learning_rate, "sequence_length": sequence_length,
        "final_train_loss": float(history.history["span_loss"][-1]),
        "seconds": {"featurize": featurized - started, "train": trained - featurized,
                    "evaluate": time.perf_counter() - trained},
        "malformed_entries": source.malformed,
        "examples": [{"id": r.id, "question": r.question, "prediction": p.text,
                      "gold": list(r.answers), "null_margin": p.null_margin}
                     for r, p in list(zip(held_out, predictions))[:5]],
    })
    if export:
        from lmfactory.models.tasks.span_serving import export as export_serving

        threshold = (results["best_f1_threshold"]["threshold"] if version_2 else None)
        if threshold is not None and not np.isfinite(threshold):
            threshold = None if threshold > 0 else -1e30
        results["serving"] = export_serving(preprocessor, model,
                                            os.path.join(work_dir, "serving"), threshold)
    os.makedirs(work_dir, exist_ok=True)
    with open(os.path.join(work_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=2, default=float)
    return results


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--squad", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--version", default="1.1", choices=("1.1", "2.0"))
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--sequence-length", type=int, default=384)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--doc-stride", type=int, default=128)
    parser.add_argument("--max-query-length", type=int, default=64)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--no-export", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    results = fine_tune_and_evaluate(
        args.squad, args.work_dir, version=args.version, epochs=args.epochs,
        batch_size=args.batch_size, learning_rate=args.learning_rate,
        sequence_length=args.sequence_length, doc_stride=args.doc_stride,
        max_query_length=args.max_query_length, vocab_size=args.vocab_size,
        preset=args.preset, export=not args.no_export)
    print(json.dumps({k: v for k, v in results.items() if k != "examples"}, indent=2,
                     default=float))


if __name__ == "__main__":
    main()
