"""Vocabulary learning: VocabularyGen's learners (Beam and in-process) against the Rust
trainers of Hugging Face ``tokenizers`` and keras-nlp's ``compute_word_piece_vocabulary``,
for WordPiece and byte-level BPE, on the same corpus at 1x / 4x / 16x its size.

    .venv/bin/python benchmarks/vocabulary.py                 # about 5-6 minutes on 2 cores
    .venv/bin/python benchmarks/vocabulary.py --quick         # smoke check, under a minute

The corpus is data/demo/corpus.txt (a WikiText-2 slice, 7,430 non-blank lines, 209k
words); 4x and 16x repeat its lines (``common.corpus_lines``), so the number of distinct
words stays the same and only the counting work grows. Every learner gets vocabulary size
8,000, minimum frequency 2 (keras-nlp's is fixed at 10), lower-casing and accent
stripping for WordPiece (BERT's normaliser in both the project and ``tokenizers``), the
GPT-2 byte alphabet and split for BPE.

Rows (the time of one call; every row learns from the same lines):

* ``Beam multi_processing`` / ``Beam in_memory``: ``executor.learn_vocabulary`` on the
  ingested Examples (GZIP TFRecords) with the DirectRunner, 2 worker processes, or in this
  process. ``Beam policy``: the recipe default (``runtime.beam.direct_running_mode: auto``,
  ``components/beam_options.py``), which picks in_memory below the size threshold and 2
  worker processes above it; the row names the mode it picked. It is timed in pairs with
  the Rust trainer (Rust, Beam, Rust, Beam: the best of each), and its ratio is to that
  best Rust time; the 1-minute load average is printed beside each kind and scale. Ingestion (``example_gen.executor.ingest``) is
  timed on its own. A run on a 10-line corpus measures the runner's fixed cost.
* ``in-process``: the same functions the Beam steps call (``executor.count_words`` on
  512-line batches, then ``executor.learn_and_write``), in this process without Beam;
  "counting" and "learning" split its time.
* ``tokenizers (Rust)``: ``WordPieceTrainer`` (BertNormalizer + BertPreTokenizer) and
  ``BpeTrainer`` (ByteLevel) via ``train_from_iterator`` on the lines; Rust, 2 threads.
* ``keras-nlp``: ``compute_word_piece_vocabulary`` on a ``tf.data`` of the lines
  (tf-text's learner, as the project's, with tf-text's own counting); 1x and 4x only.
* ``tf-text counting`` (1x): the project's WordPiece learner with tensorflow-text's own
  counting passes (``counting="tensorflow_text"``, what it ran before), on the same word
  counts, and whether it gives the identical vocabulary.

Quality: tokens per whitespace word (and [UNK] share) of held-out WikiText-2 validation
lines absent from the training text, each vocabulary read by its own tokenizer (the
project's in-graph keras-nlp tokenizers via ``load_tokenizer``; ``tokenizers``' own).
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
sys.path.insert(0, os.path.dirname(__file__))

import common  # noqa: E402

REPO = common.REPO
CORPUS = common.DEMO_CORPUS
HELD_OUT = common.WIKITEXT_VALID
VOCAB_SIZE = 8000
MIN_FREQUENCY = 2
KERAS_NLP_MIN_FREQUENCY = 10  # compute_word_piece_vocabulary's learner default, not settable
BEAM_MODES = {"multi_processing": ["--direct_running_mode=multi_processing",
                                   "--direct_num_workers=2"],
              "in_memory": ["--direct_running_mode=in_memory"],
              "policy": None}  # the recipe default's arguments, see beam_args()
PAIRS = 2  # (Rust, Beam policy) pairs timed at each scale
LINES_PER_DOCUMENT = 10
BATCH_LINES = 512  # as the Beam pipeline batches lines before counting
WORDPIECE_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
KINDS = ("wordpiece", "bpe")


# --- Data ----------------------------------------------------------------------------------
def training_lines(scale: float, quick: bool) -> list[str]:
    """The corpus's non-blank lines (stripped, as ingestion strips them), repeated to
    ``scale`` times its size; quick mode starts from 2,000 lines."""
    with open(CORPUS, encoding="utf-8") as f:
        base = 2000 if quick else sum(1 for line in f if line.strip())
    return [line.strip() for line in common.corpus_lines(CORPUS, scale, base)]


def held_out_lines(train: list[str], limit: int) -> list[str]:
    """Up to ``limit`` WikiText-2 validation lines (no headings) not in ``train``."""
    seen = set(train)
    lines = []
    with open(HELD_OUT, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("=") and line not in seen:
                lines.append(line)
    return lines[:limit]


def write_corpus(lines: list[str], path: str) -> None:
    """One line a line, a blank line after every ``LINES_PER_DOCUMENT`` (documents)."""
    with open(path, "w", encoding="utf-8") as f:
        for start in range(0, len(lines), LINES_PER_DOCUMENT):
            f.write("\n".join(lines[start:start + LINES_PER_DOCUMENT]) + "\n\n")


def ingest(lines: list[str], work_dir: str, mode: str = "in_memory") -> tuple[dict, float]:
    """Ingests the lines as TextExampleGen does (Beam ``mode``: 2 worker processes or in
    this process); returns the train split's file pattern and the seconds it took."""
    from lmfactory.components.example_gen import executor as example_gen

    corpus = os.path.join(work_dir, "corpus.txt")
    write_corpus(lines, corpus)
    out = os.path.join(work_dir, "examples")
    started = time.perf_counter()
    example_gen.ingest({"format": "text", "path": corpus, "eval_fraction": 0.0}, out,
                       BEAM_MODES[mode])
    seconds = time.perf_counter() - started
    return {"train": os.path.join(out, "Split-train", "*.gz")}, seconds


