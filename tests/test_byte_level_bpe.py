"""The ``bpe`` kind's tokenizer (models/tokenizers/byte_level_fast.py): its vectorised GPT-2
split, static word table and integer merge loop give keras-nlp's ``BytePairTokenizer``
ids (and Hugging Face ``tokenizers``' where those agree), on a vocabulary VocabularyGen's
learner writes from WikiText-2 text."""

import json
import os
import random

import keras_nlp
import numpy as np
import pytest
import tensorflow as tf
from keras_hub.src.tokenizers.byte_pair_tokenizer import split_strings_for_bpe

from lmfactory.components.pusher import op_audit
from lmfactory.components.vocabulary import VocabularyConfig, executor
from lmfactory.models.tokenizers import load_tokenizer, read_tokenizer_config
from lmfactory.models.tokenizers import byte_level_split as split
from lmfactory.models.tokenizers.byte_level_fast import (WORD_PIECES_FILE,
                                                         ByteLevelBpeTokenizer, merge_symbols,
                                                         read_word_pieces)

HARD_STRINGS = [
    "Crème brûlée à la café, naïve façade — São Paulo", "emoji 😀👍🏽 and flags 🇫🇷!",
    "東京タワー 北京大学 한국어", "multiple   spaces  and\ttabs\t\tand trailing  ",
    "line one\nline two\n\n\nend\r\n", "  leading spaces, it's, we'll, they'd",
    "x\u00a0nbsp \u3000ideographic\u2009thin", "ﬁnancial ǅ İstanbul ΣΑΣ straße", "", " ", "   ",
    "end of text<|endoftext|>next document", "<|endoftext|>", "a <|endoftext|>  b",
    "a" * 300, "supercalifragilisticexpialidocious" * 8, "😀" * 60, "12 345 6.7e-8 ١٢٣ ½",
    "don't I'M 'S 'sx x'll ''re !'s 5's", "marker ६ and ० digits ६६", "ĴA stand-in ĴAB",
    "a", "'", "'s", "ab", "a'", "combining e\u0301 and ZWJ 👨\u200d👩\u200d👧", "\u2028\x85\x0b odd spaces",
]


@pytest.fixture(scope="module")
def lines(shared_data):
    text = (shared_data / "wikitext-2" / "valid.txt").read_text(encoding="utf-8")
    found = [line.strip() for line in text.split("\n") if line.strip()]
    return found[:1200], found[1200:1500]


@pytest.fixture(scope="module")
def bpe_dir(tmp_path_factory, lines):
    """VocabularyGen's steps (count, learn, write) on 1,200 WikiText-2 lines."""
    config = VocabularyConfig(kind="bpe", vocab_size=1200, min_frequency=2)
    counts = {}
    for word, count in executor.count_words(lines[0], config):
        counts[word] = counts.get(word, 0) + count
    return executor.learn_and_write(sorted(counts.items()),
                                    str(tmp_path_factory.mktemp("bpe")), config, "test")


@pytest.fixture(scope="module")
def files(bpe_dir):
    with open(os.path.join(bpe_dir, "vocab.json"), encoding="utf-8") as f:
        vocabulary = json.load(f)
    with open(os.path.join(bpe_dir, "merges.txt"), encoding="utf-8") as f:
        merges = [line for line in f.read().splitlines() if line and line[0] != "#"]
    return vocabulary, merges


@pytest.fixture(scope="module")
def keras_tokenizer(files):
    """keras-nlp's own tokenizer: the reference every id is checked against."""
    vocabulary, merges = files
    return keras_nlp.tokenizers.BytePairTokenizer(vocabulary=vocabulary, merges=merges,
                                                  unsplittable_tokens=["<|endoftext|>"])


def _fuzz(count, seed=0):
    """Random strings over the characters where GPT-2's split has its cases."""
    pieces = list("ab Z1 2'''stmdrevl.,!-éÉ٣😀\u0301 xy東") + [
        "'s", "'re", "'ll", "'ve", "  ", "   ", "\t", "\n", "\u00a0", "६", "०", "ĴA",
        "<|endoftext|>", "\U0001F9E0", "\u0378"]
    generator = random.Random(seed)
    return ["".join(generator.choice(pieces) for _ in range(generator.randint(0, 16)))
            for _ in range(count)]


def _ids(tokenizer, texts):
    call = tf.function(lambda batch: tokenizer(batch))
    out = []
    for start in range(0, len(texts), 256):
        out += call(tf.constant(texts[start:start + 256])).to_list()
    return out


