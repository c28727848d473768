"""The ``word`` tokenizer kind: WordTokenizer, its vocabulary folder and VocabularyGen's
word learner (Beam, through the TFX executor)."""

import collections
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from tfx.types import artifact_utils, standard_artifacts

from lmfactory.components.artifacts import Vocabulary
from lmfactory.components.vocabulary import Executor, VocabularyConfig
from lmfactory.components.vocabulary import word as word_learner
from lmfactory.models.tokenizers import (WordTokenizer, load_tokenizer, read_tokenizer_config,
                                         special_token_ids, word_counts)

SPECIALS = {"pad": "<pad>", "unk": "<unk>", "start": "<s>", "end_of_text": "</s>"}
WORDS = ["the", "cat", "sat", "on", "mat", "The", "Cat"]
VOCABULARY = ["<pad>", "<unk>", "<s>", "</s>"] + WORDS


def _tokenizer(**kwargs):
    kwargs.setdefault("special_tokens", SPECIALS)
    return WordTokenizer(VOCABULARY, **kwargs)


def _ids(tokenizer, text):
    return tokenizer(text).numpy().tolist()


def _text(value):
    """Detokenized text as Python (keras-hub returns Python for Python inputs)."""
    value = value.numpy() if hasattr(value, "numpy") else value
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, list):
        return [_text(item) for item in value]
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _id(token):
    return VOCABULARY.index(token)


# --- The tokenizer ------------------------------------------------------------------------
def test_round_trip_of_known_words():
    tokenizer = _tokenizer()
    text = "  The cat sat\ton the   mat "
    ids = _ids(tokenizer, text)
    assert ids == [_id(word) for word in text.split()]
    assert _text(tokenizer.detokenize(ids)) == " ".join(text.split())
    batch = tokenizer.detokenize(tokenizer(tf.constant(["the cat", "mat"])))
    assert _text(batch) == ["the cat", "mat"]


def test_unknown_words_map_to_unk():
    tokenizer = _tokenizer()
    assert _ids(tokenizer, "the dog sat") == [_id("the"), _id("<unk>"), _id("sat")]
    assert _text(tokenizer.detokenize([_id("the"), 999, -1])) == "the <unk> <unk>"


def test_lowercase_on_and_off():
    cased, lowered = _tokenizer(), _tokenizer(lowercase=True)
    assert _ids(cased, "The CAT") == [_id("The"), _id("<unk>")]
    assert _ids(lowered, "The CAT") == [_id("the"), _id("cat")]
    # capital sigma is lowercased on its own (no final-sigma rule), as the learner counts
    assert WordTokenizer(["<unk>", "οσ"], lowercase=True)("ΟΣ").numpy().tolist() == [1]


def test_literal_special_tokens_in_text_map_to_their_ids():
    lowered = WordTokenizer(VOCABULARY + ["[CLS]"], lowercase=True,
                            special_tokens={**SPECIALS, "cls": "[CLS]"})
    ids = _ids(lowered, "the <unk> cat [CLS] </s> <UNK>")
    assert ids == [_id("the"), _id("<unk>"), _id("cat"), len(VOCABULARY), _id("</s>"),
                   _id("<unk>")]


def test_empty_and_blank_strings_give_no_tokens():
    tokenizer = _tokenizer()
    assert _ids(tokenizer, "") == []
    assert tokenizer(["", " \t\n", "the"]) == [[], [], [_id("the")]]
    assert _text(tokenizer.detokenize(tokenizer(tf.constant("")))) == ""


def test_every_unicode_whitespace_separates_words():
    tokenizer = _tokenizer()
    text = "the\u00a0cat\u3000sat\u2028on\u2009the\x1cmat\u0085the\r\ncat"
    assert len(text.split()) == 8
    assert _ids(tokenizer, text) == [_id(word) for word in text.split()]


def test_invalid_utf8_reads_as_replacement_characters():
    tokenizer = _tokenizer()
    assert _ids(tokenizer, b"the \xff\xfe cat") == [_id("the"), _id("<unk>"), _id("cat")]
    with_replacement = WordTokenizer(["<unk>", "a\ufffdb"])
    assert with_replacement(b"a\xffb").numpy().tolist() == [1]


def test_sequence_length_pads_with_the_pad_id_and_truncates():
    tokenizer = _tokenizer(sequence_length=4)
    dense = tokenizer(["the cat sat on the mat", "cat", ""]).numpy().tolist()
    the, cat, sat, on, pad = (_id(w) for w in ("the", "cat", "sat", "on", "<pad>"))
    assert dense == [[the, cat, sat, on], [cat, pad, pad, pad], [pad] * 4]
    no_pad = WordTokenizer(["<unk>", "a"], sequence_length=3)
    assert no_pad("a").numpy().tolist() == [1, 0, 0]


