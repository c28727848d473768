"""The objectives added to PretrainingExampleGen, measured on a real corpus slice.

RoBERTa FULL-SENTENCES ``mlm`` (Liu et al. 2019 §4.2), ALBERT ``albert_mlm_sop`` sentence-order
prediction (Lan et al. 2020 §3.2) and n-gram masking (ALBERT §4.1), generated through the Beam
pipeline (``generate_pretraining_examples``, in-memory DirectRunner) from wikitext-2 valid
paragraphs, and checked against the source text. Vocabularies are written by hand as in
``test_pretraining_data.py`` (WordPiece from the slice's words; a RoBERTa-style byte-level BPE
with ``<s>``/``</s>``/``<mask>`` roles).
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import glob
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmfactory.components.pretraining_data import albert_mlm_sop, features, full_sentences
from lmfactory.components.pretraining_data import masking, objectives
from lmfactory.components.pretraining_data.bert_mlm_nsp import seeded_rng
from lmfactory.components.pretraining_data.component import PretrainingExampleGen
from lmfactory.components.pretraining_data.executor import (
    document_key, generate_pretraining_examples, shard_of)
from lmfactory.models.tokenizers import load_tokenizer, write_tokenizer_config
from test_pretraining_data import (BEAM_ARGS, CLS, MASK, PAD, SEP, as_text, gpt2_byte_symbols,
                                   read_records, unmasked_tokens, wikitext_documents,
                                   write_examples, write_wordpiece_vocab)
from mask_stats import mean_mask_overlap, two_epochs

NUM_DOCUMENTS = 600
NUM_BPE_DOCUMENTS = 80
P_NGRAM = [6 / 11, 3 / 11, 2 / 11]  # ALBERT §4.1: p(n) = (1/n) / (1 + 1/2 + 1/3)
ROBERTA_SPECIALS = {"cls": "<s>", "pad": "<pad>", "sep": "</s>", "unk": "<unk>",
                    "mask": "<mask>", "end_of_text": "</s>"}


# --------------------------------------------------------------------------- corpus


def write_roberta_bpe_vocab(vocab_dir: str) -> list:
    """RoBERTa-style byte-level BPE: <s> <pad> </s> <unk>, GPT-2 byte symbols, merges, <mask>."""
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("Ġ", "a"), ("i", "n"), ("e", "r"),
              ("Ġ", "s"), ("Ġ", "o"), ("o", "n")]
    tokens = (["<s>", "<pad>", "</s>", "<unk>"] + gpt2_byte_symbols()
              + [a + b for a, b in merges] + ["<mask>"])
    os.makedirs(vocab_dir, exist_ok=True)
    with open(os.path.join(vocab_dir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({t: i for i, t in enumerate(tokens)}, f, ensure_ascii=False)
    with open(os.path.join(vocab_dir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    write_tokenizer_config(vocab_dir, {
        "kind": "bpe", "vocabulary_file": "vocab.json", "merges_file": "merges.txt",
        "special_tokens": ROBERTA_SPECIALS})
    return tokens


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("objectives")
    texts = wikitext_documents(NUM_DOCUMENTS)
    assert len(texts) == NUM_DOCUMENTS
    write_examples(str(root / "examples" / "Split-train"), texts)
    write_examples(str(root / "bpe_examples" / "Split-train"), texts[:NUM_BPE_DOCUMENTS])
    # A larger word list than the BERT tests use: shorter sentences, so 512-token
    # FULL-SENTENCES blocks can be filled with whole sentences.
    write_wordpiece_vocab(str(root / "wordpiece"), texts, num_words=6000)
    bpe_tokens = write_roberta_bpe_vocab(str(root / "bpe"))
    tokenizer = load_tokenizer(str(root / "wordpiece"))
    sentences = [doc.split("\n") for doc in texts]
    flat = tokenizer([s for doc in sentences for s in doc])  # eager call -> Python lists
    documents, start = [], 0
    for doc in sentences:
        documents.append([ids for ids in flat[start:start + len(doc)]])
        start += len(doc)
    vocabulary = tokenizer.get_vocabulary()
    return {"root": root, "texts": texts, "documents": documents,
            "keys": [document_key(t.encode()) for t in texts],
            "wordpiece": str(root / "wordpiece"), "bpe": str(root / "bpe"),
            "is_piece": np.array([t.startswith("##") for t in vocabulary]),
            "bpe_tokens": bpe_tokens}


def generate(corpus, output_uri, vocab="wordpiece", examples="examples", **config):
    counts = generate_pretraining_examples(
        {"train": str(corpus["root"] / examples / "Split-train")}, corpus[vocab],
        str(output_uri), config, beam_pipeline_args=BEAM_ARGS)
    print(f"\n[generation {config}] counts={counts}")
    return read_records(str(output_uri / "Split-train")), counts["train"]


def canonical_documents(corpus, num_shards=1, shard=0) -> list:
    """The documents of one shard in the executor's canonical order (by content hash)."""
    keyed = sorted((key, doc) for key, doc in zip(corpus["keys"], corpus["documents"])
                   if shard_of(key, num_shards) == shard)
    return [doc for _, doc in keyed]


