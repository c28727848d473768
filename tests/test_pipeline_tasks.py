"""Token tagging (WNUT-17), span QA (SQuAD v2.0 shape) and multiple choice (CommonsenseQA)
end to end through the DAG at tiny size: the tiny published-format BERT checkpoint
(tests/fixtures/hf/bert) is imported, fine-tuned on slices of the real task files, evaluated
through the exported model and pushed; the pushed SavedModel then takes the task's raw
inputs, and the evaluator's figures are recomputed from it."""

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (ops used by the serving graphs)

from lmfactory.components.evaluator import squad_metrics
from lmfactory.components.evaluator.entity_metrics import entity_scores
from lmfactory.components.example_gen import conll, multiple_choice_readers, squad
from lmfactory.components.trainer.model_artifact import read_model_config
from lmfactory.pipelines import runners
from lmfactory.recipe import RecipeError, load_recipe

from conftest import DEMO_DATA
from dag_helpers import TINY_TRAINING, small_corpus

REPO = Path(__file__).resolve().parent.parent
CHECKPOINT = REPO / "tests" / "fixtures" / "hf" / "bert"
TINY = ["finetuning.steps=8", "finetuning.batch_size=8", "finetuning.eval_steps=1",
        "runtime.steps_per_checkpoint=4", "runtime.beam.direct_running_mode=in_memory",
        "runtime.beam.direct_num_workers=1"]
IMPORTED = [f"pretraining.init_checkpoint={CHECKPOINT}"]


def _pretrained_on_a_small_corpus(tmp_path: Path) -> list:
    corpus = small_corpus(DEMO_DATA, tmp_path / "corpus.txt", 120)
    return TINY_TRAINING + [f"data.corpus.path={corpus}", "tokenizer.vocab_size=600"]


def _run(recipe_name: str, tmp_path: Path, overrides: list,
         pretraining: list | None = None) -> tuple[dict, dict]:
    """Runs the recipe's DAG; ``pretraining``: the overrides that make its base model
    (default: import the tiny HF BERT checkpoint)."""
    recipe = load_recipe(recipe_name, TINY + (IMPORTED if pretraining is None
                                              else pretraining) + overrides)
    summary = runners.run_local(recipe, str(tmp_path / "runs"))
    assert summary["evaluation"]["blessed"] is True, summary["evaluation"]["reason"]
    assert summary["pushed_model"], "a blessed model is pushed"
    models_dir = Path(summary["pipeline_root"]) / "FineTuner" / "model"
    newest = max(models_dir.iterdir(), key=lambda p: int(p.name))
    return summary, read_model_config(str(newest))


def _run_on_slices(recipe_name: str, tmp_path: Path, cut, train: Path, dev: Path,
                   suffix: str, sizes: tuple, pretraining: list | None = None
                   ) -> tuple[dict, dict]:
    """Runs the recipe on the first ``sizes`` records of the train and dev files, written
    by ``cut(source, target, size)`` to ``tmp_path/train.<suffix>`` and ``dev.<suffix>``."""
    paths = [tmp_path / f"{split}.{suffix}" for split in ("train", "dev")]
    for source, target, size in zip((train, dev), paths, sizes):
        cut(source, target, size)
    return _run(recipe_name, tmp_path, [f"data.task.splits.train={paths[0]}",
                                        f"data.task.splits.eval={paths[1]}",
                                        "finetuning.sequence_length=32"], pretraining)


def _evaluation_files(summary) -> set:
    folders = list((Path(summary["pipeline_root"]) / "LMEvaluator" / "evaluation").iterdir())
    return {p.name for p in max(folders, key=lambda p: int(p.name)).iterdir()}