# --- Learners ------------------------------------------------------------------------------
def config(kind: str):
    from lmfactory.components.vocabulary import VocabularyConfig

    return VocabularyConfig(kind=kind, vocab_size=VOCAB_SIZE, min_frequency=MIN_FREQUENCY)


def beam_args(mode: str) -> list:
    """The Beam arguments of ``mode``; ``policy``: the recipe default's (the size policy)."""
    from lmfactory.components import beam_options

    if mode == "policy":
        return beam_options.policy_args(beam_options.AUTO, 2, [])
    return BEAM_MODES[mode]


def policy_choice(patterns: dict) -> str:
    """The DirectRunner mode the policy picks for these input files."""
    from lmfactory.components import beam_options

    args = beam_options.resolve_args(beam_args("policy"),
                                     beam_options.input_size(patterns.values()))
    return next(arg.split("=", 1)[1] for arg in args
                if arg.startswith("--direct_running_mode="))


def learn_beam(kind: str, patterns: dict, out_dir: str, mode: str) -> float:
    from lmfactory.components.vocabulary import executor

    shutil.rmtree(out_dir, ignore_errors=True)
    started = time.perf_counter()
    executor.learn_vocabulary(patterns, out_dir, config(kind), beam_args(mode))
    return time.perf_counter() - started


def count_in_process(kind: str, lines: list[str]) -> list[tuple[str, int]]:
    """Word counts from the Beam steps' own function, batch by batch, summed."""
    from lmfactory.components.vocabulary import executor

    counts = collections.Counter()
    settings = config(kind)
    for start in range(0, len(lines), BATCH_LINES):
        for word, count in executor.count_words(lines[start:start + BATCH_LINES], settings):
            counts[word] += count
    return sorted(counts.items())


def learn_in_process(kind: str, lines: list[str], out_dir: str) -> dict:
    """Counting then learning (the Beam steps' functions, no Beam); their seconds."""
    from lmfactory.components.vocabulary import executor

    started = time.perf_counter()
    word_counts = count_in_process(kind, lines)
    counted = time.perf_counter()
    executor.learn_and_write(word_counts, out_dir, config(kind), "benchmark lines")
    finished = time.perf_counter()
    return {"seconds": finished - started, "counting": counted - started,
            "learning": finished - counted, "word_counts": word_counts}