def test_character_classes_agree_with_re2():
    """Letters and numbers are RE2's \\p{L} / \\p{N} on every code point the split handles."""
    classes = split.character_classes()
    codes = np.arange(split.TABLE_SIZE)
    handled = codes[classes[:-1] != split.UNSAFE]
    characters = tf.strings.unicode_encode(
        tf.RaggedTensor.from_row_lengths(handled.astype(np.int32), np.ones(len(handled),
                                                                           np.int64)), "UTF-8")
    letter = tf.strings.regex_full_match(characters, r"\p{L}").numpy()
    number = tf.strings.regex_full_match(characters, r"\p{N}").numpy()
    assert np.array_equal(letter, classes[handled] == split.LETTER)
    assert np.array_equal(number, classes[handled] == split.NUMBER)
    assert len(handled) > 140_000 and classes[-1] == split.UNSAFE


def test_split_matches_keras_nlp_split(lines):
    texts = lines[0][:300] + HARD_STRINGS + _fuzz(3000)
    classes = tf.constant(split.character_classes())
    special = tf.strings.regex_full_match(tf.constant(texts), r"(?s).*<\|endoftext\|>.*")
    words, row_splits, exact = split.split_words(tf.constant(texts), classes, special)
    expected = split_strings_for_bpe(tf.constant(texts), ["<|endoftext|>"]).to_list()
    words, row_splits, exact = words.numpy().tolist(), row_splits.numpy(), exact.numpy()
    for index, text in enumerate(texts):
        if exact[index]:
            assert words[row_splits[index]:row_splits[index + 1]] == expected[index], text
        else:  # left to keras-nlp: a character whose handling is its own
            assert row_splits[index] == row_splits[index + 1]
            assert set(text) & set(split.UNSAFE_CHARACTERS + "\u0378") or \
                "<|endoftext|>" in text, text
    assert exact[:300].all() and exact.mean() > 0.3
    # the rare rows' split: keras-nlp's steps on flat vectors, every row as keras-nlp's
    for specials, sample in ((["<|endoftext|>"], texts),
                             (["<s>", "</s>", "a b#c"], texts[300:900]), (None, texts[300:900])):
        flat, splits = split.keras_nlp_split(tf.constant(sample), specials)
        flat, splits = flat.numpy().tolist(), splits.numpy()
        assert [flat[splits[i]:splits[i + 1]] for i in range(len(sample))] == (
            expected if sample is texts else
            split_strings_for_bpe(tf.constant(sample), specials).to_list())
    # the two splits' words merged back in row order
    other_rows = np.flatnonzero(~exact)
    merged, merged_splits = split.merge_rows(
        tf.constant(words, tf.string), row_splits, *split.keras_nlp_split(
            tf.gather(tf.constant(texts), other_rows), ["<|endoftext|>"]), other_rows)
    merged = merged.numpy().tolist()
    assert [merged[merged_splits[i]:merged_splits[i + 1]] for i in range(len(texts))] == \
        expected


def test_ids_identical_to_keras_nlp_and_tokenizers(bpe_dir, files, keras_tokenizer, lines):
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = load_tokenizer(bpe_dir)
    assert isinstance(tokenizer, ByteLevelBpeTokenizer) and tokenizer._word_table is not None
    vocabulary, merges = files
    without_table = ByteLevelBpeTokenizer(vocabulary=vocabulary, merges=merges,
                                          unsplittable_tokens=["<|endoftext|>"])
    texts = lines[0][:150] + lines[1][:100] + HARD_STRINGS + _fuzz(500, seed=1)
    expected = _ids(keras_tokenizer, texts)
    assert _ids(tokenizer, texts) == expected
    assert _ids(without_table, texts) == expected
    assert expected[texts.index("")] == [] and len(expected[texts.index("a" * 300)]) > 1
    # Hugging Face tokenizers (Rust), same files: identical on the corpus and plain strings
    rust = Tokenizer(models.BPE(vocab=vocabulary, merges=[tuple(m.split(" ")) for m in merges]))
    rust.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    rust.add_special_tokens(["<|endoftext|>"])
    plain = lines[1][:100] + HARD_STRINGS[:3] + HARD_STRINGS[5:6] + ["a" * 300, "😀" * 60]
    assert _ids(tokenizer, plain) == [e.ids for e in rust.encode_batch(plain)]
    # one string, dense output, sequence_length: as keras-nlp
    fixed = load_tokenizer(bpe_dir, sequence_length=8)
    assert fixed("it's emoji 😀 time").shape == (8,)
    assert fixed(["a b", ""]).numpy().tolist() == \
        [expected_row[:8] + [0] * (8 - len(expected_row[:8]))
         for expected_row in _ids(keras_tokenizer, ["a b", ""])]
    assert tokenizer("hello world").numpy().tolist() == \
        keras_tokenizer("hello world").numpy().tolist()