class DocumentIndex:
    """Finds token sequences in documents (token ids as ``,1,2,`` text), with offsets."""

    def __init__(self, documents):
        self.documents = documents
        self.texts = [as_text([t for s in doc for t in s]) for doc in documents]
        self.boundaries = []
        for doc in documents:
            offsets = [0]
            for sentence in doc:
                offsets.append(offsets[-1] + len(sentence))
            self.boundaries.append(set(offsets))
        self.starts = []
        joined, position = [], 0
        for text in self.texts:
            self.starts.append(position)
            joined.append(text)
            position += len(text) + 1
        self.joined = "|".join(joined)

    def occurrences(self, tokens) -> list:
        """``(document, token offset)`` of every occurrence of ``tokens``."""
        pattern, found, at = as_text(tokens), [], -1
        while True:
            at = self.joined.find(pattern, at + 1)
            if at < 0:
                return found
            doc = bisect.bisect_right(self.starts, at) - 1
            local = at - self.starts[doc]
            found.append((doc, self.texts[doc].count(",", 0, local)))

    def whole_sentences(self, doc, offset, length) -> bool:
        return offset in self.boundaries[doc] and offset + length in self.boundaries[doc]


def masked_spans(record, words) -> list:
    """Maximal runs of masked positions, each as the number of whole words it covers;
    asserts that every run starts at a word start and ends at a word end."""
    positions = sorted(p for p, w in zip(record["masked_lm_positions"],
                                         record["masked_lm_weights"]) if w)
    runs = []
    for position in positions:
        if runs and runs[-1][-1] == position - 1:
            runs[-1].append(position)
        else:
            runs.append([position])
    word_of = {p: i for i, word in enumerate(words) for p in word}
    spans = []
    for run in runs:
        first, last = word_of[run[0]], word_of[run[-1]]
        assert words[first][0] == run[0] and words[last][-1] == run[-1], \
            "a masked span does not cover whole words"
        assert run == [p for word in words[first:last + 1] for p in word]
        spans.append(last - first + 1)
    return spans


def word_groups(tokens, is_continuation, specials) -> list:
    """Words of a sequence: a piece joins the word before it when it is a continuation piece
    right after it (specials are never part of a word)."""
    words = []
    for position, token in enumerate(tokens):
        if token in specials:
            continue
        if is_continuation(token) and words and words[-1][-1] == position - 1:
            words[-1].append(position)
        else:
            words.append([position])
    return words


def assert_rates(records, maskable_of, label="") -> dict:
    """BERT §3.1: ~15% of the maskable tokens predicted; 80% mask / 10% random / 10% kept."""
    selected = maskable = masked = randomized = kept = 0
    for record in records:
        count = int(sum(record["masked_lm_weights"]))
        positions = record["masked_lm_positions"][:count]
        assert positions == sorted(positions) and len(set(positions)) == count
        original = unmasked_tokens(record)
        maskable += maskable_of(original)
        selected += count
        for position in positions:
            observed = record["input_ids"][position]
            masked += observed == MASK
            kept += observed == original[position]
            randomized += observed not in (MASK, original[position])
            assert original[position] not in (PAD, CLS, SEP)
            assert observed not in (PAD, CLS, SEP, 1)
    rate = selected / maskable
    shares = [masked / selected, randomized / selected, kept / selected]
    print(f"\n[{label} masking] selected {rate:.4f} of {maskable} tokens; mask/random/kept = "
          f"{shares[0]:.4f}/{shares[1]:.4f}/{shares[2]:.4f} of {selected}")
    assert abs(rate - 0.15) <= 0.01
    for share, expected in zip(shares, (0.8, 0.1, 0.1)):
        assert abs(share - expected) <= 0.02
    return {"selected": selected, "maskable": maskable}


def assert_span_distribution(span_lengths, counts, label="", min_spans=2000) -> None:
    """ALBERT §4.1: span lengths follow p(n) = (1/n) / sum 1/k, n <= 3; the generator's
    counts agree with the spans measured in the records."""
    histogram = collections.Counter(span_lengths)
    total = sum(histogram.values())
    shares = [histogram[n] / total for n in (1, 2, 3)]
    print(f"\n[{label} n-gram] {total} spans; n=1/2/3 shares = "
          + "/".join(f"{s:.4f}" for s in shares) + " (expected 0.5455/0.2727/0.1818)")
    assert set(histogram) <= {1, 2, 3} and total > min_spans
    for share, expected in zip(shares, P_NGRAM):
        assert abs(share - expected) <= 0.03
    assert [counts[f"masked_spans_{n}"] for n in (1, 2, 3)] == [histogram[n] for n in (1, 2, 3)]


# --------------------------------------------------------------------------- mlm (RoBERTa)


@pytest.fixture(scope="module")
def mlm_run(corpus, tmp_path_factory):
    output = tmp_path_factory.mktemp("mlm")
    records, counts = generate(corpus, output, objective="mlm", max_seq_length=512,
                               max_predictions_per_seq=80, dupe_factor=3, random_seed=21)
    return {"uri": output, "records": records, "counts": counts}


def block_pieces(record) -> list:
    """The content of a ``cls … sep`` block cut at its inner separators."""
    tokens = unmasked_tokens(record)
    assert tokens[0] == CLS and tokens[-1] == SEP and CLS not in tokens[1:]
    pieces = [[]]
    for token in tokens[1:-1]:
        if token == SEP:
            pieces.append([])
        else:
            pieces[-1].append(token)
    assert all(pieces), "a separator at the start or end of a block, or two in a row"
    return pieces


