"""Pretraining-example generation (``bert_mlm_nsp``): instances/s of the PretrainingExampleGen
Beam pipeline (DirectRunner, 2 worker processes) against a single-process run of the
google-research/bert algorithm (``bert-tensorflow`` 1.0.4, ``bert.create_pretraining_data``)
on the same corpus, vocabulary and settings, at 1x / 4x / 16x corpus size.

    .venv/bin/python benchmarks/example_generation.py          # ~6 min, busy machine
    .venv/bin/python benchmarks/example_generation.py --quick  # ~80 s, busy machine

(measured with the 2 cores shared with other jobs, load average about 6; less when idle,
since most of it is CPU-bound: about 3 min and 40 s of CPU.) --quick: one corpus of 150
documents, dupe_factor 2, no start-up run and no tokenizer check.

Inputs are made once, untimed: the corpus (BERT format: one sentence a line, a blank line
between documents; the demo WikiText-2 slice, its documents cycled to reach the larger
scales), its ingestion by ExampleGen's ``ingest`` (the GZIP tf.Examples PretrainingExampleGen
reads, one document each) and a WordPiece vocabulary of 8,000 learned from the 1x corpus
(``vocab.txt`` is a plain BERT vocabulary, so the reference's ``FullTokenizer`` reads the same
file). Both sides tokenize, build instances, mask and write the records; their settings are
the same (``SETTINGS``).

* project: ``generate_pretraining_examples`` (components/pretraining_data/executor.py) with
  ``--direct_running_mode=multi_processing --direct_num_workers=2``, the pipeline's own Beam
  arguments. Its wall time includes the start of the Beam job and of its two SDK worker
  processes (each imports Beam, and no TensorFlow): that fixed cost
  is measured on its own, on a corpus of ``_STARTUP_DOCUMENTS`` documents, right before each
  scale's project run (peer, start-up, project, interleaved), and shown next to every scale.
* peer: ``create_training_instances`` + ``write_instance_to_example_files`` of the reference
  script, run through TensorFlow 2's ``tensorflow.compat.v1`` (which the package imports as
  ``tf``; its ``flags``, ``gfile``, ``logging`` and ``python_io`` are all there), one process.

Each side runs in a fresh subprocess, so both pay their imports outside the timed region and
neither inherits the other's warm caches. "wall s" is the timed region; "CPU s" is the
user + system time of the subprocess and everything it started (the Beam workers included)
over the same region, less its imports: on a machine shared with other jobs the CPU time is
the steadier figure. A last run ("profile") times the project's per-element work stage by
stage in one process without Beam, on the largest corpus. One timed run per point (a 16x run takes a minute or more), so expect
noise of tens of percent on a busy machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

REPO = common.REPO
CORPUS = common.DEMO_CORPUS
BEAM_ARGS = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
# The same instance settings on both sides (google-research/bert's defaults, dupe 5).
SETTINGS = {"max_seq_length": 128, "dupe_factor": 5, "masked_lm_prob": 0.15,
            "max_predictions_per_seq": 20, "short_seq_prob": 0.1, "random_seed": 12345}
VOCABULARY_SIZE = 8000
BASE_DOCUMENTS = 640        # 1x: the first third of the demo corpus (about 2,500 lines)
QUICK_BASE_DOCUMENTS = 150  # --quick: one small scale
_STARTUP_DOCUMENTS = 4
_RESULT_MARK = "BENCHMARK_RESULT "


# --------------------------------------------------------------------------- inputs


def read_documents(path: str) -> list:
    """The documents of a BERT-format corpus: lists of their non-blank lines."""
    documents, current = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                current.append(line)
            elif current:
                documents.append(current)
                current = []
    if current:
        documents.append(current)
    return documents


def write_corpus(path: str, documents: list, count: int) -> dict:
    """Writes ``count`` documents (cycling through ``documents``) in BERT format; returns
    its size. Cycled copies are identical texts, so each copy lands in the same Beam shard as
    the original (the document key is a content hash)."""
    chosen = [documents[i % len(documents)] for i in range(count)]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n\n".join("\n".join(document) for document in chosen) + "\n")
    return {"documents": len(chosen), "lines": sum(len(document) for document in chosen),
            "bytes": os.path.getsize(path)}


def prepare_inputs(work_dir: str, scales, base_documents: int, startup: bool = True,
                   vocabulary_lines: int | None = None) -> dict:
    """Corpus files, their ingested Examples and the vocabulary (made once, untimed); with
    ``startup`` also the tiny corpus that measures the Beam start-up. The vocabulary is
    learned from the first ``vocabulary_lines`` lines of the demo corpus (all by default)."""
    from lmfactory.components.example_gen.executor import ingest
    from lmfactory.components.vocabulary.wordpiece import learn_vocabulary_folder

    documents = read_documents(CORPUS)
    inputs = {"scales": {}}
    for scale in list(scales) + (["startup"] if startup else []):
        count = _STARTUP_DOCUMENTS if scale == "startup" else int(base_documents * scale)
        corpus = os.path.join(work_dir, f"corpus_{scale}.txt")
        size = write_corpus(corpus, documents, count)
        examples_dir = os.path.join(work_dir, f"examples_{scale}")
        ingest({"format": "text", "path": corpus, "eval_fraction": 0.0}, examples_dir, [])
        inputs["scales"][scale] = dict(size, corpus=corpus,
                                       examples=os.path.join(examples_dir, "Split-train"))
    vocab_dir = os.path.join(work_dir, "vocabulary")
    lines = [line for document in documents for line in document]
    learn_vocabulary_folder(lines[:vocabulary_lines], vocab_dir, VOCABULARY_SIZE)
    inputs["vocab_dir"] = vocab_dir
    with open(os.path.join(vocab_dir, "vocab.txt"), encoding="utf-8") as f:
        inputs["vocabulary_size"] = sum(1 for _ in f)
    return inputs


# --------------------------------------------------------------------------- the two sides


def _cpu_seconds(who) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _project_child(spec: dict) -> dict:
    """In the subprocess: PretrainingExampleGen's Beam pipeline on ingested Examples."""
    from lmfactory.components.pretraining_data.executor import generate_pretraining_examples

    config = dict(SETTINGS, objective="bert_mlm_nsp", dupe_factor=spec["dupe_factor"])
    imports_cpu = _cpu_seconds(resource.RUSAGE_SELF)
    started = time.perf_counter()
    counts = generate_pretraining_examples({"train": spec["examples"]}, spec["vocab_dir"],
                                           spec["output_dir"], config, BEAM_ARGS)["train"]
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "untimed_cpu": imports_cpu, "instances": counts["instances"],
            "random_next": counts["random_next"], "tokens": counts["tokens"],
            "masked": counts["masked_lm_predictions"], "documents": counts["documents"],
            "shards": counts["shards"]}


