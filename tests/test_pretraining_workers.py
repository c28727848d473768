"""PretrainingExampleGen's Beam workers without TensorFlow: the plain-Python
WordPiece (components/pretraining_data/plain_wordpiece.py) gives the ids of the project's
keras-nlp tokenizer (``BertWordPieceTokenizer``), and a worker that unpickles the pipeline's
steps (beam_steps.py) tokenizes and writes a ``bert_mlm_nsp`` shard without importing
TensorFlow, TFX or Keras, with the records the objective builds in-process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import tensorflow as tf

from lmfactory.components.pretraining_data import beam_steps, executor, nsp_instances
from lmfactory.components.pretraining_data import plain_wordpiece
from lmfactory.components.pretraining_data.features import resolve_config
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


_WORKER = """
import pickle, sys
from apache_beam.internal import pickler
from lmfactory.components.pretraining_data import beam_steps
tokenize, write = (pickler.loads(part) for part in pickle.loads(sys.stdin.buffer.read()))
keyed = [pair for record in step_input for pair in beam_steps.keyed_document(record)]
tokenize.setup()
documents = list(tokenize.process(keyed))
print(sorted(list(write.process((0, documents), 1))[0].items()))
print([name for name in ("tensorflow", "tfx", "keras") if name in sys.modules])
"""


def test_a_worker_tokenizes_and_writes_a_bert_shard_without_tensorflow(folder, tmp_path):
    from apache_beam.internal import pickler

    vocab_dir, texts = folder
    documents = ["\n".join(texts[i:i + 4]) for i in range(0, 160, 4)] + ["  "]
    records = [tf.train.Example(features=tf.train.Features(feature={"text": tf.train.Feature(
        bytes_list=tf.train.BytesList(value=[text.encode()]))})).SerializeToString()
        for text in documents]
    config = resolve_config({"objective": "bert_mlm_nsp", "dupe_factor": 2})
    _, state = executor.describe_vocabulary(vocab_dir, "bert_mlm_nsp", with_state=True)
    tokenize = beam_steps.TokenizeDocuments(vocab_dir, beam_steps.SENTENCES,
                                            executor._plain_tokenizer(vocab_dir))
    write = beam_steps.WriteShard(executor.objectives.get("bert_mlm_nsp").shard_examples,
                                  state, config, "train", str(tmp_path),
                                  str(tmp_path / "stats"))
    code = f"step_input = {records!r}\n" + _WORKER
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, env=env, timeout=300,
        input=__import__("pickle").dumps([pickler.dumps(tokenize), pickler.dumps(write)]))
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    stats, imported = result.stdout.decode().strip().splitlines()[-2:]
    assert imported == "[]"
    # In-process: the keras-nlp tokenizer, sentences sorted by key, the same shard builder.
    tokenizer = load_tokenizer(vocab_dir)
    kept = sorted((beam_steps.document_key(t.encode()), t) for t in documents if t.strip())
    tokenized = [[[int(i) for i in ids] for ids in tokenizer(beam_steps.document_sentences(
        text.encode()))] for _, text in kept]
    expected, expected_stats = nsp_instances.shard_examples(tokenized, state, config,
                                                            (config["random_seed"], "train", 0))
    expected_stats.update(dropped_empty_documents=1, documents=len(kept), shards=1)
    assert stats == str(sorted(expected_stats.items()))
    assert executor._read_counts(str(tmp_path / "stats")) == expected_stats
    written = list(tf.data.TFRecordDataset(
        str(tmp_path / beam_steps.shard_file_name(0, 1)), compression_type="GZIP"))
    assert [record.numpy() for record in written] == expected and len(expected) > 50
