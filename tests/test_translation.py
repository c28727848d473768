"""The translation task kind: the parallel format, the seq2seq preprocessor, and RNNsearch
through the whole DAG at tiny size (no pretraining: VocabularyGen -> BackboneInitializer ->
FineTuner), ending in a pushed SavedModel that translates raw English strings."""

import gzip
import json
import os

import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (ops used by the serving graph)

from dag_helpers import TINY_TRAINING
from lmfactory import models
from lmfactory.components.example_gen import formats, parallel
from lmfactory.components.tasks import translation
from lmfactory.components.vocabulary import executor as vocabulary_executor
from lmfactory.pipelines import runners
from lmfactory.recipe import RecipeError, load_recipe

ENGLISH = ["A man rides a bike.", "Two dogs play (outside)!", "", "A girl is reading."]


def _write_gz(path, lines):
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return str(path)


def _multi30k_slice(shared_data, tmp_path, split, rows, name):
    """The first ``rows`` pairs of a Multi30k split, as <name>.en.gz / <name>.de.gz."""
    paths = {}
    for language in ("en", "de"):
        with gzip.open(shared_data / "multi30k" / f"{split}.{language}.gz", "rt",
                       encoding="utf-8") as f:
            lines = [next(f).rstrip("\n") for _ in range(rows)]
        paths[language] = _write_gz(tmp_path / f"{name}.{language}.gz", lines)
    return paths["en"]


def test_parallel_files_pair_by_line_and_split_punctuation(tmp_path):
    source = _write_gz(tmp_path / "x.en.gz", ["A dog, running.", "", "Hi"])
    _write_gz(tmp_path / "x.de.gz", ["Ein Hund, rennt.", "Leer", "Hallo"])
    options = formats.FormatOptions(format="parallel", column_names=("en", "de"))
    examples = list(parallel.iter_examples(source, options))
    first = examples[0].features.feature
    assert first["source"].bytes_list.value == [b"A dog , running ."]
    assert first["target"].bytes_list.value == [b"Ein Hund , rennt ."]
    assert first["text"].bytes_list.value == [b"A dog , running .\nEin Hund , rennt ."]
    assert isinstance(examples[1], formats.BadRecord) and examples[1].reason == "empty"
    _write_gz(tmp_path / "x.de.gz", ["Ein Hund"])
    with pytest.raises(ValueError, match="not aligned"):
        list(parallel.iter_examples(source, options))
    with pytest.raises(ValueError, match=r"must end in \.en"):
        parallel.target_path(str(tmp_path / "x.fr"), ("en", "de"))


@pytest.fixture(scope="module")
def preprocessor(tmp_path_factory):
    config = vocabulary_executor.VocabularyConfig(
        kind="word", vocab_size=50, min_frequency=1, lowercase=False,
        special_tokens=models.get("rnnsearch").special_tokens)
    lines = [parallel.split_punctuation(s) for s in ENGLISH + ["Ein Mann fährt Rad."]]
    counts = vocabulary_executor.count_words([line for line in lines if line], config)
    out = tmp_path_factory.mktemp("vocabulary")
    vocabulary_executor.learn_and_write(counts, str(out), config, "test")
    return translation.preprocessor_for(str(out), sequence_length=6)


def test_sources_end_with_the_end_token_and_long_ones_are_truncated(preprocessor):
    inputs = preprocessor.source_inputs(tf.constant(
        ["A man rides a bike.", "", "a a a a a a a a a a a a"]))
    ids, mask = inputs["encoder_token_ids"].numpy(), inputs["encoder_padding_mask"].numpy()
    end = preprocessor.end_token_id
    assert ids.shape == (3, 6) and mask.sum(axis=1).tolist() == [6, 1, 6]
    assert ids[0, 5] == end and ids[1, 0] == end and ids[2, 5] == end
    x, targets, weights = preprocessor.training_inputs(tf.constant(["A man ."]),
                                                       tf.constant(["Ein Mann ."]))
    decoder = x["decoder_token_ids"].numpy()[0]
    assert decoder[0] == preprocessor.start_token_id
    assert decoder[1:4].tolist() == targets.numpy()[0, :3].tolist()
    assert targets.numpy()[0, 3] == end and weights.numpy()[0].tolist() == [1, 1, 1, 1]
    text = preprocessor.detokenize(tf.constant([
        [preprocessor.start_token_id, int(decoder[1]), end, int(decoder[2])],
        [preprocessor.start_token_id] + [int(i) for i in decoder[1:4]]]))
    assert text.numpy().tolist() == [b"Ein", b"Ein Mann."]  # cut at </s>, "." re-attached
    assert parallel.join_punctuation("Ein Hund ( klein ) , rennt .") == "Ein Hund (klein), rennt."


def test_recipe_without_pretraining_needs_task_data():
    recipe = load_recipe("rnnsearch_multi30k")
    assert recipe["pretraining"] is None and recipe["finetuning"]["task"] == "translation"
    with pytest.raises(RecipeError, match="column_names"):
        load_recipe("rnnsearch_multi30k", ["data.task.column_names=[en]"])


def test_rnnsearch_trains_from_scratch_and_pushes_a_translator(tmp_path, shared_data):
    train = _multi30k_slice(shared_data, tmp_path, "train", 300, "train")
    test = _multi30k_slice(shared_data, tmp_path, "test_2016_flickr", 30, "test")
    overrides = [
        f"data.corpus.path={train}", f"data.task.splits.train={train}",
        f"data.task.splits.eval={test}", "tokenizer.vocab_size=400",
        "finetuning.sequence_length=12", "finetuning.task_args={num_beams: 2}",
        "overrides={hidden_dim: 16, embedding_dim: 8, max_sequence_length: 16}",
        *[t for t in TINY_TRAINING if t.startswith(("finetuning.", "runtime."))]]
    recipe = load_recipe("rnnsearch_multi30k", overrides)
    summary = runners.run_local(recipe, str(tmp_path / "runs"))
    root = summary["pipeline_root"]
    assert tf.io.gfile.exists(f"{root}/BackboneInitializer")
    assert not tf.io.gfile.exists(f"{root}/Pretrainer")
    metrics = summary["evaluation"]["metrics"]
    assert metrics["sentences"] == 30 and 0.0 <= metrics["bleu"] <= 100.0
    serve = tf.saved_model.load(summary["pushed_model"]).signatures["serving_default"]
    long_sentence = " ".join(["a big dog"] * 40)
    translations = serve(text=tf.constant(ENGLISH + [long_sentence]))["translation"].numpy()
    assert translations.shape == (5,) and all(isinstance(t, bytes) for t in translations)
    assert all(len(t.split()) <= 12 for t in translations)
    evaluation_dirs = tf.io.gfile.glob(f"{root}/LMEvaluator/evaluation/*")
    files = tf.io.gfile.listdir(evaluation_dirs[0])
    assert "attention_heatmap.png" in files
    with tf.io.gfile.GFile(os.path.join(evaluation_dirs[0], "metrics.json")) as f:
        heatmap = json.load(f)["metrics"]["attention_heatmap"]
    assert len(heatmap["weights"]) == len(heatmap["target"])
    assert heatmap["source"][-1] == "</s>"
