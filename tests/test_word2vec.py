"""word2vec (Mikolov et al. 2013a/b) specifics the conformance harness cannot know: the
registry record and paper sizes, word2vec.c's initialisation, frequent-word subsampling,
the dynamic window, negatives (never the true target, unigram^3/4), the loss against
numpy, CBOW's averaged context, the linear learning-rate decay, the word-window records,
the word-vector metrics and the serving module."""

import collections

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmfactory import models
from lmfactory.components import tasks as task_kinds
from lmfactory.components.evaluator import word_vector_metrics as wvm
from lmfactory.components.pretraining_data import features, objectives, word_windows
from lmfactory.components.trainer.optimization import WarmupLinearDecay, make_optimizer
from lmfactory.models.word2vec import (WORD2VEC_OPTIMIZATION, UnigramNoise, Word2VecCBOW,
                                       Word2VecSkipGram, negative_sampling_loss,
                                       noise_log_probabilities)
from lmfactory.recipe import RecipeError, load_recipe


def _backbone(vocabulary_size=30, embedding_dim=8, seed=0):
    keras.utils.set_random_seed(seed)
    return models.build("word2vec", "tiny", vocabulary_size=vocabulary_size,
                        embedding_dim=embedding_dim)


def _batch(centres, contexts, mask):
    return {"centre_ids": np.array(centres, "int32"),
            "context_ids": np.array(contexts, "int32"),
            "context_mask": np.array(mask, bool)}


# --------------------------------------------------------------------------- registry


def test_registry_record_and_paper_sizes():
    arch = models.get("word2vec")
    assert arch.family == "embedding" and arch.tokenizer_kind == "word"
    assert arch.objectives == ("skipgram", "cbow")
    assert arch.pretrainer("skipgram") is Word2VecSkipGram
    assert arch.pretrainer("cbow") is Word2VecCBOW
    assert models.presets("word2vec")["base"]["embedding_dim"] == 300
    assert objectives.get("skipgram").document == objectives.SENTENCES
    assert not objectives.get("cbow").causal
    backbone = models.build("word2vec", "base", vocabulary_size=1000)
    assert backbone.count_params() == 2 * 1000 * 300  # input and output matrices
    # The word_vectors task kind exports / evaluates models of both objectives, also the
    # Pretrainer's (whose record is a language_model one).
    assert task_kinds.serving_kind("skipgram").name == "word_vectors"
    assert task_kinds.serving_kind("cbow").name == "word_vectors"
    assert task_kinds.serving_kind("causal_lm") is None


def test_initialisation_follows_word2vec_c():
    backbone = _backbone(vocabulary_size=500, embedding_dim=20)
    vectors = backbone.word_vectors.numpy()
    assert np.abs(vectors).max() <= 0.5 / 20 and np.abs(vectors).max() > 0.4 / 20
    assert abs(vectors.mean()) < 1e-3
    assert not backbone.context_matrix.numpy().any()  # output vectors start at zero
    out = backbone({"token_ids": np.array([[3, 4]], "int32")})
    np.testing.assert_allclose(out["sequence_output"][0], vectors[[3, 4]])


def test_first_skipgram_step_moves_only_output_vectors():
    """With v' = 0 the input vectors' gradient is zero at the first step (word2vec.c's
    syn1neg starts at zero, so syn0 first moves on the second update)."""
    backbone = _backbone()
    model = Word2VecSkipGram(backbone, negatives=3, seed=1)
    model.compile(optimizer=keras.optimizers.SGD(0.025))
    before = backbone.word_vectors.numpy().copy()
    x = _batch([5, 6], [[7, 8], [9, 0]], [[1, 1], [1, 0]])
    model.train_on_batch(x, x["centre_ids"])
    np.testing.assert_array_equal(backbone.word_vectors.numpy(), before)
    assert backbone.context_matrix.numpy()[[7, 8, 9]].any()


# --------------------------------------------------------------------------- objective


def test_subsampling_keep_probability_is_word2vec_c_formula():
    counts = [0, 0, 1000, 100, 10, 1]
    stats = word_windows.WordStatistics(counts, special_ids=[0, 1])
    threshold = 1e-2
    keep = stats.keep_probabilities(threshold)
    total = 1111
    for word in range(2, 6):
        f = counts[word] / total
        assert keep[word] == pytest.approx(min(1.0, (np.sqrt(f / threshold) + 1)
                                               * threshold / f))
    assert keep[0] == keep[1] == 0.0
    assert keep[2] < keep[3] < 1.0 and keep[5] == 1.0
    np.testing.assert_array_equal(stats.keep_probabilities(0.0), [0, 0, 1, 1, 1, 1])
    # Empirically: the most frequent word survives at its keep probability.
    rng = np.random.default_rng(0)
    ids = np.full(200_000, 2)
    assert word_windows.subsample(ids, keep, rng).mean() == pytest.approx(keep[2], abs=0.01)