def rust_tokenizer(kind: str):
    """An untrained ``tokenizers.Tokenizer`` set up as the project's tokenizer of ``kind``,
    and its trainer."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    if kind == "wordpiece":
        tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tokenizer.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=True, lowercase=True)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        trainer = trainers.WordPieceTrainer(
            vocab_size=VOCAB_SIZE, min_frequency=MIN_FREQUENCY, show_progress=False,
            special_tokens=WORDPIECE_SPECIALS, continuing_subword_prefix="##")
        return tokenizer, trainer
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, min_frequency=MIN_FREQUENCY, show_progress=False,
        special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    return tokenizer, trainer


def learn_rust(kind: str, lines: list[str]):
    tokenizer, trainer = rust_tokenizer(kind)
    started = time.perf_counter()
    tokenizer.train_from_iterator(lines, trainer, length=len(lines))
    return time.perf_counter() - started, tokenizer


def learn_keras_nlp(lines: list[str]):
    import keras_nlp
    import tensorflow as tf

    started = time.perf_counter()
    vocabulary = keras_nlp.tokenizers.compute_word_piece_vocabulary(
        tf.data.Dataset.from_tensor_slices(lines).batch(BATCH_LINES), VOCAB_SIZE,
        lowercase=True, strip_accents=True, reserved_tokens=WORDPIECE_SPECIALS)
    return time.perf_counter() - started, vocabulary


def reference_wordpiece(word_counts: list[tuple[str, int]]) -> tuple[float, list[str]]:
    """The project's WordPiece learner with tensorflow-text's own counting passes."""
    from lmfactory.components.vocabulary import wordpiece

    started = time.perf_counter()
    vocabulary = wordpiece.learn_vocabulary(word_counts, VOCAB_SIZE, MIN_FREQUENCY,
                                            counting="tensorflow_text")
    return time.perf_counter() - started, vocabulary


def read_vocabulary(vocab_dir: str) -> list:
    """The learned tokens of a project vocabulary folder (vocab.txt / vocab.json + merges)."""
    import json

    settings = json.load(open(os.path.join(vocab_dir, "tokenizer.json"), encoding="utf-8"))
    path = os.path.join(vocab_dir, settings["vocabulary_file"])
    with open(path, encoding="utf-8") as f:
        if settings["kind"] == "wordpiece":
            return f.read().splitlines()
        tokens = sorted(json.load(f).items(), key=lambda item: item[1])
    with open(os.path.join(vocab_dir, settings["merges_file"]), encoding="utf-8") as f:
        return [token for token, _ in tokens] + f.read().splitlines()


# --- Quality -------------------------------------------------------------------------------
def tokens_per_word_project(vocab_dir_or_vocabulary, lines: list[str]) -> dict:
    """Tokens per whitespace word of ``lines`` (and the [UNK] share) with the project's
    in-graph tokenizer of a folder, or keras-nlp's WordPiece tokenizer of a token list."""
    import keras_nlp
    import tensorflow as tf

    from lmfactory.models.tokenizers import load_tokenizer

    if isinstance(vocab_dir_or_vocabulary, str):
        tokenizer = load_tokenizer(vocab_dir_or_vocabulary)
    else:
        tokenizer = keras_nlp.tokenizers.WordPieceTokenizer(
            vocabulary=vocab_dir_or_vocabulary, lowercase=True, strip_accents=True,
            oov_token="[UNK]")
    vocabulary = tokenizer.get_vocabulary()
    unk = vocabulary.index("[UNK]") if "[UNK]" in vocabulary else -1
    tokenize = tf.function(lambda batch: tokenizer(batch).flat_values)
    tokens = unknown = 0
    for start in range(0, len(lines), 256):
        ids = tokenize(tf.constant(lines[start:start + 256])).numpy()
        tokens += len(ids)
        unknown += int((ids == unk).sum())
    words = sum(len(line.split()) for line in lines)
    return {"tokens_per_word": tokens / words, "unk_share": unknown / max(tokens, 1),
            "size": len(vocabulary)}