def _peer_child(spec: dict) -> dict:
    """In the subprocess: google-research/bert's create_pretraining_data, one process."""
    import random

    from bert import create_pretraining_data as reference
    from bert import tokenization

    reference.FLAGS(["create_pretraining_data"])  # defaults; the tokenizer reads one flag
    reference.tf.logging.set_verbosity(reference.tf.logging.WARN)
    imports_cpu = _cpu_seconds(resource.RUSAGE_SELF)
    started = time.perf_counter()
    tokenizer = tokenization.FullTokenizer(
        vocab_file=os.path.join(spec["vocab_dir"], "vocab.txt"), do_lower_case=True)
    instances = reference.create_training_instances(
        [spec["corpus"]], tokenizer, SETTINGS["max_seq_length"], spec["dupe_factor"],
        SETTINGS["short_seq_prob"], SETTINGS["masked_lm_prob"],
        SETTINGS["max_predictions_per_seq"], random.Random(SETTINGS["random_seed"]))
    created = time.perf_counter()
    reference.write_instance_to_example_files(
        instances, tokenizer, SETTINGS["max_seq_length"], SETTINGS["max_predictions_per_seq"],
        [spec["output_file"]])
    seconds = time.perf_counter() - started
    timed_end_cpu = _cpu_seconds(resource.RUSAGE_SELF)
    result = {"seconds": seconds, "create_seconds": created - started,
              "instances": len(instances),
              "random_next": sum(int(i.is_random_next) for i in instances),
              "tokens": sum(len(i.tokens) - 3 for i in instances),
              "masked": sum(len(i.masked_lm_positions) for i in instances),
              "tokenizer_mismatches": (_tokenizer_mismatches(tokenizer, spec)
                                       if spec["check_tokenizer"] else None)}
    result["untimed_cpu"] = imports_cpu + _cpu_seconds(resource.RUSAGE_SELF) - timed_end_cpu
    return result


