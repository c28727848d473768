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
from lmfactory.models.tokenizers import load_tokenizer, read_tokenizer_config, word_counts

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


def _bert_basic_tokens(text, lowercase=True, strip_accents=True):
    """BERT's basic tokenizer (Devlin et al. 2019; google-research/bert tokenization.py) in
    plain Python, character by character: the reference the graph ops must agree with."""
    import unicodedata

    def is_punctuation(char):
        return ((33 <= ord(char) <= 47 or 58 <= ord(char) <= 64 or 91 <= ord(char) <= 96
                 or 123 <= ord(char) <= 126) or unicodedata.category(char).startswith("P"))

    def is_cjk(char):
        return any(low <= ord(char) <= high for low, high in (
            (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
            (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)))

    cleaned = []
    for char in text:
        if char in "\t\n\r" or unicodedata.category(char) == "Zs":
            cleaned.append(" ")
        elif not (ord(char) in (0, 0xFFFD) or unicodedata.category(char).startswith("C")):
            cleaned.append(f" {char} " if is_cjk(char) else char)
    words = []
    for word in "".join(cleaned).split():
        if strip_accents:
            word = "".join(c for c in unicodedata.normalize("NFD", word)
                           if unicodedata.category(c) != "Mn")
        if lowercase:
            word = "".join(c.lower() for c in word)
        current = ""
        for char in word:
            if is_punctuation(char):
                words.extend([current, char] if current else [char])
                current = ""
            else:
                current += char
        if current:
            words.append(current)
    return words


def test_wordpiece_pretokenization_matches_bert(corpus):
    from lmfactory.components.vocabulary import wordpiece

    lines = corpus[1][:50] + TRICKY_STRINGS + [
        "a\u00a0b\u2028c\u200bd\x85e\u00adf", "ﬁne ½ ＡＢＣ İstanbul straße ΣΊΣΥΦΟΣ"]
    for lowercase, strip_accents in ((True, True), (False, False), (False, True)):
        words = wordpiece.pretokenize_lines(lines, lowercase=lowercase,
                                            strip_accents=strip_accents)
        expected = [word for line in lines
                    for word in _bert_basic_tokens(line, lowercase, strip_accents)]
        assert words == expected, (lowercase, strip_accents)
    words = wordpiece.pretokenize_lines(lines)
    assert "creme" in words and "東" in words and "京" in words  # accents stripped, CJK split
    assert {"a", "b", "cdef", "ﬁne", "σισυφοσ"} <= set(words)  # Unicode spaces; C* dropped


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
        "special_tokens": {"end_of_text": "<|endoftext|>", "pad": "<|endoftext|>"},
        "word_pieces_file": "word_pieces.txt"}


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
    # the pipeline's word counts file is gone once the learner has run
    assert not os.path.exists(os.path.join(vocabulary.uri, ".word_counts.json"))


def _word_counts(vocab_dir):
    return dict(zip(_read_lines(os.path.join(vocab_dir, "vocab.txt")),
                    word_counts(vocab_dir).tolist()))


def test_extra_examples_are_counted_with_the_corpus(tmp_path, examples_uri):
    """A second Examples artifact (e.g. ULMFiT's target-task text): its words are counted
    together with the corpus's, from the same splits only."""
    extra = str(tmp_path / "extra")
    _write_split(extra, "small", ["zyzzyva quokka\nzyzzyva quokka", "zyzzyva"])
    _write_split(extra, "eval", ["heldoutword heldoutword heldoutword"])
    vocabulary = Vocabulary()
    vocabulary.uri = str(tmp_path / "vocabulary")
    properties = {"kind": "word", "vocab_size": 5000, "splits": json.dumps(["small"]),
                  "min_frequency": 2}
    Executor().Do({"examples": [_examples_artifact(examples_uri)],
                   "extra_examples": [_examples_artifact(extra, splits=("small", "eval"))]},
                  {"vocabulary": [vocabulary]}, properties)
    counts = _word_counts(vocabulary.uri)
    assert counts["zyzzyva"] == 3 and counts["quokka"] == 2
    assert "heldoutword" not in counts  # the eval split is not learned from
    alone = Vocabulary()
    alone.uri = str(tmp_path / "alone")
    Executor().Do({"examples": [_examples_artifact(examples_uri)]}, {"vocabulary": [alone]},
                  properties)
    alone_counts = _word_counts(alone.uri)
    assert "zyzzyva" not in alone_counts
    assert counts["the"] == alone_counts["the"]  # the corpus's own counts are unchanged


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