def tokens_per_word_rust(tokenizer, lines: list[str]) -> dict:
    unk = tokenizer.token_to_id("[UNK]")
    encodings = tokenizer.encode_batch(lines, add_special_tokens=False)
    tokens = sum(len(encoding.ids) for encoding in encodings)
    unknown = sum(encoding.ids.count(unk) for encoding in encodings) if unk is not None else 0
    words = sum(len(line.split()) for line in lines)
    return {"tokens_per_word": tokens / words, "unk_share": unknown / max(tokens, 1),
            "size": tokenizer.get_vocab_size()}


# --- The benchmark -------------------------------------------------------------------------
def run(scales=(1, 4, 16), out_dir: str = ".", quick: bool = False) -> common.Result:
    import tensorflow as tf  # noqa: F401  (imported once, before any timing)

    started = time.perf_counter()
    os.makedirs(out_dir, exist_ok=True)
    scales = tuple(scales)
    keras_nlp_scales = set() if quick else {scales[0]}  # ~50x the Rust time: 1x only
    in_memory_scales = {scale for scale in scales if scale <= 4}  # 16x: ~1 min, skipped
    work = tempfile.mkdtemp(prefix="vocabulary_bench_")
    rows, figures = [], {"scales": {}, "quality": {}, "fixed_cost": {}}
    try:
        fixed, tiny_patterns = beam_fixed_cost(work, quick)
        figures["fixed_cost"] = fixed
        held_out = None
        for scale in scales:
            lines = training_lines(scale, quick)
            words = sum(len(line.split()) for line in lines)
            held_out = held_out if held_out is not None else held_out_lines(
                lines, 300 if quick else 2000)
            scale_dir = os.path.join(work, f"x{scale}")
            os.makedirs(scale_dir)
            patterns, ingest_seconds = ingest(lines, scale_dir, "in_memory")
            record = figures["scales"][scale] = {"lines": len(lines), "words": words,
                                                 "ingest_seconds": ingest_seconds}
            for kind in KINDS:
                modes = (["in_memory"] if quick else
                         (["multi_processing"] if scale in (scales[0], scales[-1]) else [])
                         + (["in_memory"] if scale in in_memory_scales else []))
                record[kind] = measure_kind(kind, lines, patterns, scale_dir, quick, modes,
                                            scale in keras_nlp_scales,
                                            held_out if scale == scales[0] else None,
                                            tiny_patterns if scale == scales[-1] else None)
                if scale == scales[0]:
                    figures["quality"][kind] = record[kind].pop("quality")
                for learner, seconds in record[kind]["seconds"].items():
                    rust = record[kind]["seconds"]["tokenizers (Rust)"]
                    rows.append([kind, f"{scale}x", len(lines), learner, seconds,
                                 1e6 * seconds / words, seconds / rust,
                                 record[kind]["load"]])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = common.Result(name="Vocabulary learning", tables=[], figures=figures)
    result.tables = make_tables(rows, figures, scales)
    result.plots = make_plots(figures, scales, out_dir)
    result.findings = findings(figures, scales)
    result.seconds = time.perf_counter() - started
    return result


def beam_fixed_cost(work: str, quick: bool) -> tuple[dict, dict]:
    """Seconds of a Beam vocabulary run on a 10-line corpus, per runner mode (WordPiece),
    and that corpus's file patterns."""
    folder = os.path.join(work, "tiny")
    os.makedirs(folder)
    patterns, _ = ingest(training_lines(1, True)[:10], folder, "in_memory")
    modes = ["in_memory", "policy"] if quick else list(BEAM_MODES)
    return {mode: learn_beam("wordpiece", patterns, os.path.join(folder, mode), mode)
            for mode in modes}, patterns


