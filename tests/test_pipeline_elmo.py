"""ELMo through the whole DAG at tiny size (LocalDagRunner): a word vocabulary, `bilm`
windows with character ids, the biLM pretrained, the feature-based SST-2 classifier
fine-tuned on the frozen biLM, evaluated and pushed; the pushed SavedModel classifies raw
strings and the Pretrainer's SavedModel turns sentences into per-token ELMo layers."""

import glob
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (ops used by the serving graph)

from dag_helpers import TINY_TRAINING, small_corpus, small_tsv
from lmfactory.pipelines import runners
from lmfactory.recipe import load_recipe

SENTENCES = ["a gorgeous , witty film", "", "unwatchable \u00fcberlong " + "word " * 80]


def test_elmo_pretrains_fine_tunes_and_pushes(tmp_path, demo_data):
    train = small_tsv(demo_data / "sst2" / "train.tsv", tmp_path / "train.tsv", 200)
    dev = small_tsv(demo_data / "sst2" / "dev.tsv", tmp_path / "dev.tsv", 40)
    training = [t for t in TINY_TRAINING if not t.startswith(("overrides=", "objective."))]
    overrides = training + [
        f"data.task.splits.train={train}", f"data.task.splits.eval={dev}",
        f"data.corpus.path={small_corpus(demo_data, tmp_path / 'corpus.txt', 120)}",
        "tokenizer.vocab_size=600", "objective.max_seq_length=12",
        "finetuning.sequence_length=24", "evaluation.threshold=0.0"]
    summary = runners.run_local(load_recipe("elmo_wikitext2_sst2", overrides),
                                str(tmp_path / "runs"))
    assert summary["evaluation"]["blessed"] is True
    assert summary["evaluation"]["metrics"]["examples"] == 40
    serve = tf.saved_model.load(summary["pushed_model"]).signatures["serving_default"]
    probabilities = serve(sentence=tf.constant(SENTENCES))["probabilities"].numpy()
    assert probabilities.shape == (3, 2) and np.isfinite(probabilities).all()
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)

    # The pretrained biLM's SavedModel: sentences -> per-token ELMo layers.
    encoders = glob.glob(str(tmp_path / "runs" / "**" / "Pretrainer" / "model" / "*"
                             / "Format-Serving"), recursive=True)
    assert encoders, "no Pretrainer SavedModel"
    encode = tf.saved_model.load(encoders[0]).signatures["serving_default"]
    outputs = encode(text=tf.constant(SENTENCES))
    layers = outputs["layer_outputs"].numpy()
    assert layers.shape[:2] == (3, 3) and np.isfinite(layers).all()
    # "<S> a gorgeous , witty film </S>": 7 real positions; "" is "<S> </S>"
    np.testing.assert_array_equal((np.abs(layers[:, 0]).sum(-1) > 0).sum(-1)[:2], [7, 2])