# --- SentencePiece (ALBERT) --------------------------------------------------------------
SPM_SIZE = 600
ALBERT_SPECIALS = {"pad": "<pad>", "unk": "<unk>", "cls": "[CLS]", "sep": "[SEP]",
                   "mask": "[MASK]"}


@pytest.fixture(scope="module")
def demo_lines(demo_data):
    """A slice of the bundled corpus (WikiText-103 text, one sentence a line)."""
    text = (demo_data / "corpus.txt").read_text(encoding="utf-8")
    return [line.strip() for line in text.split("\n") if line.strip()][:2500]


@pytest.fixture(scope="module")
def demo_examples_uri(tmp_path_factory, demo_lines):
    root = str(tmp_path_factory.mktemp("demo_examples"))
    _write_split(root, "train", _documents(demo_lines))
    return root


def _sentencepiece_properties(**extra):
    return {"kind": "sentencepiece", "vocab_size": SPM_SIZE, "splits": json.dumps(["train"]),
            **extra}


@pytest.fixture(scope="module")
def sentencepiece_artifact(tmp_path_factory, demo_examples_uri):
    vocabulary = Vocabulary()
    vocabulary.uri = str(tmp_path_factory.mktemp("sentencepiece"))
    Executor().Do({"examples": [_examples_artifact(demo_examples_uri, splits=("train",))]},
                  {"vocabulary": [vocabulary]}, _sentencepiece_properties())
    return vocabulary


def test_sentencepiece_files_follow_the_contract(sentencepiece_artifact):
    from lmfactory.models.tokenizers import AlbertSentencePieceTokenizer, special_token_ids

    folder = sentencepiece_artifact.uri
    assert sorted(os.listdir(folder)) == ["spm.model", "tokenizer.json"]
    assert read_tokenizer_config(folder) == {
        "kind": "sentencepiece", "model_file": "spm.model", "lowercase": True,
        "strip_accents": True, "special_tokens": ALBERT_SPECIALS}
    assert sentencepiece_artifact.get_string_custom_property("kind") == "sentencepiece"
    assert sentencepiece_artifact.get_int_custom_property("vocabulary_size") == SPM_SIZE
    tokenizer = load_tokenizer(folder)
    assert isinstance(tokenizer, AlbertSentencePieceTokenizer)
    assert tokenizer.vocabulary_size() == SPM_SIZE
    vocabulary = tokenizer.get_vocabulary()
    assert len(vocabulary) == SPM_SIZE and len(set(vocabulary)) == SPM_SIZE
    assert vocabulary[:5] == ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
    assert special_token_ids(folder) == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    assert tokenizer.token_to_id("[MASK]") == 4 and tokenizer.id_to_token(3) == "[SEP]"
    assert "\u2581the" in vocabulary  # pieces carry the word-start marker
    assert not any(piece != piece.lower() for piece in vocabulary[5:])  # lowercase=True
    # The control symbols are never produced from text.
    ids = _flat_ids(tokenizer, ["the [MASK] and [CLS] of <pad>"])
    assert not set(ids) & {0, 2, 3, 4}


def test_sentencepiece_round_trips_normalised_text(sentencepiece_artifact, demo_lines):
    from lmfactory.models.tokenizers import albert_preprocess_python

    tokenizer = load_tokenizer(sentencepiece_artifact.uri)
    # WikiText writes unknown words as "<unk>", which SentencePiece's trainer leaves out of
    # its character statistics (it is the unknown piece), so "<" and ">" stay unknown.
    samples = [line for line in demo_lines[:200] if "<unk>" not in line] + [
        "  The  LOBSTER,\tcaught near Sao Paulo\u00a0 ``today''  ",
        "Cr\u00e8me br\u00fbl\u00e9e \u00e0 la caf\u00e9", ""]
    ids = tokenizer.tokenize(samples)
    assert 1 not in [token for row in _as_list(ids) for token in row]  # no <unk>
    decoded = [t.decode("utf-8") if isinstance(t, bytes) else t
               for t in _as_list(tokenizer.detokenize(ids))]
    assert decoded == [albert_preprocess_python(sample) for sample in samples]
    assert decoded[-3] == 'the lobster, caught near sao paulo "today"'
    assert decoded[-2] == "creme brulee a la cafe"
    tokens = len(_flat_ids(tokenizer, samples[:100]))
    assert tokens < 0.5 * sum(len(sample) for sample in samples[:100])  # it compresses


