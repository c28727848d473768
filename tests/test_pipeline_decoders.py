"""GPT-1 and GPT-3 recipes and their pipeline pieces. The decoder family's whole-DAG test is
GPT-2's (test_pipeline_e2e.py); GPT-1's causal-LM pretraining DAG runs in
test_pipeline_tasks.py (multiple choice). Here: both recipes compiled for Vertex, GPT-1's
task preprocessor as the registry hands it out, run_fn's classifier path training
`Gpt1Classifier` with L3 = L2 + λ L1 on sentence pairs (its SavedModel serving raw pairs),
and the GPT-3 optimiser settings reaching the Trainer."""

import json
import math
import types

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (ops used by the serving graph)

from lmfactory import models
from lmfactory.components.trainer import run_fn as run_fn_lib
from lmfactory.components.trainer.config import TrainerConfig
from lmfactory.components.trainer.model_artifact import (
    BACKBONE_WEIGHTS, MODEL_CONFIG, copy_dir, keras_dir_of, load_task_model, read_model_config,
    vocabulary_dir_of)
from lmfactory.components.trainer.optimization import WarmupCosineDecay, make_optimizer
from lmfactory.components.vocabulary import executor as vocabulary_executor
from lmfactory.models.classifier_preprocessor import classifier_preprocessor
from lmfactory.models.gpt1 import SPECIAL_TOKENS, Gpt1Classifier, Gpt1Preprocessor
from lmfactory.models.gpt3 import GPT3_OPTIMIZATION
from lmfactory.models.tokenizers import load_tokenizer
from lmfactory.pipelines import runners
from lmfactory.pipelines.pipeline import trainer_config
from lmfactory.recipe import RecipeError, load_recipe

GPT1_TINY = {"num_layers": 2, "hidden_dim": 32, "num_heads": 4, "intermediate_dim": 64,
             "max_sequence_length": 64}


@pytest.fixture(scope="module")
def gpt1_vocabulary(tmp_path_factory, demo_data) -> str:
    """A byte-level BPE vocabulary learned by VocabularyGen's learner with GPT-1's special
    tokens (the registry's set, as the pipeline passes it)."""
    tmp_path = tmp_path_factory.mktemp("gpt1_vocabulary")
    config = vocabulary_executor.VocabularyConfig(
        kind="bpe", vocab_size=400, min_frequency=2,
        special_tokens=models.get("gpt1").special_tokens)
    lines = (demo_data / "corpus.txt").read_text(encoding="utf-8").splitlines()[:400]
    counts = vocabulary_executor.count_words([line for line in lines if line.strip()], config)
    out = tmp_path / "vocabulary"
    out.mkdir()
    return vocabulary_executor.learn_and_write(counts, str(out), config, "test corpus")


def _tokens(tokenizer, text):
    tokens = tokenizer(tf.constant([text]))
    return [int(t) for t in (tokens.to_list() if hasattr(tokens, "to_list") else tokens)[0]]


# --------------------------------------------------------------------------- unit checks