def test_vocabulary_accessors_and_special_token_attributes():
    tokenizer = _tokenizer()
    assert tokenizer.vocabulary_size() == len(VOCABULARY)
    assert tokenizer.get_vocabulary() == VOCABULARY
    assert tokenizer.id_to_token(_id("mat")) == "mat"
    assert tokenizer.token_to_id("mat") == _id("mat")
    assert (tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.start_token_id,
            tokenizer.end_of_text_token_id) == (0, 1, 2, 3)
    assert tokenizer.start_token == "<s>"
    with pytest.raises(ValueError, match="not in the word vocabulary"):
        tokenizer.token_to_id("dog")
    with pytest.raises(ValueError, match="must lie in"):
        tokenizer.id_to_token(len(VOCABULARY))


@pytest.mark.parametrize("vocabulary, specials, message", [
    (["<unk>", "a", "a"], None, "appears twice"),
    (["<unk>", "a b"], None, "without whitespace"),
    (["<unk>", ""], None, "without whitespace"),
    (["a"], {"pad": "a"}, "need an 'unk' role"),
    (["<unk>", "a"], {"unk": "<unk>", "pad": "<pad>"}, "not in the vocabulary"),
])
def test_bad_vocabularies_are_rejected(vocabulary, specials, message):
    with pytest.raises(ValueError, match=message):
        WordTokenizer(vocabulary, special_tokens=specials)


def test_config_round_trip_and_keras_serialization():
    tokenizer = _tokenizer(lowercase=True, sequence_length=5)
    restored = WordTokenizer.from_config(tokenizer.get_config())
    serialized = keras.saving.serialize_keras_object(tokenizer)
    deserialized = keras.saving.deserialize_keras_object(json.loads(json.dumps(serialized)))
    assert isinstance(deserialized, WordTokenizer)
    texts = ["The Cat sat", "dog"]
    for other in (restored, deserialized):
        assert other.get_vocabulary() == VOCABULARY
        assert other.start_token_id == tokenizer.start_token_id
        np.testing.assert_array_equal(other(texts), tokenizer(texts))


def test_runs_in_tf_data_and_a_saved_model(tmp_path):
    tokenizer = _tokenizer(sequence_length=3)
    dataset = tf.data.Dataset.from_tensor_slices(["the cat", "mat dog on the"]).batch(2)
    np.testing.assert_array_equal(next(iter(dataset.map(tokenizer))),
                                  [[_id("the"), _id("cat"), 0],
                                   [_id("mat"), _id("<unk>"), _id("on")]])
    module = tf.Module()
    module.tokenizer = tokenizer
    module.serve = tf.function(lambda text: tokenizer(text),
                               input_signature=[tf.TensorSpec([None], tf.string)])
    tf.saved_model.save(module, str(tmp_path / "saved"))
    loaded = tf.saved_model.load(str(tmp_path / "saved"))
    np.testing.assert_array_equal(loaded.serve(tf.constant(["on the dog"])),
                                  [[_id("on"), _id("the"), _id("<unk>")]])


# --- The learner ---------------------------------------------------------------------------
def test_learner_orders_by_count_then_word_and_totals_unk():
    counts = [("b", 5), ("a", 5), ("c", 7), ("rare", 1), ("<unk>", 3), ("<s>", 2),
              ("d", 4), (word_learner.TOTAL_KEY, 40)]
    tokens, token_counts = word_learner.learn_vocabulary(
        counts, vocab_size=5, min_frequency=2, special_tokens={"unk": "<unk>", "start": "<s>"})
    assert tokens == ["<unk>", "<s>", "c", "a", "b"]
    # unk: all 40 words but the kept 17 and the 2 literal <s> (the 3 literal <unk> included)
    assert token_counts == [40 - 17 - 2, 2, 7, 5, 5]
    assert sum(token_counts) == 40


def test_learner_counts_words_as_the_tokenizer_splits_them():
    lines = ["The CAT\u00a0sat <unk>", "the [CLS]  cat"]
    counted = dict(word_learner.count_lines(lines, True, {"unk": "<unk>", "cls": "[CLS]"}))
    assert counted == {"the": 2, "cat": 2, "sat": 1, "<unk>": 1, "[CLS]": 1,
                       word_learner.TOTAL_KEY: 7}
    assert word_learner.count_lines([], True, {"unk": "<unk>"}) == []


# --- VocabularyGen (Beam, through the TFX executor) -> a loadable folder ------------------
CORPUS = [
    "the cat sat on the mat",
    "The dog sat on the log <unk>",
    "a cat and a dog\u3000met on the mat",
    "zebra quagga okapi the",
]


