"""The Reformer through the whole DAG at tiny size (LocalDagRunner): byte vocabulary,
causal-LM pretraining with reversible layers and multi-chunk LSH / local attention (chunks
of 8 over 32-byte blocks), fine-tuning, evaluation, and a pushed SavedModel that continues
raw-text prompts."""

from pathlib import Path

import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (ops used by the serving graph)

from dag_helpers import TINY_TRAINING

PRETRAINING_STEPS, FINETUNING_STEPS = 4, 2


def _texts(values):
    return [v.decode("utf-8") for v in values.numpy().tolist()]


@pytest.fixture(scope="module")
def reformer_run(tmp_path_factory, shared_data):
    from lmfactory.pipelines import runners
    from lmfactory.recipe import load_recipe

    tmp = tmp_path_factory.mktemp("reformer")
    corpus = tmp / "shakespeare.txt"
    text = (shared_data / "tiny_shakespeare" / "input.txt").read_text(encoding="utf-8")
    corpus.write_text(text[:text.index("\n\n", 12_000)] + "\n", encoding="utf-8")
    recipe = load_recipe("reformer_tiny_shakespeare", TINY_TRAINING + [
        f"data.corpus.path={corpus}", f"data.target_corpus.path={corpus}",
        f"pretraining.steps={PRETRAINING_STEPS}", f"finetuning.steps={FINETUNING_STEPS}",
        "evaluation.threshold=1000000.0", "evaluation.metric=perplexity",
        "evaluation.max_batches=1", "serving.generation.max_length=24",
        "finetuning.sequence_length=32",
        "overrides={max_sequence_length: 64, num_layers: 2, hidden_dim: 32, "
        "intermediate_dim: 64, head_dim: 16, axial_pos_embds_dim: [16, 16], "
        "axial_pos_shape: [8, 8], lsh_attn_chunk_length: 8, local_attn_chunk_length: 8, "
        "num_buckets: 4}"])
    summary = runners.run_local(recipe, str(tmp / "runs"))
    return recipe, summary


def test_reformer_dag_pushes_a_model_that_continues_raw_prompts(reformer_run):
    import keras

    from lmfactory.models.reformer import ReformerCausalLM

    _, summary = reformer_run
    outcome = summary["evaluation"]
    assert outcome["blessed"] is True
    assert outcome["metrics"]["perplexity"] < 257  # below the uniform byte model
    root = Path(summary["pipeline_root"])
    model_dir = sorted((root / "Pretrainer" / "model").iterdir())[-1]
    model = keras.saving.load_model(str(model_dir / "keras" / "model.keras"), compile=False)
    assert isinstance(model, ReformerCausalLM)
    assert model.backbone.lsh_attn_chunk_length == 8 and model.backbone.reversible

    loaded = tf.saved_model.load(summary["pushed_model"])
    prompts = ["First Citizen:", "ROMEO: what", ""]
    generated = _texts(loaded.signatures["generate_default"](
        prompt=tf.constant(prompts))["generated_text"])
    assert len(generated) == 3
    for prompt, text in zip(prompts, generated):
        assert text.startswith(prompt)
    assert any(len(text) > len(prompt) for prompt, text in zip(prompts, generated))
    greedy = [_texts(loaded.signatures["serving_default"](
        prompt=tf.constant(prompts), max_length=tf.constant(20),
        sampler=tf.constant("greedy"), temperature=tf.constant(1.0), k=tf.constant(5),
        p=tf.constant(0.9))["generated_text"]) for _ in range(2)]
    assert greedy[0] == greedy[1]  # greedy decoding is deterministic
    for prompt, text in zip(prompts, greedy[0]):
        assert text.startswith(prompt)