def test_vocabulary_reserves_gpt1_tokens_and_pairs_pack_as_entailment(gpt1_vocabulary):
    vocab_dir = gpt1_vocabulary
    tokenizer = load_tokenizer(vocab_dir)
    ids = {role: tokenizer.token_to_id(token) for role, token in SPECIAL_TOKENS.items()}
    assert None not in ids.values() and len(set(ids.values())) == 4, ids
    assert tokenizer.vocabulary_size() == 400

    single = classifier_preprocessor(vocab_dir, "gpt1", 16)
    assert isinstance(single, Gpt1Preprocessor) and single.task == "classification"
    pair = classifier_preprocessor(vocab_dir, "gpt1", 16, num_text_features=2)
    assert pair.task == "entailment"
    premise, hypothesis = "the film is good", "it is"
    out = pair((tf.constant([premise]), tf.constant([hypothesis])))
    expected = ([ids["start"]] + _tokens(tokenizer, premise) + [ids["delimiter"]]
                + _tokens(tokenizer, hypothesis) + [ids["extract"]])
    assert out["token_ids"].numpy()[0].tolist() == expected + [ids["pad"]] * (16 - len(expected))
    assert out["padding_mask"].numpy()[0].tolist() == [1] * len(expected) + [0] * (
        16 - len(expected))
    out = single((tf.constant(["", "caf\u00e9"]),))
    assert out["token_ids"].numpy()[0, :3].tolist() == [ids["start"], ids["extract"], ids["pad"]]

    similarity = classifier_preprocessor(vocab_dir, "gpt1", 16, 2, {"task": "similarity"})
    assert similarity((tf.constant(["a"]), tf.constant(["b"])))["token_ids"].shape == (1, 2, 16)
    with pytest.raises(ValueError, match="packs the task"):
        classifier_preprocessor(vocab_dir, "gpt1", 16, 1, {"task": "entailment"})
    # The multiple-choice task kind packs a context and its answers [B, C] (§3.3).
    choices = classifier_preprocessor(vocab_dir, "gpt1", 16, 2, {"task": "multiple_choice"})
    assert choices.task == "multiple_choice"
    packed = choices((tf.constant(["a", "b"]), tf.constant([["x", "y", "z"]] * 2)))
    assert packed["token_ids"].shape == (2, 3, 16)
    with pytest.raises(ValueError, match="packs the task"):
        classifier_preprocessor(vocab_dir, "gpt1", 16, 1, {"task": "multiple_choice"})
    # Encoders keep the cls/sep packing.
    assert models.get("bert").preprocessor("classification") is None


def _write_examples(path, rows, features):
    path.parent.mkdir(parents=True)
    with tf.io.TFRecordWriter(str(path), options="GZIP") as writer:
        for *texts, label in rows:
            feature = {name: tf.train.Feature(bytes_list=tf.train.BytesList(
                value=[text.encode("utf-8")])) for name, text in zip(features, texts)}
            feature["label"] = tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))
            writer.write(tf.train.Example(
                features=tf.train.Features(feature=feature)).SerializeToString())
    return str(path.parent / "*")


def _base_model(tmp_path, vocab_dir) -> str:
    """A pretrained-Model artifact as the Pretrainer leaves it (the parts FineTuner reads)."""
    keras.utils.set_random_seed(0)
    backbone = models.build("gpt1", "tiny", vocabulary_size=400, **GPT1_TINY)
    uri = tmp_path / "base_model"
    keras_dir = keras_dir_of(str(uri))
    tf.io.gfile.makedirs(keras_dir)
    backbone.save_weights(f"{keras_dir}/{BACKBONE_WEIGHTS}")
    with open(f"{keras_dir}/{MODEL_CONFIG}", "w") as f:
        json.dump({"architecture": "gpt1", "preset": "tiny",
                   "backbone_config": backbone.get_config(),
                   "task": {"kind": "language_model", "objective": "causal_lm"}}, f)
    copy_dir(vocab_dir, vocabulary_dir_of(str(uri)))
    return str(uri)


