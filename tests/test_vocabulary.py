"""VocabularyGen: Beam word counting + WordPiece / byte-level BPE learners on real text."""

import collections
import json
import os

import pytest
import tensorflow as tf
from tfx.types import artifact_utils, channel, standard_artifacts

from lmfactory.components.artifacts import Vocabulary
from lmfactory.components.vocabulary import (Executor, VocabularyConfig, VocabularyGen,
                                             bpe, learn_vocabulary)
from lmfactory.models.tokenizers import load_tokenizer, read_tokenizer_config

TRAIN_LINES = 1500
LINES_PER_DOCUMENT = 5
WORDPIECE_SIZE = 2000
BPE_SIZE = 1000
TRICKY_STRINGS = [
    "Crème brûlée à la café, naïve façade — São Paulo",
    "emoji 😀👍🏽 and flags 🇫🇷!",
    "東京タワー 北京大学 한국어",
    "multiple   spaces  and\ttabs\t\tand trailing  ",
    "line one\nline two\n\n\nend\r\n",
    "  leading spaces, it's, we'll, they'd",
    "x\u00a0nbsp \u3000ideographic\u2009thin",
    "",
]


# --- Fixtures: a real Examples artifact folder -------------------------------------------
@pytest.fixture(scope="module")
def corpus(shared_data):
    text = (shared_data / "wikitext-2" / "valid.txt").read_text(encoding="utf-8")
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    return lines[:TRAIN_LINES], lines[TRAIN_LINES:TRAIN_LINES + 300]


def _write_split(root, split, documents):
    folder = os.path.join(root, f"Split-{split}")
    os.makedirs(folder)
    path = os.path.join(folder, "data_tfrecord-00000-of-00001.gz")
    with tf.io.TFRecordWriter(path, options="GZIP") as writer:
        for document in documents:
            feature = {"text": tf.train.Feature(
                bytes_list=tf.train.BytesList(value=[document.encode("utf-8")]))}
            writer.write(tf.train.Example(
                features=tf.train.Features(feature=feature)).SerializeToString())


def _documents(lines):
    return ["\n".join(lines[i:i + LINES_PER_DOCUMENT])
            for i in range(0, len(lines), LINES_PER_DOCUMENT)]


@pytest.fixture(scope="module")
def examples_uri(tmp_path_factory, corpus):
    train, held_out = corpus
    root = str(tmp_path_factory.mktemp("examples"))
    _write_split(root, "train", _documents(train))
    _write_split(root, "eval", _documents(held_out))
    _write_split(root, "small", _documents(train[:300]))
    _write_split(root, "empty", [])
    return root


def _examples_artifact(uri, splits=("train", "eval", "small", "empty")):
    examples = standard_artifacts.Examples()
    examples.uri = uri
    examples.split_names = artifact_utils.encode_split_names(list(splits))
    return examples


def _train_pattern(examples_uri):
    return {"train": os.path.join(examples_uri, "Split-train", "*.gz")}


@pytest.fixture(scope="module")
def wordpiece_dir(tmp_path_factory, examples_uri):
    output = str(tmp_path_factory.mktemp("wordpiece"))
    learn_vocabulary(_train_pattern(examples_uri), output,
                     VocabularyConfig(kind="wordpiece", vocab_size=WORDPIECE_SIZE))
    return output


@pytest.fixture(scope="module")
def bpe_dir(tmp_path_factory, examples_uri):
    output = str(tmp_path_factory.mktemp("bpe"))
    learn_vocabulary(_train_pattern(examples_uri), output,
                     VocabularyConfig(kind="bpe", vocab_size=BPE_SIZE))
    return output


def _as_list(values):
    """keras-hub gives Python lists for ragged eager results and tensors otherwise."""
    return values.numpy().tolist() if hasattr(values, "numpy") else list(values)


def _flat_ids(tokenizer, texts):
    return [token for row in _as_list(tokenizer.tokenize(texts)) for token in row]


def _read_lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


