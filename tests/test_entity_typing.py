"""Entity typing on KG-linked text (ERNIE §3.5 / §4.1): the data builder over FB15k-237 and
real sentences (bad inputs counted, types from the relations an entity heads, split by
entity), the in-graph mention marking against the Python reference, the Ling & Weld
metrics by hand, the task kind's recipe checks, and its training, export and evaluation
through the Trainer's run_fn and the Evaluator (no pipeline runner) with the exported
model called on raw strings."""

import collections
import json
import types as pytypes

import keras
import keras_nlp
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)

from lmfactory.components.evaluator import executor as evaluator
from lmfactory.components.evaluator.metrics import typing_metrics
from lmfactory.components.knowledge_graph import typing_data
from lmfactory.components.trainer import run_fn as run_fn_lib
from lmfactory.components.trainer.model_artifact import (BACKBONE_WEIGHTS, MODEL_CONFIG,
                                                         VOCABULARY_DIR, copy_dir,
                                                         keras_dir_of, read_model_config)
from lmfactory.models.tasks.relation_marking import EntityMarkingPreprocessor, mark_entity
from lmfactory.pipelines.pipeline import task_record, trainer_config
from lmfactory.recipe import RecipeError, load_recipe

import serving_models
from conftest import SHARED_DATA

WIKITEXT = str(SHARED_DATA / "wikitext-2" / "valid.txt")
SENTENCES = ["Gothenburg is the second largest city in Sweden , after Stockholm .",
             "The war was fought by France and England in 1340 ."]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("typing")
    text = root / "text.txt"
    with open(WIKITEXT, encoding="utf-8") as f:
        lines = [next(f) for _ in range(300)]
    text.write_bytes(f"{SENTENCES[0]}\n\n = Heading = \n".encode()
                     + b"caf\xe9 \xff broken\n" + "".join(lines).encode())
    squad = root / "squad.json"
    squad.write_text(json.dumps({"data": [{"paragraphs": [
        {"context": SENTENCES[1]}, {"context": None}]}]}), encoding="utf-8")
    counts = typing_data.build(
        str(root / "out"), str(SHARED_DATA), sources=[{"format": "text", "path": str(text)},
                                    {"format": "squad", "path": str(squad)}],
        top_k=6, eval_fraction=0.3, max_per_entity=5)
    rows = {}
    for split in ("train", "eval"):
        with open(root / "out" / f"{split}.tsv", encoding="utf-8") as f:
            header, *body = f.read().splitlines()
        assert header.split("\t") == list(typing_data.COLUMNS)
        rows[split] = [line.split("\t") for line in body]
    return counts, rows, root


def test_builder_counts_types_entities_and_splits_by_entity(built):
    counts, rows, root = built
    skipped = counts["skipped"]
    assert skipped["non_utf8_lines"] == 1 and skipped["malformed_paragraphs"] == 1
    assert skipped["empty_or_heading_lines"] >= 2 and skipped["sentences_without_entities"] > 0
    assert skipped["relations_of_excluded_domains"] > 0  # /common/topic/..., /base/...
    assert skipped["entity_without_kept_type"] > 0 and skipped["over_entity_cap"] > 0
    assert counts["examples"] == {split: len(r) for split, r in rows.items()}
    assert min(counts["examples"].values()) > 5
    assert (root / "out" / "types.txt").read_text().split() == counts["types"]
    everything = rows["train"] + rows["eval"]
    # FB15k-237: Sweden heads /location/location/contains ... -> location; France heads
    # /location/country/... relations -> country (if kept) and location.
    by_mention = {(text, mention): labels.split() for text, mention, labels in everything}
    assert "location" in by_mention[(SENTENCES[0], "Sweden")]
    assert "location" in by_mention[(SENTENCES[1], "France")]
    assert len(counts["types"]) == 6 and "topic" not in counts["types"]
    for text, mention, labels in everything:
        assert mention in text and labels.split() and set(labels.split()) <= set(
            counts["types"])
        ranks = [counts["types"].index(t) for t in labels.split()]
        assert ranks == sorted(ranks)  # most frequent type first
    assert max(len(r[2].split()) for r in everything) > 1  # multi-label
    # Split by entity: a surface form links to one entity, and none crosses the splits.
    mentions = {split: {r[1].lower() for r in split_rows} for split, split_rows in rows.items()}
    assert not mentions["train"] & mentions["eval"]
    per_mention = {}
    for r in everything:
        per_mention[r[1].lower()] = per_mention.get(r[1].lower(), 0) + 1
    assert max(per_mention.values()) <= 5


def test_relation_paths_name_their_subject_type():
    assert typing_data.relation_type("/people/person/nationality") == "person"
    assert typing_data.relation_type("/film/film/genre") == "film"
    assert typing_data.relation_type(
        "/award/award_winner/awards_won./award/award_honor/award_winner") == "award_winner"
    assert typing_data.relation_type("/base/popstra/celebrity/dated./base/x/y") == "celebrity"
    assert typing_data.relation_type("/location/contains") is None  # no property
    assert typing_data.relation_type("not a path") is None
    assert typing_data.relation_type("/people//x") is None


