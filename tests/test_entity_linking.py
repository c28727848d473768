"""Entity linking: the Python `EntityMatcher` (Beam) and the TF
`EntityLinkingLayer` (inside exported models) find the same mentions on real sentences with
FB15k-237's labels, the layer survives a SavedModel, and the Beam `EntityLinker` annotates
Examples with counters."""

import json
import os

import pytest
import tensorflow as tf

from lmfactory.components.knowledge_graph.executor import generate_graph
from lmfactory.components.knowledge_graph.graph import read_labels
from lmfactory.components.knowledge_graph.linker_component import link_examples
from lmfactory.components.knowledge_graph.linking import EntityMatcher, Mention
from lmfactory.models.knowledge import EntityLinkingLayer, read_linking_vocabulary

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")


@pytest.fixture(scope="module")
def fb15k_labels():
    labels = read_labels(os.path.join(DATA, "kg", "FB15k-237", "entity2wikidata.json"))
    return [[form.lower() for form in labels[entity]] for entity in sorted(labels)]


@pytest.fixture(scope="module")
def sentences():
    with open(os.path.join(DATA, "glue", "SST-2", "dev.tsv"), encoding="utf-8") as f:
        sst2 = [line.split("\t")[0] for line in list(f)[1:121]]
    with open(os.path.join(DATA, "wikitext-2", "valid.txt"), encoding="utf-8") as f:
        wiki = [line.strip() for line in f if len(line.strip()) > 40][:80]
    return sst2 + wiki + ["Café au lait in São Paulo, naïve New  York–based U.S. critics",
                          "", "   "]


def _layer_mentions(starts, ends, ids):
    return [[Mention(*m) for m in zip(s, e, i)]
            for s, e, i in zip(starts.tolist(), ends.tolist(), ids.tolist())]


def test_matching_rules():
    labels = [["new york"], ["york"], ["new york city"], ["paris"], ["u.s."], ["york"],
              ["são paulo"]]
    matcher = EntityMatcher(labels, max_ngram=4, lowercase=True)  # "u . s ." has 4 words
    text = "New  York City, york; U . S . and São Paulo: New York"
    assert matcher.link(text) == [Mention(0, 14, 2), Mention(16, 20, 1), Mention(22, 29, 4),
                                  Mention(34, 43, 6), Mention(45, 53, 0)]
    assert EntityMatcher(labels, max_ngram=2, lowercase=True).link("new york city")[0] == \
        Mention(0, 8, 0)  # "new york city" has 3 words: longer than max_ngram
    assert EntityMatcher(labels, max_ngram=3, lowercase=False).link("Paris paris") == \
        [Mention(6, 11, 3)]
    layer = EntityLinkingLayer(labels, max_ngram=4, lowercase=True)
    assert _layer_mentions(*[x.numpy() for x in layer(tf.constant([text]))]) == \
        [matcher.link(text)]
    byte_layer = EntityLinkingLayer(labels, max_ngram=3, offset_unit="BYTE")
    starts, ends, _ = byte_layer(tf.constant(["São Paulo"]))
    assert (starts.numpy().tolist(), ends.numpy().tolist()) == ([[0]], [[10]])  # ã: 2 bytes
    assert layer.get_config()["labels"] == labels
    assert EntityLinkingLayer.from_config(layer.get_config()).max_ngram == 4


def test_layer_and_matcher_agree_on_real_sentences(fb15k_labels, sentences):
    matcher = EntityMatcher(fb15k_labels, max_ngram=4, lowercase=True)
    layer = EntityLinkingLayer(fb15k_labels, max_ngram=4, lowercase=True)
    expected = [matcher.link(text) for text in sentences]
    found = _layer_mentions(*[x.numpy() for x in layer(tf.constant(sentences))])
    assert found == expected
    assert sum(map(len, expected)) > 100  # real text does mention FB15k-237 entities
    for text, mentions in zip(sentences, expected):
        for mention in mentions:
            surface = " ".join(text[mention.start_char:mention.end_char].lower().split())
            assert any(" ".join(form.split()) == surface or
                       form.replace(" ", "") == surface.replace(" ", "")
                       for form in fb15k_labels[mention.entity_index])


def test_layer_in_a_saved_model(fb15k_labels, sentences, tmp_path):
    layer = EntityLinkingLayer(fb15k_labels[:2000], max_ngram=4, lowercase=True)

    class Linker(tf.Module):
        def __init__(self):
            super().__init__()
            self.layer = layer

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def serve(self, texts):
            starts, ends, ids = self.layer(texts)
            return {"starts": starts.to_tensor(-1), "ends": ends.to_tensor(-1),
                    "entity_ids": ids.to_tensor(-1)}

    module = Linker()
    tf.saved_model.save(module, str(tmp_path / "linker"),
                        signatures={"serving_default": module.serve})
    del module
    served = tf.saved_model.load(str(tmp_path / "linker")).signatures["serving_default"]
    outputs = {key: value.numpy() for key, value in served(tf.constant(sentences)).items()}
    matcher = EntityMatcher(fb15k_labels[:2000], max_ngram=4, lowercase=True)
    for row, text in enumerate(sentences):
        keep = outputs["entity_ids"][row] >= 0
        assert [Mention(*m) for m in zip(outputs["starts"][row][keep].tolist(),
                                         outputs["ends"][row][keep].tolist(),
                                         outputs["entity_ids"][row][keep].tolist())] == \
            matcher.link(text)