def test_dynamic_window_is_uniform_from_one_to_window():
    window = 4
    rng = np.random.default_rng(1)
    ids = np.arange(100, 20_100)
    centres, contexts, counts = word_windows.windows(ids, np.zeros(len(ids), int), window, rng)
    np.testing.assert_array_equal(centres, ids)  # every word of a long sentence has contexts
    spans = collections.Counter()
    for centre, row, count in zip(centres, contexts, counts):
        position = centre - 100
        if window <= position < len(ids) - window:
            span = count // 2
            assert count == 2 * span
            np.testing.assert_array_equal(
                row, np.r_[ids[position - span:position],
                           ids[position + 1:position + 1 + span], [0] * (2 * window - count)])
            spans[span] += 1
    total = sum(spans.values())
    assert sorted(spans) == [1, 2, 3, 4]
    for span in spans:
        assert spans[span] / total == pytest.approx(1 / window, abs=0.015)


def test_windows_stay_inside_their_sentence_and_reach_past_subsampled_words():
    rng = np.random.default_rng(0)
    # Two sentences laid end to end: [7, 8] and [9, 10, 11], and a one-word sentence [12].
    centres, contexts, counts = word_windows.windows(
        np.array([7, 8, 9, 10, 11, 12]), np.array([0, 0, 1, 1, 1, 2]), 5, rng)
    rows = {int(c): list(row[:n]) for c, row, n in zip(centres, contexts, counts)}
    assert 12 not in rows  # no context: no record
    assert rows[7] == [8] and rows[8] == [7]
    assert all(set(rows[c]) <= {9, 10, 11} - {c} for c in (9, 10, 11))
    assert np.all(contexts[np.arange(2 * 5)[None, :] >= counts[:, None]] == 0)
    # Subsampling removes words before the windows are taken (word2vec.c), so with every
    # other word of a sentence dropped, a window of 1 reaches the next kept word.
    keep = np.array([0.0, 0.0, 1.0, 0.0])
    sentence = np.array([2, 3, 2, 3, 2])
    centres, contexts, counts, kept = word_windows.pass_windows([sentence], keep, 1, rng)
    assert kept == 3 and list(centres) == [2, 2, 2]
    assert [list(row[:n]) for row, n in zip(contexts, counts)] == [[2], [2, 2], [2]]


def test_window_records_are_the_bytes_of_tf_train_example():
    stats = word_windows.WordStatistics([0, 0] + [50] * 400, special_ids=[0, 1])
    rng = np.random.default_rng(3)
    documents = [[rng.integers(0, 402, size=int(n)) for n in rng.integers(1, 30, size=20)]]
    config = _config(window=3, subsample_threshold=1e-2, dupe_factor=2)
    records, counts = word_windows.shard_examples(documents, stats, config, (1, "train", 0))
    assert len(records) == counts["windows"] > 100
    pairs = 0
    for record in records:
        example = tf.train.Example.FromString(record)
        feature = example.features.feature
        mask = list(feature["context_mask"].int64_list.value)
        contexts = list(feature["context_ids"].int64_list.value)
        assert len(mask) == len(contexts) == 6 and mask == sorted(mask, reverse=True)
        assert all(c >= 2 for c, m in zip(contexts, mask) if m) and 1 in mask
        assert example.SerializeToString(deterministic=True) == record
        pairs += sum(mask)
    assert pairs == counts["pairs"]


def _config(**values):
    return features.resolve_config({"objective": "skipgram", **values})