# --- WordPiece ---------------------------------------------------------------------------
def test_wordpiece_files_follow_the_contract(wordpiece_dir):
    vocabulary = _read_lines(os.path.join(wordpiece_dir, "vocab.txt"))
    assert vocabulary[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert 0.85 * WORDPIECE_SIZE <= len(vocabulary) <= WORDPIECE_SIZE
    assert len(set(vocabulary)) == len(vocabulary)
    continuations = [token for token in vocabulary if token.startswith("##")]
    assert len(continuations) > 100 and "##s" in continuations
    assert {"the", "lobster", ",", "."} <= set(vocabulary)
    assert not any(token != token.lower() for token in vocabulary[5:])  # lowercase=True
    assert read_tokenizer_config(wordpiece_dir) == {
        "kind": "wordpiece", "vocabulary_file": "vocab.txt", "lowercase": True,
        "strip_accents": True, "special_tokens": {
            "pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}}


def test_wordpiece_tokenizer_covers_held_out_text(wordpiece_dir, corpus):
    _, held_out = corpus
    tokenizer = load_tokenizer(wordpiece_dir)
    assert tokenizer.token_to_id("[PAD]") == 0
    unknown = tokenizer.token_to_id("[UNK]")
    ids = _flat_ids(tokenizer, held_out)
    assert len(ids) > 10_000
    assert ids.count(unknown) / len(ids) < 0.02
    pieces = _as_list(tokenizer.tokenize("The lobsters, caught near São Paulo."))
    assert unknown not in pieces


def test_wordpiece_pretokenization_matches_the_tokenizer(corpus):
    from lmfactory.components.vocabulary import wordpiece
    from keras_hub.src.tokenizers.word_piece_tokenizer import pretokenize

    lines = corpus[1][:50] + TRICKY_STRINGS
    words = wordpiece.pretokenize_lines(lines, lowercase=True, strip_accents=True)
    expected = pretokenize(tf.constant(lines), lowercase=True, strip_accents=True)
    assert words == [w.decode("utf-8") for w in expected.flat_values.numpy()]
    assert "creme" in words and "東" in words and "京" in words  # accents stripped, CJK split


# --- Byte-level BPE ----------------------------------------------------------------------
def test_bpe_files_follow_the_contract(bpe_dir):
    with open(os.path.join(bpe_dir, "vocab.json"), encoding="utf-8") as f:
        vocabulary = json.load(f)
    merges = _read_lines(os.path.join(bpe_dir, "merges.txt"))
    assert merges[0] == "#version: 0.2"
    assert len(vocabulary) == BPE_SIZE
    assert sorted(vocabulary.values()) == list(range(BPE_SIZE))
    assert [token for token, _ in sorted(vocabulary.items(), key=lambda kv: kv[1])][:256] == \
        bpe.BYTE_SYMBOLS
    assert vocabulary["<|endoftext|>"] == BPE_SIZE - 1
    assert len(merges) - 1 >= BPE_SIZE - 257
    for merge in merges[1:]:
        left, right = merge.split(" ")
        assert left in vocabulary and right in vocabulary and left + right in vocabulary
    assert "Ġthe" in vocabulary
    assert read_tokenizer_config(bpe_dir) == {
        "kind": "bpe", "vocabulary_file": "vocab.json", "merges_file": "merges.txt",
        "special_tokens": {"end_of_text": "<|endoftext|>", "pad": "<|endoftext|>"}}


def test_bpe_tokenizer_round_trips_text(bpe_dir, corpus):
    tokenizer = load_tokenizer(bpe_dir)
    samples = corpus[1][:100] + TRICKY_STRINGS
    decoded = _as_list(tokenizer.detokenize(tokenizer.tokenize(samples)))
    assert [t.decode("utf-8") if isinstance(t, bytes) else t for t in decoded] == samples
    for sample in TRICKY_STRINGS[:3]:
        assert tokenizer.detokenize(tokenizer.tokenize(sample)) == sample


def test_bpe_ids_match_merges_applied_in_python(bpe_dir):
    with open(os.path.join(bpe_dir, "vocab.json"), encoding="utf-8") as f:
        vocabulary = json.load(f)
    merge_lines = _read_lines(os.path.join(bpe_dir, "merges.txt"))[1:]
    merges = [tuple(line.split(" ")) for line in merge_lines]
    ranks = {merge: rank for rank, merge in enumerate(merges)}
    tokenizer = load_tokenizer(bpe_dir)
    words = [" lobster", " the", "Homarus", " gammarus", " conspicuous", " 1999", " ,",
             " unbelievably", " Zürich"]
    expected = [[vocabulary[token] for token in bpe.encode_word(word, ranks)] for word in words]
    assert _as_list(tokenizer.tokenize(words)) == expected
    assert any(len(ids) > 1 for ids in expected) and any(len(ids) == 1 for ids in expected)


def test_bpe_compresses_held_out_text(bpe_dir, corpus):
    tokenizer = load_tokenizer(bpe_dir)
    held_out = corpus[1][:200]
    tokens = len(_flat_ids(tokenizer, held_out))
    words = sum(len(bpe.split_words(line)) for line in held_out)
    byte_count = sum(len(line.encode("utf-8")) for line in held_out)
    assert tokens / words < 2.0
    assert tokens < 0.45 * byte_count
    eot = _as_list(tokenizer.tokenize("hello<|endoftext|>world"))
    assert tokenizer.token_to_id("<|endoftext|>") in eot
    assert _as_list(tokenizer.tokenize("<|endoftext|>")) == [BPE_SIZE - 1]


def test_bpe_pretokenization_agrees_with_keras_split(corpus):
    from keras_hub.src.tokenizers.byte_pair_tokenizer import split_strings_for_bpe

    samples = corpus[1] + TRICKY_STRINGS + ["a\n\nb", "12 34", "go\r\nnow", "a  \t b"]
    keras_words = split_strings_for_bpe(tf.constant(samples), ["<|endoftext|>"]).to_list()
    for sample, expected in zip(samples, keras_words):
        assert bpe.split_words(sample) == [w.decode("utf-8") for w in expected], repr(sample)


def _naive_bpe(word_counts, num_merges):
    """Textbook BPE (Sennrich et al. 2016): recount every pair after every merge."""
    words = [(list(word), count) for word, count in word_counts]
    merges = []
    for _ in range(num_merges):
        pairs = collections.Counter()
        for symbols, count in words:
            for pair in zip(symbols, symbols[1:]):
                pairs[pair] += count
        best = min(pairs, key=lambda pair: (-pairs[pair], pair))
        if pairs[best] < 2:
            break
        merges.append(best)
        for symbols, _ in words:
            position = 0
            while position < len(symbols) - 1:
                if (symbols[position], symbols[position + 1]) == best:
                    symbols[position:position + 2] = [best[0] + best[1]]
                position += 1
    return merges


def test_incremental_learner_matches_textbook_bpe(corpus):
    counts = collections.Counter(bpe.pretokenize_lines(corpus[0][:150]))
    counts.update({"aaaaaaa": 9, "abababa": 7, "ĠĠĠĠ": 5})  # overlapping and repeated pairs
    _, merges = bpe.learn_merges(counts.items(), 257 + 120)
    assert merges == _naive_bpe(counts.items(), len(merges))
    assert len(merges) >= 120


# --- TFX executor and component ----------------------------------------------------------
def test_executor_do_writes_a_vocabulary_artifact(tmp_path, examples_uri):
    vocabulary = Vocabulary()
    vocabulary.uri = str(tmp_path / "vocabulary")
    properties = {"kind": "wordpiece", "vocab_size": 800, "splits": json.dumps(["small"]),
                  "text_features": json.dumps(["text"]), "lowercase": False,
                  "strip_accents": False}
    Executor().Do({"examples": [_examples_artifact(examples_uri)]},
                  {"vocabulary": [vocabulary]}, properties)
    tokens = _read_lines(os.path.join(vocabulary.uri, "vocab.txt"))
    assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert len(tokens) <= 800 and {"The", "It"} <= set(tokens)  # case kept
    assert read_tokenizer_config(vocabulary.uri)["lowercase"] is False
    assert vocabulary.get_string_custom_property("kind") == "wordpiece"
    assert vocabulary.get_int_custom_property("vocabulary_size") == len(tokens)
    tokenizer = load_tokenizer(vocabulary.uri)
    assert tokenizer.id_to_token(_as_list(tokenizer.tokenize("The"))[0]) == "The"


def test_executor_rejects_a_split_without_records(tmp_path, examples_uri):
    vocabulary = Vocabulary()
    vocabulary.uri = str(tmp_path / "vocabulary")
    properties = {"kind": "bpe", "vocab_size": 300, "splits": json.dumps(["empty"])}
    with pytest.raises(ValueError, match="'empty'"):
        Executor().Do({"examples": [_examples_artifact(examples_uri)]},
                      {"vocabulary": [vocabulary]}, properties)


def test_executor_rejects_missing_splits(tmp_path, examples_uri):
    vocabulary = Vocabulary()
    vocabulary.uri = str(tmp_path / "vocabulary")
    with pytest.raises(ValueError, match="'test'"):
        Executor().Do({"examples": [_examples_artifact(examples_uri)]},
                      {"vocabulary": [vocabulary]},
                      {"kind": "bpe", "vocab_size": 300, "splits": json.dumps(["test"])})
    listed_without_files = _examples_artifact(examples_uri, splits=("train", "missing"))
    with pytest.raises(ValueError, match="'missing'"):
        Executor().Do({"examples": [listed_without_files]}, {"vocabulary": [vocabulary]},
                      {"kind": "bpe", "vocab_size": 300, "splits": json.dumps(["missing"])})


def test_config_validation():
    with pytest.raises(ValueError, match="kind"):
        VocabularyConfig(kind="unigram", vocab_size=100)
    with pytest.raises(ValueError, match="at least 257"):
        VocabularyConfig(kind="bpe", vocab_size=256)
    config = VocabularyConfig.from_exec_properties(
        {"kind": "bpe", "vocab_size": 500, "text_features": '["title", "body"]',
         "lowercase": 0, "min_frequency": None})
    assert config.text_features == ("title", "body") and config.splits == ("train",)
    assert config.lowercase is False and config.min_frequency == 2


def test_component_wires_examples_to_vocabulary():
    examples = channel.Channel(type=standard_artifacts.Examples)
    component = VocabularyGen(examples=examples, kind="bpe", vocab_size=50257,
                              text_features=["text", "title"], splits=["train", "eval"])
    assert component.outputs["vocabulary"].type is Vocabulary
    assert component.inputs["examples"] is examples
    assert component.exec_properties["kind"] == "bpe"
    assert json.loads(component.exec_properties["text_features"]) == ["text", "title"]
    assert json.loads(component.exec_properties["splits"]) == ["train", "eval"]
    assert component.executor_spec.executor_class is Executor


def test_component_runs_in_a_local_tfx_pipeline(tmp_path, examples_uri):
    from tfx import v1 as tfx

    importer = tfx.dsl.Importer(
        source_uri=examples_uri, artifact_type=standard_artifacts.Examples,
        properties={"split_names": json.dumps(["small"])}).with_id("import_examples")
    vocabulary_gen = VocabularyGen(examples=importer.outputs["result"], kind="bpe",
                                   vocab_size=400, splits=["small"])
    metadata = tfx.orchestration.metadata.sqlite_metadata_connection_config(
        str(tmp_path / "metadata.sqlite"))
    pipeline = tfx.dsl.Pipeline(
        pipeline_name="vocabulary_test", pipeline_root=str(tmp_path / "root"),
        components=[importer, vocabulary_gen], metadata_connection_config=metadata,
        beam_pipeline_args=["--direct_num_workers=1"])
    tfx.orchestration.LocalDagRunner().run(pipeline)
    outputs = list((tmp_path / "root" / "VocabularyGen" / "vocabulary").glob("*"))
    assert len(outputs) == 1
    assert read_tokenizer_config(str(outputs[0]))["kind"] == "bpe"
    assert load_tokenizer(str(outputs[0])).vocabulary_size() == 400
