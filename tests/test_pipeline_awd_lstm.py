"""ULMFiT's three stages through the DAG at tiny size (LocalDagRunner): AWD-LSTM pretrained
on the causal LM objective over a word vocabulary, fine-tuned as an LM on the target task's
sentences (the `lm_finetuning` stage, TargetLMFineTuner), then fine-tuned as a classifier
with ULMFiT's schedule; the pushed SavedModel classifies raw strings."""

import json
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (ops used by the serving graph)

from dag_helpers import TINY_TRAINING, small_corpus, small_tsv
from lmfactory.pipelines import runners
from lmfactory.pipelines.pipeline import create_components
from lmfactory.recipe import RecipeError, load_recipe

SENTENCES = ["a gorgeous , witty film", "dull and lifeless", "", "caf\u00e9 \u4e2d\u6587 !"]


def _sst2_folder(demo_data, folder):
    folder.mkdir()
    small_tsv(demo_data / "sst2" / "train.tsv", folder / "train.tsv", 200)
    small_tsv(demo_data / "sst2" / "dev.tsv", folder / "dev.tsv", 40)
    return folder


def _recipe(tmp_path, demo_data, extra=(), name="sst2"):
    sst2 = _sst2_folder(demo_data, tmp_path / name)
    return load_recipe("ulmfit_sst2", TINY_TRAINING + [
        "preset=tiny", "tokenizer.vocab_size=600",
        f"data.corpus.path={small_corpus(demo_data, tmp_path / 'corpus.txt', 120)}",
        f"data.target_corpus.path={sst2 / 'train.tsv'}", f"data.task.dir={sst2}",
        "finetuning.sequence_length=32", "evaluation.threshold=0.0",
        "pretraining.task_args={bptt: 24}", "lm_finetuning.steps=6",
        "lm_finetuning.task_args.bptt=24", *extra])


def test_lm_finetuning_stage_sits_between_pretraining_and_the_classifier(tmp_path, demo_data):
    recipe = _recipe(tmp_path, demo_data)
    components = {c.id: c for c in create_components(recipe, str(tmp_path / "serving"))}
    target_lm = components["TargetLMFineTuner"]
    assert target_lm.inputs["base_model"].producer_component_id == "Pretrainer"
    assert components["FineTuner"].inputs["base_model"].producer_component_id == \
        "TargetLMFineTuner"
    config = json.loads(target_lm.exec_properties["custom_config"])
    assert config["task"] is None
    assert config["task_args"] == {"bptt": 24, "discriminative_factor": 2.6,
                                   "slanted_triangular": True}
    assert config["learning_rate"] == recipe["lm_finetuning"]["learning_rate"] == 0.004
    # ULMFiT's vocabulary covers the target task's words: VocabularyGen counts the target
    # corpus too, ingested once and shared with the target LM stage.
    assert recipe["tokenizer"]["learn_from"] == ["corpus", "target_corpus"]
    vocabulary_inputs = components["VocabularyGen"].inputs
    assert vocabulary_inputs["examples"].producer_component_id == "CorpusExampleGen"
    assert vocabulary_inputs["extra_examples"].producer_component_id == \
        "LMFineTuningExampleGen"
    ids = [c.id for c in create_components(recipe, str(tmp_path / "serving"))]
    assert ids.count("LMFineTuningExampleGen") == 1
    # The task's labels are bounded by its classes at ingestion.
    assert json.loads(components["TaskExampleGen"].exec_properties["input_config"])[
        "num_classes"] == 2
    corpus_only = _recipe(tmp_path, demo_data, ["tokenizer.learn_from=[corpus]"], name="e")
    components = {c.id: c for c in create_components(corpus_only, str(tmp_path / "serving"))}
    assert "extra_examples" not in components["VocabularyGen"].inputs
    assert "LMFineTuningExampleGen" in components
    for bad in ("[target_corpus]", "[corpus, corpus]", "[corpus, task]", "corpus"):
        with pytest.raises(RecipeError, match="tokenizer.learn_from"):
            _recipe(tmp_path, demo_data, [f"tokenizer.learn_from={bad}"], name=f"f{len(bad)}")
    no_stage = _recipe(tmp_path, demo_data, ["lm_finetuning=null"], name="b")
    ids = [c.id for c in create_components(no_stage, str(tmp_path / "serving"))]
    assert "TargetLMFineTuner" not in ids and "FineTuner" in ids
    with pytest.raises(RecipeError, match="lm_finetuning"):
        _recipe(tmp_path, demo_data, ["lm_finetuning=3"], name="c")
    with pytest.raises(RecipeError, match="lm_finetuning.steps"):
        _recipe(tmp_path, demo_data, ["lm_finetuning.steps=0"], name="d")


def test_ulmfit_three_stages_push_a_classifier_of_raw_strings(tmp_path, demo_data):
    summary = runners.run_local(_recipe(tmp_path, demo_data), str(tmp_path / "runs"))
    assert summary["evaluation"]["blessed"] is True
    assert summary["evaluation"]["metrics"]["examples"] == 40
    serve = tf.saved_model.load(summary["pushed_model"]).signatures["serving_default"]
    probabilities = serve(sentence=tf.constant(SENTENCES))["probabilities"].numpy()
    assert probabilities.shape == (len(SENTENCES), 2)
    assert probabilities.sum(axis=1) == pytest.approx([1.0] * len(SENTENCES), abs=1e-5)