def test_window_records_are_deterministic_and_drop_special_tokens(tmp_path):
    stats = word_windows.WordStatistics([0, 0] + [50] * 8, special_ids=[0, 1])
    documents = [[np.array([2, 3, 1, 4, 5], "int32"), np.array([6, 7], "int32")],
                 [np.array([8, 9, 2], "int32")]]
    config = _config(window=2, subsample_threshold=0.0, dupe_factor=2)
    records, counts = word_windows.shard_examples(documents, stats, config, (1, "train", 0))
    again, _ = word_windows.shard_examples(documents, stats, config, (1, "train", 0))
    other, _ = word_windows.shard_examples(documents, stats, config, (2, "train", 0))
    assert records == again and records != other
    assert counts["words"] == 2 * 9 and counts["windows"] == len(records) == 18
    spec = word_windows.feature_spec(config)
    path = str(tmp_path / "records.gz")
    with tf.io.TFRecordWriter(path, options="GZIP") as writer:
        for record in records:
            writer.write(record)
    x, y, weight = next(iter(features.make_dataset(path, config, batch_size=18,
                                                   shuffle=False, repeat=False)))
    assert set(spec) == {"centre_id", "context_ids", "context_mask"}
    assert x["context_ids"].shape == (18, 4) and x["context_mask"].dtype == tf.bool
    np.testing.assert_array_equal(y, x["centre_ids"])
    real = x["context_ids"].numpy()[x["context_mask"].numpy()]
    assert 1 not in real and 0 not in real  # the unk / pad ids are not words
    sentence_of = {2: "a", 3: "a", 4: "a", 5: "a", 6: "b", 7: "b", 8: "c", 9: "c"}
    for centre, contexts, mask in zip(x["centre_ids"].numpy(), x["context_ids"].numpy(),
                                      x["context_mask"].numpy()):
        if centre != 2:  # 2 occurs in two sentences
            assert {sentence_of[c] for c in contexts[mask]} <= {sentence_of[centre], "a"}
    np.testing.assert_array_equal(weight.numpy(), x["context_mask"].numpy())


def test_objective_config_checks():
    with pytest.raises(ValueError, match="window"):
        _config(window=0)
    with pytest.raises(ValueError, match="subsample_threshold"):
        _config(subsample_threshold=1.5)
    with pytest.raises(ValueError, match="word counts"):
        word_windows.WordStatistics([0, 0, 0], special_ids=[0])


# --------------------------------------------------------------------------- negatives


def test_negatives_never_equal_the_target_and_follow_unigram_power():
    counts = np.array([0, 0, 500, 200, 100, 50, 20, 10, 5, 1], dtype=np.float64)
    targets = np.full(4000, 2, "int32")
    expected = counts[3:] ** 0.75 / np.sum(counts[3:] ** 0.75)  # P_n without the target
    # word2vec.c / gensim (redraws=0): a draw equal to the target is skipped (weight 0).
    # The target is the most likely noise word here (P_n = 0.46).
    plain = UnigramNoise(len(counts), seed=4, counts=counts, redraws=0)
    negatives, weights = (t.numpy() for t in plain(targets, num_negatives=10))
    collided = negatives == 2
    assert collided.mean() == pytest.approx(np.exp(noise_log_probabilities(counts)[2]),
                                            abs=0.01)
    # Skipped, not redrawn: the collisions stay in the draws and only they weigh 0.
    assert collided.any() and weights[collided].max() == 0 and weights[~collided].min() == 1
    # The default: 2 redraws of each collision from the pool; ~P^3 of them are left.
    default = UnigramNoise(len(counts), seed=5, counts=counts)
    _, weights = default(targets, num_negatives=10)
    assert default.redraws == 2
    assert 1 - weights.numpy().mean() == pytest.approx(0.46 ** 3, abs=0.03)
    # More redraws: (almost) none is left. The pool (1/16 of the draws) is cycled when
    # collisions outnumber it, as here.
    noise = UnigramNoise(len(counts), seed=3, counts=counts, redraws=12)
    negatives, weights = (t.numpy() for t in noise(targets, num_negatives=10))
    assert not np.any((negatives == 2) & (weights > 0))
    assert weights.mean() > 0.999
    for kept in (negatives[weights > 0], plain(targets, num_negatives=10)[0].numpy()):
        kept = kept[kept != 2]
        assert not np.isin(kept, [0, 1]).any()  # special tokens have no count
        observed = np.bincount(kept, minlength=len(counts))[3:]
        np.testing.assert_allclose(observed / observed.sum(), expected, atol=0.01)
    np.testing.assert_allclose(noise_log_probabilities([1, 16, 0])[:2],
                               np.log(np.array([1, 8]) / 9), rtol=1e-6)


