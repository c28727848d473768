"""PretrainingExampleGen measured on a real corpus slice (wikitext-2 valid paragraphs).

The input Examples artifact and the vocabularies are written here by hand (a WordPiece
vocabulary from the slice's words + reserved tokens; a byte-level BPE with 256 byte symbols, a
few merges and <|endoftext|>), so the test does not depend on the vocabulary learner.
"""

from __future__ import annotations

import collections
import glob
import json
import os
import re
import time
import unicodedata

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmfactory.components.pretraining_data import bert_mlm_nsp, causal_lm, features
from lmfactory.components.pretraining_data.component import PretrainingExampleGen
from lmfactory.components.pretraining_data.executor import (
    Executor, document_key, generate_pretraining_examples, shard_of)
from lmfactory.models.tokenizers import load_tokenizer, write_tokenizer_config
from mask_stats import mean_mask_overlap, two_epochs

WIKITEXT = "/work/shared/data/wikitext-2/valid.txt"
NUM_DOCUMENTS = 300
BEAM_ARGS = ["--runner=DirectRunner", "--direct_running_mode=in_memory",
             "--direct_num_workers=1"]
RESERVED = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SPECIALS = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
PAD, CLS, SEP, MASK = 0, 2, 3, 4


# --------------------------------------------------------------------------- corpus