def _conll_slice(source: Path, target: Path, sentences: int) -> None:
    """The first ``sentences`` sentences of a CoNLL file, separators as they are."""
    lines, count = [], 0
    for line in source.read_text(encoding="utf-8").splitlines():
        lines.append(line)
        if not line.strip():
            count += 1
            if count == sentences:
                break
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_tagging_dag_tags_raw_sentences(tmp_path, shared_data):
    summary, model_config = _run_on_slices(
        "bert_tiny_wnut17", tmp_path, _conll_slice, shared_data / "wnut17" / "wnut17train.conll",
        shared_data / "wnut17" / "emerging.dev.conll", "conll", (80, 30))
    outcome = summary["evaluation"]
    dev = conll.read_conll(str(tmp_path / "dev.conll"))
    assert outcome["metrics"]["sentences"] == len(dev.sentences) == 30
    assert outcome["metric"] == "entity_f1"
    assert set(outcome["official_metrics"]) == {"entity_f1", "entity_precision",
                                                "entity_recall"}
    labels = model_config["task"]["label_vocabulary"]
    assert labels[0] == "O" and "B-location" in labels and model_config["task"]["kind"] == \
        "tagging"
    serve = tf.saved_model.load(summary["pushed_model"]).signatures["serving_default"]
    outputs = serve(sentences=tf.constant([" ".join(words) for words in dev.tokens]))
    predicted = [[tag.decode() for tag in row[:length]]
                 for row, length in zip(outputs["tags"].numpy(), outputs["lengths"].numpy())]
    assert [len(p) for p in predicted] == [len(words) for words in dev.tokens]
    assert set(tag for row in predicted for tag in row) <= set(labels)
    expected = entity_scores(dev.tags, predicted)
    assert outcome["metrics"]["entity_f1"] == pytest.approx(expected["f1"])
    assert outcome["metrics"]["entity_precision"] == pytest.approx(expected["precision"])
    confusion = np.array(outcome["metrics"]["confusion_matrix"]["matrix"])
    assert confusion.sum() == sum(len(words) for words in dev.tokens)
    files = _evaluation_files(summary)
    assert {"metrics.json", "report.md", "report.html", "confusion_matrix.png",
            "training_curve.png"} <= files


def _squad_v2_files(shared_data: Path, directory: Path) -> tuple[list, list]:
    records = squad.read_squad(str(shared_data / "squad" / "dev-v1.1.json")).records
    titles = list(dict.fromkeys(r.title for r in records))
    def questions(articles, per_article):
        return [r for title in articles for r in
                [r for r in records if r.title == title][:per_article]]

    train, held_out = questions(titles[:2], 24), questions(titles[2:4], 12)
    train = squad.make_unanswerable(train, 0.33, seed=0)
    held_out = squad.make_unanswerable(held_out, 0.33, seed=1)
    directory.mkdir(parents=True, exist_ok=True)
    for name, part in (("train", train), ("dev", held_out)):
        (directory / f"{name}-v2.0.json").write_text(json.dumps(squad.to_json(part, "v2.0")),
                                                     encoding="utf-8")
    return train, held_out


def test_span_qa_dag_answers_raw_questions(tmp_path, shared_data):
    train, held_out = _squad_v2_files(shared_data, tmp_path / "squad")
    assert any(r.is_impossible for r in held_out) and any(not r.is_impossible
                                                          for r in held_out)
    summary, model_config = _run("bert_tiny_squad", tmp_path, [
        f"data.task={{format: squad, splits: {{"
        f"train: {tmp_path / 'squad' / 'train-v2.0.json'}, "
        f"eval: {tmp_path / 'squad' / 'dev-v2.0.json'}}}}}",
        "finetuning.sequence_length=64",
        "finetuning.task_args={doc_stride: 16, max_query_length: 16}"])
    task = model_config["task"]
    assert task["kind"] == "span_qa" and task["version"] == "2.0"
    assert isinstance(task["null_threshold"], float)
    outcome = summary["evaluation"]
    assert outcome["metrics"]["questions"] == len(held_out)
    assert set(outcome["official_metrics"]) == {"exact_match", "f1"}
    serve = tf.saved_model.load(summary["pushed_model"]).signatures["serving_default"]
    outputs = serve(question=tf.constant([r.question for r in held_out]),
                    context=tf.constant([r.context for r in held_out]))
    answers = {r.id: a.decode() for r, a in zip(held_out, outputs["answer"].numpy())}
    for record, answer, margin in zip(held_out, outputs["answer"].numpy(),
                                      outputs["null_margin"].numpy()):
        if margin > task["null_threshold"]:
            assert answer == b""  # abstains above the tuned threshold
        else:
            assert answer.decode() in record.context
    expected = squad_metrics.evaluate(squad.gold_answers(held_out), answers)
    assert outcome["metrics"]["f1"] == pytest.approx(expected["f1"])
    assert outcome["metrics"]["exact_match"] == pytest.approx(expected["exact_match"])
    assert {"report.md", "report.html", "training_curve.png"} <= _evaluation_files(summary)