def assert_full_sentence_block(pieces, index: DocumentIndex) -> None:
    """One piece: whole consecutive sentences of one document. Several: the end of document d,
    documents d+1.. whole, the start of the next one (canonical order), each boundary marked
    by exactly one separator."""
    if len(pieces) == 1:
        assert any(index.whole_sentences(d, o, len(pieces[0]))
                   for d, o in index.occurrences(pieces[0])), "not whole sentences of a document"
        return
    documents = index.documents
    for d, offset in index.occurrences(pieces[0]):
        length = sum(len(s) for s in documents[d])
        if offset + len(pieces[0]) != length or not index.whole_sentences(d, offset, 0):
            continue
        if d + len(pieces) - 1 >= len(documents):
            continue
        middle_ok = all(as_text(piece) == index.texts[d + k]
                        for k, piece in enumerate(pieces[1:-1], start=1))
        last_doc = d + len(pieces) - 1
        last_ok = (index.texts[last_doc].startswith(as_text(pieces[-1]))
                   and len(pieces[-1]) in index.boundaries[last_doc])
        if middle_ok and last_ok:
            return
    raise AssertionError("a block's separators are not at document boundaries")


def test_mlm_full_sentences_layout(mlm_run, corpus):
    """RoBERTa §4.2 FULL-SENTENCES: whole sentences, contiguous across documents, one extra
    separator between documents, blocks filled to max_seq_length."""
    records, counts = mlm_run["records"], mlm_run["counts"]
    config = features.read_pretraining_config(str(mlm_run["uri"]))
    assert config["objective"] == "mlm" and config["tokenizer_kind"] == "wordpiece"
    assert counts["instances"] == len(records) == 3 * counts["blocks"]
    assert counts["split_sentences"] == 0  # no sentence of this slice exceeds 510 tokens
    index = DocumentIndex(canonical_documents(corpus))
    content_tokens = separators = 0
    fills = []
    for record in records:
        assert set(record) == {"input_ids", "input_mask", "masked_lm_positions",
                               "masked_lm_ids", "masked_lm_weights"}
        length = sum(record["input_mask"])
        assert record["input_mask"] == [1] * length + [0] * (512 - length)
        assert record["input_ids"][length:] == [PAD] * (512 - length)
        pieces = block_pieces(record)
        assert_full_sentence_block(pieces, index)
        content_tokens += sum(len(p) for p in pieces)
        separators += len(pieces) - 1
        fills.append(length / 512)
    # Every token of every document is in exactly one block per dupe round.
    corpus_tokens = sum(len(s) for doc in corpus["documents"] for s in doc)
    assert content_tokens == 3 * corpus_tokens
    assert separators == 3 * counts["document_separators"] and separators > 3 * 200
    fills.sort()
    full = fills[3:]  # one shard: its last block is shorter, once per dupe round
    print(f"\n[full-sentences] {len(records)} blocks, mean fill {np.mean(full):.4f} "
          f"(last blocks {fills[:3]}), {separators // 3} document separators per round")
    assert np.mean(full) > 0.95


def test_mlm_masking_rates(mlm_run):
    measured = assert_rates(mlm_run["records"],
                            lambda tokens: sum(t not in (CLS, SEP) for t in tokens), "mlm")
    counts = mlm_run["counts"]
    assert counts["masked_lm_predictions"] == measured["selected"]
    assert counts["tokens"] == measured["maskable"] and counts["capped_instances"] == 0


def test_mlm_make_dataset_contract(mlm_run):
    config = features.read_pretraining_config(str(mlm_run["uri"]))
    pattern = str(mlm_run["uri"] / "Split-train" / "*.gz")
    dataset = features.make_dataset(pattern, config, batch_size=8, shuffle=True, repeat=True,
                                    seed=3)
    x_spec, y_spec, w_spec = dataset.element_spec
    assert {k: (v.shape.as_list(), v.dtype) for k, v in x_spec.items()} == {
        "token_ids": ([8, 512], tf.int32), "padding_mask": ([8, 512], tf.bool),
        "segment_ids": ([8, 512], tf.int32), "mask_positions": ([8, 80], tf.int32)}
    assert set(y_spec) == {"mlm"} and y_spec["mlm"].shape.as_list() == [8, 80]
    assert set(w_spec) == {"mlm"} and w_spec["mlm"].dtype == tf.float32
    x, y, w = next(iter(dataset))
    assert (x["segment_ids"].numpy() == 0).all() and (x["token_ids"].numpy()[:, 0] == CLS).all()
    gathered = np.take_along_axis(x["token_ids"].numpy(), x["mask_positions"].numpy(), axis=1)
    weights = w["mlm"].numpy()
    assert 0.7 < (gathered == MASK)[weights == 1].mean() < 0.9
    assert not np.isin(y["mlm"].numpy()[weights == 1], [PAD, CLS, SEP]).any()