def test_run_fn_fine_tunes_gpt1_on_pairs_with_the_auxiliary_lm_loss(tmp_path,
                                                                   gpt1_vocabulary):
    lm_weight = 0.25  # not the default 0.5: finetuning.task_args reach the classifier
    vocab_dir = gpt1_vocabulary
    base_model = _base_model(tmp_path, vocab_dir)
    features = ["premise", "hypothesis"]
    rng = np.random.default_rng(0)
    words = ["good", "bad", "film", "the", "a", "story", "dull", "fine"]
    rows = [(" ".join(rng.choice(words, 5)), " ".join(rng.choice(words, 3)), int(i % 2))
            for i in range(48)]
    train = _write_examples(tmp_path / "task" / "Split-train" / "data.gz", rows, features)
    evaluation = _write_examples(tmp_path / "task" / "Split-eval" / "data.gz", rows[:16],
                                 features)
    config = {"architecture": "gpt1", "preset": "tiny",
              "task": {"kind": "classification", "text_features": features, "num_classes": 2,
                       "sequence_length": 24},
              "batch_size": 8, "learning_rate": 1e-3, "steps_per_checkpoint": 6,
              "task_args": {"lm_weight": lm_weight}}
    run_dir = tmp_path / "FineTuner" / "model_run" / "1"
    serving_dir = tmp_path / "FineTuner" / "model" / "1" / "Format-Serving"
    fn_args = types.SimpleNamespace(
        custom_config=config, train_files=[train], eval_files=[evaluation],
        base_model=base_model, train_steps=12, eval_steps=2, model_run_dir=str(run_dir),
        serving_model_dir=str(serving_dir))
    run_fn_lib.run_fn(fn_args)

    metrics = json.loads((run_dir / "metrics.json").read_text())
    print(f"\nGPT-1 run_fn fine-tuning (lm_weight {lm_weight}): {metrics}")
    assert {"loss", "classification_loss", "lm_loss", "accuracy"} <= set(metrics)
    # L3 = L2 + λ L1, each averaged over the same evaluation batches.
    assert metrics["loss"] == pytest.approx(
        metrics["classification_loss"] + lm_weight * metrics["lm_loss"], rel=1e-4)
    assert 0 < metrics["lm_loss"] < math.log(400) + 1.0

    classifier = load_task_model(str(serving_dir))
    assert isinstance(classifier, Gpt1Classifier) and classifier.lm_weight == lm_weight
    assert read_model_config(str(serving_dir))["task"]["text_features"] == features
    serve = tf.saved_model.load(str(serving_dir)).signatures["serving_default"]
    premises, hypotheses = ["the film is good", "", "caf\u00e9 \u4e2d\u6587"], ["fine", "x", ""]
    outputs = serve(premise=tf.constant(premises), hypothesis=tf.constant(hypotheses))
    probabilities = outputs["probabilities"].numpy()
    assert probabilities.sum(axis=1) == pytest.approx([1.0] * 3, abs=1e-5)
    assert outputs["label"].numpy().tolist() == probabilities.argmax(axis=1).tolist()
    # The SavedModel packs as training did: `start premise $ hypothesis extract`.
    packed = classifier_preprocessor(vocab_dir, "gpt1", 24, 2)(
        (tf.constant(premises), tf.constant(hypotheses)))
    expected = tf.nn.softmax(classifier(packed, training=False)["logits"]).numpy()
    np.testing.assert_allclose(probabilities, expected, atol=1e-5)


def test_cosine_schedule_decays_to_the_final_fraction():
    schedule = WarmupCosineDecay(1e-3, warmup_steps=10, total_steps=110,
                                 final_learning_rate_fraction=0.1)
    values = {step: float(schedule(step)) for step in (0, 5, 10, 60, 110, 500)}
    assert values[5] == pytest.approx(5e-4) and values[10] == pytest.approx(1e-3)
    assert values[60] == pytest.approx(1e-4 + 0.9e-3 * 0.5)  # half-way down the cosine
    assert values[110] == pytest.approx(1e-4) and values[500] == pytest.approx(1e-4)
    assert WarmupCosineDecay(**schedule.get_config()).get_config() == schedule.get_config()
    with pytest.raises(ValueError, match="decay must be one of"):
        make_optimizer(1e-3, 10, decay="step")


