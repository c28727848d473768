"""Every kind of Trainer stage, killed with SIGKILL after a checkpoint and run again, ends with
the task model of a run never killed (1e-6; tests/resume_runs.py): the multiple-choice,
tagging and span-QA fine-tunings (their heads, inputs and dropout), ULMFiT's target-task LM
fine-tuning (a base model, ordered streams with a carried LSTM state, variable BPTT lengths,
discriminative rates and the slanted triangular schedule) and the Distiller (a DistilBERT
student taught by a teacher Model artifact, on dynamically masked records). Pretraining and
the classifier's fine-tuning are in tests/test_trainer_resume.py, the KnowledgeTrainer in
tests/test_pipeline_ernie.py (on its DAG's own graph, embeddings and records).

Each stage is tiny and short: 20 steps, a checkpoint every 5, killed after the second; no
serving export (the Model artifact's keras/ folder is what is compared)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import resume_runs
from lmfactory import models
from lmfactory.components.model_init.executor import initialize_backbone
from lmfactory.pipelines.pipeline import task_record
from lmfactory.recipe import load_recipe

pytestmark = pytest.mark.dag  # each case trains three times in processes of its own

STEPS, STEPS_PER_CHECKPOINT, KILL_AFTER_EPOCH = 20, 5, 2
SEQUENCE_LENGTH = 32


def _stage_config(architecture: str, preset: str, **settings) -> dict:
    return {"architecture": architecture, "preset": preset, "batch_size": 4,
            "learning_rate": 1e-3, "steps_per_checkpoint": STEPS_PER_CHECKPOINT,
            "overrides": {"max_sequence_length": SEQUENCE_LENGTH}, "export_serving": False,
            **settings}


def _kill_resume_and_compare(folder: Path, stage: dict) -> None:
    output, saved_epoch = resume_runs.kill_resume_and_compare(
        folder, stage, kill_after_epoch=KILL_AFTER_EPOCH, epochs=STEPS // STEPS_PER_CHECKPOINT)
    assert f"at step {saved_epoch * STEPS_PER_CHECKPOINT} of {STEPS}" in output


@pytest.fixture(scope="module")
def bert_base(tmp_path_factory, demo_data) -> tuple[Path, Path]:
    """A word-level BERT vocabulary of the demo corpus and a fresh BERT-tiny base model."""
    tmp = tmp_path_factory.mktemp("bert_base")
    documents = (demo_data / "corpus.txt").read_text(encoding="utf-8").split("\n\n")[:120]
    vocab = resume_runs.word_vocabulary(tmp / "vocab", documents, size=3000)
    initialize_backbone("bert", "tiny", {"max_sequence_length": SEQUENCE_LENGTH}, str(vocab),
                        str(tmp / "base"), seed=1)
    return vocab, tmp / "base"


def _fine_tuning(folder: Path, recipe: str, source: dict, base: Path, *settings) -> dict:
    """A FineTuner stage of ``recipe``'s task kind (with the ``--set`` ``settings``) on the
    records of ``source``."""
    examples = resume_runs.ingest_task(source, folder / "examples")
    task = task_record(load_recipe(
        recipe, [f"finetuning.sequence_length={SEQUENCE_LENGTH}", *settings]))
    return resume_runs.spec(folder / "killed", examples, STEPS,
                            _stage_config("bert", "tiny", task=task), base_model=str(base))


def test_multiple_choice_fine_tuning_resumes_exactly(bert_base, shared_data, tmp_path):
    lines = (shared_data / "commonsenseqa" / "train_rand_split.jsonl").read_text(
        encoding="utf-8").splitlines()[:60]
    (tmp_path / "questions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    stage = _fine_tuning(tmp_path, "bert_tiny_csqa", {
        "format": "commonsenseqa", "path": str(tmp_path / "questions.jsonl"),
        "eval_fraction": 0.2}, bert_base[1])
    _kill_resume_and_compare(tmp_path, stage)


def test_tagging_fine_tuning_resumes_exactly(bert_base, shared_data, tmp_path):
    sentences = (shared_data / "wnut17" / "wnut17train.conll").read_text(
        encoding="utf-8").split("\n\n")[:80]
    (tmp_path / "train.conll").write_text("\n\n".join(sentences) + "\n", encoding="utf-8")
    stage = _fine_tuning(tmp_path, "bert_tiny_wnut17", {
        "format": "conll", "path": str(tmp_path / "train.conll"), "eval_fraction": 0.2},
        bert_base[1])
    _kill_resume_and_compare(tmp_path, stage)


def test_span_qa_fine_tuning_resumes_exactly(bert_base, shared_data, tmp_path):
    squad = json.loads((shared_data / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    splits = {}
    for split, (article, paragraphs) in {"train": (0, 8), "eval": (1, 2)}.items():
        article = squad["data"][article]
        splits[split] = str(tmp_path / f"{split}.json")
        Path(splits[split]).write_text(json.dumps({**squad, "data": [{
            **article, "paragraphs": article["paragraphs"][:paragraphs]}]}), encoding="utf-8")
    stage = _fine_tuning(tmp_path, "bert_tiny_squad", {"format": "squad", "splits": splits},
                         bert_base[1], "finetuning.task_args.max_query_length=12",
                         "finetuning.task_args.doc_stride=8")
    _kill_resume_and_compare(tmp_path, stage)


def test_target_lm_fine_tuning_resumes_exactly(demo_data, tmp_path):
    """ULMFiT's second stage: the AWD-LSTM language model continued from a base model on
    ordered streams, with the recipe's discriminative rates and slanted triangular
    schedule."""
    from lmfactory.components.vocabulary import executor

    documents = (demo_data / "corpus.txt").read_text(encoding="utf-8").split("\n\n")[:60]
    config = executor.VocabularyConfig(kind="word", vocab_size=2000, min_frequency=1,
                                       lowercase=True,
                                       special_tokens=models.get("awd_lstm").special_tokens)
    vocab = tmp_path / "vocab"
    executor.learn_and_write(executor.count_words(documents, config), str(vocab), config,
                             "the demo corpus")
    examples = resume_runs.pretraining_examples(
        resume_runs.corpus_records(demo_data, tmp_path, 60)[1], vocab, tmp_path / "streams",
        {"objective": "causal_lm_bptt", "max_seq_length": 20})
    initialize_backbone("awd_lstm", "tiny", {}, str(vocab), str(tmp_path / "base"), seed=1)
    lm_finetuning = load_recipe("ulmfit_sst2")["lm_finetuning"]
    stage = resume_runs.spec(tmp_path / "killed", examples, STEPS, {
        **_stage_config("awd_lstm", "tiny", overrides={},
                        task_args={**lm_finetuning["task_args"], "bptt": 20}),
        **{key: lm_finetuning[key] for key in ("adam_beta_1", "adam_beta_2")}},
        base_model=str(tmp_path / "base"))
    _kill_resume_and_compare(tmp_path, stage)


def test_distillation_resumes_exactly(bert_base, demo_data, tmp_path):
    """The Distiller: a DistilBERT student initialised from, and taught by, a BERT teacher's
    Model artifact, on masked-LM records masked afresh at each read (dynamic masking)."""
    vocab = bert_base[0]
    _, raw = resume_runs.corpus_records(demo_data, tmp_path, 60)
    teacher_examples = resume_runs.pretraining_examples(raw, vocab, tmp_path / "teacher_examples", {
        "objective": "bert_mlm_nsp", "max_seq_length": SEQUENCE_LENGTH, "dupe_factor": 1,
        "max_predictions_per_seq": 5})
    teacher = resume_runs.spec(tmp_path / "teacher", teacher_examples, 2,
                               _stage_config("bert", "mini"))
    resume_runs.run(teacher, tmp_path / "teacher.log")
    examples = resume_runs.pretraining_examples(raw, vocab, tmp_path / "student_examples", {
        "objective": "mlm", "max_seq_length": SEQUENCE_LENGTH, "dupe_factor": 1,
        "max_predictions_per_seq": 5, "dynamic_masking": True})
    stage = resume_runs.spec(tmp_path / "killed", examples, STEPS, _stage_config(
        "distilbert", "tiny", teacher_model=str(resume_runs.keras_dir(teacher).parent)))
    _kill_resume_and_compare(tmp_path, stage)
