"""The Beam workers' WordPiece without TensorFlow (components/pretraining_data/plain_wordpiece.py)
gives the ids of the project's keras-nlp tokenizer (``BertWordPieceTokenizer``)."""

from __future__ import annotations

import os

import pytest

from lmfactory.components.pretraining_data import plain_wordpiece
from lmfactory.models.tokenizers import load_tokenizer, read_tokenizer_config
from lmfactory.models.tokenizers.config import read_lines
from test_pretraining_data import write_wordpiece_vocab

WIKITEXT = "/work/shared/data/wikitext-2/valid.txt"
CRAFTED = [
    "Hello, World! It's 3.14 -- ok?", "naïve CAFÉ résumé Ångström", "ΟΔΥΣΣΕΥΣ ΣΑΣ",
    "tab\there\nnew\rline\x0bvt\x0cff\x1cfs\x85nel", "a\u00a0b\u2003c\u3000d",
    "zero\u200bwidth\u200dand\ufeffbom\ufffdreplacement\x00nul\x7fdel",
    "中文字符和日本語のテキスト", "emoji 😀 and symbols © ® ™ € £ ^ $ ` ~ | <>",
    "İstanbul ǅ ﬁ ß ẞ", "unknownwordzzzqqq", "x" * 120, "", "   ", "«quoted» „low“ ‹›",
    "e\u0301 precomposed é", "[CLS] [MASK] ## ##a a##b",
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    texts = [line.strip() for line in open(WIKITEXT, encoding="utf-8") if line.strip()]
    vocab_dir = str(tmp_path_factory.mktemp("plain_wordpiece"))
    # words of the crafted lines too (accents, Greek, CJK), not their control characters
    write_wordpiece_vocab(vocab_dir, texts[:400] + [CRAFTED[i] for i in (1, 2, 6, 8, 13)],
                          num_words=1500)
    return vocab_dir, texts


def _both(vocab_dir, texts):
    config = read_tokenizer_config(vocab_dir)
    tokens = read_lines(os.path.join(vocab_dir, config["vocabulary_file"]))
    plain = plain_wordpiece.for_vocabulary(config, tokens)
    keras = load_tokenizer(vocab_dir)(texts)
    return plain.tokenize(texts), [[int(i) for i in row] for row in keras]


def test_same_ids_as_the_keras_nlp_tokenizer_on_wikitext_and_crafted_text(folder):
    vocab_dir, texts = folder
    sample = texts[:3000] + CRAFTED
    plain, keras = _both(vocab_dir, sample)
    differing = [(text, p, k) for text, p, k in zip(sample, plain, keras) if p != k]
    assert not differing, differing[:3]
    assert sum(map(len, plain)) > 50_000  # the comparison covered real text
    assert plain[len(sample) - len(CRAFTED) + CRAFTED.index("x" * 120)] == [1]  # > 100 bytes: [UNK]


def test_the_tokenizer_pickles_without_its_cache_and_other_kinds_get_none(folder):
    import pickle

    vocab_dir, _ = folder
    config = read_tokenizer_config(vocab_dir)
    tokens = read_lines(os.path.join(vocab_dir, config["vocabulary_file"]))
    plain = plain_wordpiece.for_vocabulary(config, tokens)
    first = plain.tokenize(["Hello world"])
    copy = pickle.loads(pickle.dumps(plain))
    assert copy._cache == {} and copy.tokenize(["Hello world"]) == first
    assert plain_wordpiece.for_vocabulary({"kind": "bpe"}, tokens) is None