def test_mlm_dynamic_masking(corpus, tmp_path):
    """RoBERTa §4.1: unmasked records, a fresh mask in every epoch of training."""
    records, counts = generate(corpus, tmp_path, objective="mlm", max_seq_length=512,
                               max_predictions_per_seq=80, dupe_factor=1, dynamic_masking=True)
    assert records and all(set(r) == {"input_ids", "input_mask"} for r in records)
    assert all(MASK not in r["input_ids"] for r in records)
    config = features.read_pretraining_config(str(tmp_path))
    keras.utils.set_random_seed(0)  # run_fn seeds everything; masks must still change
    passes = two_epochs(str(tmp_path / "Split-train" / "*.gz"), config)
    # A fresh mask each pass: the selected positions of two passes barely overlap.
    assert mean_mask_overlap(passes[0], passes[1]) < 0.35
    selected = 0
    for x, y, w in passes[0]:
        assert set(y) == {"mlm"} and (x["segment_ids"] == 0).all()
        for row in range(len(x["token_ids"])):
            count = int(w["mlm"][row].sum())
            assert not np.isin(y["mlm"][row][:count], [PAD, CLS, SEP]).any()
            selected += count
    maskable = sum(sum(t not in (PAD, CLS, SEP) for t in r["input_ids"]) for r in records)
    assert maskable == counts["tokens"]
    rate = selected / maskable
    print(f"\n[mlm dynamic] selected {rate:.4f} of {maskable} tokens")
    assert abs(rate - 0.15) <= 0.01


def test_mlm_determinism_and_shards(corpus, tmp_path):
    """Same seed -> identical bytes; other seed -> other masks; blocks stay in their shard."""
    config = dict(objective="mlm", max_seq_length=512, max_predictions_per_seq=80,
                  dupe_factor=1, num_shards=2)
    for name, seed in (("first", 5), ("second", 5), ("other", 6)):
        generate(corpus, tmp_path / name, random_seed=seed, **config)
    files = {name: sorted(glob.glob(str(tmp_path / name / "Split-train" / "*.gz")))
             for name in ("first", "second", "other")}
    contents = {name: [open(p, "rb").read() for p in paths] for name, paths in files.items()}
    assert len(files["first"]) == 2 and contents["first"] == contents["second"]
    assert contents["first"] != contents["other"]
    for shard, path in enumerate(files["first"]):
        index = DocumentIndex(canonical_documents(corpus, 2, shard))
        for record in read_records_of(path):
            assert_full_sentence_block(block_pieces(record), index)


def read_records_of(path: str) -> list:
    """The records of one shard file."""
    records = []
    for raw in tf.data.TFRecordDataset(path, compression_type="GZIP").as_numpy_iterator():
        feature = tf.train.Example.FromString(raw).features.feature
        records.append({name: list(getattr(f, f.WhichOneof("kind")).value)
                        for name, f in feature.items()})
    return records


# --------------------------------------------------------------------------- ALBERT SOP


@pytest.fixture(scope="module")
def sop_run(corpus, tmp_path_factory):
    """ALBERT's setting: SOP with 3-gram masking (§4.1), 128-token sequences."""
    output = tmp_path_factory.mktemp("sop")
    records, counts = generate(corpus, output, objective="albert_mlm_sop", max_seq_length=128,
                               max_predictions_per_seq=24, dupe_factor=8, ngram_masking=3,
                               random_seed=9)
    return {"uri": output, "records": records, "counts": counts}


def sop_segments(record):
    tokens = unmasked_tokens(record)
    length = len(tokens)
    first_sep = tokens.index(SEP)
    assert tokens[0] == CLS and tokens[-1] == SEP
    assert [i for i, t in enumerate(tokens) if t in (CLS, SEP)] == [0, first_sep, length - 1]
    assert 2 <= first_sep <= length - 3
    assert record["segment_ids"] == ([0] * (first_sep + 1) + [1] * (length - first_sep - 1)
                                     + [0] * (128 - length))
    return tokens[1:first_sep], tokens[first_sep + 1:-1]


def test_sop_labels_and_order(sop_run, corpus):
    """ALBERT §3.2: 50% swapped; both segments from one document; the label says which
    segment comes first in the document."""
    records, counts = sop_run["records"], sop_run["counts"]
    assert "next_sentence_labels" not in records[0]
    labels = [r["sentence_order_labels"][0] for r in records]
    swapped_share = sum(labels) / len(labels)
    print(f"\n[sop] swapped share {swapped_share:.4f} of {len(labels)} instances")
    assert len(labels) > 5000 and abs(swapped_share - 0.5) <= 0.02
    assert counts["swapped"] == sum(labels) and counts["instances"] == len(labels)
    index = DocumentIndex(corpus["documents"])
    unambiguous = 0
    for record, label in zip(records, labels):
        a, b = sop_segments(record)
        where_a, where_b = index.occurrences(a), index.occurrences(b)
        in_order = any(da == db and oa + len(a) <= ob for da, oa in where_a for db, ob in where_b)
        reversed_ = any(da == db and ob + len(b) <= oa for da, oa in where_a for db, ob in where_b)
        if label == albert_mlm_sop.IN_ORDER:
            assert in_order, "an in-order pair whose B does not follow A in one document"
        else:
            assert reversed_, "a swapped pair whose B does not come before A in one document"
        if len(where_a) == 1 and len(where_b) == 1:  # the position is unique: order is strict
            unambiguous += 1
            assert (in_order, reversed_) == ((True, False) if label == 0 else (False, True))
    assert unambiguous > 0.8 * len(records)


