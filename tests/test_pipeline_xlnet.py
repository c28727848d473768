"""XLNet through the whole DAG at tiny size (LocalDagRunner): SentencePiece vocabulary,
permutation-LM pretraining (records built by Beam, orders drawn in tf.data), SST-2
fine-tuning with XLNet's own packing, evaluation and push; the pushed SavedModel classifies
raw strings."""

import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (ops used by the serving graph)

from dag_helpers import TINY_TRAINING, small_corpus, small_tsv
from lmfactory.pipelines import runners
from lmfactory.recipe import load_recipe

SENTENCES = ["a gorgeous , witty film", "dull and lifeless", "",
             "non-ascii: caf\u00e9 \u2013 \u4e2d\u6587"]


def test_xlnet_pretrains_fine_tunes_and_pushes(tmp_path, demo_data):
    train = small_tsv(demo_data / "sst2" / "train.tsv", tmp_path / "train.tsv", 200)
    dev = small_tsv(demo_data / "sst2" / "dev.tsv", tmp_path / "dev.tsv", 40)
    corpus = small_corpus(demo_data, tmp_path / "corpus.txt", 120)
    overrides = [t for t in TINY_TRAINING if not t.startswith("overrides=")] + [
        f"data.task.splits.train={train}", f"data.task.splits.eval={dev}",
        f"data.corpus.path={corpus}", "tokenizer.vocab_size=600",
        "finetuning.sequence_length=32", "evaluation.threshold=0.0",
        "overrides={hidden_dim: 32, num_heads: 2, intermediate_dim: 64}"]
    recipe = load_recipe("xlnet_wikitext2_sst2", overrides)
    summary = runners.run_local(recipe, str(tmp_path / "runs"))
    assert summary["evaluation"]["blessed"] is True
    assert summary["evaluation"]["metrics"]["examples"] == 40
    assert tf.io.gfile.exists(f"{summary['pipeline_root']}/Pretrainer")
    serve = tf.saved_model.load(summary["pushed_model"]).signatures["serving_default"]
    probabilities = serve(sentence=tf.constant(SENTENCES))["probabilities"].numpy()
    assert probabilities.shape == (len(SENTENCES), 2)
    assert probabilities.sum(axis=1) == pytest.approx([1.0] * len(SENTENCES), abs=1e-5)
    # XLNet's layout reached the served model: a sentence's score does not depend on the
    # other sentences of the batch (left padding to the batch's packed length).
    alone = serve(sentence=tf.constant(SENTENCES[:1]))["probabilities"].numpy()
    assert alone[0] == pytest.approx(probabilities[0], abs=1e-5)
