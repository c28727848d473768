"""word2vec through the whole DAG at tiny size (LocalDagRunner): the word vocabulary with
its counts, Beam's skip-gram window records, SGD pretraining, continued training on the
target corpus (task word_vectors), evaluation (held-out loss, analogies, word pairs) and
push; the pushed SavedModel maps raw words to vectors and nearest neighbours. Also the
serving module on its own (unknown words, several words, the empty string)."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (ops used by the serving graph)

from dag_helpers import TINY_TRAINING, small_corpus
from lmfactory.components.trainer.model_artifact import read_model_config
from lmfactory.components.tasks.word_vectors_serving import (
    NEIGHBOURS_SIGNATURE, WordVectorServing, save_word_vectors)
from lmfactory.models.tokenizers.word import WordTokenizer
from lmfactory.pipelines import runners
from lmfactory.recipe import load_recipe

WORDS = ["lobster", "Lobster", "the", "zzz-unknown", "", "the sea", "<unk>"]


def test_serving_module_maps_words_and_defines_unknowns(tmp_path):
    vocabulary = ["<pad>", "<unk>", "a", "b", "c", "d"]
    tokenizer = WordTokenizer(vocabulary, {"pad": "<pad>", "unk": "<unk>"}, lowercase=True)
    vectors = np.array([[9, 9], [8, 8], [1, 0], [0.9, 0.1], [0, 1], [-1, 0]], "float32")
    module = WordVectorServing(tokenizer, vectors, vocabulary, [0, 1], top_k=2)
    path = str(tmp_path / "served")
    save_word_vectors(module, path)
    loaded = tf.saved_model.load(path)
    words = tf.constant(["A", "c", "nope", "", "a b", "<unk>"])
    out = loaded.signatures["serving_default"](words=words)
    np.testing.assert_array_equal(out["known"], [True, True, False, False, False, False])
    np.testing.assert_array_equal(out["ids"], [2, 4, -1, -1, -1, -1])
    np.testing.assert_allclose(out["vectors"].numpy(), [[1, 0], [0, 1]] + [[0, 0]] * 4)
    near = loaded.signatures[NEIGHBOURS_SIGNATURE](words=words)
    assert [w.decode() for w in near["neighbours"].numpy()[0]] == ["b", "c"]
    assert near["scores"].numpy()[0, 0] == pytest.approx(0.9 / np.hypot(0.9, 0.1), abs=1e-6)
    assert [w.decode() for w in near["neighbours"].numpy()[1]] == ["b", "a"]
    assert set(near["neighbours"].numpy()[2]) == {b""} and not near["scores"].numpy()[2].any()
    with pytest.raises(Exception, match="1-D batch"):
        loaded.signatures["serving_default"](words=tf.constant([["a"]]))


def _word_files(tmp_path):
    analogies = tmp_path / "questions.txt"
    analogies.write_text(": family\nthe lobster the lobster\nsea the lobster of\n"
                         "king queen man woman\n", encoding="utf-8")
    pairs = tmp_path / "wordsim.tsv"
    pairs.write_text("# w1\tw2\tscore\nlobster\tsea\t7.5\nthe\tof\t3\nlobster\tthe\t1\n"
                     "lobster\tmoon\t2\n", encoding="utf-8")
    return str(analogies), str(pairs)


def test_word2vec_pretrains_continues_and_pushes_word_vectors(tmp_path, demo_data):
    corpus = small_corpus(demo_data, tmp_path / "corpus.txt", 60)
    analogies, pairs = _word_files(tmp_path)
    training = [setting for setting in TINY_TRAINING if not setting.startswith("overrides")]
    recipe = load_recipe("word2vec_wikitext2", training + [
        "preset=tiny", f"data.corpus.path={corpus}", f"data.target_corpus.path={corpus}",
        "tokenizer.vocab_size=400", "tokenizer.min_frequency=2", "objective.window=2",
        "objective.subsample_threshold=0.01", "finetuning.nearest_neighbours=3",
        f"finetuning.analogy_file={analogies}", f"finetuning.similarity_file={pairs}",
        "evaluation.threshold=100.0", "evaluation.max_batches=4"])
    summary = runners.run_local(recipe, str(tmp_path / "runs"))
    root = summary["pipeline_root"]
    for component in ("VocabularyGen", "PretrainingExampleGen", "Pretrainer",
                      "TargetLMExampleGen", "FineTuner"):
        assert tf.io.gfile.exists(f"{root}/{component}"), component
    outcome = summary["evaluation"]
    print(f"\nword2vec tiny DAG: {outcome['metrics']}")
    assert outcome["blessed"] is True and outcome["metric"] == "sgns_loss"
    metrics = outcome["metrics"]
    assert 0 < metrics["sgns_loss"] < 100
    assert metrics["analogy_questions"] == 2 and metrics["analogy_skipped"] == 1
    assert 0.0 <= metrics["analogy_accuracy"] <= 1.0
    assert metrics["similarity_pairs"] == 3 and -1 <= metrics["similarity_spearman"] <= 1
    assert set(outcome["official_metrics"]) == {"analogy_accuracy", "similarity_spearman"}

    examples = tf.io.gfile.glob(f"{root}/PretrainingExampleGen/pretraining_examples/*")[0]
    data_config = json.load(open(os.path.join(examples, "pretraining_config.json")))
    assert data_config["objective"] == "skipgram" and data_config["window"] == 2
    counts = data_config["token_counts"]
    assert len(counts) == data_config["vocabulary_size"] and counts[1] == 0  # unk
    fine_tuned = tf.io.gfile.glob(f"{root}/FineTuner/model/*")[0]
    model_config = read_model_config(fine_tuned)
    assert model_config["task"]["kind"] == "word_vectors"
    assert model_config["backbone_config"]["embedding_dim"] == 16
    projector = os.path.join(fine_tuned, "projector")
    vectors = np.loadtxt(os.path.join(projector, "vectors.tsv"), delimiter="\t")
    with open(os.path.join(projector, "metadata.tsv"), encoding="utf-8") as f:
        words = f.read().splitlines()
    assert vectors.shape == (len(words), 16) and "lobster" in words and "<unk>" not in words
    # The Pretrainer's model only feeds the FineTuner: its Keras model, no serving export.
    pretrained = tf.io.gfile.glob(f"{root}/Pretrainer/model/*")[0]
    assert read_model_config(pretrained)["task"]["objective"] == "skipgram"
    assert not tf.io.gfile.exists(os.path.join(pretrained, "Format-Serving", "saved_model.pb"))
    assert not tf.io.gfile.exists(os.path.join(pretrained, "projector"))

    loaded = tf.saved_model.load(summary["pushed_model"])
    out = loaded.signatures["serving_default"](words=tf.constant(WORDS))
    assert out["vectors"].shape == (len(WORDS), 16)
    np.testing.assert_array_equal(out["known"], [True, True, True, False, False, False,
                                                 False])
    np.testing.assert_allclose(out["vectors"][0], out["vectors"][1])  # lower-cased
    np.testing.assert_allclose(out["vectors"][0], vectors[words.index("lobster")], atol=1e-5)
    assert not out["vectors"].numpy()[3:].any()
    near = loaded.signatures[NEIGHBOURS_SIGNATURE](words=tf.constant(WORDS))
    neighbours = near["neighbours"].numpy()
    assert neighbours.shape == (len(WORDS), 3)
    assert b"lobster" not in neighbours[0] and all(w in words for w in
                                                   (n.decode() for n in neighbours[0]))
    scores = near["scores"].numpy()
    assert np.all(np.diff(scores[0]) <= 1e-6) and np.all(np.abs(scores[:3]) <= 1 + 1e-5)


def test_word2vec_recipe_compiles_for_vertex(tmp_path):
    output = tmp_path / "pipeline.json"
    runners.compile_vertex(load_recipe("word2vec_wikitext2"), str(output), "gs://bucket/root",
                           local_data="as_is")  # the DAG shape only
    spec = json.loads(output.read_text())
    tasks = set(spec["pipelineSpec"]["root"]["dag"]["tasks"])
    assert {"VocabularyGen", "PretrainingExampleGen", "Pretrainer", "TargetExampleGen",
            "TargetLMExampleGen", "FineTuner", "LMEvaluator", "Pusher"} <= tasks
    parameters = spec["pipelineSpec"]["root"]["dag"]["tasks"]["FineTuner"]["inputs"][
        "parameters"]
    config = json.loads(parameters["custom_config"]["runtimeValue"]["constantValue"][
        "stringValue"])
    assert config["optimizer"] == "sgd" and config["task"]["kind"] == "word_vectors"
    assert config["task_args"] == {"negatives": 5}