def _write_examples(folder, records):
    os.makedirs(folder)
    with tf.io.TFRecordWriter(os.path.join(folder, "data_tfrecord-00000-of-00001.gz"),
                              options="GZIP") as writer:
        for features in records:
            example = tf.train.Example()
            for name, value in features.items():
                example.features.feature[name].bytes_list.value.append(value)
            writer.write(example.SerializeToString())


def _read_examples(folder):
    names = sorted(os.listdir(folder))
    assert names and all(name.endswith(".gz") for name in names)
    return [tf.train.Example.FromString(record.numpy()) for record in tf.data.TFRecordDataset(
        [os.path.join(folder, name) for name in names], compression_type="GZIP")]


def test_entity_linker_beam(tmp_path):
    (tmp_path / "train.txt").write_text("paris\tcapital_of\tfrance\nnew_york\tin\tusa\n")
    (tmp_path / "labels.tsv").write_text("paris\tParis\nfrance\tFrance\nnew_york\tNew York\n"
                                         "usa\tUnited States\tU.S.\n")
    generate_graph({"splits": {"train": str(tmp_path / "train.txt")},
                    "labels": str(tmp_path / "labels.tsv"),
                    "linking": {"max_ngram": 4, "lowercase": True}}, str(tmp_path / "graph"))
    _write_examples(tmp_path / "in" / "Split-train", [
        {"sentence": b"From Paris to New York, U.S.", "label": b"1"},
        {"sentence": "nothing to see here".encode(), "label": b"0"},
        {"label": b"0"},  # no text feature
        {"sentence": b"caf\xe9 in France"},  # not UTF-8
    ])
    _write_examples(tmp_path / "in" / "Split-eval", [{"sentence": "France".encode()}])
    counts = link_examples({split: str(tmp_path / "in" / f"Split-{split}")
                            for split in ("train", "eval")}, str(tmp_path / "graph"),
                           str(tmp_path / "out"), ["sentence"])
    assert counts["train"] == {"examples": 4, "texts": 3, "linked_mentions": 4,
                               "texts_without_entity": 1, "missing_text_feature": 1,
                               "invalid_utf8_texts": 1, "multi_value_texts": 0}
    assert counts["eval"]["linked_mentions"] == 1
    assert json.loads((tmp_path / "out" / "linking_counts.json").read_text()) == counts
    records = _read_examples(tmp_path / "out" / "Split-train")
    by_label = {}
    for record in records:
        feature = record.features.feature
        key = feature["sentence"].bytes_list.value[0] if "sentence" in feature else b""
        by_label[key] = [list(feature[f"sentence_entity_{name}"].int64_list.value)
                         for name in ("starts", "ends", "ids")]
        assert "label" in feature or key.startswith(b"caf")
    entities = [line.split("\t")[1] for line in
                (tmp_path / "graph" / "entities.tsv").read_text().splitlines()]
    starts, ends, ids = by_label[b"From Paris to New York, U.S."]
    assert (starts, ends) == ([5, 14, 24], [10, 22, 28])
    assert [entities[i] for i in ids] == ["paris", "new_york", "usa"]
    assert by_label[b"nothing to see here"] == [[], [], []]
    assert by_label[b""] == [[], [], []]
    assert by_label[b"caf\xe9 in France"] == [[8], [14], [entities.index("france")]]


def test_linking_vocabulary_files(tmp_path):
    from lmfactory.components.knowledge_graph.graph import add_linking_files

    (tmp_path / "train.txt").write_text("x\tr\ty\n")
    generate_graph({"splits": {"train": str(tmp_path / "train.txt")},
                    "linking": {"max_ngram": 2, "lowercase": False, "min_label_chars": 1}},
                   str(tmp_path / "g"))
    (tmp_path / "vocab").mkdir()
    (tmp_path / "vocab" / "vocab.txt").write_text("[PAD]\n")
    assert read_linking_vocabulary(str(tmp_path / "vocab")) is None
    add_linking_files(str(tmp_path / "vocab"), str(tmp_path / "g"), str(tmp_path / "v2"))
    assert sorted(os.listdir(tmp_path / "v2")) == ["entities.tsv", "linking.json",
                                                   "vocab.txt"]
    assert read_linking_vocabulary(str(tmp_path / "v2")) == ([["x"], ["y"]], 2, False)