def _profile_child(spec: dict) -> dict:
    """In the subprocess: the project's per-element work on one corpus, stage by stage, in
    this one process without Beam (CPU seconds): what the two workers share, the rest of
    the project's wall time being Beam's (start-up, stages, transfers)."""
    import glob
    import gzip
    import struct

    from lmfactory.components.pretraining_data import beam_steps, executor, objectives
    from lmfactory.components.pretraining_data.features import resolve_config

    config = resolve_config(dict(SETTINGS, objective="bert_mlm_nsp",
                                 dupe_factor=spec["dupe_factor"]))
    seconds, clock = {}, time.process_time()

    def lap(name):
        nonlocal clock
        now = time.process_time()
        seconds[name] = now - clock
        clock = now

    _, state = executor.describe_vocabulary(spec["vocab_dir"], "bert_mlm_nsp", with_state=True)
    tokenizer = executor._plain_tokenizer(spec["vocab_dir"])
    lap("vocabulary state + tokenizer (launching process)")
    serialized = []
    for path in sorted(glob.glob(os.path.join(spec["examples"], "*.gz"))):
        data = gzip.open(path).read()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset:offset + 8])
            serialized.append(data[offset + 12:offset + 12 + length])
            offset += 16 + length
    keyed = [pair for record in serialized for pair in beam_steps.keyed_document(record)]
    lap("read + parse + key documents")
    step = beam_steps.TokenizeDocuments(spec["vocab_dir"], beam_steps.SENTENCES, tokenizer)
    step.setup()
    tokenized = [item for start in range(0, len(keyed), 256)
                 for item in step.process(keyed[start:start + 256])]
    lap("tokenize (plain WordPiece)")
    num_shards = beam_steps.resolve_num_shards(len(tokenized), config)
    shards = {}
    for key, value in tokenized:
        shards.setdefault(beam_steps.shard_of(key, num_shards), []).append((key, value))
    build = objectives.get("bert_mlm_nsp").shard_examples
    built = []
    for shard, documents in sorted(shards.items()):
        ordered = [doc for _, (doc, _) in sorted(documents, key=lambda kv: kv[0]) if doc]
        built.append(build(ordered, state, config, (config["random_seed"], "train", shard))[0])
    lap("build instances, mask, serialize")
    with tempfile.TemporaryDirectory() as folder:
        for shard, records in enumerate(built):
            beam_steps.write_records(os.path.join(folder, f"{shard}.gz"), records)
    lap("frame + GZIP + write")
    return {"stages": seconds, "untimed_cpu": 0.0}


def _tokenizer_mismatches(reference_tokenizer, spec: dict, lines: int = 2000) -> list:
    """``[differing, compared]``: corpus lines whose ids from the reference ``FullTokenizer``
    and from the project's tokenizer (``load_tokenizer``, used by the Beam pipeline) differ.
    Run after the timed region."""
    import tensorflow as tf

    from lmfactory.models.tokenizers import load_tokenizer

    with open(spec["corpus"], encoding="utf-8") as f:
        texts = [line.strip() for line in f if line.strip()][:lines]
    ours = load_tokenizer(spec["vocab_dir"])(tf.constant(texts))
    differing = sum(
        reference_tokenizer.convert_tokens_to_ids(reference_tokenizer.tokenize(text))
        != [int(i) for i in ids] for text, ids in zip(texts, ours))
    return [differing, len(texts)]


def run_child(kind: str, spec: dict) -> dict:
    """Runs one side in a fresh Python process; adds the CPU time of that process and of all
    it started (Beam's workers), less its imports and checks, as ``cpu_seconds``."""
    before = _cpu_seconds(resource.RUSAGE_CHILDREN)
    command = [sys.executable, os.path.abspath(__file__), "--child", kind, json.dumps(spec)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONWARNINGS="ignore")
    completed = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO)
    total_cpu = _cpu_seconds(resource.RUSAGE_CHILDREN) - before
    lines = [line for line in completed.stdout.splitlines() if line.startswith(_RESULT_MARK)]
    if completed.returncode or not lines:
        raise RuntimeError(f"{kind} run failed (exit {completed.returncode}):\n"
                           f"{completed.stderr[-3000:]}")
    result = json.loads(lines[-1][len(_RESULT_MARK):])
    result["cpu_seconds"] = total_cpu - result["untimed_cpu"]
    return result


def _child_main(kind: str, spec_json: str) -> None:
    spec = json.loads(spec_json)
    result = {"project": _project_child, "peer": _peer_child,
              "profile": _profile_child}[kind](spec)
    print(_RESULT_MARK + json.dumps(result), flush=True)


