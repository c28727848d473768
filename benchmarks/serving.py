"""Serving: latency (p50 / p99) and throughput of the pushed classifier SavedModel (raw UTF-8
strings in, tokenization inside the graph) at batch 1 and 32, against the same Keras model
called directly on pre-tokenized inputs, for a BERT-tiny and a BERT-mini-sized classifier at
sequence length 32 / 128 / 512 (1x / 4x / 16x).

    .venv/bin/python benchmarks/serving.py              # under 5 minutes on a busy machine
    .venv/bin/python benchmarks/serving.py --quick      # ~30 s: BERT-tiny, length 128 only

The SavedModel is built the way the Trainer pushes a classification model, without running
the pipeline: a backbone from ``models.build("bert", preset, vocabulary_size=...)``, the
architecture's ``head("classification")(backbone, num_classes=2)``, the classifier
preprocessor of a WordPiece vocabulary folder (learned here from the demo corpus, 8,000 pieces), wrapped in
``components/trainer/serving.py``'s ``ClassifierServing`` and written with
``save_serving_module`` (models/saved_model.py), its model run at the packed sequence length
(the pushed signature runs it at each request's longest row instead: benchmarks/
request_length.py compares the two). It is loaded back with
``tf.saved_model.load`` (after ``import tensorflow_text``, as TF Serving has its ops) and
called as ``signatures["serving_default"](sentence=<batch of strings>)`` on real SST-2
sentences (data/demo/sst2/dev.tsv). Weights are random: latency does not depend on them.

Paths timed per request (the same sentences, batch 1 and batch 32):

* "SavedModel (strings)": the loaded signature: rank check, tokenization, packing to the
  sequence length, the model, softmax and argmax, one graph call.
* "Keras eager (ids)": ``model(inputs, training=False)`` on inputs tokenized and packed
  beforehand (outside the timing): the Keras model called directly in Python.
* "tf.function (ids)": the same Keras call inside a ``tf.function`` (traced once): the
  model's graph without tokenization; SavedModel minus this is the cost of serving raw
  strings.
* "tokenize only": the preprocessor alone in a ``tf.function`` (strings -> packed ids).

Each request is timed on its own (``time.perf_counter`` around the call and ``.numpy()`` of
its outputs) after warm-up calls; the four paths are interleaved request by request, so load
from other processes on a shared machine falls on all of them alike. p50 / p99 are over the
requests, sentences/s is ``batch x requests / total time``. The number of requests is capped
by a time budget (long sequences at batch 32 take ~1 s each on 2 cores); the tables give
it.
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

REPO = common.REPO
SST2_DEV = os.path.join(REPO, "data", "demo", "sst2", "dev.tsv")
CORPUS = common.DEMO_CORPUS
VOCABULARY_SIZE = 8000
BASE_SEQUENCE_LENGTH = 32    # 1x; 4x = 128, 16x = 512
PRESETS = ("tiny", "mini")   # BERT-tiny L2 H128, BERT-mini L4 H256 (Turc et al. 2019)
BATCHES = (1, 32)
REQUESTS = {1: 200, 32: 50}  # wanted requests per series; fewer once the budget is spent
MIN_REQUESTS = {1: 20, 32: 8}
SERIES_BUDGET_SECONDS = 3.0  # timed seconds per path and batch size (on average)
WARMUP_REQUESTS = 3
PATHS = ("SavedModel (strings)", "Keras eager (ids)", "tf.function (ids)", "tokenize only")


# --------------------------------------------------------------------------- inputs


def read_sentences(path: str = SST2_DEV) -> list:
    """The ``sentence`` column of an SST-2 TSV file (header line first)."""
    with open(path, encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        column = header.index("sentence")
        return [line.rstrip("\n").split("\t")[column].strip() for line in f if line.strip()]


def learn_vocabulary(vocab_dir: str, max_lines: int) -> str:
    """A WordPiece vocabulary folder learned from the first ``max_lines`` corpus lines."""
    from lmfactory.components.vocabulary.wordpiece import learn_vocabulary_folder

    lines = common.corpus_lines(CORPUS, 1, max_lines)
    return learn_vocabulary_folder(lines[:max_lines], vocab_dir, VOCABULARY_SIZE)


def request_batches(sentences: list, batch: int, count: int) -> list:
    """``count`` batches of ``batch`` consecutive sentences, cycling through ``sentences``."""
    return [[sentences[(i * batch + j) % len(sentences)] for j in range(batch)]
            for i in range(count)]


# --------------------------------------------------------------------------- model


def export_classifier(vocab_dir: str, preset: str, sequence_length: int, export_dir: str,
                      cut: bool = False):
    """Builds and pushes a 2-class BERT classifier SavedModel like the Trainer does, its model
    run at the packed length (``cut``: at each request's longest row, as pushed); returns
    ``(keras model, preprocessor, parameter count)``."""
    import keras
    import tensorflow as tf

    from lmfactory import models
    from lmfactory.components.trainer.serving import ClassifierServing, save_serving_module
    from lmfactory.models.classifier_preprocessor import classifier_preprocessor

    keras.utils.set_random_seed(0)
    preprocessor = classifier_preprocessor(vocab_dir, "bert", sequence_length)
    backbone = models.build("bert", preset,
                            vocabulary_size=preprocessor.tokenizer.vocabulary_size())
    model = models.get("bert").head("classification")(backbone, num_classes=2)
    module = ClassifierServing(preprocessor, model, ["sentence"])
    if not cut:  # the packed length; request_length.py times the cut
        module.length_multiple = None
    save_serving_module(module, export_dir)
    return model, preprocessor, model.count_params()


def load_signature(export_dir: str):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops the graph uses)

    loaded = tf.saved_model.load(export_dir)
    return loaded, loaded.signatures["serving_default"]


# --------------------------------------------------------------------------- timing


def time_paths(calls: dict, count: int, budget_seconds: float, min_requests: int) -> dict:
    """Per-request latencies (s) of each path: ``calls`` maps a name to ``call(index)``.

    The paths are interleaved (request ``i`` of every path, in an order that rotates, then
    request ``i + 1``), so a burst of load from other processes hits all paths alike rather
    than one series. ``WARMUP_REQUESTS`` untimed calls of each path first; stops after
    ``budget_seconds`` of timed calls per path (on average) once ``min_requests`` are done.
    """
    names = list(calls)
    for index in range(WARMUP_REQUESTS):
        for name in names:
            calls[name](index)
    latencies = {name: [] for name in names}
    spent = 0.0
    for index in range(WARMUP_REQUESTS, WARMUP_REQUESTS + count):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            started = time.perf_counter()
            calls[name](index)
            elapsed = time.perf_counter() - started
            latencies[name].append(elapsed)
            spent += elapsed
        if spent > budget_seconds * len(names) and len(latencies[names[0]]) >= min_requests:
            break
    return latencies


def summarize(latencies: list, batch: int) -> dict:
    import numpy as np

    values = np.asarray(latencies)
    return {"requests": len(latencies), "p50_ms": float(np.percentile(values, 50) * 1e3),
            "p99_ms": float(np.percentile(values, 99) * 1e3),
            "sentences_per_s": batch * len(latencies) / float(values.sum())}


def measure_model(vocab_dir: str, preset: str, sequence_length: int, sentences: list,
                  work_dir: str, quick: bool) -> dict:
    """Exports, loads and times the four paths of one (preset, sequence length)."""
    import numpy as np
    import tensorflow as tf

    export_dir = os.path.join(work_dir, f"{preset}_{sequence_length}")
    started = time.perf_counter()
    model, preprocessor, parameters = export_classifier(vocab_dir, preset, sequence_length,
                                                        export_dir)
    export_seconds = time.perf_counter() - started
    started = time.perf_counter()
    _, serve = load_signature(export_dir)
    load_seconds = time.perf_counter() - started

    tokenize = tf.function(lambda texts: preprocessor((texts,)),
                           input_signature=[tf.TensorSpec([None], tf.string)])
    compiled = tf.function(lambda inputs: model(inputs, training=False))
    budget = SERIES_BUDGET_SECONDS / (3 if quick else 1)
    figures = {"parameters": parameters, "export_seconds": export_seconds,
               "load_seconds": load_seconds, "paths": {}}
    for batch in BATCHES:
        wanted = REQUESTS[batch] // (4 if quick else 1)
        texts = [tf.constant(b) for b in request_batches(sentences, batch,
                                                          wanted + WARMUP_REQUESTS)]
        packed = [{name: value for name, value in tokenize(t).items()} for t in texts]
        calls = {
            "SavedModel (strings)":
                lambda i: serve(sentence=texts[i])["probabilities"].numpy(),
            "Keras eager (ids)": lambda i: model(packed[i], training=False).numpy(),
            "tf.function (ids)": lambda i: compiled(packed[i]).numpy(),
            "tokenize only": lambda i: tokenize(texts[i])["token_ids"].numpy(),
        }
        latencies = time_paths(calls, wanted, budget, MIN_REQUESTS[batch])
        for path in PATHS:
            figures["paths"][f"{path}|{batch}"] = summarize(latencies[path], batch)
        served = serve(sentence=texts[0])["probabilities"].numpy()
        direct = tf.nn.softmax(model(packed[0], training=False)).numpy()
        figures[f"max_abs_difference|{batch}"] = float(np.abs(served - direct).max())
    return figures


# --------------------------------------------------------------------------- benchmark


def run(scales=(1, 4, 16), out_dir: str = "benchmark_results", quick: bool = False
        ) -> common.Result:
    began = time.perf_counter()
    os.makedirs(out_dir, exist_ok=True)
    scales = (4,) if quick else tuple(sorted(scales))
    presets = ("tiny",) if quick else PRESETS
    sentences = read_sentences()
    figures = {"models": {}}
    with tempfile.TemporaryDirectory(prefix="serving_") as work_dir:
        vocab_dir = learn_vocabulary(os.path.join(work_dir, "vocabulary"),
                                     2000 if quick else 9270)
        for preset in presets:
            for scale in scales:
                length = BASE_SEQUENCE_LENGTH * scale
                figures["models"][f"{preset}|{length}"] = measure_model(
                    vocab_dir, preset, length, sentences, work_dir, quick)
    figures["sentence_words_mean"] = sum(len(s.split()) for s in sentences) / len(sentences)
    tables = _tables(figures["models"])
    plots = _plots(out_dir, figures["models"], presets, scales)
    findings = _findings(figures["models"], presets, scales, figures["sentence_words_mean"])
    return common.Result("Serving (classifier SavedModel, raw strings in)", tables, plots,
                         findings, figures,
                         time.perf_counter() - began)


def _tables(models_figures: dict):
    tables = []
    for batch in BATCHES:
        rows = []
        for key, figures in models_figures.items():
            preset, length = key.split("|")
            paths = figures["paths"]
            saved = paths[f"SavedModel (strings)|{batch}"]
            graph = paths[f"tf.function (ids)|{batch}"]
            row = [f"BERT-{preset}", int(length), saved["requests"]]
            for path in PATHS:
                one = paths[f"{path}|{batch}"]
                row += [one["p50_ms"], one["p99_ms"]]
            eager = paths[f"Keras eager (ids)|{batch}"]
            row += [saved["sentences_per_s"], eager["sentences_per_s"], graph["sentences_per_s"],
                    saved["p50_ms"] / eager["p50_ms"],
                    saved["p50_ms"] / graph["p50_ms"],
                    figures[f"max_abs_difference|{batch}"]]
            rows.append(row)
        columns = ["model", "seq len", "requests"]
        for path in PATHS:
            columns += [f"{path} p50 ms", f"{path} p99 ms"]
        columns += ["SavedModel sent/s", "Keras eager sent/s", "tf.function sent/s",
                    "p50 ratio SavedModel/eager", "p50 ratio SavedModel/tf.function",
                    "max |Δprob|"]
        tables.append(common.Table(
            f"Serving latency and throughput, batch {batch}", columns, rows,
            note=("SavedModel = the pushed serving_default signature on raw strings "
                  "(tokenization in the graph); Keras eager / tf.function = the same model on "
                  "ids tokenized beforehand; tokenize only = the preprocessor alone. "
                  "Ratios > 1: serving raw strings is slower. max |Δprob| = largest "
                  "difference between the SavedModel's probabilities and softmax of the Keras "
                  "logits on one batch (same sentences). 'requests' = timed requests of each "
                  "path (interleaved; they stop after a time budget).")))
    totals = []
    for key, figures in models_figures.items():
        preset, length = key.split("|")
        totals.append([f"BERT-{preset}", int(length), figures["parameters"],
                       figures["export_seconds"], figures["load_seconds"]])
    tables.append(common.Table("Export and load", ["model", "seq len", "parameters",
                                                   "build + save s", "load s"], totals))
    return tables


def _plots(out_dir: str, models_figures: dict, presets, scales) -> list:
    plots = []
    for batch in BATCHES:
        series = {}
        for preset in presets:
            lengths = [BASE_SEQUENCE_LENGTH * scale for scale in scales]
            for path in PATHS[:3]:
                series[f"{preset}: {path}"] = (lengths, [
                    models_figures[f"{preset}|{n}"]["paths"][f"{path}|{batch}"]["p50_ms"]
                    for n in lengths])
        plots.append(common.line_plot(
            os.path.join(out_dir, f"serving_latency_batch{batch}.png"),
            f"Classifier serving p50 latency, batch {batch}", "sequence length",
            "p50 latency (ms)", series, log_x=True, log_y=True))
    return plots


def _span(values) -> str:
    low, high = min(values), max(values)
    return f"{low:.2f}" if round(low, 2) == round(high, 2) else f"{low:.2f}-{high:.2f}"


def _findings(models_figures: dict, presets, scales, words_per_sentence: float) -> list:
    findings = []
    for batch in BATCHES:
        overheads, tokenize_ms = [], []
        for preset in presets:
            for scale in scales:
                length = BASE_SEQUENCE_LENGTH * scale
                paths = models_figures[f"{preset}|{length}"]["paths"]
                saved = paths[f"SavedModel (strings)|{batch}"]["p50_ms"]
                graph = paths[f"tf.function (ids)|{batch}"]["p50_ms"]
                eager = paths[f"Keras eager (ids)|{batch}"]["p50_ms"]
                tokenize = paths[f"tokenize only|{batch}"]["p50_ms"]
                overheads.append(f"{preset}/{length}: {saved - graph:+.2f} ms "
                                 f"({saved / graph:.2f}x; eager {eager / saved:.2f}x slower "
                                 f"than the SavedModel)")
                tokenize_ms.append(tokenize)
        findings.append(f"Batch {batch}, p50 of the SavedModel minus the same model's graph on "
                        f"ids (the cost of tokenizing inside the graph): " + "; ".join(overheads)
                        + ". The preprocessor called on its own (one graph call, its dispatch "
                        f"included) takes {_span(tokenize_ms)} ms p50.")
    for preset in presets:
        short, long = (BASE_SEQUENCE_LENGTH * scales[0], BASE_SEQUENCE_LENGTH * scales[-1])
        first = models_figures[f"{preset}|{short}"]["paths"]
        last = models_figures[f"{preset}|{long}"]["paths"]
        first_32, last_32 = first["SavedModel (strings)|32"], last["SavedModel (strings)|32"]
        findings.append(
            f"BERT-{preset}: the SavedModel serves {first_32['sentences_per_s']:,.0f} "
            f"sentences/s at batch 32 and length {short}, {last_32['sentences_per_s']:,.0f} at "
            f"length {long} (p50 x{last_32['p50_ms'] / first_32['p50_ms']:.1f} for "
            f"x{long // short} length; every request is padded to the full length, so the cost "
            f"follows the sequence length, not the sentences' own {words_per_sentence:.0f} words "
            f"on average, and attention makes it grow faster than the length); batch 1 serves "
            f"{first['SavedModel (strings)|1']['sentences_per_s']:,.0f} sentences/s at length "
            f"{short}.")
    return findings


def main(argv=None) -> None:
    parser = common.argument_parser(__doc__)
    args = parser.parse_args(argv)
    result = run(tuple(int(s) for s in args.scales.split(",")), args.out_dir, args.quick)
    common.print_and_save(result, args.out_dir, "serving.json")


if __name__ == "__main__":
    main()
