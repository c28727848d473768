"""Relation classification on KG-linked text (ERNIE §3.5 / §4.4): the data builder over
FB15k-237 and real sentences (bad inputs counted, splits by entity pair), the in-graph
mention marking against the Python reference, the marking preprocessor over ERNIE's
linking preprocessor, and the task kind's recipe checks. (The DAG run: test_pipeline_ernie.)"""

import json

import keras
import keras_nlp
import numpy as np
import pytest
import tensorflow as tf

from lmfactory.components.knowledge_graph import relation_data
from lmfactory.models.tasks.relation_marking import (RelationMarkingPreprocessor,
                                                     mark_mentions)

from conftest import SHARED_DATA

WIKITEXT = str(SHARED_DATA / "wikitext-2" / "valid.txt")
SENTENCES = [
    "Gothenburg is the second largest city in Sweden , after Stockholm .",
    "Sweden borders Norway and Finland .",
    "The war was fought by France and England in 1340 .",
]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("relations")
    text = root / "text.txt"
    with open(WIKITEXT, encoding="utf-8") as f:
        lines = [next(f) for _ in range(400)]
    text.write_bytes(f"{SENTENCES[0]}\n{SENTENCES[1]}\n\n = Heading = \n".encode()
                     + b"caf\xe9 \xff broken\n" + "".join(lines).encode())
    squad = root / "squad.json"
    squad.write_text(json.dumps({"data": [{"paragraphs": [
        {"context": SENTENCES[2]}, {"context": 7}]}]}), encoding="utf-8")
    counts = relation_data.build(
        str(root / "out"), str(SHARED_DATA), sources=[{"format": "text", "path": str(text)},
                                    {"format": "squad", "path": str(squad)}],
        top_k=6, eval_fraction=0.3)
    rows = {}
    for split in ("train", "eval"):
        with open(root / "out" / f"{split}.tsv", encoding="utf-8") as f:
            header, *body = f.read().splitlines()
        assert header.split("\t") == list(relation_data.COLUMNS)
        rows[split] = [line.split("\t") for line in body]
    return counts, rows


def test_builder_counts_links_and_splits_by_entity_pair(built):
    counts, rows = built
    skipped = counts["skipped"]
    assert skipped["non_utf8_lines"] == 1 and skipped["malformed_paragraphs"] == 1
    assert skipped["empty_or_heading_lines"] >= 2
    assert skipped["sentences_without_two_entities"] > 0
    assert counts["examples"] == {split: len(r) for split, r in rows.items()}
    assert min(counts["examples"].values()) > 5
    with pytest.raises(ValueError, match="give data_dir"):  # no default data location
        relation_data.build("unused", sources=[])
    everything = rows["train"] + rows["eval"]
    # The crafted sentences: FB15k-237 says Sweden contains Gothenburg, Sweden adjoins Norway.
    assert [SENTENCES[0], "Sweden", "Gothenburg", "/location/location/contains"] in everything
    assert any(r[:3] == [SENTENCES[1], "Sweden", "Norway"] for r in everything)
    labels = {r[3] for r in everything}
    assert labels <= set(counts["relations"]) and len(counts["relations"]) == 6
    for text, head, tail, _ in everything:
        assert head in text and tail in text and head != tail
    pairs = {split: {frozenset(r[1:3]) for r in split_rows}
             for split, split_rows in rows.items()}
    # Split by pair of entities (ids); surface forms of one pair never cross splits here.
    assert not pairs["train"] & pairs["eval"]


def test_graph_marking_matches_the_python_reference(built):
    _, rows = built
    extra = [["C++ (film) and C++ (film) in Paris", "C++ (film)", "Paris"],
             ["no mention here", "", "absent"], ["\u00e9cole in Z\u00fcrich", "Z\u00fcrich",
                                                  "\u00e9cole"],
             ["a\\Eb a\\Eb", "a\\Eb", "b"]]
    cases = [r[:3] for r in rows["train"] + rows["eval"]] + extra
    layer = RelationMarkingPreprocessor(inner=keras.layers.Identity(),
                                        head_marker="*", tail_marker="~")
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert (restored.head_marker, restored.tail_marker) == ("*", "~")
    marked = tf.function(restored.mark)(*(tf.constant([c[i] for c in cases])
                                          for i in range(3)))
    expected = [mark_mentions(*case, head_marker="*", tail_marker="~") for case in cases]
    assert [m.decode("utf-8") for m in marked.numpy()] == expected
    assert expected[-4] == "* C++ (film) * and C++ (film) in ~ Paris ~"
    assert expected[-3] == "no mention here"


def _ernie_preprocessor():
    from lmfactory.models.ernie.ernie_preprocessor import ErniePreprocessor
    from lmfactory.models.knowledge import EntityLinkingLayer

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "*", "~", ".", ",", "sweden",
             "gothenburg", "is", "in", "a", "city"]
    tokenizer = keras_nlp.tokenizers.WordPieceTokenizer(vocabulary=vocab, lowercase=True)
    linker = EntityLinkingLayer([["sweden"], ["gothenburg"]], offset_unit="BYTE")
    return ErniePreprocessor(tokenizer, linker, sequence_length=16), vocab


def test_marking_preprocessor_over_ernie_links_the_marked_text():
    inner, vocab = _ernie_preprocessor()
    layer = RelationMarkingPreprocessor(inner, head_marker="*", tail_marker="~")
    texts = tf.constant(["Gothenburg is a city in Sweden .", "Sweden ."])
    heads, tails = tf.constant(["Sweden", "Sweden"]), tf.constant(["Gothenburg", "Norway"])
    packed = tf.function(layer)((texts, heads, tails))
    tokens = [[vocab[i] for i in row if i] for row in packed["token_ids"].numpy()]
    assert tokens[0] == ["[CLS]", "~", "gothenburg", "~", "is", "a", "city", "in", "*",
                         "sweden", "*", ".", "[SEP]"]
    assert tokens[1] == ["[CLS]", "*", "sweden", "*", ".", "[SEP]"]
    mask, ids = packed["entity_mask"].numpy(), packed["entity_ids"].numpy()
    assert np.flatnonzero(mask[0]).tolist() == [2, 9] and ids[0, [2, 9]].tolist() == [1, 0]
    with pytest.raises(ValueError, match="head_marker '#' is not a token of the vocabulary"):
        RelationMarkingPreprocessor(inner, head_marker="#", tail_marker="~")
    with pytest.raises(ValueError, match="must differ"):
        RelationMarkingPreprocessor(inner, head_marker="*", tail_marker="*")


def test_task_kind_is_registered_and_checks_the_recipe():
    from lmfactory.components import tasks
    from lmfactory.recipe import RecipeError, load_recipe

    kind = tasks.for_recipe("relation_classification")
    assert kind.head == "classification" and kind.metrics[0] == "macro_f1"
    recipe = load_recipe("ernie_fb15k237_relations")
    from lmfactory.pipelines.pipeline import task_record

    assert task_record(recipe) == {"kind": "relation_classification",
                                   "text_features": ["text", "head", "tail"],
                                   "label_feature": "relation", "sequence_length": 64}
    with pytest.raises(RecipeError, match="three features"):
        load_recipe("ernie_fb15k237_relations", ["finetuning.text_features=[text, head]"])
    with pytest.raises(RecipeError, match="one character"):
        load_recipe("ernie_fb15k237_relations", ['finetuning.task_args={head_marker: "[HD]"}'])