def test_sop_ngram_masking(sop_run, corpus):
    """ALBERT §4.1 n-gram masking: whole-word spans with p(n), ~15% of the tokens, 80/10/10
    per token, no two spans touching."""
    records = sop_run["records"]
    assert_rates(records, lambda tokens: len(tokens) - 3, "sop 3-gram")
    is_piece = corpus["is_piece"]
    spans = []
    for record in records:
        tokens = unmasked_tokens(record)
        words = word_groups(tokens, lambda t: bool(is_piece[t]), (CLS, SEP))
        spans.extend(masked_spans(record, words))
    assert_span_distribution(spans, sop_run["counts"], "sop")


def test_sop_make_dataset_contract(sop_run):
    config = features.read_pretraining_config(str(sop_run["uri"]))
    assert config["ngram_masking"] == 3
    dataset = features.make_dataset(str(sop_run["uri"] / "Split-train" / "*.gz"), config,
                                    batch_size=16, shuffle=False, repeat=False)
    x_spec, y_spec, _ = dataset.element_spec
    assert set(x_spec) == {"token_ids", "padding_mask", "segment_ids", "mask_positions"}
    assert set(y_spec) == {"mlm", "sop"} and y_spec["sop"].dtype == tf.int32
    labels = np.concatenate([y["sop"] for _, y, _ in dataset.as_numpy_iterator()])
    expected = [r["sentence_order_labels"][0] for r in sop_run["records"]]
    assert labels.shape == (len(expected),) and sorted(labels.tolist()) == sorted(expected)
    x, _, _ = next(iter(dataset))
    assert (x["segment_ids"].numpy().max(axis=1) == 1).all()


# --------------------------------------------------------------------------- n-gram masking


def test_ngram_masking_bert(corpus, tmp_path):
    """bert_mlm_nsp with n-gram masking: the same span law and rates on NSP pairs."""
    records, counts = generate(corpus, tmp_path, max_seq_length=128, max_predictions_per_seq=24,
                               dupe_factor=3, ngram_masking=3, random_seed=4)
    assert "next_sentence_labels" in records[0]
    assert_rates(records, lambda tokens: len(tokens) - 3, "bert 3-gram")
    is_piece = corpus["is_piece"]
    spans = []
    for record in records:
        words = word_groups(unmasked_tokens(record), lambda t: bool(is_piece[t]), (CLS, SEP))
        spans.extend(masked_spans(record, words))
    assert_span_distribution(spans, counts, "bert")


def test_ngram_and_whole_words_with_byte_level_bpe(corpus, tmp_path):
    """RoBERTa vocabulary (<s>/</s> roles, Ġ word starts): mlm blocks, 3-gram spans of whole
    BPE words, and whole-word masking with the same word rule."""
    tokens_of = corpus["bpe_tokens"]
    cls_id, sep_id, mask_id = (tokens_of.index(t) for t in ("<s>", "</s>", "<mask>"))
    # A piece continues a word unless it starts with Ġ; specials (e.g. <unk>, which
    # wikitext holds as text) are words of their own.
    specials = set(ROBERTA_SPECIALS.values())
    continuation = np.array([not t.startswith("Ġ") and t not in specials for t in tokens_of])
    records, counts = generate(corpus, tmp_path / "ngram", vocab="bpe", examples="bpe_examples",
                               objective="mlm", max_seq_length=256, max_predictions_per_seq=64,
                               ngram_masking=3, dupe_factor=2, random_seed=2)
    spans = []
    selected = maskable = masked = 0
    for record in records:
        tokens = unmasked_tokens(record)
        assert tokens[0] == cls_id and tokens[-1] == sep_id
        words = word_groups(tokens, lambda t: bool(continuation[t]), (cls_id, sep_id))
        spans.extend(masked_spans(record, words))
        count = int(sum(record["masked_lm_weights"]))
        selected += count
        maskable += sum(len(w) for w in words)
        masked += sum(record["input_ids"][p] == mask_id
                      for p in record["masked_lm_positions"][:count])
    print(f"\n[bpe 3-gram] selected {selected / maskable:.4f}, mask share {masked / selected:.4f}")
    assert abs(selected / maskable - 0.15) <= 0.01 and abs(masked / selected - 0.8) <= 0.02
    assert_span_distribution(spans, counts, "bpe", min_spans=1500)

    records, _ = generate(corpus, tmp_path / "wwm", vocab="bpe", examples="bpe_examples",
                          objective="mlm", max_seq_length=256, max_predictions_per_seq=64,
                          whole_word_masking=True, dupe_factor=1, random_seed=2)
    multi_piece = 0
    for record in records:
        tokens = unmasked_tokens(record)
        chosen = {p for p, w in zip(record["masked_lm_positions"],
                                    record["masked_lm_weights"]) if w}
        for word in word_groups(tokens, lambda t: bool(continuation[t]), (cls_id, sep_id)):
            hit = [p in chosen for p in word]
            assert all(hit) or not any(hit), "a BPE word was only partly masked"
            multi_piece += len(word) > 1 and all(hit)
    assert multi_piece > 500