def measure_kind(kind, lines, patterns, scale_dir, quick, modes, with_keras_nlp, held_out,
                 tiny_patterns=None):
    """All learners of one kind at one scale: seconds, and quality when ``held_out``."""
    seconds, quality, notes = {}, {}, {}
    load = os.getloadavg()[0]
    rust_seconds, rust = learn_rust(kind, lines)
    policy_dir = os.path.join(scale_dir, f"{kind}_beam_policy")
    policy_label = f"Beam policy ({policy_choice(patterns)})"
    policy_seconds = []
    for _ in range(0 if quick else PAIRS):  # Rust, Beam, Rust, Beam, ...: best of each
        policy_seconds.append(learn_beam(kind, patterns, policy_dir, "policy"))
        rust_seconds = min(rust_seconds, learn_rust(kind, lines)[0])
    seconds["tokenizers (Rust)"] = rust_seconds
    if policy_seconds:
        seconds[policy_label] = min(policy_seconds)
    in_process_dir = os.path.join(scale_dir, f"{kind}_in_process")
    in_process = learn_in_process(kind, lines, in_process_dir)
    seconds["in-process"] = in_process["seconds"]
    seconds["in-process: counting"] = in_process["counting"]
    seconds["in-process: learning"] = in_process["learning"]
    project_tokens = read_vocabulary(in_process_dir)
    if policy_seconds:
        notes[f"{policy_label} same vocabulary as in-process"] = (
            read_vocabulary(policy_dir) == project_tokens)
    start_up = None
    for mode in modes:
        beam_dir = os.path.join(scale_dir, f"{kind}_beam_{mode}")
        if mode == "multi_processing" and tiny_patterns:  # its start-up, at the same load
            start_up = learn_beam(kind, tiny_patterns, beam_dir + "_tiny", mode)
        seconds[f"Beam {mode}"] = learn_beam(kind, patterns, beam_dir, mode)
        if mode == "multi_processing":  # and the Rust trainer right after it
            seconds["tokenizers (Rust)"] = min(seconds["tokenizers (Rust)"],
                                               learn_rust(kind, lines)[0])
        notes[f"Beam {mode} same vocabulary as in-process"] = (
            read_vocabulary(beam_dir) == project_tokens)
    if kind == "wordpiece" and with_keras_nlp:
        seconds["keras-nlp"], keras_vocabulary = learn_keras_nlp(lines)
    if kind == "wordpiece" and held_out is not None and not quick:
        seconds["tf-text counting: learning"], reference = reference_wordpiece(
            in_process["word_counts"])
        notes["tf-text counting same vocabulary"] = reference == project_tokens
    record = {"seconds": seconds, "notes": notes, "multi_processing_start_up": start_up,
              "load": round((load + os.getloadavg()[0]) / 2, 2)}
    if held_out is not None:
        quality["project"] = tokens_per_word_project(in_process_dir, held_out)
        quality["tokenizers (Rust)"] = tokens_per_word_rust(rust, held_out)
        if kind == "wordpiece" and with_keras_nlp:
            quality["keras-nlp"] = tokens_per_word_project(keras_vocabulary, held_out)
        record["quality"] = {"held_out_lines": len(held_out), **quality}
    return record


def make_tables(rows, figures, scales) -> list:
    first = figures["scales"][scales[0]]
    timing = common.Table(
        title="Vocabulary learning time (vocabulary size 8,000)",
        columns=["kind", "scale", "lines", "learner", "seconds", "µs / word",
                 "/ tokenizers (Rust)", "load avg (1 min)"],
        rows=rows, digits=3,
        note=("One call each, except 'Beam policy' and the Rust trainer: best of "
              f"{PAIRS} calls timed in pairs (Rust, Beam, Rust, Beam). The machine has "
              f"{os.cpu_count()} cores; 'load avg' is the 1-minute load average around the "
              "kind's rows (other jobs running). "
              "'in-process: counting / learning' split the 'in-process' "
              "row; 'tf-text counting: learning' is the learning part alone, with "
              "tensorflow-text's own counting (not the distinct-piece counting), 1x only. "
              "keras-nlp at 1x only (~50x the Rust time); Beam multi_processing at the "
              "smallest and largest scale (at the largest after a 10-line run of its own, the "
              "profile's start-up, and followed by one more Rust run), Beam in_memory up to 4x. "
              f"Beam fixed cost (10-line corpus, WordPiece): " + ", ".join(
                  f"{mode} {seconds:.1f} s" for mode, seconds in
                  figures["fixed_cost"].items()) + "."))
    ingestion = common.Table(
        title="Ingestion (TextExampleGen's ingest, Beam in_memory)",
        columns=["scale", "lines", "words", "seconds", "µs / word"],
        rows=[[f"{scale}x", record["lines"], record["words"], record["ingest_seconds"],
               1e6 * record["ingest_seconds"] / record["words"]]
              for scale, record in figures["scales"].items()], digits=3)
    quality_rows = []
    for kind, record in figures["quality"].items():
        for learner, values in record.items():
            if learner == "held_out_lines":
                continue
            minimum = KERAS_NLP_MIN_FREQUENCY if learner == "keras-nlp" else MIN_FREQUENCY
            quality_rows.append([kind, learner, values["size"], minimum,
                                 values["tokens_per_word"], 100 * values["unk_share"],
                                 values["tokens_per_word"]
                                 / record["tokenizers (Rust)"]["tokens_per_word"]])
    held = next(iter(figures["quality"].values()))["held_out_lines"]
    quality = common.Table(
        title=f"Held-out quality ({scales[0]}x vocabularies, {held} WikiText-2 validation "
              "lines not in the training text)",
        columns=["kind", "learner", "vocabulary size", "min frequency", "tokens / word",
                 "[UNK] %", "/ tokenizers (Rust)"],
        rows=quality_rows, digits=4,
        note="Each vocabulary tokenized by its own tokenizer; words = whitespace words.")
    checks = common.Table(
        title="Checks", columns=["kind", "scale", "check", "holds"],
        rows=[[kind, f"{scale}x", name, "yes" if value else "NO"]
              for scale, record in figures["scales"].items() for kind in KINDS
              for name, value in record[kind]["notes"].items()])
    return [timing, ingestion, quality, checks]