def test_gpt3_recipe_trains_with_appendix_b_optimiser():
    recipe = load_recipe("gpt3_tiny_shakespeare")
    for stage in ("pretraining", "finetuning"):
        settings = recipe[stage]
        assert settings["weight_decay"] == GPT3_OPTIMIZATION["weight_decay"]
        assert settings["adam_beta_1"] == GPT3_OPTIMIZATION["adam_beta_1"]
        assert settings["adam_beta_2"] == GPT3_OPTIMIZATION["adam_beta_2"]
        assert settings["adam_epsilon"] == GPT3_OPTIMIZATION["adam_epsilon"]
        assert settings["clip_norm"] == GPT3_OPTIMIZATION["global_clipnorm"]
        assert settings["final_learning_rate_fraction"] == (
            GPT3_OPTIMIZATION["final_learning_rate_fraction"])
        assert settings["learning_rate_decay"] == "cosine" and settings["warmup_fraction"] > 0
        config = TrainerConfig.from_dict(trainer_config(recipe, stage))
        optimizer = run_fn_lib._optimizer(config, total_steps=100)
        assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, 0.95, 1e-8)
        assert optimizer.weight_decay == 0.1 and optimizer.clip_global_norm == 1.0
        schedule = optimizer._learning_rate
        assert isinstance(schedule, WarmupCosineDecay) and schedule.warmup_steps == 5
        assert float(schedule(100)) == pytest.approx(0.1 * settings["learning_rate"])
    backbone = models.presets("gpt3")[recipe["preset"]]
    assert backbone["attention_band"] < recipe["objective"]["max_seq_length"]  # sparse on
    # BERT's recipes keep BERT's optimiser.
    bert = TrainerConfig.from_dict(trainer_config(load_recipe("bert_tiny_sst2"), "pretraining"))
    assert (bert.adam_beta_2, bert.adam_epsilon, bert.learning_rate_decay) == (
        0.999, 1e-6, "linear")


def test_recipes_name_bad_decoder_settings():
    with pytest.raises(RecipeError) as error:
        load_recipe("gpt2_tiny_shakespeare", [
            "finetuning.task=classification", "data.task={format: tsv, path: x.tsv}"])
    assert error.value.field == "finetuning.task"
    with pytest.raises(RecipeError) as error:
        load_recipe("gpt3_tiny_shakespeare", ["pretraining.learning_rate_decay=step"])
    assert error.value.field == "pretraining.learning_rate_decay"
    with pytest.raises(RecipeError) as error:
        load_recipe("gpt1_tiny_sst2", ["finetuning.task_args=[1]"])
    assert error.value.field == "finetuning.task_args"
    recipe = load_recipe("gpt1_tiny_sst2")
    assert recipe["finetuning"]["task_args"] == {"lm_weight": 0.5}
    assert recipe["tokenizer"]["kind"] == "bpe" and recipe["objective"]["name"] == "causal_lm"


# --------------------------------------------------------------------------- whole DAG


@pytest.mark.parametrize("recipe_name, expected", [
    ("gpt1_tiny_sst2", {"CorpusExampleGen", "VocabularyGen", "PretrainingExampleGen",
                        "Pretrainer", "TaskExampleGen", "FineTuner", "LMEvaluator", "Pusher"}),
    ("gpt3_tiny_shakespeare", {"CorpusExampleGen", "VocabularyGen", "PretrainingExampleGen",
                               "Pretrainer", "TargetExampleGen", "TargetLMExampleGen",
                               "FineTuner", "LMEvaluator", "Pusher"}),
])
def test_decoder_recipes_compile_for_vertex(recipe_name, expected, tmp_path):
    output = tmp_path / "pipeline.json"
    runners.compile_vertex(load_recipe(recipe_name), str(output), "gs://bucket/root",
                           local_data="as_is")  # the DAG shape only
    spec = json.loads(output.read_text())
    tasks = set(spec["pipelineSpec"]["root"]["dag"]["tasks"])
    assert expected <= tasks, expected - tasks
    executors = json.dumps(spec["pipelineSpec"]["deploymentSpec"]["executors"])
    assert "lmfactory.components" in executors

    def custom_config(task):
        parameter = spec["pipelineSpec"]["root"]["dag"]["tasks"][task]["inputs"][
            "parameters"]["custom_config"]
        return json.loads(parameter["runtimeValue"]["constantValue"]["stringValue"])

    if recipe_name == "gpt1_tiny_sst2":
        assert custom_config("FineTuner")["task_args"] == {"lm_weight": 0.5}
        assert custom_config("Pretrainer")["learning_rate_decay"] == "cosine"
    else:
        for task in ("Pretrainer", "FineTuner"):
            config = custom_config(task)
            assert (config["adam_beta_2"], config["weight_decay"], config["clip_norm"]) == (
                0.95, 0.1, 1.0)