def test_ngram_and_whole_words_with_sentencepiece(corpus, tmp_path):
    """ALBERT vocabulary (SentencePiece, ▁ word starts, CONTRACTS §2): SOP with 3-gram spans
    of whole words, and whole-word masking with the same word rule."""
    import io

    import sentencepiece

    vocab_dir = tmp_path / "spm"
    vocab_dir.mkdir()
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter([line for text in corpus["texts"][:NUM_BPE_DOCUMENTS]
                                for line in text.split("\n")]),
        model_writer=model, vocab_size=1500, model_type="unigram", pad_id=0, unk_id=1,
        bos_id=-1, eos_id=-1, pad_piece="<pad>", unk_piece="<unk>",
        control_symbols=["[CLS]", "[SEP]", "[MASK]"], minloglevel=2)
    (vocab_dir / "spm.model").write_bytes(model.getvalue())
    write_tokenizer_config(str(vocab_dir), {
        "kind": "sentencepiece", "model_file": "spm.model", "lowercase": True,
        "strip_accents": True, "special_tokens": {"pad": "<pad>", "unk": "<unk>",
                                                  "cls": "[CLS]", "sep": "[SEP]",
                                                  "mask": "[MASK]"}})
    pieces = load_tokenizer(str(vocab_dir)).get_vocabulary()
    assert pieces[:5] == ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
    corpus = dict(corpus, spm=str(vocab_dir))
    continuation = np.array([i > 4 and not p.startswith("▁") for i, p in enumerate(pieces)])
    records, counts = generate(corpus, tmp_path / "ngram", vocab="spm", examples="bpe_examples",
                               objective="albert_mlm_sop", max_seq_length=128,
                               max_predictions_per_seq=24, ngram_masking=3, dupe_factor=4)
    spans = []
    for record in records:
        words = word_groups(unmasked_tokens(record), lambda t: bool(continuation[t]), (2, 3))
        spans.extend(masked_spans(record, words))
    assert_span_distribution(spans, counts, "sentencepiece", min_spans=1500)
    records, _ = generate(corpus, tmp_path / "wwm", vocab="spm", examples="bpe_examples",
                          objective="albert_mlm_sop", whole_word_masking=True, dupe_factor=1)
    multi_piece = 0
    for record in records:
        chosen = {p for p, w in zip(record["masked_lm_positions"],
                                    record["masked_lm_weights"]) if w}
        for word in word_groups(unmasked_tokens(record), lambda t: bool(continuation[t]),
                                (2, 3)):
            hit = [p in chosen for p in word]
            assert all(hit) or not any(hit), "a SentencePiece word was only partly masked"
            multi_piece += len(word) > 1 and all(hit)
    assert multi_piece > 100


# --------------------------------------------------------------------------- units


def test_word_boundary_rules():
    assert masking.is_continuation_piece("##ing", "wordpiece")
    assert not masking.is_continuation_piece("ing", "wordpiece")
    assert masking.is_continuation_piece("ing", "bpe")
    assert not masking.is_continuation_piece("Ġthe", "bpe")
    assert masking.is_continuation_piece("ing", "sentencepiece")
    assert not masking.is_continuation_piece("▁the", "sentencepiece")
    with pytest.raises(ValueError, match="kind"):
        masking.is_continuation_piece("a", "unigram")
    pieces = ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]", "▁the", "▁ca", "t", "s", ",",
              "<s>"]
    specials = {"pad": "<pad>", "unk": "<unk>", "cls": "[CLS]", "sep": "[SEP]",
                "mask": "[MASK]"}
    vocab = masking.BertVocabulary.from_tokens(pieces, specials, kind="sentencepiece")
    # <s> (a SentencePiece control symbol with no role) is neither a piece nor a replacement.
    assert vocab.continuation_ids == {7, 8, 9} and vocab.replacement_ids == (5, 6, 7, 8, 9)
    # [CLS] ▁the ▁ca t s [SEP] t ,  -> the | cats | t,  (no word across [SEP])
    groups = masking.candidate_groups([2, 5, 6, 7, 8, 3, 7, 9], vocab, True)
    assert groups == [[1], [2, 3, 4], [6, 7]]
    assert masking.candidate_groups([2, 5, 6, 7, 8, 3], vocab, False) == [[1], [2], [3], [4]]
    bpe = masking.BertVocabulary.from_tokens(
        ["<s>", "<pad>", "</s>", "<unk>", "Ġthe", "Ġca", "t", "<mask>"],
        {k: v for k, v in ROBERTA_SPECIALS.items()}, kind="bpe")
    assert (bpe.cls_id, bpe.sep_id, bpe.mask_id, bpe.pad_id) == (0, 2, 7, 1)
    assert bpe.continuation_ids == {6} and bpe.replacement_ids == (4, 5, 6)
    with pytest.raises(ValueError, match="albert_mlm_sop needs a 'mask'"):
        masking.BertVocabulary.from_tokens(["<s>", "</s>", "<pad>"],
                                           {"cls": "<s>", "sep": "</s>", "pad": "<pad>"},
                                           kind="bpe", objective="albert_mlm_sop")