def make_plots(figures, scales, out_dir) -> list:
    plots = []
    for kind in KINDS:
        learners = [learner for learner in figures["scales"][scales[0]][kind]["seconds"]
                    if ":" not in learner]
        series = {}
        for learner in learners:
            points = [(scale, figures["scales"][scale][kind]["seconds"][learner])
                      for scale in scales
                      if learner in figures["scales"][scale][kind]["seconds"]]
            series[learner] = ([x for x, _ in points], [y for _, y in points])
        plots.append(common.line_plot(
            os.path.join(out_dir, f"vocabulary_{kind}_time.png"),
            f"{kind} vocabulary learning (size {VOCAB_SIZE})", "corpus scale",
            "seconds", series, log_x=True, log_y=True))
    return plots


# What lies behind each figure (one line each; the report prints them).
CHANGES = {
    "Beam multi_processing": (
        "the counting below, and a WordPiece worker imports no TensorFlow (its BERT "
        "normalisation and split in plain Python, "
        "components/pretraining_data/plain_wordpiece.py, same counts)"),
    "in-process, Beam policy / in_memory": (
        "BPE and WordPiece count each distinct space-separated piece of a "
        "512-line batch once (joined lines cut by one regex pass, pieces counted in C, each "
        "distinct piece split once and cached per process) instead of splitting every line; "
        "WordPiece counts in plain Python instead of TF ops (same counts, same vocabularies)"),
    "tokenizers (Rust), keras-nlp": "the peers; their times move with the load",
}


def multi_processing_profile(figures, kind, scale) -> str | None:
    """Where a forced 2-worker run's time goes: the 10-line run's start-up, the counting
    (in-process time, halved for 2 workers), the learner, and what is left (shuffles,
    pickling, the runner's bookkeeping)."""
    at = figures["scales"][scale][kind]["seconds"]
    fixed = figures["scales"][scale][kind].get("multi_processing_start_up")
    if "Beam multi_processing" not in at or fixed is None:
        return None
    total = at["Beam multi_processing"]
    counting, learning = at["in-process: counting"] / 2, at["in-process: learning"]
    rest = total - fixed - counting - learning
    if rest < 0:  # the two runs saw different loads (other jobs on the machine)
        return (f"{kind} {scale}x, Beam multi_processing {total:.1f} s, its 10-line start-up "
                f"run {fixed:.1f} s: the load changed between them, no split; counting "
                f"~{counting:.1f} s (in-process / 2 workers), learning {learning:.1f} s; "
                f"tokenizers takes {at['tokenizers (Rust)']:.1f} s.")
    return (f"{kind} {scale}x, Beam multi_processing {total:.1f} s = start-up {fixed:.1f} s "
            f"(a 10-line run just before it) + counting ~{counting:.1f} s (in-process / 2 workers) + learning "
            f"{learning:.1f} s + the rest {rest:.1f} s (read, shuffles, pickling); "
            f"tokenizers takes {at['tokenizers (Rust)']:.1f} s.")