def test_graph_marking_matches_the_python_reference(built):
    _, rows, _ = built
    cases = [r[:2] for r in rows["train"] + rows["eval"]] + [
        ["C++ (film) and C++ (film) in Paris", "C++ (film)"], ["no mention here", "absent"],
        ["\u00e9cole in Z\u00fcrich", "Z\u00fcrich"], ["x", ""], ["a\\Eb a\\Eb", "a\\Eb"]]
    layer = EntityMarkingPreprocessor(inner=keras.layers.Identity(), entity_marker="*")
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert restored.entity_marker == "*"
    marked = tf.function(restored.mark)(tf.constant([c[0] for c in cases]),
                                        tf.constant([c[1] for c in cases]))
    expected = [mark_entity(*case) for case in cases]
    assert [m.decode("utf-8") for m in marked.numpy()] == expected
    assert expected[-5] == "* C++ (film) * and C++ (film) in Paris"
    assert expected[-4] == "no mention here" and expected[-2] == "x"


def test_marking_over_ernie_links_the_marked_text():
    from lmfactory.models.ernie.ernie_preprocessor import ErniePreprocessor
    from lmfactory.models.knowledge import EntityLinkingLayer

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "*", ".", "sweden", "gothenburg",
             "is", "in", "a", "city"]
    tokenizer = keras_nlp.tokenizers.WordPieceTokenizer(vocabulary=vocab, lowercase=True)
    linker = EntityLinkingLayer([["sweden"], ["gothenburg"]], offset_unit="BYTE")
    inner = ErniePreprocessor(tokenizer, linker, sequence_length=16)
    packed = tf.function(EntityMarkingPreprocessor(inner, entity_marker="*"))(
        (tf.constant(["Gothenburg is a city in Sweden ."]), tf.constant(["Sweden"])))
    tokens = [vocab[i] for i in packed["token_ids"].numpy()[0] if i]
    assert tokens == ["[CLS]", "gothenburg", "is", "a", "city", "in", "*", "sweden", "*", ".",
                      "[SEP]"]
    mask, ids = packed["entity_mask"].numpy()[0], packed["entity_ids"].numpy()[0]
    assert np.flatnonzero(mask).tolist() == [1, 7] and ids[[1, 7]].tolist() == [1, 0]
    with pytest.raises(ValueError, match="entity_marker '#' is not a token of the vocabulary"):
        EntityMarkingPreprocessor(inner, entity_marker="#")


def test_typing_metrics_by_hand():
    labels = np.array([[1, 1, 0], [1, 0, 0], [0, 0, 1], [0, 1, 0]])
    predictions = np.array([[1, 1, 0], [1, 1, 0], [0, 0, 0], [1, 0, 0]])
    result = typing_metrics(labels, predictions)
    assert result["strict_accuracy"] == pytest.approx(1 / 4)
    # per mention P: 1, 1/2, (none predicted) 0, 0 -> 1.5/4; R: 1, 1, 0, 0 -> 2/4
    p, r = 1.5 / 4, 2 / 4
    assert result["loose_macro_precision"] == pytest.approx(p)
    assert result["loose_macro_f1"] == pytest.approx(2 * p * r / (p + r))
    # pooled: 3 right of 5 predicted, of 5 true
    assert result["loose_micro_precision"] == pytest.approx(3 / 5)
    assert result["loose_micro_f1"] == pytest.approx(3 / 5)
    with pytest.raises(ValueError, match="one shape"):
        typing_metrics(labels, predictions[:, :2])


def test_task_kind_is_registered_and_checks_the_recipe():
    from lmfactory.components import tasks

    kind = tasks.for_recipe("entity_typing")
    assert kind.head == "classification" and kind.metrics[0] == "loose_micro_f1"
    recipe = load_recipe("ernie_fb15k237_typing")
    assert task_record(recipe) == {"kind": "entity_typing", "text_features": ["text", "mention"],
                                   "label_feature": "types", "sequence_length": 64}
    with pytest.raises(RecipeError, match="two features"):
        load_recipe("ernie_fb15k237_typing", ["finetuning.text_features=[text]"])
    with pytest.raises(RecipeError, match="one character"):
        load_recipe("ernie_fb15k237_typing", ['finetuning.task_args={entity_marker: "[ENT]"}'])
    with pytest.raises(RecipeError, match="evaluation.metric"):
        load_recipe("ernie_fb15k237_typing", ["evaluation.metric=accuracy"])


def _write_records(folder, rows) -> str:
    folder.mkdir(parents=True)
    with tf.io.TFRecordWriter(str(folder / "data-00000-of-00001.gz"), options="GZIP") as out:
        for row in rows:
            out.write(tf.train.Example(features=tf.train.Features(feature={
                name: tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode()]))
                for name, v in zip(typing_data.COLUMNS, row)})).SerializeToString())
    return str(folder / "*")