def _jsonl_slice(source: Path, target: Path, lines: int) -> None:
    kept = source.read_text(encoding="utf-8").splitlines()[:lines]
    target.write_text("\n".join(kept) + "\n", encoding="utf-8")


@pytest.mark.parametrize("recipe_name", ["bert_tiny_csqa", "gpt1_tiny_csqa"])
def test_multiple_choice_dag_picks_among_raw_choices(recipe_name, tmp_path, shared_data):
    """BERT §4.4 ([CLS] scores) from the imported checkpoint; GPT-1 §3.3 (`start z $ a_k
    extract`, L2 + 0.5 L1) pretrained in the DAG on a small corpus."""
    csqa = shared_data / "commonsenseqa"
    summary, model_config = _run_on_slices(
        recipe_name, tmp_path, _jsonl_slice, csqa / "train_rand_split.jsonl",
        csqa / "dev_rand_split.jsonl", "jsonl", (64, 32),
        _pretrained_on_a_small_corpus(tmp_path) if recipe_name.startswith("gpt1") else None)
    assert model_config["task"]["num_choices"] == 5
    outcome = summary["evaluation"]
    dev = multiple_choice_readers.read_commonsenseqa(str(tmp_path / "dev.jsonl"))
    assert outcome["metrics"]["examples"] == len(dev) == 32
    serve = tf.saved_model.load(summary["pushed_model"]).signatures["serving_default"]
    outputs = serve(context=tf.constant([e.context for e in dev]),
                    choices=tf.constant([list(e.choices) for e in dev]))
    probabilities = outputs["probabilities"].numpy()
    assert probabilities.shape == (32, 5)
    assert probabilities.sum(axis=1) == pytest.approx(np.ones(32), abs=1e-5)
    chosen = outputs["label"].numpy()
    labels = np.array([e.label for e in dev])
    assert outcome["metrics"]["accuracy"] == pytest.approx(float(np.mean(chosen == labels)))
    confusion = np.array(outcome["metrics"]["confusion_matrix"]["matrix"])
    assert confusion.shape == (5, 5) and confusion.trace() == int(np.sum(chosen == labels))
    assert {"report.md", "report.html", "confusion_matrix.png"} <= _evaluation_files(summary)


@pytest.mark.parametrize("override, field, message", [
    (["data.task.format=tsv"], "data.task.format", "must be one of conll"),
    (["finetuning.task_args={doc_stride: 8}"], "finetuning.task_args", "tagging takes"),
    (["architecture=gpt2", "tokenizer.kind=bpe", "objective.name=causal_lm"], "finetuning.task",
     "needs an encoder"),
])
def test_task_recipe_errors_name_the_field(override, field, message):
    with pytest.raises(RecipeError, match=message) as error:
        load_recipe("bert_tiny_wnut17", override)
    assert error.value.field == field


def test_squad_ingestion_keeps_an_articles_questions_in_one_split(tmp_path, shared_data):
    from lmfactory.components.example_gen import executor

    report = executor.ingest({"format": "squad", "path": str(shared_data / "squad" /
                                                             "dev-v1.1.json"),
                              "eval_fraction": 0.2}, str(tmp_path / "out"),
                             ["--direct_running_mode=in_memory", "--direct_num_workers=1"])
    splits = {split: squad.read_examples(str(tmp_path / "out" / f"Split-{split}" / "*"))
              for split in ("train", "eval")}
    assert len(splits["train"]) + len(splits["eval"]) == 10570
    assert report["splits"]["train"]["malformed"] == 0
    titles = {split: {r.title for r in records} for split, records in splits.items()}
    assert not titles["train"] & titles["eval"] and titles["eval"]