def test_word_table_is_the_merge_loop(bpe_dir, files):
    """Every word the learner wrote has the pieces the in-graph merge loop gives, merged in
    keras-nlp's order; a table written for other merges is refused."""
    vocabulary, merges = files
    path = os.path.join(bpe_dir, WORD_PIECES_FILE)
    assert read_tokenizer_config(bpe_dir)["word_pieces_file"] == WORD_PIECES_FILE
    table = read_word_pieces(path, merges)
    assert len(table) > 1000 and ["Ġthe"] in table[:5]
    tokenizer = load_tokenizer(bpe_dir)
    symbols = dict(zip(*[tokenizer.byte2unicode.lookup(tf.constant(
        [bytes([b]) for b in range(256)])).numpy().tolist(), range(256)]))
    raw = [bytes(symbols[s.encode("utf-8")] for piece in pieces for s in piece)
           for pieces in table]
    merged = tokenizer._merge_words(tf.constant(raw)).to_list()
    assert merged == [[vocabulary[piece] for piece in pieces] for pieces in table]
    ranks = {tuple(m.split(" ")): rank for rank, m in enumerate(merges)}
    assert all(merge_symbols(list("".join(pieces)), ranks) == pieces for pieces in table[:500])
    assert read_word_pieces(path, merges[:-1]) is None


def test_saved_model_takes_raw_strings_and_is_servable(bpe_dir, keras_tokenizer, tmp_path):
    tokenizer = load_tokenizer(bpe_dir)

    class Serve(tf.Module):
        def __init__(self):
            super().__init__()
            self.tokenizer = tokenizer

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def serve(self, text):
            ids = self.tokenizer(text)
            return {"ids": ids.flat_values, "splits": ids.row_splits}

    module = Serve()
    tf.saved_model.save(module, str(tmp_path / "bpe"), signatures={"serving_default":
                                                                   module.serve})
    assert not op_audit.unservable_ops(op_audit.saved_model_ops(str(tmp_path / "bpe")))
    served = tf.saved_model.load(str(tmp_path / "bpe")).signatures["serving_default"]
    texts = HARD_STRINGS + ["fresh words: zygomorphic quokkas"]
    out = served(tf.constant(texts))
    ids = tf.RaggedTensor.from_row_splits(out["ids"], out["splits"]).to_list()
    assert ids == _ids(keras_tokenizer, texts)


def test_host_map_gives_dataset_map_ids(bpe_dir, lines):
    """``host_map`` (tf.data's parallel map, its function instantiated on the host device
    alone) yields Dataset.map's elements: ragged ids of every path of the tokenizer
    (word table, merge loop, keras-nlp's split of rare rows), and nested outputs."""
    from lmfactory.models.host_map import SINGLE_DEVICE_ATTRIBUTE, HostMapDataset, host_map, on_host

    tokenizer = load_tokenizer(bpe_dir)
    texts = lines[1][:100] + HARD_STRINGS + _fuzz(60, seed=3)
    batched = tf.data.Dataset.from_tensor_slices(texts).batch(64)
    mapped = host_map(batched, tokenizer)
    packed = mapped._input_dataset  # HostMapDataset, then the one-op unpacking map
    assert isinstance(packed, HostMapDataset)
    assert packed._map_func.function.function_def.attr[SINGLE_DEVICE_ATTRIBUTE].b
    for _ in range(2):  # a second iterator instantiates the function again
        ours = [row for batch in mapped for row in batch.to_list()]
        assert ours == [row for batch in batched.map(tokenizer) for row in batch.to_list()]

    def nested(batch):
        return {"ids": tokenizer(batch), "length": tf.strings.length(batch)}, tf.size(batch)

    first = next(iter(host_map(batched, nested)))  # several outputs, int32 among them
    assert first[0]["ids"].to_list() == ours[:64] and int(first[1]) == 64
    assert first[0]["length"].numpy().tolist() == [len(t.encode()) for t in texts[:64]]

    class Held:  # a captured tensor's device decides whether host_map may be used
        def __init__(self, device):
            self.device = device
    assert on_host([Held("/job:localhost/replica:0/task:0/device:CPU:0"), Held("")])
    assert not on_host([Held("/job:localhost/replica:0/task:0/device:GPU:0")])