def test_sentencepiece_learning_is_deterministic(tmp_path, demo_examples_uri,
                                                 sentencepiece_artifact):
    output = str(tmp_path / "again")
    learn_vocabulary({"train": os.path.join(demo_examples_uri, "Split-train", "*.gz")},
                     output, VocabularyConfig(kind="sentencepiece", vocab_size=SPM_SIZE),
                     beam_pipeline_args=["--direct_num_workers=1"])
    with open(os.path.join(output, "spm.model"), "rb") as f:
        again = f.read()
    with open(os.path.join(sentencepiece_artifact.uri, "spm.model"), "rb") as f:
        assert f.read() == again


def test_sentencepiece_tokenizer_in_tf_function_and_saved_model(tmp_path,
                                                               sentencepiece_artifact):
    tokenizer = load_tokenizer(sentencepiece_artifact.uri)
    texts = ["Homarus gammarus, 1,000 LOBSTERS!", "", "  a  b  "]
    eager = _as_list(tokenizer.tokenize(texts))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def tokenize(batch):
        return tokenizer.tokenize(batch)

    traced = tokenize(tf.constant(texts))
    assert isinstance(traced, tf.RaggedTensor) and traced.to_list() == eager

    class Serving(tf.Module):
        def __init__(self, layer):
            super().__init__()
            self.layer = layer

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def __call__(self, batch):
            return self.layer.tokenize(batch).to_tensor()

    tf.saved_model.save(Serving(tokenizer), str(tmp_path / "saved"))
    reloaded = tf.saved_model.load(str(tmp_path / "saved"))
    dense = reloaded(tf.constant(texts)).numpy().tolist()
    assert [[t for t in row[:len(ids)]] for row, ids in zip(dense, eager)] == eager
    assert all(not any(row[len(ids):]) for row, ids in zip(dense, eager))


def test_sentencepiece_custom_specials_and_case(tmp_path, demo_examples_uri):
    specials = {"unk": "<unk>", "pad": "<pad>", "cls": "<cls>", "sep": "<sep>",
                "mask": "<mask>", "end_of_text": "<eod>"}
    vocabulary = Vocabulary()
    vocabulary.uri = str(tmp_path / "vocabulary")
    Executor().Do({"examples": [_examples_artifact(demo_examples_uri, splits=("train",))]},
                  {"vocabulary": [vocabulary]},
                  _sentencepiece_properties(vocab_size=300, lowercase=False,
                                            special_tokens=json.dumps(specials)))
    tokenizer = load_tokenizer(vocabulary.uri)
    assert tokenizer.get_vocabulary()[:6] == ["<pad>", "<unk>", "<cls>", "<sep>", "<mask>",
                                              "<eod>"]
    assert tokenizer.vocabulary_size() == 300
    assert read_tokenizer_config(vocabulary.uri)["lowercase"] is False
    assert any(piece != piece.lower() for piece in tokenizer.get_vocabulary()[6:])


# --- Special-token sets ------------------------------------------------------------------
ROBERTA_SPECIALS = {"cls": "<s>", "pad": "<pad>", "sep": "</s>", "unk": "<unk>",
                    "mask": "<mask>"}