def _ingest(tmp_path, config: dict) -> tuple[dict, list]:
    from lmfactory.components.example_gen import executor

    out = tmp_path / config["format"]
    report = executor.ingest(config, str(out), ["--direct_running_mode=in_memory",
                                                "--direct_num_workers=1"])
    records = [tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset(
        sorted(str(p) for p in (out / "Split-train").glob("*")), compression_type="GZIP")]
    return report["splits"]["train"], records


def test_task_formats_count_malformed_records_instead_of_losing_them(tmp_path):
    conll_file = tmp_path / "train.conll"
    conll_file.write_bytes(b"-DOCSTART-\tO\n\nI\tO\nlove\tO\nParis\tB-location\n\t\n"
                           b"no tag here\n\nbad\xff\tO\n\nok\tO\n")
    counts, records = _ingest(tmp_path, {"format": "conll", "path": str(conll_file),
                                         "eval_fraction": 0.0})
    assert (counts["good"], counts["malformed"], counts["invalid_utf8"]) == (2, 1, 1)
    tokens = sorted([v.decode() for v in r.features.feature["tokens"].bytes_list.value]
                    for r in records)
    assert tokens == [["I", "love", "Paris"], ["ok"]]

    context = "Paris is the capital of France."
    squad_file = tmp_path / "squad.json"
    squad_file.write_text(json.dumps({"version": "1.1", "data": [{"title": "P", "paragraphs": [
        {"context": context, "qas": [
            {"id": "q1", "question": "Capital?", "answers": [{"text": "Paris",
                                                              "answer_start": 0}]},
            {"id": "q2", "question": "Bad start?", "answers": [{"text": "Paris",
                                                                "answer_start": 3}]},
            {"id": "q1", "question": "Repeated id", "answers": [{"text": "France",
                                                                 "answer_start": 24}]}]},
        {"qas": []}]}]}), encoding="utf-8")
    counts, records = _ingest(tmp_path, {"format": "squad", "path": str(squad_file),
                                         "eval_fraction": 0.0})
    assert (counts["good"], counts["malformed"]) == (1, 3)
    assert records[0].features.feature["answers"].bytes_list.value == [b"Paris"]

    swag_file = tmp_path / "train.csv"
    swag_file.write_text(
        ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,"
        "ending3,label\n"
        '0,v1,1,"She sits. She","She sits.",She,gold,smiles.,runs.,eats.,jumps.,2\n'
        "1,v2,2,too,few,columns,gold,a,b,c,1\n", encoding="utf-8")
    counts, records = _ingest(tmp_path, {"format": "swag", "path": str(swag_file),
                                         "eval_fraction": 0.0})
    assert (counts["good"], counts["malformed"]) == (1, 1)
    feature = records[0].features.feature
    assert feature["choices"].bytes_list.value[2] == b"She eats."
    assert feature["label"].int64_list.value == [2]


def test_tagging_task_args_choose_fine_tuning_or_frozen_features():
    from lmfactory import models
    from lmfactory.models.tasks.feature_based_tagger import FeatureBasedTagger
    from lmfactory.models.tasks.token_classifier import TokenClassifier

    tagger = models.get("bert").head("tagging")  # the encoder family's default
    backbone = models.build("bert", "tiny", vocabulary_size=64, max_sequence_length=16)
    fine_tuned = tagger(backbone, 5, dropout=0.2)
    assert type(fine_tuned) is TokenClassifier and backbone.trainable
    features = tagger(models.build("bert", "tiny", vocabulary_size=64,
                                   max_sequence_length=16),
                      5, feature_mode="sum_all", lstm_units=8)
    assert isinstance(features, FeatureBasedTagger) and not features.backbone.trainable
    with pytest.raises(ValueError, match="go with feature_mode"):
        tagger(backbone, 5, lstm_units=8)