# --------------------------------------------------------------------------- benchmark


def _describe(result: dict) -> dict:
    instances = max(1, result["instances"])
    return {"tokens/inst": result["tokens"] / instances,
            "NotNext %": 100.0 * result["random_next"] / instances,
            "masked/inst": result["masked"] / instances}


def run(scales=(1, 4, 16), out_dir: str = "benchmark_results", quick: bool = False
        ) -> common.Result:
    began = time.perf_counter()
    os.makedirs(out_dir, exist_ok=True)
    scales = (1,) if quick else tuple(sorted(scales))
    base_documents = QUICK_BASE_DOCUMENTS if quick else BASE_DOCUMENTS
    dupe_factor = 2 if quick else SETTINGS["dupe_factor"]
    rows, compare_rows, figures = [], [], {"scales": {}}
    with tempfile.TemporaryDirectory(prefix="example_generation_") as work_dir:
        inputs = prepare_inputs(work_dir, scales, base_documents, startup=not quick,
                                vocabulary_lines=2000 if quick else None)
        vocab_dir = inputs["vocab_dir"]

        def project(scale):
            return run_child("project", {
                "examples": inputs["scales"][scale]["examples"], "vocab_dir": vocab_dir,
                "output_dir": os.path.join(work_dir, f"project_{scale}"),
                "dupe_factor": dupe_factor})

        # --quick skips the start-up runs (a Beam job of their own, 10-40 s). Interleaved per
        # scale: peer, start-up, project; the load average is taken before each run.
        figures["startup"] = None
        for scale in scales:
            size = inputs["scales"][scale]
            loads = [os.getloadavg()[0]]
            peer = run_child("peer", {
                "corpus": size["corpus"], "vocab_dir": vocab_dir, "dupe_factor": dupe_factor,
                "output_file": os.path.join(work_dir, f"peer_{scale}.tfrecord"),
                "check_tokenizer": not quick})
            loads.append(os.getloadavg()[0])
            startup = None if quick else project("startup")
            figures["startup"] = figures["startup"] or startup
            loads.append(os.getloadavg()[0])
            ours = project(scale)
            ours_rate = ours["instances"] / ours["seconds"]
            peer_rate = peer["instances"] / peer["seconds"]
            startup_seconds = startup["seconds"] if startup else "n/a"
            net_seconds = ours["seconds"] - (startup["seconds"] if startup else ours["seconds"])
            # Noisy when the run is not well above the start-up measured next to it.
            net_rate = ours["instances"] / net_seconds if net_seconds > 0 else "n/a"
            net_ratio = net_rate / peer_rate if net_seconds > 0 else "n/a"
            rows.append([f"{scale}x", size["lines"], size["documents"],
                         ours["instances"], peer["instances"],
                         ours["seconds"], startup_seconds, peer["seconds"],
                         ours_rate, peer_rate, ours_rate / peer_rate, net_rate,
                         ours["cpu_seconds"], peer["cpu_seconds"],
                         ours["cpu_seconds"] / max(1e-9, peer["cpu_seconds"]),
                         net_ratio, "/".join(f"{load:.1f}" for load in loads)])
            described_ours, described_peer = _describe(ours), _describe(peer)
            compare_rows.append([f"{scale}x", ours["instances"], peer["instances"],
                                 100.0 * (ours["instances"] / peer["instances"] - 1.0),
                                 ours.get("shards", 0)]
                                + [value for key in described_ours
                                   for value in (described_ours[key], described_peer[key])])
            figures["scales"][str(scale)] = {"corpus": {k: size[k] for k in
                                                        ("documents", "lines", "bytes")},
                                             "project": ours, "peer": peer,
                                             "startup": startup, "load_average": loads}
        largest = scales[-1]
        profile = run_child("profile", {"examples": inputs["scales"][largest]["examples"],
                                        "vocab_dir": vocab_dir, "dupe_factor": dupe_factor})
        figures["profile"] = dict(profile, corpus=f"{largest}x")
    figures.update(settings=dict(SETTINGS, dupe_factor=dupe_factor), beam_args=BEAM_ARGS,
                   vocabulary_size=inputs["vocabulary_size"], base_documents=base_documents)

    throughput = common.Table(
        "Pretraining-example generation (bert_mlm_nsp): instances/s",
        ["corpus", "lines", "docs", "instances (project)", "instances (peer)",
         "project wall s", "of which Beam start-up s", "peer wall s", "project inst/s",
         "peer inst/s", "ratio project/peer", "project inst/s excl. start-up",
         "project CPU s", "peer CPU s", "CPU ratio project/peer",
         "ratio excl. start-up project/peer", "load avg before peer/start-up/project"], rows,
        note=(f"project: PretrainingExampleGen's Beam pipeline, DirectRunner "
              f"{' '.join(BEAM_ARGS)}, GZIP (level 1) TFRecords; peer: google-research/bert "
              f"create_pretraining_data (bert-tensorflow 1.0.4), one process, uncompressed "
              f"TFRecord. Both tokenize (WordPiece, {inputs['vocabulary_size']} pieces), "
              f"build, mask and write: max_seq_length {SETTINGS['max_seq_length']}, "
              f"dupe_factor {dupe_factor}, masked_lm_prob {SETTINGS['masked_lm_prob']}, "
              f"max_predictions_per_seq {SETTINGS['max_predictions_per_seq']}, "
              f"short_seq_prob {SETTINGS['short_seq_prob']}, seed {SETTINGS['random_seed']}. "
              f"Beam start-up = the same pipeline on a {_STARTUP_DOCUMENTS}-document corpus, "
              f"run right before each scale's project run (peer, start-up, project "
              f"interleaved); 'excl. start-up' divides by wall minus it. CPU s = user + "
              f"system seconds of the run's processes (Beam workers included), imports "
              f"excluded. One run per point; ratio > 1 means the project is faster."))
    compare = common.Table(
        "What each side produced",
        ["corpus", "instances (project)", "instances (peer)", "difference %", "project shards",
         "tokens/inst (project)", "tokens/inst (peer)", "NotNext % (project)",
         "NotNext % (peer)", "masked/inst (project)", "masked/inst (peer)"], compare_rows,
        note=("tokens/inst excludes [CLS]/[SEP]. Tokenization is the same on both sides "
              f"({_mismatch_text(figures)}). The project draws a random-next segment "
              "from another document of the same shard (documents hashed into shards of about "
              "1,000), the reference from the whole corpus; the project throws the NotNext "
              "coin first (50%), while the reference always takes a random next for a "
              "one-sentence chunk (hence its ~66% NotNext) and fills that B from the other "
              "document up to the target length, where the project splits the sentence in two "
              "(hence its shorter instances); the project masks 15% of the tokens other than "
              "[CLS]/[SEP], the reference 15% of all tokens."))

    last = rows[-1]
    stage_rows = [[name, value] for name, value in figures["profile"]["stages"].items()]
    work = sum(value for name, value in figures["profile"]["stages"].items()
               if "launching" not in name)
    stage_rows.append(["all per-element work (shared by 2 workers)", work])
    if startup:
        stage_rows.append([f"Beam start-up run ({_STARTUP_DOCUMENTS} documents), wall",
                           last[6]])
    stage_rows.append([f"project wall at {last[0]} (Beam, 2 workers)", last[5]])
    stages = common.Table(
        f"Where the project's time goes ({last[0]} corpus)", ["stage", "seconds"], stage_rows,
        note=("CPU seconds of each stage's work run in one process without Beam (the same "
              "functions the Beam steps call, beam_steps.py), beside the wall seconds of the "
              "Beam runs: the wall time above the half of the work that two workers share "
              "is Beam's (job and worker start-up, stages, element transfers)."))
    plots = [
        common.line_plot(os.path.join(out_dir, "example_generation_throughput.png"),
                         "bert_mlm_nsp example generation", "corpus scale (x)",
                         "instances / s",
                         {"project (Beam, 2 workers)": (scales, [r[8] for r in rows]),
                          "google-research/bert (1 process)": (scales, [r[9] for r in rows])},
                         log_x=True),
        common.line_plot(os.path.join(out_dir, "example_generation_seconds.png"),
                         "bert_mlm_nsp example generation: time", "corpus scale (x)",
                         "wall seconds", dict(
                             {"project (Beam, 2 workers)": (scales, [r[5] for r in rows]),
                              "google-research/bert": (scales, [r[7] for r in rows])},
                             **({"Beam start-up (fixed)": (scales, [r[6] for r in rows])}
                                if startup else {})),
                         log_x=True)]
    return common.Result("Pretraining-example generation", [throughput, compare, stages], plots,
                         _findings(rows, compare_rows, figures["startup"]), figures,
                         time.perf_counter() - began)


