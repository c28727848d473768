"""The Quaternion Transformer encoder through the whole DAG at tiny size (LocalDagRunner), with
no pretraining: VocabularyGen (WordPiece from the SST-2 sentences) -> BackboneInitializer ->
FineTuner (SST-2 from scratch) -> evaluation -> push; then the pushed SavedModel classifies
raw strings."""

import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (ops used by the serving graph)

from dag_helpers import TINY_TRAINING, small_tsv
from lmfactory.pipelines import runners
from lmfactory.recipe import load_recipe

SENTENCES = ["a gorgeous , witty film", "dull and lifeless", "",
             "non-ascii: caf\u00e9 \u2013 \u4e2d\u6587"]


def test_quaternion_encoder_trains_from_scratch_and_pushes_a_classifier(tmp_path, shared_data):
    sst2 = shared_data / "glue" / "SST-2"
    train = small_tsv(sst2 / "train.tsv", tmp_path / "train.tsv", 200)
    dev = small_tsv(sst2 / "dev.tsv", tmp_path / "dev.tsv", 40)
    overrides = [
        f"data.corpus.path={train}", f"data.task.dir={tmp_path}", "tokenizer.vocab_size=400",
        "finetuning.sequence_length=24", "evaluation.threshold=0.0",
        "overrides={hidden_dim: 16, num_heads: 2, intermediate_dim: 32, num_layers: 1}",
        *[t for t in TINY_TRAINING if t.startswith(("finetuning.", "runtime."))]]
    recipe = load_recipe("quaternion_encoder_sst2", overrides)
    summary = runners.run_local(recipe, str(tmp_path / "runs"))
    root = summary["pipeline_root"]
    assert tf.io.gfile.exists(f"{root}/BackboneInitializer")
    assert not tf.io.gfile.exists(f"{root}/Pretrainer")
    assert summary["evaluation"]["blessed"] is True
    assert summary["evaluation"]["metrics"]["examples"] == 40
    serve = tf.saved_model.load(summary["pushed_model"]).signatures["serving_default"]
    probabilities = serve(sentence=tf.constant(SENTENCES))["probabilities"].numpy()
    assert probabilities.shape == (len(SENTENCES), 2)
    assert probabilities.sum(axis=1) == pytest.approx([1.0] * len(SENTENCES), abs=1e-5)
