"""Tokenization throughput: the project's in-graph tokenizers (keras-nlp WordPiece with
BERT's normaliser, keras-nlp byte-level BPE, as ``load_tokenizer`` builds them) against
Hugging Face ``tokenizers`` (Rust) on the SAME vocabulary, with a check that ids agree.

    .venv/bin/python benchmarks/tokenization.py               # about 4-5 minutes on 2 cores
    .venv/bin/python benchmarks/tokenization.py --quick       # smoke check, under a minute

The vocabularies (size 8,000, minimum frequency 2) are learned by VocabularyGen's own
functions (``executor.count_words`` + ``executor.learn_and_write``) from
data/demo/corpus.txt; ``tokenizers`` reads the same ``vocab.txt`` / ``vocab.json`` +
``merges.txt`` (WordPiece: BertNormalizer lower-casing and stripping accents +
BertPreTokenizer; BPE: ByteLevel without a prefix space, ``<|endoftext|>`` a special
token). The sentences are the corpus's lines (1x: 7,430 lines, 209k words), repeated for
4x and 16x.

Rows (sentences per second; batches of 256 sentences; after a first pass per path, which
also fills the word caches, up to 5 interleaved rounds, every path once a round, and the
best pass of each path counts, so that a ratio's two sides see the same machine load;
the 1-minute load average is printed per scale):

* ``tf.data map``: ``host_map(Dataset.from_tensor_slices(lines).batch(256), tokenizer,
  AUTOTUNE).prefetch`` iterated to the end, as the project's fine-tuning input pipeline
  runs it (components/trainer/task_data.py; ``lmfactory.models.host_map``: tf.data's
  parallel map op, its function instantiated on the host device alone, without the
  multi-device path's per-iterator placement, Grappler and partitioning).
* ``tf.data Dataset.map``: the same with tf.data's own ``Dataset.map`` (1x only).
* ``tf.function``: one traced function called on each batch (ragged ids out).
* ``eager call``: ``tokenizer(batch)`` outside any graph, as a user calls it; keras-nlp
  turns the ragged result into Python lists.
* ``tokenizers encode_batch``: Rust, threads on both cores; ids read back into Python.

Fixed costs (bpe, 1x): a tf.data pass split into starting the iterator (instantiating the
map function: paid by every iterator, i.e. every epoch; through ``Dataset.map`` that
includes placement, Grappler and partitioning of the function), the first batch and the
others, for both maps; tracing the map function is paid once per dataset.

Agreement: the share of sentences whose ids are identical (corpus lines, WikiText-2
validation lines and a few hard strings); the first disagreements are printed with their
tokens and grouped by cause.
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
BATCH = 256
ROUNDS = 5  # interleaved rounds (each mode once a round); the best pass of each mode counts
ROUND_BUDGET_SECONDS = 20.0
KINDS = ("wordpiece", "bpe")
HARD_STRINGS = [
    "Crème brûlée à la café, naïve façade — São Paulo",
    "emoji 😀👍🏽 and flags 🇫🇷!",
    "東京タワー 北京大学 한국어",
    "multiple   spaces  and\ttabs\t\tand trailing  ",
    "  leading spaces, it's, we'll, they'd",
    "x\u00a0nbsp \u3000ideographic\u2009thin",
    "ﬁnancial ǅ İstanbul ΣΑΣ straße",
    "end of text<|endoftext|>next document",
    "a" * 120,
]


def corpus_lines(scale: float, quick: bool) -> list[str]:
    with open(CORPUS, encoding="utf-8") as f:
        base = 400 if quick else sum(1 for line in f if line.strip())
    return [line.strip() for line in common.corpus_lines(CORPUS, scale, base)]


def held_out_lines(limit: int) -> list[str]:
    with open(HELD_OUT, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()][:limit]


# --- Vocabularies and tokenizers -----------------------------------------------------------
def learn_vocabulary(kind: str, lines: list[str], vocab_dir: str) -> str:
    """VocabularyGen's steps in this process: count words batch by batch, learn, write."""
    from lmfactory.components.vocabulary import VocabularyConfig, executor

    config = VocabularyConfig(kind=kind, vocab_size=VOCAB_SIZE, min_frequency=2)
    counts = collections.Counter()
    for start in range(0, len(lines), 512):
        for word, count in executor.count_words(lines[start:start + 512], config):
            counts[word] += count
    return executor.learn_and_write(sorted(counts.items()), vocab_dir, config, "corpus")