def test_bpe_with_roberta_special_tokens(tmp_path, examples_uri):
    from lmfactory.models.tokenizers import special_token_ids

    output = str(tmp_path / "roberta")
    learn_vocabulary({"small": os.path.join(examples_uri, "Split-small", "*.gz")}, output,
                     VocabularyConfig(kind="bpe", vocab_size=400,
                                      special_tokens=ROBERTA_SPECIALS))
    with open(os.path.join(output, "vocab.json"), encoding="utf-8") as f:
        vocabulary = json.load(f)
    by_id = [token for token, _ in sorted(vocabulary.items(), key=lambda kv: kv[1])]
    assert len(vocabulary) == 400 and sorted(vocabulary.values()) == list(range(400))
    assert by_id[:5] == ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    assert by_id[5:261] == bpe.BYTE_SYMBOLS
    assert read_tokenizer_config(output)["special_tokens"] == ROBERTA_SPECIALS
    assert special_token_ids(output) == {"cls": 0, "pad": 1, "sep": 2, "unk": 3, "mask": 4}
    tokenizer = load_tokenizer(output)
    for token, index in (("<s>", 0), ("<pad>", 1), ("</s>", 2), ("<unk>", 3), ("<mask>", 4)):
        assert _as_list(tokenizer.tokenize(token)) == [index]
    ids = _as_list(tokenizer.tokenize("<s>The lobster<mask> is blue.</s>"))
    assert ids[0] == 0 and ids[-1] == 2 and 4 in ids and 1 not in ids and 3 not in ids
    text = "The lobsters, caught near Zürich."
    assert tokenizer.detokenize(tokenizer.tokenize(text)) == text


def test_wordpiece_reserves_a_custom_special_set_first(tmp_path, examples_uri):
    output = str(tmp_path / "wordpiece")
    learn_vocabulary({"small": os.path.join(examples_uri, "Split-small", "*.gz")}, output,
                     VocabularyConfig(kind="wordpiece", vocab_size=600,
                                      special_tokens=ROBERTA_SPECIALS))
    tokens = _read_lines(os.path.join(output, "vocab.txt"))
    assert tokens[:5] == ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    assert len(tokens) <= 600 and "[PAD]" not in tokens
    tokenizer = load_tokenizer(output)
    assert _as_list(tokenizer.tokenize("the \u2603")) == [tokenizer.token_to_id("the"), 3]


def test_special_token_validation():
    with pytest.raises(ValueError, match="unknown role"):
        VocabularyConfig(kind="bpe", vocab_size=500, special_tokens={"bos": "<s>"})
    with pytest.raises(ValueError, match="'unk'"):
        VocabularyConfig(kind="wordpiece", vocab_size=500, special_tokens={"pad": "[PAD]"})
    with pytest.raises(ValueError, match="'unk'"):
        VocabularyConfig(kind="sentencepiece", vocab_size=500, special_tokens={"pad": "<p>"})
    with pytest.raises(ValueError, match="non-empty string"):
        VocabularyConfig(kind="bpe", vocab_size=500, special_tokens={"pad": " "})
    with pytest.raises(ValueError, match="at least 261"):
        VocabularyConfig(kind="bpe", vocab_size=260, special_tokens=ROBERTA_SPECIALS)
    assert VocabularyConfig(kind="bpe", vocab_size=261,
                            special_tokens=ROBERTA_SPECIALS).vocab_size == 261
    config = VocabularyConfig.from_exec_properties(
        {"kind": "bpe", "vocab_size": 500, "special_tokens": json.dumps(ROBERTA_SPECIALS)})
    assert config.resolved_special_tokens == ROBERTA_SPECIALS
    assert VocabularyConfig(kind="sentencepiece", vocab_size=500).resolved_special_tokens == \
        ALBERT_SPECIALS
    assert VocabularyConfig(kind="bpe", vocab_size=500).resolved_special_tokens == {
        "end_of_text": "<|endoftext|>", "pad": "<|endoftext|>"}
    examples = channel.Channel(type=standard_artifacts.Examples)
    component = VocabularyGen(examples=examples, kind="sentencepiece", vocab_size=30000,
                              special_tokens=ALBERT_SPECIALS)
    assert json.loads(component.exec_properties["special_tokens"]) == ALBERT_SPECIALS
    assert VocabularyGen(examples=examples, kind="bpe", vocab_size=300).exec_properties.get(
        "special_tokens") is None