def _examples(root, documents):
    folder = os.path.join(root, "Split-train")
    os.makedirs(folder)
    with tf.io.TFRecordWriter(os.path.join(folder, "data-00000-of-00001.gz"),
                              options="GZIP") as writer:
        for document in documents:
            feature = {"text": tf.train.Feature(
                bytes_list=tf.train.BytesList(value=[document.encode("utf-8")]))}
            writer.write(tf.train.Example(
                features=tf.train.Features(feature=feature)).SerializeToString())
    examples = standard_artifacts.Examples()
    examples.uri = root
    examples.split_names = artifact_utils.encode_split_names(["train"])
    return examples


@pytest.fixture(scope="module")
def word_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("word")
    examples = _examples(str(root / "examples"), ["\n".join(CORPUS[:2]), "\n".join(CORPUS[2:])])
    vocabulary = Vocabulary()
    vocabulary.uri = str(root / "vocabulary")
    properties = {"kind": "word", "vocab_size": 8, "min_frequency": 2, "lowercase": True,
                  "max_unique_words": 3,  # the unk total must not depend on this cut
                  "special_tokens": json.dumps({"pad": "<pad>", "unk": "<unk>"})}
    Executor().Do({"examples": [examples]}, {"vocabulary": [vocabulary]}, properties)
    return vocabulary


def _expected_counts():
    return collections.Counter(word for line in CORPUS for word in line.lower().split())


def test_executor_writes_a_word_folder_that_loads(word_folder):
    folder = word_folder.uri
    assert read_tokenizer_config(folder) == {
        "kind": "word", "vocabulary_file": "vocab.txt", "counts_file": "counts.txt",
        "lowercase": True, "special_tokens": {"pad": "<pad>", "unk": "<unk>"}}
    with open(os.path.join(folder, "vocab.txt"), encoding="utf-8") as f:
        tokens = f.read().split("\n")[:-1]
    # max_unique_words=3 keeps the total and the 2 most frequent words: "the" (5), "on" (3)
    assert tokens == ["<pad>", "<unk>", "the", "on"]
    assert word_folder.get_string_custom_property("kind") == "word"
    assert word_folder.get_int_custom_property("vocabulary_size") == len(tokens)
    tokenizer = load_tokenizer(folder, sequence_length=6)
    assert tokenizer(["The dog on <unk>"]).numpy().tolist() == [[2, 1, 3, 1, 0, 0]]
    assert special_token_ids(folder) == {"pad": 0, "unk": 1}


def test_counts_file_is_aligned_and_unk_holds_the_rest(word_folder):
    counts = word_counts(word_folder.uri)
    expected = _expected_counts()
    assert counts.dtype == np.int64
    total = sum(expected.values())
    assert counts.tolist() == [0, total - expected["the"] - expected["on"], expected["the"],
                               expected["on"]]
    assert counts.sum() == total


def test_executor_keeps_the_most_frequent_words(tmp_path):
    examples = _examples(str(tmp_path / "examples"), ["\n".join(CORPUS)])
    vocabulary = Vocabulary()
    vocabulary.uri = str(tmp_path / "vocabulary")
    Executor().Do({"examples": [examples]}, {"vocabulary": [vocabulary]},
                  {"kind": "word", "vocab_size": 100, "min_frequency": 2, "lowercase": False})
    expected = collections.Counter(word for line in CORPUS for word in line.split())
    kept = sorted((word for word, count in expected.items()
                   if count >= 2 and word != "<unk>"), key=lambda w: (-expected[w], w))
    tokenizer = load_tokenizer(vocabulary.uri)
    assert tokenizer.get_vocabulary() == ["<unk>"] + kept
    counts = word_counts(vocabulary.uri)
    assert counts.tolist()[1:] == [expected[word] for word in kept]
    assert counts.sum() == sum(expected.values())


def test_word_counts_rejects_a_misaligned_folder(word_folder, tmp_path):
    folder = tmp_path / "broken"
    folder.mkdir()
    for name in ("tokenizer.json", "vocab.txt"):
        (folder / name).write_bytes(open(os.path.join(word_folder.uri, name), "rb").read())
    (folder / "counts.txt").write_text("1\n2\n")
    with pytest.raises(ValueError, match="2 counts for 4 tokens"):
        word_counts(str(folder))


def test_config_requires_unk_for_word_and_one_word_special_tokens():
    with pytest.raises(ValueError, match="need an 'unk' role"):
        VocabularyConfig(kind="word", vocab_size=10, special_tokens={"pad": "<pad>"})
    with pytest.raises(ValueError, match="must not contain whitespace"):
        VocabularyConfig(kind="word", vocab_size=10, special_tokens={"unk": "<un k>"})
    assert VocabularyConfig(kind="word", vocab_size=2).resolved_special_tokens == {
        "unk": "<unk>"}