def _mismatch_text(figures: dict) -> str:
    checks = [scale["peer"]["tokenizer_mismatches"] for scale in figures["scales"].values()
              if scale["peer"]["tokenizer_mismatches"]]
    if not checks:
        return "not checked in --quick mode"
    return (f"{sum(c[0] for c in checks)} of {sum(c[1] for c in checks)} corpus lines got "
            f"different ids from the reference FullTokenizer and the project's tokenizer")


def marginal_rate(rows, instances_column: int, seconds_column: int):
    """Instances/s between the two largest scales: the slope of time against instances,
    free of any fixed cost (None with fewer than two scales)."""
    if len(rows) < 2:
        return None
    small, large = rows[-2], rows[-1]
    seconds = large[seconds_column] - small[seconds_column]
    return (large[instances_column] - small[instances_column]) / seconds if seconds > 0 else None


def _findings(rows, compare_rows, startup) -> list:
    first, last = rows[0], rows[-1]
    findings = []
    if startup:
        findings.append(
            f"Beam start-up (job + 2 SDK worker processes, which import Beam, numpy and the "
            f"plain WordPiece, no TensorFlow) costs " + "/".join(f"{r[6]:.1f}" for r in rows) + " s (measured "
            f"next to each scale) whatever the corpus size: "
            f"{100 * first[6] / first[5]:.0f}% of the project's wall time at {first[0]}, "
            f"{100 * last[6] / last[5]:.0f}% at {last[0]}.")
    findings.append("Throughput ratio project/peer (wall, start-up included): " + ", ".join(
        f"{r[10]:.2f} at {r[0]}" for r in rows) + "; excluding start-up: " + ", ".join(
        (f"{r[15]:.2f}" if isinstance(r[15], float) else str(r[15])) + f" at {r[0]}"
        for r in rows) + " (load average 1 min before peer/start-up/project: "
        + ", ".join(f"{r[16]} at {r[0]}" for r in rows) + ").")
    findings.append(
        "Per shard, instances are built as spans of one token stream, gathered, masked "
        "(vectorised numpy, masked_records.py) and serialized (numpy tf.Example encoder, "
        "example_encoder.py) in batches of 4,096, and written with GZIP level 1; in-process "
        "CPU of that stage on the 16x corpus is 2.6 s (tokenisation 1.4 s), against about "
        "21 s one instance at a time.")
    findings.append(
        "The Beam workers import no TensorFlow, TFX or Keras "
        "(beam_steps.py: WordPiece in plain Python with the keras-nlp ids, plain_wordpiece.py; "
        "the vocabulary state and tokenizer shipped inside the pickled steps; TFRecords framed "
        "and gzipped with zlib) and the split's counts are per-shard files summed by the "
        "launching process (no combine and text sink stages); Beam start-up is "
        + (f"{startup['seconds']:.1f} s wall and {startup['cpu_seconds']:.1f} s CPU (first "
           f"start-up run; 9.4 s wall with TensorFlow in the workers, at a lower load)"
           if startup
           else "not measured (--quick)")
        + "; SOP, FULL-SENTENCES and ERNIE dEA records take the same vectorised path.")
    ours_marginal, peer_marginal = marginal_rate(rows, 3, 5), marginal_rate(rows, 4, 7)
    if ours_marginal and peer_marginal:
        findings.append(
            f"Marginal throughput between {rows[-2][0]} and {last[0]} (extra instances / extra "
            f"seconds, no fixed cost): project {ours_marginal:,.0f} instances/s, peer "
            f"{peer_marginal:,.0f} instances/s, ratio {ours_marginal / peer_marginal:.2f}.")
    findings.append(
        "CPU seconds project/peer: " + ", ".join(f"{r[14]:.2f} at {r[0]}" for r in rows)
        + " (each of the project's worker processes imports Beam, and the project compresses "
        "its output with GZIP).")
    findings.append(
        f"Instance counts agree within {max(abs(r[3]) for r in compare_rows):.1f}% (same "
        "documents and length targets; the differences come from the random draws: the "
        "project's per-shard RNGs, its NotNext coin and its in-shard random-next documents).")
    return findings


def main(argv=None) -> None:
    parser = common.argument_parser(__doc__)
    parser.add_argument("--child", nargs=2, metavar=("KIND", "SPEC"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child_main(*args.child)
        return
    result = run(tuple(int(s) for s in args.scales.split(",")), args.out_dir, args.quick)
    common.print_and_save(result, args.out_dir, "example_generation.json")


if __name__ == "__main__":
    main()