# --- The byte vocabulary (character LM, Al-Rfou et al. 2018) ------------------------------
def test_byte_vocabulary_is_fixed_and_records_the_corpus_byte_counts(tmp_path, examples_uri,
                                                                     corpus):
    vocabulary = Vocabulary()
    vocabulary.uri = str(tmp_path / "bytes")
    Executor().Do({"examples": [_examples_artifact(examples_uri)]}, {"vocabulary": [vocabulary]},
                  {"kind": "byte", "vocab_size": 257, "splits": json.dumps(["small"])})
    settings = read_tokenizer_config(vocabulary.uri)
    assert settings == {"kind": "byte", "statistics_file": "byte_counts.json",
                        "special_tokens": {"end_of_text": "<|endoftext|>",
                                           "pad": "<|endoftext|>"}}
    assert sorted(os.listdir(vocabulary.uri)) == ["byte_counts.json", "tokenizer.json"]
    assert vocabulary.get_string_custom_property("kind") == "byte"
    assert vocabulary.get_int_custom_property("vocabulary_size") == 257
    # The statistics: the UTF-8 bytes of the split's non-blank lines, counted by Beam.
    with open(os.path.join(vocabulary.uri, "byte_counts.json"), encoding="utf-8") as f:
        statistics = json.load(f)
    expected = collections.Counter(b"".join(line.encode("utf-8") for line in corpus[0][:300]))
    assert statistics["bytes"] == sum(expected.values())
    assert statistics["distinct_bytes"] == len(expected)
    assert {int(value): count for value, count in statistics["counts"].items()} == expected
    assert statistics["non_ascii_bytes"] == sum(c for b, c in expected.items() if b >= 128)
    assert statistics["non_ascii_bytes"] > 0  # WikiText has accents and dashes
    assert list(statistics["counts"])[0] == str(ord(" "))  # most frequent first
    tokenizer = load_tokenizer(vocabulary.uri)
    assert tokenizer.vocabulary_size() == 257
    assert tokenizer.token_to_id("<|endoftext|>") == 256
    text = corpus[1][0]
    assert _as_list(tokenizer.tokenize([text]))[0] == list(text.encode("utf-8"))


def test_byte_vocabulary_with_its_own_special_tokens(tmp_path, examples_uri):
    specials = {"end_of_text": "<eot>", "pad": "<pad>"}
    config = VocabularyConfig(kind="byte", vocab_size=258, special_tokens=specials)
    learn_vocabulary({"eval": os.path.join(examples_uri, "Split-eval", "*.gz")},
                     str(tmp_path / "bytes"), config)
    tokenizer = load_tokenizer(str(tmp_path / "bytes"))
    assert (tokenizer.token_to_id("<eot>"), tokenizer.token_to_id("<pad>")) == (256, 257)
    assert tokenizer.vocabulary_size() == 258


def test_byte_vocabulary_validation():
    with pytest.raises(ValueError, match="must be 257"):
        VocabularyConfig(kind="byte", vocab_size=8000)
    with pytest.raises(ValueError, match="must be 259"):
        VocabularyConfig(kind="byte", vocab_size=257,
                         special_tokens={"end_of_text": "<e>", "pad": "<p>", "sep": "<s>"})
    with pytest.raises(ValueError, match="spelling of byte 97"):
        VocabularyConfig(kind="byte", vocab_size=257, special_tokens={"end_of_text": "a"})
    assert VocabularyConfig(kind="byte", vocab_size=257).resolved_special_tokens == {
        "end_of_text": "<|endoftext|>", "pad": "<|endoftext|>"}
    assert VocabularyGen(examples=channel.Channel(type=standard_artifacts.Examples),
                         kind="byte", vocab_size=257).exec_properties["kind"] == "byte"


@pytest.mark.parametrize("vocab_size, min_frequency", [(1500, 1), (400, 5)])
def test_remainder_counting_learns_the_tensorflow_text_vocabulary(corpus, vocab_size,
                                                                  min_frequency):
    """The fast counting (remainders after each piece start) gives exactly the vocabulary
    of tensorflow-text's own counting passes."""
    from lmfactory.components.vocabulary import wordpiece

    train, _ = corpus
    counts = collections.Counter(word for line in train[:600] for word in line.lower().split())
    args = dict(vocab_size=vocab_size, min_frequency=min_frequency)
    fast = wordpiece.learn_vocabulary(counts.items(), counting="remainders", **args)
    reference = wordpiece.learn_vocabulary(counts.items(), counting="tensorflow_text", **args)
    assert len(fast) > 100 and fast == reference