def wikitext_documents(limit: int) -> list:
    """Paragraphs of wikitext-2 valid with >= 2 sentences, one sentence per line."""
    documents = []
    with open(WIKITEXT, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("="):
                continue
            sentences = [s.strip() for s in re.split(r"(?<= \.) ", line) if s.strip()]
            if len(sentences) >= 2:
                documents.append("\n".join(sentences))
            if len(documents) == limit:
                break
    return documents


def write_examples(split_dir: str, texts: list) -> None:
    os.makedirs(split_dir, exist_ok=True)
    path = os.path.join(split_dir, "data_tfrecord-00000-of-00001.gz")
    with tf.io.TFRecordWriter(path, options="GZIP") as writer:
        for text in texts:
            feature = tf.train.Feature(bytes_list=tf.train.BytesList(value=[text.encode()]))
            example = tf.train.Example(features=tf.train.Features(feature={"text": feature}))
            writer.write(example.SerializeToString())


def _normalized_words(texts):
    for text in texts:
        text = unicodedata.normalize("NFD", text.lower())
        text = "".join(c for c in text if unicodedata.category(c) != "Mn")
        yield from re.findall(r"\w+|[^\w\s]", text)


def write_wordpiece_vocab(vocab_dir: str, texts: list, num_words: int = 1500) -> None:
    """Reserved tokens, every character (+ its ## piece), the most frequent whole words."""
    counts = collections.Counter(_normalized_words(texts))
    chars = sorted({c for word in counts for c in word})
    words = [w for w, _ in counts.most_common(num_words) if len(w) > 1]
    vocab = list(dict.fromkeys(RESERVED + chars + ["##" + c for c in chars] + words))
    os.makedirs(vocab_dir, exist_ok=True)
    with open(os.path.join(vocab_dir, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(vocab) + "\n")
    write_tokenizer_config(vocab_dir, {
        "kind": "wordpiece", "vocabulary_file": "vocab.txt", "lowercase": True,
        "strip_accents": True, "special_tokens": SPECIALS})


def gpt2_byte_symbols() -> list:
    """The 256 printable stand-ins GPT-2 uses for bytes, in byte order."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    symbols, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            symbols[byte] = chr(byte)
        else:
            symbols[byte] = chr(256 + extra)
            extra += 1
    return [symbols[b] for b in range(256)]


def write_bpe_vocab(vocab_dir: str) -> None:
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("Ġ", "a"), ("i", "n"), ("e", "r")]
    tokens = gpt2_byte_symbols() + [a + b for a, b in merges] + ["<|endoftext|>"]
    os.makedirs(vocab_dir, exist_ok=True)
    with open(os.path.join(vocab_dir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({t: i for i, t in enumerate(tokens)}, f, ensure_ascii=False)
    with open(os.path.join(vocab_dir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    write_tokenizer_config(vocab_dir, {
        "kind": "bpe", "vocabulary_file": "vocab.json", "merges_file": "merges.txt",
        "special_tokens": {"end_of_text": "<|endoftext|>", "pad": "<|endoftext|>"}})


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    texts = wikitext_documents(NUM_DOCUMENTS + 40)
    train, eval_ = texts[:NUM_DOCUMENTS], texts[NUM_DOCUMENTS:]
    write_examples(str(root / "examples" / "Split-train"), train)
    write_examples(str(root / "examples" / "Split-eval"), eval_)
    write_wordpiece_vocab(str(root / "wordpiece"), texts)
    write_bpe_vocab(str(root / "bpe"))
    tokenizer = load_tokenizer(str(root / "wordpiece"))
    sentences = [doc.split("\n") for doc in train]
    flat = tokenizer([s for doc in sentences for s in doc])  # eager call -> Python lists
    streams, start = [], 0
    for doc in sentences:
        streams.append([t for ids in flat[start:start + len(doc)] for t in ids])
        start += len(doc)
    return {"root": root, "texts": train, "eval_texts": eval_, "streams": streams,
            "inputs": {"train": str(root / "examples" / "Split-train"),
                       "eval": str(root / "examples" / "Split-eval")},
            "wordpiece": str(root / "wordpiece"), "bpe": str(root / "bpe")}


def run_generation(corpus, output_uri, vocab="wordpiece", splits=("train",), **config):
    started = time.time()
    inputs = {s: corpus["inputs"][s] for s in splits}
    counts = generate_pretraining_examples(inputs, corpus[vocab], str(output_uri), config,
                                           beam_pipeline_args=BEAM_ARGS)
    print(f"\n[generation {config}] {time.time() - started:.1f}s counts={counts}")
    return counts


@pytest.fixture(scope="module")
def static_run(corpus):
    """BERT MLM+NSP through the TFX Executor (defaults, dupe_factor 5), both splits."""
    from tfx.types import artifact_utils, standard_artifacts
    from lmfactory.components.artifacts import Vocabulary

    examples = standard_artifacts.Examples()
    examples.uri = str(corpus["root"] / "examples")
    examples.split_names = artifact_utils.encode_split_names(["train", "eval"])
    vocabulary = Vocabulary()
    vocabulary.uri = corpus["wordpiece"]
    output = standard_artifacts.Examples()
    output.uri = str(corpus["root"] / "static")
    started = time.time()
    Executor(Executor.Context(beam_pipeline_args=BEAM_ARGS)).Do(
        {"examples": [examples], "vocabulary": [vocabulary]},
        {"pretraining_examples": [output]}, {"random_seed": 7, "dupe_factor": 5})
    print(f"\n[executor bert_mlm_nsp] {time.time() - started:.1f}s")
    return {"artifact": output, "uri": output.uri,
            "records": read_records(os.path.join(output.uri, "Split-train"))}


def read_records(split_dir: str) -> list:
    records = []
    for path in sorted(glob.glob(os.path.join(split_dir, "data_tfrecord-*.gz"))):
        for raw in tf.data.TFRecordDataset(path, compression_type="GZIP").as_numpy_iterator():
            example = tf.train.Example.FromString(raw)
            record = {}
            for name, feature in example.features.feature.items():
                kind = feature.WhichOneof("kind")
                record[name] = list(getattr(feature, kind).value)
            records.append(record)
    return records


def unmasked_tokens(record) -> list:
    """The sequence before masking: masked positions get their original ids back."""
    length = sum(record["input_mask"])
    tokens = list(record["input_ids"][:length])
    for position, label, weight in zip(record.get("masked_lm_positions", []),
                                       record.get("masked_lm_ids", []),
                                       record.get("masked_lm_weights", [])):
        if weight:
            tokens[position] = label
    return tokens


def segments(record):
    tokens = unmasked_tokens(record)
    first_sep = tokens.index(SEP)
    return tokens[1:first_sep], tokens[first_sep + 1:-1]


def as_text(ids) -> str:
    return "," + ",".join(map(str, ids)) + ","


# --------------------------------------------------------------------------- BERT static


def test_artifact_layout_and_config(static_run, corpus):
    uri = static_run["uri"]
    assert static_run["artifact"].split_names == '["train", "eval"]'
    for split in ("train", "eval"):
        assert glob.glob(os.path.join(uri, f"Split-{split}", "data_tfrecord-*.gz"))
    config = features.read_pretraining_config(uri)
    assert config["objective"] == "bert_mlm_nsp" and config["random_seed"] == 7
    assert config["special_token_ids"] == {"pad": PAD, "unk": 1, "cls": CLS, "sep": SEP,
                                           "mask": MASK}
    assert config["counts"]["train"]["documents"] == NUM_DOCUMENTS
    assert config["counts"]["train"]["instances"] == len(static_run["records"])
    assert not glob.glob(os.path.join(uri, "_pretraining_stats_tmp*"))
    with open(os.path.join(uri, "vocabulary", "vocab.txt")) as copied, \
            open(os.path.join(corpus["wordpiece"], "vocab.txt")) as original:
        assert copied.read() == original.read()
    assert load_tokenizer(features.vocabulary_dir(uri)).vocabulary_size() == \
        config["vocabulary_size"]


def test_bert_sequence_layout(static_run):
    records = static_run["records"]
    assert len(records) > 2000
    for record in records:
        assert len(record["input_ids"]) == len(record["segment_ids"]) == 128
        length = sum(record["input_mask"])
        assert record["input_mask"] == [1] * length + [0] * (128 - length)
        assert 5 <= length <= 128
        tokens = unmasked_tokens(record)
        assert tokens[0] == CLS and tokens[-1] == SEP
        assert [i for i, t in enumerate(tokens) if t in (CLS, SEP)] == \
            [0, tokens.index(SEP), length - 1]
        first_sep = tokens.index(SEP)
        assert 2 <= first_sep <= length - 3  # A and B both non-empty
        assert record["segment_ids"] == ([0] * (first_sep + 1) + [1] * (length - first_sep - 1)
                                         + [0] * (128 - length))
        assert record["input_ids"][length:] == [PAD] * (128 - length)


def test_masking_rates(static_run):
    """BERT §3.1: 15% of tokens predicted; 80% [MASK], 10% random, 10% unchanged."""
    selected = maskable = masked = randomized = kept = 0
    for record in static_run["records"]:
        count = int(sum(record["masked_lm_weights"]))
        positions = record["masked_lm_positions"][:count]
        assert positions == sorted(positions) and len(set(positions)) == count
        assert record["masked_lm_weights"] == [1.0] * count + [0.0] * (20 - count)
        assert record["masked_lm_positions"][count:] == [0] * (20 - count)
        original = unmasked_tokens(record)
        assert all(original[p] not in (CLS, SEP) for p in positions)
        maskable += len(original) - 3
        selected += count
        for position in positions:
            observed = record["input_ids"][position]
            masked += observed == MASK
            kept += observed == original[position]
            randomized += observed not in (MASK, original[position])
            assert observed not in (PAD, CLS, SEP, 1)  # no special token as random id
    rate = selected / maskable
    shares = [masked / selected, randomized / selected, kept / selected]
    print(f"\n[static masking] selected {rate:.4f} of {maskable} tokens; "
          f"mask/random/kept = {shares[0]:.4f}/{shares[1]:.4f}/{shares[2]:.4f} "
          f"of {selected}")
    assert abs(rate - 0.15) <= 0.01
    for share, expected in zip(shares, (0.8, 0.1, 0.1)):
        assert abs(share - expected) <= 0.02
    counts = features.read_pretraining_config(static_run["uri"])["counts"]["train"]
    assert counts["masked_lm_predictions"] == selected and counts["capped_instances"] == 0


def test_next_sentence_labels_and_sources(static_run, corpus):
    """BERT §3.1 Task #2: 50% IsNext (B follows A in its document), 50% B from elsewhere."""
    records = static_run["records"]
    labels = [r["next_sentence_labels"][0] for r in records]
    random_share = sum(labels) / len(labels)
    print(f"\n[nsp] random-next share {random_share:.4f} of {len(labels)} instances")
    assert abs(random_share - 0.5) <= 0.02
    streams = [as_text(s) for s in corpus["streams"]]
    checked = {0: 0, 1: 0}
    for record, label in zip(records, labels):
        a, b = (as_text(s) for s in segments(record))
        holders = [i for i, s in enumerate(streams) if a in s]
        assert holders, "segment A is not text of any input document"
        if label == 0:
            assert any(streams[i].find(b, streams[i].find(a) + len(a) - 1) >= 0
                       for i in holders), "IsNext B does not follow A"
            checked[0] += 1
        elif len(holders) == 1 and b.count(",") > 8:
            source = holders[0]
            assert any(b in s for i, s in enumerate(streams) if i != source)
            assert streams[source].find(b, streams[source].find(a) + len(a) - 1) < 0
            checked[1] += 1
    assert checked[0] == labels.count(0) and checked[1] > 0.8 * labels.count(1)


def test_whole_word_masking(corpus, tmp_path):
    run_generation(corpus, tmp_path, whole_word_masking=True, dupe_factor=1, random_seed=3)
    tokenizer = load_tokenizer(corpus["wordpiece"])
    is_piece = np.array([t.startswith("##") for t in tokenizer.get_vocabulary()])
    records = read_records(str(tmp_path / "Split-train"))
    words = selected = multi_piece_words = 0
    for record in records:
        tokens = unmasked_tokens(record)
        chosen = {p for p, w in zip(record["masked_lm_positions"],
                                    record["masked_lm_weights"]) if w}
        selected += len(chosen)
        for word in word_spans(tokens, is_piece):
            hit = [p in chosen for p in word]
            assert all(hit) or not any(hit), "a word was only partly masked"
            words += 1
            multi_piece_words += len(word) > 1 and all(hit)
    print(f"\n[whole word] {selected} predictions, {multi_piece_words} multi-piece words "
          f"masked whole, {words} words")
    assert multi_piece_words > 100


def word_spans(tokens, is_piece):
    spans = []
    for position, token in enumerate(tokens):
        if token in (CLS, SEP):
            continue
        if is_piece[token] and spans and spans[-1][-1] == position - 1:
            spans[-1].append(position)
        else:
            spans.append([position])
    return spans


def test_determinism_and_shards(corpus, tmp_path):
    """Same seed -> identical bytes; new seed -> different data; random B from same shard."""
    config = dict(num_shards=4, dupe_factor=1, random_seed=11)
    for name, seed in (("first", 11), ("second", 11), ("other", 12)):
        run_generation(corpus, tmp_path / name, **dict(config, random_seed=seed))
    files = {name: sorted(glob.glob(str(tmp_path / name / "Split-train" / "*.gz")))
             for name in ("first", "second", "other")}
    assert len(files["first"]) == 4
    contents = {name: [open(p, "rb").read() for p in paths] for name, paths in files.items()}
    assert contents["first"] == contents["second"]
    assert [os.path.basename(p) for p in files["first"]] == \
        [os.path.basename(p) for p in files["second"]]
    assert contents["first"] != contents["other"]
    assert_segments_from_own_shard(corpus, files["first"])


def assert_segments_from_own_shard(corpus, shard_files):
    shard_by_document = [shard_of(document_key(t.encode()), 4) for t in corpus["texts"]]
    streams = [as_text(s) for s in corpus["streams"]]
    for path in shard_files:
        shard = int(re.search(r"-(\d{5})-of-", path).group(1))
        own = [s for s, sh in zip(streams, shard_by_document) if sh == shard]
        for record in _records_of(path):
            for segment in segments(record):
                assert any(as_text(segment) in s for s in own)


def _records_of(path):
    records = []
    for raw in tf.data.TFRecordDataset(path, compression_type="GZIP").as_numpy_iterator():
        feature = tf.train.Example.FromString(raw).features.feature
        records.append({name: list(getattr(f, f.WhichOneof("kind")).value)
                        for name, f in feature.items()})
    return records


# --------------------------------------------------------------------------- dynamic masking


def test_dynamic_masking(corpus, tmp_path):
    run_generation(corpus, tmp_path, dynamic_masking=True, dupe_factor=1, random_seed=5)
    records = read_records(str(tmp_path / "Split-train"))
    assert records and "masked_lm_ids" not in records[0]
    assert all(MASK not in r["input_ids"] for r in records)
    config = features.read_pretraining_config(str(tmp_path))
    pattern = str(tmp_path / "Split-train" / "*.gz")
    keras.utils.set_random_seed(0)  # run_fn seeds everything; masks must still change
    passes = two_epochs(pattern, config)
    # A fresh mask each pass: the selected positions of two passes barely overlap.
    assert mean_mask_overlap(passes[0], passes[1]) < 0.35
    for batches in passes:
        assert_dynamic_rates(batches)


def test_dynamic_masks_of_a_resumed_input_are_the_uninterrupted_ones(corpus, tmp_path):
    """A resumed training skips the batches it had trained on (fit_loop.resume_input): the
    batches after them get the masks the uninterrupted run gave them; another seed, others."""
    run_generation(corpus, tmp_path, dynamic_masking=True, dupe_factor=1, random_seed=5)
    config = features.read_pretraining_config(str(tmp_path))
    pattern = str(tmp_path / "Split-train" / "*.gz")

    def batches(seed, skip=0, count=6):
        data = features.make_dataset(pattern, config, batch_size=4, shuffle=True, repeat=True,
                                     seed=seed)
        return list(data.skip(skip).take(count - skip).as_numpy_iterator())

    uninterrupted, resumed = batches(7), batches(7, skip=3)
    for (x, y, w), (x2, y2, w2) in zip(uninterrupted[3:], resumed):
        np.testing.assert_array_equal(x["token_ids"], x2["token_ids"])
        np.testing.assert_array_equal(x["mask_positions"], x2["mask_positions"])
        np.testing.assert_array_equal(y["mlm"], y2["mlm"])
        np.testing.assert_array_equal(w["mlm"], w2["mlm"])
    other = batches(8)
    assert not all(np.array_equal(a[0]["token_ids"], b[0]["token_ids"])
                   for a, b in zip(uninterrupted, other))


def assert_dynamic_rates(batches):
    selected = maskable = masked = randomized = kept = 0
    for x, y, weights in batches:
        for row in range(len(x["token_ids"])):
            count = int(weights["mlm"][row].sum())
            positions = x["mask_positions"][row][:count]
            labels = y["mlm"][row][:count]
            observed = x["token_ids"][row][positions]
            selected += count
            maskable += int(x["padding_mask"][row].sum()) - 3
            masked += int((observed == MASK).sum())
            kept += int((observed == labels).sum())
            randomized += int(((observed != MASK) & (observed != labels)).sum())
            assert not np.isin(labels, [PAD, CLS, SEP]).any()
    rate = selected / maskable
    shares = [masked / selected, randomized / selected, kept / selected]
    print(f"\n[dynamic masking] selected {rate:.4f} of {maskable} tokens; mask/random/kept = "
          f"{shares[0]:.4f}/{shares[1]:.4f}/{shares[2]:.4f} of {selected}")
    assert abs(rate - 0.15) <= 0.01
    for share, expected in zip(shares, (0.8, 0.1, 0.1)):
        assert abs(share - expected) <= 0.02


# --------------------------------------------------------------------------- make_dataset


def test_make_dataset_contract_bert(static_run):
    config = features.read_pretraining_config(static_run["uri"])
    pattern = os.path.join(static_run["uri"], "Split-train", "*.gz")
    dataset = features.make_dataset(pattern, config, batch_size=16, shuffle=True, repeat=True,
                                    seed=1)
    x_spec, y_spec, w_spec = dataset.element_spec
    assert {k: (v.shape.as_list(), v.dtype) for k, v in x_spec.items()} == {
        "token_ids": ([16, 128], tf.int32), "padding_mask": ([16, 128], tf.bool),
        "segment_ids": ([16, 128], tf.int32), "mask_positions": ([16, 20], tf.int32)}
    assert (y_spec["mlm"].shape.as_list(), y_spec["mlm"].dtype) == ([16, 20], tf.int32)
    assert (y_spec["nsp"].shape.as_list(), y_spec["nsp"].dtype) == ([16], tf.int32)
    assert (w_spec["mlm"].shape.as_list(), w_spec["mlm"].dtype) == ([16, 20], tf.float32)
    x, y, w = next(iter(dataset))
    tokens = x["token_ids"].numpy()
    assert (tokens[:, 0] == CLS).all() and set(np.unique(y["nsp"])) <= {0, 1}
    gathered = np.take_along_axis(tokens, x["mask_positions"].numpy(), axis=1)
    weights = w["mlm"].numpy()
    assert (weights.sum(axis=1) >= 1).all()
    assert 0.6 < (gathered == MASK)[weights == 1].mean() < 0.95
    assert not np.isin(y["mlm"].numpy()[weights == 1], [PAD, CLS, SEP]).any()
    eval_pattern = os.path.join(static_run["uri"], "Split-eval", "*.gz")
    eval_batches = list(features.make_dataset(eval_pattern, config, 64, False, False))
    eval_count = config["counts"]["eval"]["instances"]
    assert sum(b[0]["token_ids"].shape[0] for b in eval_batches) == eval_count


# --------------------------------------------------------------------------- causal LM


def test_causal_lm_blocks(corpus, tmp_path):
    """GPT-2 §2: documents end with <|endoftext|>; blocks of L+1 ids re-form the stream."""
    length = 64
    counts = run_generation(corpus, tmp_path, vocab="bpe", objective="causal_lm",
                            max_seq_length=length, num_shards=2)
    config = features.read_pretraining_config(str(tmp_path))
    end_of_text = config["end_of_text_id"]
    assert end_of_text == 262 and config["special_token_ids"]["end_of_text"] == 262
    tokenizer = load_tokenizer(corpus["bpe"])
    ids = tokenizer(corpus["texts"])
    assert tokenizer.detokenize([ids[0]])[0] == corpus["texts"][0]
    dropped = 0
    for shard in range(2):
        keyed = sorted((document_key(t.encode()), doc) for t, doc in zip(corpus["texts"], ids)
                       if shard_of(document_key(t.encode()), 2) == shard)
        stream = [token for _, doc in keyed for token in doc + [end_of_text]]
        path = tmp_path / "Split-train" / f"data_tfrecord-{shard:05d}-of-00002.gz"
        blocks = [r["input_ids"] for r in _records_of(str(path))]
        assert all(len(block) == length + 1 for block in blocks)
        packed = [t for block in blocks for t in block]
        assert packed == stream[:len(packed)] and len(stream) - len(packed) <= length
        dropped += len(stream) - len(packed)
        assert packed.count(end_of_text) == sum(1 for t in stream[:len(packed)]
                                               if t == end_of_text)
    assert counts["train"]["dropped_tail_tokens"] == dropped
    assert counts["train"]["documents"] == NUM_DOCUMENTS
    assert_causal_dataset(tmp_path, config, length)


def assert_causal_dataset(output_uri, config, length):
    pattern = str(output_uri / "Split-train" / "*.gz")
    dataset = features.make_dataset(pattern, config, batch_size=8, shuffle=True, repeat=True)
    x_spec, y_spec, w_spec = dataset.element_spec
    assert x_spec["token_ids"].shape.as_list() == [8, length]
    assert x_spec["padding_mask"].dtype == tf.bool and y_spec.dtype == tf.int32
    assert w_spec.shape.as_list() == [8, length] and w_spec.dtype == tf.float32
    x, y, w = next(iter(dataset))
    assert (x["token_ids"].numpy()[:, 1:] == y.numpy()[:, :-1]).all()
    assert (w.numpy() == 1.0).all()


def test_pack_documents_unit():
    blocks, dropped = causal_lm.pack_documents([[1, 2, 3], [4], [5, 6]], 4, 0)
    assert blocks == [[1, 2, 3, 0], [4, 0, 5, 6]] and dropped == 1


# --------------------------------------------------------------------------- reference / unit


def test_reference_nsp_sampling_forces_random_for_single_segment_chunks():
    vocab = bert_mlm_nsp.BertVocabulary.from_tokens(RESERVED + list("abcdef"), SPECIALS)
    documents = [[[5, 6, 7, 8]], [[9, 10], [9, 9]]]
    for seed in range(20):
        rng = bert_mlm_nsp.seeded_rng(seed)
        instances = bert_mlm_nsp.create_instances_from_document(
            documents, 0, 32, 0.0, rng, vocab.cls_id, vocab.sep_id,
            reference_nsp_sampling=True)
        assert [i.is_random_next for i in instances] == [True]
    labels = {bert_mlm_nsp.create_instances_from_document(
        documents, 0, 32, 0.0, bert_mlm_nsp.seeded_rng(seed), CLS, SEP)[0].is_random_next
        for seed in range(20)}
    assert labels == {True, False}


def test_component_spec():
    from tfx.types import channel, standard_artifacts
    from lmfactory.components.artifacts import Vocabulary

    component = PretrainingExampleGen(
        examples=channel.Channel(type=standard_artifacts.Examples),
        vocabulary=channel.Channel(type=Vocabulary), objective="causal_lm",
        max_seq_length=256, whole_word_masking=True, masked_lm_prob=1)
    assert component.exec_properties["objective"] == "causal_lm"
    assert component.exec_properties["whole_word_masking"] == 1
    assert component.exec_properties["masked_lm_prob"] == 1.0
    assert "pretraining_examples" in component.outputs
    with pytest.raises(ValueError):
        PretrainingExampleGen(examples=channel.Channel(type=standard_artifacts.Examples),
                              vocabulary=channel.Channel(type=Vocabulary), max_seqlen=3)


def test_dropped_documents_and_sentences_are_counted_with_their_reason(corpus, tmp_path):
    """Every document or sentence the stage leaves out is counted, by reason."""
    texts = corpus["texts"][:20]
    bad = ["   \n  ", "\x07\n\x08\x01", texts[0] + "\n\x07"]  # empty; no tokens; one bad line
    write_examples(str(tmp_path / "examples" / "Split-train"), texts[1:] + bad)
    counts = generate_pretraining_examples(
        {"train": str(tmp_path / "examples" / "Split-train")}, corpus["wordpiece"],
        str(tmp_path / "out"), {"dupe_factor": 1}, beam_pipeline_args=BEAM_ARGS)["train"]
    assert counts["documents"] == 20  # texts[1:] and texts[0] with its bad line left out
    assert counts["dropped_empty_documents"] == 1
    assert counts["dropped_documents_without_tokens"] == 1
    assert counts["dropped_sentences_without_tokens"] == 3  # 2 in the dropped document
    clean = generate_pretraining_examples(
        {"train": corpus["inputs"]["train"]}, corpus["wordpiece"], str(tmp_path / "clean"),
        {"dupe_factor": 1}, beam_pipeline_args=BEAM_ARGS)["train"]
    assert not {key for key in clean if key.startswith("dropped_") and clean[key]}