def _base_model(path) -> str:
    """A Model artifact as the Pretrainer writes it (keras/ only): a tiny BERT backbone and
    the test vocabulary (which holds the marker "*")."""
    backbone = serving_models.backbone("bert")
    keras_dir = keras_dir_of(str(path / "Format-Serving"))
    tf.io.gfile.makedirs(keras_dir)
    backbone.save_weights(f"{keras_dir}/{BACKBONE_WEIGHTS}")
    copy_dir(serving_models.vocabulary("bert"), f"{keras_dir}/{VOCABULARY_DIR}")
    with open(f"{keras_dir}/{MODEL_CONFIG}", "w") as f:
        json.dump({"architecture": "bert", "preset": "tiny", "task": None,
                   "backbone_config": backbone.get_config()}, f)
    return str(path)


def test_run_fn_evaluator_and_raw_string_serving(built, tmp_path):
    _, rows, root = built
    train = _write_records(tmp_path / "Split-train", rows["train"][:32])
    evaluation = _write_records(tmp_path / "Split-eval", rows["eval"][:16])
    recipe = load_recipe("bert_tiny_sst2", [  # BERT's recipe switched to the typing task
        f"data.task={{format: tsv, splits: {{train: {root}/out/train.tsv, "
        f"eval: {root}/out/eval.tsv}}}}", "finetuning.task=entity_typing",
        "finetuning.text_features=[text, mention]", 'finetuning.task_args={entity_marker: "*"}',
        "evaluation.metric=loose_micro_f1", "finetuning.steps=2", "finetuning.batch_size=8",
        "finetuning.eval_steps=1", "finetuning.sequence_length=20",
        "finetuning.learning_rate=0.01", "runtime.steps_per_checkpoint=2"])
    model_uri, run_dir = tmp_path / "FineTuner" / "1", tmp_path / "run"
    run_fn_lib.run_fn(pytypes.SimpleNamespace(
        custom_config=trainer_config(recipe, "finetuning", task_record(recipe), serves=True),
        train_files=[train], eval_files=[evaluation], base_model=_base_model(tmp_path / "base"),
        train_steps=2, eval_steps=1, model_run_dir=str(run_dir),
        serving_model_dir=str(model_uri / "Format-Serving")))
    assert json.loads((run_dir / "metrics.json").read_text())["loss"] > 0
    task = read_model_config(str(model_uri))["task"]
    names = task["label_vocabulary"]
    assert task["kind"] == "entity_typing" and task["num_classes"] == len(names) >= 2
    frequency = collections.Counter(t for r in rows["train"][:32] for t in r[2].split())
    assert names[:len(frequency)] == sorted(frequency, key=lambda t: (-frequency[t], t))

    outcome = evaluator.evaluate_and_bless(str(model_uri), evaluation,
                                           {"metric": "loose_micro_f1", "threshold": None})
    metrics = outcome["metrics"]
    assert outcome["blessed"] and metrics["examples"] == 16
    assert {"strict_accuracy", "loose_macro_f1", "loose_micro_f1"} <= set(metrics)
    # the pushed model on the raw strings gives the Evaluator's figures
    serve = tf.saved_model.load(str(model_uri / "Format-Serving")).signatures["serving_default"]
    eval_rows = rows["eval"][:16]
    out = serve(text=tf.constant([r[0] for r in eval_rows]),
                mention=tf.constant([r[1] for r in eval_rows]))
    probabilities = out["probabilities"].numpy()
    assert probabilities.shape == (16, len(names)) and set(out) == {"probabilities", "labels"}
    truth = np.array([[name in r[2].split() for name in names] for r in eval_rows])
    expected = typing_metrics(truth, probabilities > 0.5)
    assert metrics["loose_micro_f1"] == pytest.approx(expected["loose_micro_f1"])
    assert metrics["strict_accuracy"] == pytest.approx(expected["strict_accuracy"])
    assert metrics["types_outside_vocabulary"] == 0
    fallback = probabilities > 0.5  # the most probable type always predicted too
    fallback[np.arange(16), probabilities.argmax(axis=1)] = True
    assert metrics["loose_macro_f1_at_least_one"] == pytest.approx(
        typing_metrics(truth, fallback)["loose_macro_f1"])
    for row, labels in zip(probabilities, out["labels"].numpy()):
        chosen = [names[i] for i in np.argsort(-row, kind="stable") if row[i] > 0.5]
        assert labels.decode() == " ".join(chosen)
    odd = serve(text=tf.constant(["caf\u00e9 in Paris", "", "no mention"]),
                mention=tf.constant(["Paris", "", "absent"]))
    assert odd["probabilities"].shape == (3, len(names))
    with pytest.raises(tf.errors.InvalidArgumentError, match="1-D batch of UTF-8 strings"):
        serve(text=tf.constant([["a"]]), mention=tf.constant(["a"]))