def findings(figures, scales) -> list:
    notes = [f"Behind {figure}: {change}." for figure, change in CHANGES.items()]
    first, last = scales[0], scales[-1]
    for kind in KINDS:
        at = {scale: figures["scales"][scale][kind]["seconds"] for scale in scales}
        rust = {scale: at[scale]["tokenizers (Rust)"] for scale in scales}
        policy = {scale: next((name for name in at[scale] if name.startswith("Beam policy")),
                              None) for scale in scales}
        if all(policy.values()):
            ratios = ", ".join(f"{at[scale][policy[scale]] / rust[scale]:.2f}x at {scale}x "
                               f"({policy[scale][len('Beam policy ('):-1]}, load "
                               f"{figures['scales'][scale][kind]['load']:.1f})"
                               for scale in scales)
            notes.append(f"{kind}: Beam with the mode policy (the recipe default) takes "
                         f"{ratios} the Rust trainer's time.")
        for learner in ("in-process", "Beam multi_processing", "Beam in_memory"):
            if learner not in at[first]:
                continue
            ratios = ", ".join(f"{at[scale][learner] / rust[scale]:.1f}x at {scale}x"
                               for scale in scales if learner in at[scale])
            notes.append(f"{kind}: {learner} takes {ratios} the Rust trainer's time.")
        if len(scales) > 1:
            words = {scale: figures["scales"][scale]["words"] for scale in scales}
            for learner in ("in-process", "Beam multi_processing", "tokenizers (Rust)"):
                if learner in at[first] and learner in at[last]:
                    slope = ((at[last][learner] - at[first][learner])
                             / (words[last] - words[first]))
                    notes.append(f"{kind}: {learner} grows by {1e6 * slope:.2f} µs per "
                                 f"extra word from {first}x to {last}x "
                                 f"({at[first][learner]:.1f} s -> {at[last][learner]:.1f} s "
                                 f"for {last / first:g}x the words).")
        if "tf-text counting: learning" in at[first]:
            before = at[first]["tf-text counting: learning"]
            after = at[first]["in-process: learning"]
            notes.append(f"{kind}: the learner itself takes {after:.2f} s with remainder "
                         f"counting vs {before:.2f} s with tensorflow-text's counting "
                         f"({before / after:.1f}x faster, same vocabulary: "
                         f"{figures['scales'][first][kind]['notes'].get('tf-text counting same vocabulary')}).")
    for kind in KINDS:
        profile = multi_processing_profile(figures, kind, last)
        if profile:
            notes.append("Profile: " + profile)
    for mode, seconds in figures["fixed_cost"].items():
        notes.append(f"Beam {mode} costs {seconds:.1f} s on a 10-line corpus: start-up, "
                     "not work.")
    for kind, record in figures["quality"].items():
        project = record["project"]["tokens_per_word"]
        rust = record["tokenizers (Rust)"]["tokens_per_word"]
        notes.append(f"{kind}: held-out tokens per word {project:.3f} (project) vs "
                     f"{rust:.3f} (tokenizers), ratio {project / rust:.3f}.")
    return notes


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", default="benchmark_results")
    parser.add_argument("--quick", action="store_true", help="small smoke run (< 60 s)")
    parser.add_argument("--scales", type=float, nargs="+", default=None)
    args = parser.parse_args(argv)
    scales = tuple(int(s) if float(s).is_integer() else s for s in args.scales) if args.scales \
        else ((1,) if args.quick else (1, 4, 16))
    result = run(scales=scales, out_dir=args.out_dir, quick=args.quick)
    common.write_json(result.figures, os.path.join(args.out_dir, "vocabulary.json"))
    print(result.markdown())
    return result


if __name__ == "__main__":
    main()