def rust_tokenizer(kind: str, vocab_dir: str):
    """A ``tokenizers.Tokenizer`` reading the project's vocabulary files of ``kind``."""
    import json

    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

    if kind == "wordpiece":
        with open(os.path.join(vocab_dir, "vocab.txt"), encoding="utf-8") as f:
            vocabulary = {token: index for index, token in enumerate(f.read().splitlines())}
        tokenizer = Tokenizer(models.WordPiece(vocab=vocabulary, unk_token="[UNK]"))
        tokenizer.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=True, lowercase=True)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        return tokenizer
    with open(os.path.join(vocab_dir, "vocab.json"), encoding="utf-8") as f:
        vocabulary = json.load(f)
    with open(os.path.join(vocab_dir, "merges.txt"), encoding="utf-8") as f:
        merges = [tuple(line.split(" ")) for line in f.read().splitlines()
                  if line and not line.startswith("#version")]
    tokenizer = Tokenizer(models.BPE(vocab=vocabulary, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(["<|endoftext|>"])
    return tokenizer


# --- Throughput ------------------------------------------------------------------------------
def batches(lines: list[str]) -> list[list[str]]:
    return [lines[start:start + BATCH] for start in range(0, len(lines), BATCH)]


def runners(tokenizer, rust, lines: list[str]) -> dict:
    """Name -> a function tokenizing all ``lines`` once in that way."""
    import tensorflow as tf

    string_batches = [tf.constant(batch) for batch in batches(lines)]
    text_batches = batches(lines)
    traced = tf.function(lambda batch: tokenizer(batch))
    dataset, plain = (tokenized_dataset(tokenizer, lines, host) for host in (True, False))

    def run_dataset():
        collections.deque(dataset, maxlen=0)

    def run_plain():
        collections.deque(plain, maxlen=0)

    def run_traced():
        for batch in string_batches:
            traced(batch)

    def run_eager():
        for batch in string_batches:
            tokenizer(batch)

    def run_rust():
        for batch in text_batches:
            [encoding.ids for encoding in rust.encode_batch(batch, add_special_tokens=False)]

    return {"tf.data map": run_dataset, "tf.data Dataset.map": run_plain,
            "tf.function": run_traced, "eager call": run_eager,
            "tokenizers encode_batch": run_rust}


def tokenized_dataset(tokenizer, lines: list[str], host: bool = True):
    """Batches of 256 lines -> ids, mapped by the project's ``host_map`` (``host``) or by
    tf.data's ``Dataset.map``; prefetched."""
    import tensorflow as tf

    from lmfactory.models.host_map import host_map

    batched = tf.data.Dataset.from_tensor_slices(lines).batch(BATCH)
    mapped = (host_map(batched, tokenizer, num_parallel_calls=tf.data.AUTOTUNE) if host
              else batched.map(tokenizer, num_parallel_calls=tf.data.AUTOTUNE))
    return mapped.prefetch(tf.data.AUTOTUNE)


def interleaved(modes: dict, sentences: int, quick: bool) -> tuple[dict, dict]:
    """Sentences per second of each mode's first pass (tracing, empty caches), then of its
    best pass over interleaved rounds (every mode once per round: tokenizers, tf.data,
    tokenizers, tf.data, ...), so that both sides of a ratio see the same machine load."""
    first = {}
    for name, fn in modes.items():
        started = time.perf_counter()
        fn()
        first[name] = sentences / (time.perf_counter() - started)
    best = {name: float("inf") for name in modes}
    rounds, spent = (1 if quick else ROUNDS), 0.0
    for _ in range(rounds):
        for name, fn in modes.items():
            started = time.perf_counter()
            fn()
            elapsed = time.perf_counter() - started
            best[name], spent = min(best[name], elapsed), spent + elapsed
        if spent > ROUND_BUDGET_SECONDS:
            break
    return first, {name: sentences / seconds for name, seconds in best.items()}


def fixed_costs(tokenizer, lines: list[str], passes: int = 4, host: bool = True) -> dict:
    """Where a ``tf.data`` pass's time goes: building the dataset (tracing the map
    function, once), and per pass: starting the iterator (instantiating the map function:
    every pass), the first batch, the other batches. Seconds; the per-pass figures are the
    best of ``passes``. ``host``: the project's ``host_map``, else ``Dataset.map``."""
    started = time.perf_counter()
    dataset = tokenized_dataset(tokenizer, lines, host)
    record = {"trace": time.perf_counter() - started}
    best = {"iterator start": float("inf"), "first batch": float("inf"),
            "other batches": float("inf")}
    for _ in range(passes):
        started = time.perf_counter()
        iterator = iter(dataset)
        opened = time.perf_counter()
        next(iterator)
        first = time.perf_counter()
        collections.deque(iterator, maxlen=0)  # the remaining batches
        done = time.perf_counter()
        for name, seconds in (("iterator start", opened - started),
                              ("first batch", first - opened),
                              ("other batches", done - first)):
            best[name] = min(best[name], seconds)
    record.update(best)
    return record


# --- Agreement -------------------------------------------------------------------------------
def project_ids(tokenizer, lines: list[str]) -> list[list[int]]:
    import tensorflow as tf

    traced = tf.function(lambda batch: tokenizer(batch))
    ids = []
    for batch in batches(lines):
        ids += traced(tf.constant(batch)).to_list()
    return ids


def agreement(kind, tokenizer, rust, lines: list[str]) -> dict:
    """Share of ``lines`` with identical ids, and the disagreements (cause, example)."""
    ours = project_ids(tokenizer, lines)
    theirs = [encoding.ids for encoding in rust.encode_batch(lines, add_special_tokens=False)]
    differing = [index for index, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    examples = []
    causes = collections.Counter()
    for index in differing:
        cause, detail = explain(kind, tokenizer, rust, lines[index], ours[index],
                                theirs[index])
        causes[cause] += 1
        if len(examples) < 6:
            examples.append({"text": lines[index][:160], "cause": cause, "detail": detail})
    return {"sentences": len(lines), "agree": 1 - len(differing) / max(len(lines), 1),
            "differing": len(differing), "causes": dict(causes), "examples": examples}


def explain(kind, tokenizer, rust, text, ours, theirs) -> tuple[str, str]:
    """A short cause for one disagreement: the first differing token of each side."""
    vocabulary = tokenizer.get_vocabulary()
    position = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b),
                    min(len(ours), len(theirs)))
    mine = [vocabulary[i] for i in ours[position:position + 4]]
    other = [rust.id_to_token(i) for i in theirs[position:position + 4]]
    detail = f"project {mine} vs tokenizers {other}"
    if kind == "wordpiece":
        word = next((w for w in text.split() if len(w) > 100), None)
        if word is not None:
            return "word over 100 characters (tokenizers: [UNK])", detail
        if "[UNK]" in mine or "[UNK]" in other:
            return "a word only one side maps to [UNK]", detail
        return "normalisation / splitting", detail
    if "<|endoftext|>" in text:
        return "text around a special token", detail
    if any(ord(c) > 127 and c.isspace() for c in text):
        return "non-ASCII whitespace (keras-nlp's RE2 split)", detail
    if "  " in text or "\t" in text:
        return "whitespace runs", detail
    return "other", detail


# --- The benchmark -------------------------------------------------------------------------
def run(scales=(1, 4, 16), out_dir: str = ".", quick: bool = False) -> common.Result:
    import tensorflow as tf  # noqa: F401

    from lmfactory.models.tokenizers import load_tokenizer

    started = time.perf_counter()
    os.makedirs(out_dir, exist_ok=True)
    scales = tuple(scales)
    work = tempfile.mkdtemp(prefix="tokenization_bench_")
    figures = {"throughput": {}, "agreement": {}, "learn_seconds": {},
               "load_average": {"start": os.getloadavg()}}
    try:
        base_lines = corpus_lines(1, quick)
        check_lines = (base_lines + held_out_lines(200 if quick else 3000) + HARD_STRINGS)
        for kind in KINDS:
            learn_started = time.perf_counter()
            vocab_dir = learn_vocabulary(kind, base_lines, os.path.join(work, kind))
            figures["learn_seconds"][kind] = time.perf_counter() - learn_started
            tokenizer, rust = load_tokenizer(vocab_dir), rust_tokenizer(kind, vocab_dir)
            figures["agreement"][kind] = agreement(kind, tokenizer, rust, check_lines)
            figures["throughput"][kind] = {}
            for scale in scales:
                lines = corpus_lines(scale, quick)
                modes = runners(tokenizer, rust, lines)
                if scale != scales[0]:  # the scaling study: the batched paths only
                    modes = {name: fn for name, fn in modes.items()
                             if name in ("tf.data map", "tokenizers encode_batch")}
                load = os.getloadavg()[0]
                first, best = interleaved(modes, len(lines), quick)
                record = figures["throughput"][kind][scale] = {
                    "sentences": len(lines), "words": sum(len(line.split()) for line in lines),
                    "first pass": first, **best,
                    "load": round((load + os.getloadavg()[0]) / 2, 2)}
            if kind == "bpe":
                figures["fixed_costs"] = {"load": os.getloadavg()[0],
                                          **fixed_costs(tokenizer, base_lines)}
                figures["fixed_costs_dataset_map"] = fixed_costs(tokenizer, base_lines,
                                                                 host=False)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    figures["load_average"]["end"] = os.getloadavg()
    result = common.Result(name="Tokenization throughput", tables=[], figures=figures)
    result.tables = make_tables(figures, scales)
    result.plots = make_plots(figures, scales, out_dir)
    result.findings = findings(figures, scales)
    result.seconds = time.perf_counter() - started
    return result


def make_tables(figures, scales) -> list:
    rows = []
    for kind, by_scale in figures["throughput"].items():
        for scale, record in by_scale.items():
            rust = record["tokenizers encode_batch"]
            for name, value in record.items():
                if name in ("sentences", "words", "first pass", "load"):
                    continue
                rows.append([kind, f"{scale}x", record["sentences"], name, value,
                             value * record["words"] / record["sentences"] / 1e3,
                             value / rust, record["first pass"][name], record["load"]])
    speed = common.Table(
        title="Tokenization throughput (same vocabulary, batches of 256 sentences)",
        columns=["kind", "scale", "sentences", "path", "sentences / s", "k words / s",
                 "/ tokenizers", "first pass sentences / s", "load avg (1 min)"], rows=rows,
        digits=3,
        note=(f"Best pass of up to {ROUNDS} interleaved rounds (each path once a round, "
              "tokenizers and tf.data alternating) after a first pass (its own column: "
              "tracing and empty word caches); 'load avg' is the 1-minute load average "
              "around the scale's rounds (2 cores, other jobs running). Eager and "
              "tf.function rows at "
              f"{scales[0]}x only; the scaling rows time the batched paths. tokenizers "
              "uses Rust threads on both cores; the in-graph paths use TensorFlow's "
              "thread pools."))
    agree_rows = []
    for kind, record in figures["agreement"].items():
        causes = "; ".join(f"{cause}: {count}" for cause, count in record["causes"].items())
        agree_rows.append([kind, record["sentences"], 100 * record["agree"],
                           record["differing"], causes or "-"])
    agree = common.Table(
        title="Do the ids agree? (project in-graph tokenizer vs tokenizers, same files)",
        columns=["kind", "sentences", "identical ids %", "differing", "causes"],
        rows=agree_rows, digits=5,
        note="Corpus lines, WikiText-2 validation lines and a few hard strings.")
    example_rows = [[kind, example["text"][:70].replace("|", "\\|"), example["cause"],
                     example["detail"].replace("|", "\\|")]
                    for kind, record in figures["agreement"].items()
                    for example in record["examples"]]
    examples = common.Table(title="First disagreements",
                            columns=["kind", "text", "cause", "first differing tokens"],
                            rows=example_rows or [["-", "-", "-", "-"]])
    tables = [speed, agree, examples]
    costs = figures.get("fixed_costs")
    if costs:
        plain = figures.get("fixed_costs_dataset_map") or {}
        per_pass = costs["iterator start"] + costs["first batch"] + costs["other batches"]
        plain_pass = sum(plain.get(name, 0.0)
                         for name in ("iterator start", "first batch", "other batches"))

        def share(seconds, total):
            return f"{100 * seconds / total:.0f}%" if total else "-"

        tables.insert(1, common.Table(
            title=f"Where a bpe tf.data pass goes ({scales[0]}x corpus, seconds)",
            columns=["step", "host_map (project)", "share of a pass", "Dataset.map",
                     "share of a pass"],
            rows=[["trace the map function (once per dataset)", costs["trace"], "-",
                   plain.get("trace", "-"), "-"]]
            + [[f"{name} (every pass)", costs[name], share(costs[name], per_pass),
                plain.get(name, "-"), share(plain.get(name, 0.0), plain_pass)]
               for name in ("iterator start", "first batch", "other batches")],
            digits=3,
            note=("'iterator start' is instantiating the map function, paid again by every "
                  "iterator (every epoch of a training loop): through Dataset.map a "
                  "multi-device instantiation (placement, Grappler, partitioning), through "
                  "host_map the host device's function runtime alone; best of 4 passes, "
                  f"load average {costs['load']:.1f}.")))
    return tables


def make_plots(figures, scales, out_dir) -> list:
    series = {}
    for kind, by_scale in figures["throughput"].items():
        for name in ("tf.data map", "tokenizers encode_batch"):
            series[f"{kind}: {name}"] = (list(by_scale), [by_scale[s][name] for s in by_scale])
    line = common.line_plot(os.path.join(out_dir, "tokenization_scaling.png"),
                            "Tokenization throughput vs corpus size", "corpus scale",
                            "sentences / s", series, log_x=True, log_y=True)
    bars = {f"{kind} {name}": value
            for kind, by_scale in figures["throughput"].items()
            for name, value in by_scale[scales[0]].items()
            if name not in ("sentences", "words", "first pass", "load")}
    bar = common.bar_plot(os.path.join(out_dir, "tokenization_throughput.png"),
                          f"Tokenization throughput at {scales[0]}x", "sentences / s", bars)
    return [line, bar]


# What lies behind each figure (one line each; the report prints them).
CHANGES = {
    "bpe tf.data map": (
        "the tf.data rows map the tokenizer with lmfactory.models.host_map (the same "
        "parallel map op and traced function, instantiated on the host device alone: no "
        "per-iterator placement, Grappler and partitioning, which take ~0.1 s of a 0.15 s 1x "
        "pass through Dataset.map); 'tf.data Dataset.map' keeps tf.data's own map; the "
        "tokenizer's rare paths (keras-nlp's split, the merge loop) are traced into its "
        "tf.cond branches instead of non-inlined functions, which would be instantiated with "
        "Grappler at their first call in every iterator (not on this corpus, whose words are "
        "all in the word table; on 3,000 WikiText-2 lines a host_map pass takes 0.22 s with "
        "the branches and 0.98 s with the functions, at load 14); the map function's library "
        "holds 10 functions instead of 82 (keras-nlp's split of the rare rows runs on flat "
        "vectors through tf-text's RegexSplitWithOffsets op, without ~1,000 nodes and 70 "
        "ragged assertion functions) and its graph 269 nodes instead of 547 (row ids by one "
        "search op, neighbours by tf.roll, rare rows merged at the word level): Grappler's "
        "per-iterator work on the map function, most of a 1x pass, is ~2.5x smaller"),
    "bpe tf.function / eager call": "the same smaller graph (fewer ops a batch)",
    "wordpiece rows": "its tf.data map row through host_map as well",
    "tokenizers encode_batch": "the peer (Rust, 2 threads)",
    "timing": ("paths timed in interleaved rounds (tokenizers, tf.data, ...), best pass of "
               "each, load average per scale"),
}


def findings(figures, scales) -> list:
    load = figures.get("load_average", {})
    notes = [f"load average (1, 5, 15 min) at start {tuple(round(x, 1) for x in load['start'])}"
             f", at end {tuple(round(x, 1) for x in load['end'])} (2 cores)"] if load else []
    notes += [f"Behind {figure}: {change}." for figure, change in CHANGES.items()]
    costs = figures.get("fixed_costs")
    if costs:
        per_pass = costs["iterator start"] + costs["first batch"] + costs["other batches"]
        notes.append(f"bpe: a {scales[0]}x tf.data pass (host_map) is {per_pass:.3f} s, of "
                     f"which {costs['iterator start']:.3f} s starting the iterator "
                     "(instantiating the map function: every pass) and "
                     f"{costs['other batches'] + costs['first batch']:.3f} s tokenizing; "
                     f"tracing the map function ({costs['trace']:.2f} s) is paid once.")
        plain = figures.get("fixed_costs_dataset_map")
        if plain:
            notes.append(f"bpe: through tf.data's Dataset.map the iterator start is "
                         f"{plain['iterator start']:.3f} s a pass (placement, Grappler and "
                         f"partitioning of the map function) and tokenizing "
                         f"{plain['other batches'] + plain['first batch']:.3f} s.")
    for kind, by_scale in figures["throughput"].items():
        first = by_scale[scales[0]]
        rust = first["tokenizers encode_batch"]
        notes.append(f"{kind}: tokenizers encodes {rust:,.0f} sentences/s; the in-graph "
                     f"tokenizer {first['tf.data map']:,.0f} in tf.data "
                     f"({first['tf.data map'] / rust:.2f}x; through tf.data's own Dataset.map "
                     f"{first['tf.data Dataset.map']:,.0f}, "
                     f"{first['tf.data Dataset.map'] / rust:.2f}x), "
                     f"{first['tf.function']:,.0f} in a tf.function, "
                     f"{first['eager call']:,.0f} called eagerly.")
        if len(scales) > 1:
            spread = [by_scale[scale]["tf.data map"] for scale in scales]
            ratios = [by_scale[scale]["tf.data map"]
                      / by_scale[scale]["tokenizers encode_batch"] for scale in scales]
            notes.append(f"{kind}: tf.data throughput from {scales[0]}x to {scales[-1]}x: "
                         + " -> ".join(f"{value:,.0f}" for value in spread)
                         + " sentences/s (flat = linear time); / tokenizers: "
                         + " / ".join(f"{ratio:.2f}x (load {by_scale[scale]['load']:.1f})"
                                      for ratio, scale in zip(ratios, scales)) + ".")
        cold = first["first pass"]
        notes.append(f"{kind}: first passes (tracing, empty word caches): tf.function "
                     f"{cold['tf.function']:,.0f}, tf.data {cold['tf.data map']:,.0f}, "
                     f"tokenizers {cold['tokenizers encode_batch']:,.0f} sentences/s.")
        record = figures["agreement"][kind]
        notes.append(f"{kind}: ids identical on {100 * record['agree']:.2f}% of "
                     f"{record['sentences']} sentences"
                     + (f"; differences: {record['causes']}." if record["causes"] else "."))
    return notes


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", default="benchmark_results")
    parser.add_argument("--quick", action="store_true", help="small smoke run (< 60 s)")
    parser.add_argument("--scales", type=float, nargs="+", default=None)
    args = parser.parse_args(argv)
    scales = tuple(int(s) if float(s).is_integer() else s for s in args.scales) if args.scales \
        else ((1, 2) if args.quick else (1, 4, 16))
    result = run(scales=scales, out_dir=args.out_dir, quick=args.quick)
    common.write_json(result.figures, os.path.join(args.out_dir, "tokenization.json"))
    print(result.markdown())
    return result


if __name__ == "__main__":
    main()