def test_inverse_cdf_draws_every_word_at_its_probability_and_never_a_zero_count():
    counts = np.array([0, 3, 0, 0, 1, 0, 7, 0])  # zero counts at the start, middle and end
    noise = UnigramNoise(len(counts), seed=0, counts=counts, power=1.0, redraws=0)
    draws, _ = noise(np.full(20_000, 1, "int32"), num_negatives=5)
    observed = np.bincount(draws.numpy().ravel(), minlength=len(counts)) / draws.numpy().size
    np.testing.assert_allclose(observed, counts / counts.sum(), atol=0.01)
    assert observed[[0, 2, 3, 5, 7]].sum() == 0
    noise.set_counts([0, 0, 0, 0, 0, 0, 0, 1])  # new counts move the table too
    draws, _ = noise(np.full(100, 1, "int32"), num_negatives=5)
    assert set(draws.numpy().ravel()) == {7}


def test_noise_table_is_saved_with_the_task_model(tmp_path):
    counts = np.arange(30)
    model = Word2VecSkipGram(_backbone(), negatives=4, token_counts=counts, seed=2)
    path = str(tmp_path / "skipgram.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    assert isinstance(restored, Word2VecSkipGram) and restored.negatives == 4
    np.testing.assert_allclose(restored.noise.log_probabilities.numpy(),
                               noise_log_probabilities(counts))


# --------------------------------------------------------------------------- loss


def _numpy_sgns(hidden, output, targets, negatives, negative_weights):
    def log_sigmoid(z):
        return -np.log1p(np.exp(-z))

    positive = np.sum(hidden * output[targets], axis=1)
    negative = np.einsum("nd,nkd->nk", hidden, output[negatives])
    return -log_sigmoid(positive) - np.sum(negative_weights * log_sigmoid(-negative), axis=1)


def test_skipgram_loss_matches_numpy():
    backbone = _backbone()
    rng = np.random.default_rng(0)
    backbone.output_embedding.embeddings.assign(rng.normal(0, 0.3, (30, 8)))
    model = Word2VecSkipGram(backbone, negatives=3, seed=5)
    x = _batch([5, 6], [[7, 8, 9], [10, 0, 0]], [[1, 1, 1], [1, 0, 0]])
    out = model(x)
    inputs = backbone.word_vectors.numpy()
    output = backbone.context_matrix.numpy()
    targets = np.array([7, 8, 9, 10, 0, 0])
    np.testing.assert_array_equal(out["targets"], targets)
    hidden = inputs[[5, 5, 5, 6, 6, 6]]
    per_pair = _numpy_sgns(hidden, output, targets, out["negatives"].numpy(),
                           out["negative_weights"].numpy())
    np.testing.assert_allclose(
        negative_sampling_loss(out["positive_logits"], out["negative_logits"],
                               out["negative_weights"]), per_pair, rtol=1e-5)
    weights = np.array([1, 1, 1, 1, 0, 0])
    assert float(model.compute_loss(x=x, y_pred=out)) == pytest.approx(
        np.sum(per_pair * weights), rel=1e-5)
    assert float(model.sgns_loss_tracker.result()) == pytest.approx(
        np.sum(per_pair * weights) / 4, rel=1e-5)


def test_cbow_predicts_the_centre_from_the_mean_of_real_contexts():
    backbone = _backbone()
    backbone.output_embedding.embeddings.assign(np.random.default_rng(1).normal(
        0, 0.3, (30, 8)))
    model = Word2VecCBOW(backbone, negatives=2, seed=6)
    x = _batch([5, 6], [[7, 8, 9, 0], [10, 0, 0, 0]], [[1, 1, 1, 0], [1, 0, 0, 0]])
    out = model(x)
    inputs = backbone.word_vectors.numpy()
    hidden = np.stack([inputs[[7, 8, 9]].mean(axis=0), inputs[10]])
    np.testing.assert_array_equal(out["targets"], [5, 6])
    per_pair = _numpy_sgns(hidden, backbone.context_matrix.numpy(), np.array([5, 6]),
                           out["negatives"].numpy(), out["negative_weights"].numpy())
    assert float(model.compute_loss(x=x, y_pred=out)) == pytest.approx(per_pair.sum(),
                                                                        rel=1e-5)


# --------------------------------------------------------------------------- optimiser


def test_sgd_with_linear_decay_to_alpha_times_1e4():
    settings = {**WORD2VEC_OPTIMIZATION["common"], **WORD2VEC_OPTIMIZATION["skipgram"]}
    optimizer = make_optimizer(
        settings["learning_rate"], 1000, settings["warmup_fraction"],
        settings["weight_decay"], settings["clip_norm"], decay="linear",
        final_learning_rate_fraction=settings["final_learning_rate_fraction"],
        optimizer=settings["optimizer"])
    assert type(optimizer) is keras.optimizers.SGD
    schedule = optimizer._learning_rate
    assert isinstance(schedule, WarmupLinearDecay)
    alpha = 0.025
    assert float(schedule(0)) == pytest.approx(alpha)
    assert float(schedule(500)) == pytest.approx(alpha * (1e-4 + (1 - 1e-4) * 0.5))
    assert float(schedule(1000)) == pytest.approx(alpha * 1e-4)
    steps = np.array([float(schedule(step)) for step in range(0, 1001, 100)])
    np.testing.assert_allclose(np.diff(steps), np.diff(steps)[0], rtol=1e-4)  # linear
    assert WORD2VEC_OPTIMIZATION["cbow"]["learning_rate"] == 0.05
    with pytest.raises(ValueError, match="optimizer"):
        make_optimizer(0.1, 10, optimizer="adagrad")
    with pytest.raises(ValueError, match="plain SGD"):
        make_optimizer(0.1, 10, weight_decay=0.01, optimizer="sgd")


# --------------------------------------------------------------------------- metrics


def test_analogy_accuracy_and_similarity(tmp_path):
    words = ["man", "woman", "king", "queen", "apple"]
    vectors = np.array([[1, 0, 0], [1, 1, 0], [1, 0, 1], [1, 1, 1], [-1, 0, 0]], float)
    analogies = tmp_path / "questions.txt"
    analogies.write_text(": gender\nMan Woman King Queen\nman woman king apple\n"
                         "man woman pear queen\n", encoding="utf-8")
    questions = wvm.read_analogies(str(analogies))
    assert questions[0] == ("gender", "man", "woman", "king", "queen")
    result = wvm.analogy_accuracy(vectors, words, questions)
    assert result == {"questions": 2, "skipped": 1, "accuracy": 0.5, "correct": 1}
    pairs = tmp_path / "wordsim.tsv"
    pairs.write_text("# Word 1\tWord 2\tHuman\nking\tqueen\t9\nman\tapple\t1\n"
                     "king\tapple\t2\nman\tpear\t5\n", encoding="utf-8")
    similarity = wvm.similarity_spearman(vectors, words, wvm.read_word_pairs(str(pairs)))
    assert similarity["pairs"] == 3 and similarity["skipped"] == 1
    assert similarity["spearman"] == pytest.approx(1.0)
    analogies.write_text("man woman king\n", encoding="utf-8")
    with pytest.raises(ValueError, match="4 words"):
        wvm.read_analogies(str(analogies))


def test_recipe_uses_the_papers_optimiser_and_names_bad_settings():
    recipe = load_recipe("word2vec_wikitext2")
    assert recipe["objective"]["name"] == "skipgram"
    for stage in ("pretraining", "finetuning"):
        assert recipe[stage]["optimizer"] == "sgd"
        assert recipe[stage]["learning_rate"] == 0.025
        assert recipe[stage]["final_learning_rate_fraction"] == 1e-4
    assert recipe["finetuning"]["task"] == "word_vectors"
    with pytest.raises(RecipeError) as error:
        load_recipe("word2vec_wikitext2", ["pretraining.optimizer=rmsprop"])
    assert error.value.field == "pretraining.optimizer"
    with pytest.raises(RecipeError, match="plain SGD") as error:
        load_recipe("word2vec_wikitext2", ["finetuning.clip_norm=1.0"])
    assert error.value.field == "finetuning.optimizer"
    with pytest.raises(RecipeError) as error:
        load_recipe("word2vec_wikitext2", ["objective.window=0"])
    assert error.value.field == "objective.window"
    with pytest.raises(RecipeError) as error:
        load_recipe("word2vec_wikitext2", ["finetuning.analogy_file=/no/such/file.txt"])
    assert error.value.field == "finetuning.analogy_file"


def test_a_beam_worker_builds_window_records_without_tensorflow():
    import subprocess
    import sys

    assert objectives.get("skipgram").shard_examples.__module__.endswith(
        "word_window_records")
    code = ("import sys\n"
            "from lmfactory.components.pretraining_data import word_window_records as w\n"
            "import numpy as np\n"
            "stats = w.WordStatistics([0, 0, 5, 5, 5], special_ids=[0, 1])\n"
            "config = {'window': 2, 'subsample_threshold': 0.0, 'dupe_factor': 1}\n"
            "records, _ = w.shard_examples([[np.array([2, 3, 4])]], stats, config, (0,))\n"
            "assert len(records) == 3\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('tensorflow', 'keras', 'tfx', 'apache_beam')))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"
