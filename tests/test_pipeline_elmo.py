"""ELMo through the whole DAG at tiny size (LocalDagRunner): a word vocabulary, `bilm`
windows with character ids, the biLM pretrained, the feature-based SST-2 classifier
fine-tuned on the frozen biLM, evaluated and pushed; the pushed SavedModel classifies raw
strings and the Pretrainer's SavedModel turns sentences into per-token ELMo layers."""

import glob

import numpy as np
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
        "finetuning.sequence_length=24", "evaluation.threshold=0.0",
        "runtime.export_every_stage=true"]  # the biLM's own SavedModel, read below
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


def _conll_slice(source, target, sentences: int) -> str:
    lines, count = [], 0
    for line in source.read_text(encoding="utf-8").splitlines():
        lines.append(line)
        if not line.strip():
            count += 1
            if count == sentences:
                break
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(target)


def test_elmo_tagger_through_the_dag_tags_raw_sentences(tmp_path, demo_data, shared_data):
    wnut = shared_data / "wnut17"
    train = _conll_slice(wnut / "wnut17train.conll", tmp_path / "train.conll", 60)
    dev = _conll_slice(wnut / "emerging.dev.conll", tmp_path / "dev.conll", 20)
    training = [t for t in TINY_TRAINING if not t.startswith(("overrides=", "objective."))]
    overrides = training + [
        f"data.task.splits.train={train}", f"data.task.splits.eval={dev}",
        f"data.corpus.path={small_corpus(demo_data, tmp_path / 'corpus.txt', 60)}",
        "tokenizer.vocab_size=600", "objective.max_seq_length=12",
        "finetuning.sequence_length=24"]
    summary = runners.run_local(load_recipe("elmo_wikitext2_wnut17", overrides),
                                str(tmp_path / "runs"))
    assert summary["evaluation"]["blessed"] is True
    assert summary["evaluation"]["metrics"]["sentences"] == 20
    serve = tf.saved_model.load(summary["pushed_model"]).signatures["serving_default"]
    outputs = serve(sentences=tf.constant(["Paris is lovely @user", "", "word " * 40]))
    np.testing.assert_array_equal(outputs["lengths"].numpy(), [4, 0, 40])
    assert outputs["tags"].numpy()[2, 30] == b"O"  # past the 22 words that fit: O