def test_ngram_probabilities_and_spans_unit():
    assert masking.ngram_probabilities(3) == pytest.approx(P_NGRAM)
    assert masking.ngram_probabilities(1) == [1.0]
    with pytest.raises(ValueError):
        masking.ngram_probabilities(0)
    vocab = masking.BertVocabulary.from_tokens(
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(50)],
        {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"})
    tokens = [CLS] + list(range(5, 55)) + [SEP] + list(range(5, 45)) + [SEP]
    for seed in range(30):
        masked = masking.create_masked_lm_predictions(tokens, vocab, 0.15, 40, False,
                                                      seeded_rng(seed), ngram_masking=3)
        positions = masked.positions
        assert len(positions) <= 40 and not {0, 51, 92} & set(positions)
        assert sum(masked.span_lengths) == len(positions)  # one-piece words: n = tokens
        runs = np.split(np.array(positions), np.where(np.diff(positions) != 1)[0] + 1)
        assert sorted(len(r) for r in runs) == sorted(masked.span_lengths)


def test_pack_full_sentences_unit():
    cls_id, sep_id = 2, 3
    # capacity 6: doc 0 fills a block; doc 1 does not fit with its separator; doc 2's only
    # sentence is longer than a block and is cut.
    documents = [[[5, 6], [7, 8, 9]], [[10]], [[11] * 7]]
    packed = full_sentences.pack_full_sentences(documents, 8, cls_id, sep_id)
    assert packed.blocks == [[2, 5, 6, 7, 8, 9, 3], [2, 10, 3], [2] + [11] * 6 + [3], [2, 11, 3]]
    assert (packed.document_separators, packed.split_sentences) == (0, 1)
    packed = full_sentences.pack_full_sentences([[[5]], [[6, 7]], [[8], [9]]], 8, 2, 3)
    assert packed.blocks == [[2, 5, 3, 6, 7, 3, 8, 3], [2, 9, 3]]
    assert packed.document_separators == 2


def test_sop_instances_unit():
    document = [[5, 6, 7], [8, 9]]
    seen = set()
    for seed in range(40):
        instances = albert_mlm_sop.create_instances_from_document(
            document, 32, 0.0, seeded_rng(seed), CLS, SEP)
        assert len(instances) == 1
        instance = instances[0]
        expected = ([2, 5, 6, 7, 3, 8, 9, 3] if not instance.is_swapped
                    else [2, 8, 9, 3, 5, 6, 7, 3])
        assert instance.tokens == expected
        seen.add(instance.is_swapped)
    assert seen == {True, False}
    # A single sentence is split inside (never a random other document); one token: nothing.
    a, b = albert_mlm_sop.split_chunk([[5, 6, 7, 8]], seeded_rng(1))
    assert a + b == [5, 6, 7, 8] and a and b
    assert albert_mlm_sop.split_chunk([[5]], seeded_rng(1)) is None


def test_config_validation():
    assert {"bert_mlm_nsp", "mlm", "albert_mlm_sop", "causal_lm"} <= set(objectives.names())
    assert [objectives.get(n).causal for n in ("bert_mlm_nsp", "mlm", "causal_lm")] == [
        False, False, True]
    resolved = features.resolve_config({"objective": "albert_mlm_sop", "ngram_masking": 3})
    assert resolved["ngram_masking"] == 3 and features.DEFAULT_CONFIG["ngram_masking"] == 0
    for bad, message in (({"objective": "causal_lm", "ngram_masking": 3}, "masked-LM"),
                         ({"ngram_masking": 3, "dynamic_masking": True}, "static masking"),
                         ({"ngram_masking": -1}, ">= 0"), ({"ngram_masking": 2.5}, "integer"),
                         ({"ngram_masking": True}, "integer"),
                         ({"objective": "roberta"}, "objective must be one of")):
        with pytest.raises(ValueError, match=message):
            features.resolve_config(bad)
    spec = features.feature_spec({"objective": "mlm", "max_seq_length": 16,
                                  "max_predictions_per_seq": 4})
    assert "segment_ids" not in spec and "masked_lm_ids" in spec
    spec = features.feature_spec({"objective": "albert_mlm_sop", "max_seq_length": 16,
                                  "max_predictions_per_seq": 4, "dynamic_masking": True})
    assert "sentence_order_labels" in spec and "masked_lm_ids" not in spec


def test_component_accepts_new_objectives():
    from tfx.types import channel, standard_artifacts
    from lmfactory.components.artifacts import Vocabulary

    def make(**config):
        return PretrainingExampleGen(examples=channel.Channel(type=standard_artifacts.Examples),
                                     vocabulary=channel.Channel(type=Vocabulary), **config)

    component = make(objective="albert_mlm_sop", ngram_masking=3)
    assert component.exec_properties["objective"] == "albert_mlm_sop"
    assert component.exec_properties["ngram_masking"] == 3
    assert make(objective="mlm").exec_properties["objective"] == "mlm"
    with pytest.raises(ValueError, match="ngram_masking"):
        make(objective="causal_lm", ngram_masking=2)


# --------------------------------------------------------------------------- registry


REVERSED_LM = "reversed_lm"


def _reversed_lm_pad_id(tokenizer, tokenizer_config: dict) -> int:
    return int(tokenizer.token_to_id(tokenizer_config["special_tokens"]["pad"]))


def _reversed_lm_shard(documents, pad_id, config, seed_scope):
    """One record per sentence: its ids right to left (truncated to L, padded), its length."""
    length = int(config["max_seq_length"])
    serialized, tokens = [], 0
    for document in documents:
        for sentence in document:
            ids = list(reversed(sentence))[:length]
            tokens += len(ids)
            example = tf.train.Example(features=tf.train.Features(feature={
                "input_ids": masking.int_feature(masking.padded(ids, length, pad_id)),
                "length": masking.int_feature([len(ids)])}))
            serialized.append(example.SerializeToString(deterministic=True))
    return serialized, {"sentences": len(serialized), "tokens": tokens}


def _reversed_lm_spec(config: dict) -> dict:
    length = int(config["max_seq_length"])
    return {"input_ids": tf.io.FixedLenFeature([length], tf.int64),
            "length": tf.io.FixedLenFeature([1], tf.int64)}


def _reversed_lm_converter(config: dict):
    def batch(parsed):
        ids = tf.cast(parsed["input_ids"], tf.int32)
        positions = tf.range(tf.shape(ids)[1] - 1)[tf.newaxis, :]
        mask = positions < tf.cast(parsed["length"], tf.int32) - 1
        return ({"token_ids": ids[:, :-1], "padding_mask": mask}, ids[:, 1:],
                tf.cast(mask, tf.float32))

    return batch


def _reversed_lm_checks(config: dict) -> None:
    if config["dynamic_masking"]:
        raise ValueError("reversed_lm has no masked-LM targets; set dynamic_masking off")


def reversed_lm_objective() -> objectives.Objective:
    """A backward LM (ELMo, Peters et al. 2018 §3.1: predict the previous token from the
    future context), written only here: one record per sentence, right to left."""
    return objectives.Objective(
        name=REVERSED_LM, document=objectives.SENTENCES,
        vocabulary_state=_reversed_lm_pad_id, shard_examples=_reversed_lm_shard,
        feature_spec=_reversed_lm_spec, converter=_reversed_lm_converter, causal=True,
        check_config=_reversed_lm_checks,
        vocabulary_record=lambda pad_id: {"reversed_lm_pad_id": pad_id},
        paper="Peters et al. 2018, Deep contextualized word representations, §3.1")


def test_registered_objective_runs_end_to_end(tmp_path):
    """An objective registered from outside the folder is accepted by resolve_config, written
    by the Beam pipeline and read back by make_dataset, with no edit to the package."""
    texts = ["The cat sat on the mat .\nIt was warm .",
             "Dogs bark at night .\nThe moon is bright .\nNobody sleeps .",
             "A short one .", "Rivers run to the sea .\nThe sea is salt ."]
    write_examples(str(tmp_path / "examples" / "Split-train"), texts)
    write_wordpiece_vocab(str(tmp_path / "vocab"), texts)
    tokenizer = load_tokenizer(str(tmp_path / "vocab"))
    sentences = [s for text in texts for s in text.split("\n")]
    length = 6
    expected = sorted(list(reversed(ids))[:length] for ids in tokenizer(sentences))
    assert REVERSED_LM not in objectives.names()
    with objectives.registered(reversed_lm_objective()):
        assert REVERSED_LM in objectives.names()
        with pytest.raises(ValueError, match="already registered"):
            objectives.register(dataclasses.replace(reversed_lm_objective(), causal=False))
        resolved = features.resolve_config({"objective": REVERSED_LM, "max_seq_length": length})
        assert resolved["objective"] == REVERSED_LM
        with pytest.raises(ValueError, match="reversed_lm has no masked-LM"):
            features.resolve_config({"objective": REVERSED_LM, "dynamic_masking": True})
        counts = generate_pretraining_examples(
            {"train": str(tmp_path / "examples" / "Split-train")}, str(tmp_path / "vocab"),
            str(tmp_path / "out"), {"objective": REVERSED_LM, "max_seq_length": length},
            beam_pipeline_args=BEAM_ARGS)
        assert counts["train"]["sentences"] == len(sentences) == 8
        assert counts["train"]["documents"] == len(texts)
        config = features.read_pretraining_config(str(tmp_path / "out"))
        assert config["objective"] == REVERSED_LM and config["reversed_lm_pad_id"] == PAD
        records = read_records(str(tmp_path / "out" / "Split-train"))
        assert sorted(r["input_ids"][:r["length"][0]] for r in records) == expected
        dataset = features.make_dataset(str(tmp_path / "out" / "Split-train" / "*.gz"), config,
                                        batch_size=3, shuffle=False, repeat=False)
        batches = list(dataset)
        assert sum(int(x["token_ids"].shape[0]) for x, _, _ in batches) == len(sentences)
        x, y, w = batches[0]
        assert x["token_ids"].shape[1] == y.shape[1] == w.shape[1] == length - 1
        assert (x["token_ids"].numpy()[:, 1:] == y.numpy()[:, :-1]).all()
        assert sum(float(tf.reduce_sum(w)) for _, _, w in batches) == sum(
            len(ids) - 1 for ids in expected)
    assert REVERSED_LM not in objectives.names()
    with pytest.raises(ValueError, match="objective must be one of"):
        features.resolve_config({"objective": REVERSED_LM})
    with pytest.raises(ValueError, match="Unknown pretraining objective"):
        objectives.unregister(REVERSED_LM)
