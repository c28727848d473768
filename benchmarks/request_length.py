"""Serving at the request's length: latency of a pushed classifier SavedModel whose requests
run at their longest sentence (models/request_length.py) against the same model run at its
full packed length, in Python and in TF Serving's loader (the C API).

    .venv/bin/python benchmarks/request_length.py             # BERT-mini, lengths 128, 512
    .venv/bin/python benchmarks/request_length.py --quick     # BERT-tiny, length 128 only

Two SavedModels per (preset, maximum length), both built as ``benchmarks/serving.py`` builds
the Trainer's classifier (``ClassifierServing`` over a random-weight BERT and a WordPiece
vocabulary learned from the demo corpus): "full", whose signature runs the model at the
packed length (``length_multiple = None``), and "cut", the default, which cuts every request
after its longest row rounded up to 8. The requests are real SST-2 dev sentences
(data/demo/sst2/dev.tsv, ~19 words: ~25 WordPiece tokens), batches of 1 and 32.

Paths timed per request:

* "Python": ``tf.saved_model.load`` and ``signatures["serving_default"](sentence=...)``, the
  two models interleaved request by request (``serving.time_paths``);
* "C API": c_api_runner.py in its own process (no TensorFlow Python): the SavedModel
  loaded by ``TF_LoadSessionFromSavedModel`` and each request fed to ``TF_SessionRun`` by
  tensor names, as TF Serving runs it; each request once untimed, then timed once
  (``loader_check.c_api_latencies``). The two models run one after the other.

Both models' probabilities are compared on the first batch of each size (max |diff|).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import serving  # noqa: E402

LENGTHS = (128, 512)
BATCHES = (1, 32)
REQUESTS = {1: 100, 32: 30}
MIN_REQUESTS = {1: 20, 32: 8}
BUDGET_SECONDS = 6.0  # timed Python seconds per model and batch size (on average)
MODELS = ("full", "cut")


def measure(vocab_dir: str, preset: str, length: int, sentences: list, work_dir: str,
            quick: bool) -> dict:
    import numpy as np
    import tensorflow as tf

    from lmfactory.components.pusher import loader_check, warmup

    folders = {name: os.path.join(work_dir, f"{preset}_{length}_{name}") for name in MODELS}
    for name, folder in folders.items():
        serving.export_classifier(vocab_dir, preset, length, folder, cut=name == "cut")
    signatures = {name: serving.load_signature(folder)[1] for name, folder in folders.items()}
    figures = {}
    for batch in BATCHES:
        wanted = REQUESTS[batch] // (4 if quick else 1)
        batches = serving.request_batches(sentences, batch, wanted + serving.WARMUP_REQUESTS)
        texts = [tf.constant(b) for b in batches]
        calls = {name: (lambda i, s=signatures[name]: s(sentence=texts[i])["probabilities"]
                        .numpy()) for name in MODELS}
        python = serving.time_paths(calls, wanted, BUDGET_SECONDS / (3 if quick else 1),
                                    MIN_REQUESTS[batch])
        done = len(python[MODELS[0]])
        requests = [warmup.predict_request("serving_default",
                                           {"sentence": np.array(b, dtype=object)})
                    for b in batches[serving.WARMUP_REQUESTS:serving.WARMUP_REQUESTS + done]]
        c_api = {name: [seconds for run in loader_check.c_api_latencies(folder, requests, 1)
                        for seconds in run] for name, folder in folders.items()}
        outputs = {name: calls[name](0) for name in MODELS}
        figures[batch] = {
            "python": {name: serving.summarize(python[name], batch) for name in MODELS},
            "c_api": {name: serving.summarize(c_api[name], batch) for name in MODELS},
            "max_abs_difference": float(np.max(np.abs(outputs["cut"] - outputs["full"]))),
        }
    return figures


def run(scales=(1,), out_dir: str = "benchmark_results", quick: bool = False
        ) -> common.Result:
    del scales  # the lengths are the issue's: 128 and 512
    began = time.perf_counter()
    preset = "tiny" if quick else "mini"
    lengths = (128,) if quick else LENGTHS
    sentences = serving.read_sentences()
    figures = {"preset": preset, "lengths": {}}
    with tempfile.TemporaryDirectory(prefix="request_length_") as work_dir:
        vocab_dir = serving.learn_vocabulary(os.path.join(work_dir, "vocabulary"),
                                             2000 if quick else 9270)
        from lmfactory.models.tokenizers import load_tokenizer

        tokenizer = load_tokenizer(vocab_dir)
        tokens = [len(tokenizer.tokenize(s).numpy()) for s in sentences[:200]]
        figures["tokens_per_sentence_mean"] = sum(tokens) / len(tokens)
        for length in lengths:
            figures["lengths"][length] = measure(vocab_dir, preset, length, sentences,
                                                 work_dir, quick)
    rows, findings = [], []
    for length, by_batch in figures["lengths"].items():
        for batch, result in by_batch.items():
            for path in ("python", "c_api"):
                full, cut = result[path]["full"], result[path]["cut"]
                rows.append([length, batch, path, full["p50_ms"], cut["p50_ms"],
                             full["p50_ms"] / cut["p50_ms"], full["p99_ms"], cut["p99_ms"],
                             cut["requests"]])
            findings.append(f"length {length}, batch {batch}: max |probability difference| "
                            f"cut vs full {result['max_abs_difference']:.2g}")
    table = common.Table(
        f"BERT-{preset} classifier on SST-2 dev sentences (mean "
        f"{figures['tokens_per_sentence_mean']:.1f} WordPiece tokens): ms per request",
        ["max length", "batch", "path", "p50 full", "p50 cut", "p50 full / cut",
         "p99 full", "p99 cut", "requests"], rows, digits=3,
        note="full: the model at the packed length (every request padded to it); cut: the "
             "same SavedModel's model at the request's longest row, rounded up to 8.")
    return common.Result("Serving at the request's length", [table], [], findings, figures,
                         time.perf_counter() - began)


def main() -> None:
    args = common.argument_parser(__doc__).parse_args()
    result = run(out_dir=args.out_dir, quick=args.quick)
    common.print_and_save(result, args.out_dir, "request_length.json")


if __name__ == "__main__":
    main()
