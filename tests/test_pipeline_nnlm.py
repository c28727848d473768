"""The NNLM (Bengio et al. 2003) through the whole DAG at tiny size (LocalDagRunner): a
word vocabulary learned by VocabularyGen, causal-LM pretraining with the §2 weight decay in
the loss, continued training on the target corpus, held-out perplexity, and a pushed
SavedModel that continues raw-string prompts (empty, unknown-word and over-long prompts
included) exactly as the Keras model's cached greedy decoding does."""

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (ops used by the serving graph)

from dag_helpers import TINY_TRAINING, small_corpus
from lmfactory.components.trainer.model_artifact import (load_task_model, read_model_config,
                                                         vocabulary_dir_of)
from lmfactory.models.nnlm import SPECIAL_TOKENS, NnlmCausalLM
from lmfactory.models.tokenizers import load_tokenizer
from lmfactory.pipelines import runners
from lmfactory.recipe import load_recipe

MAX_LENGTH = 12


def _keras_greedy(lm, tokenizer, prompt):
    """What serving does, with the Keras model: ``</s>`` + the prompt's last
    MAX_LENGTH - 2 words, greedy decoding to MAX_LENGTH, ``</s>`` dropped, words joined."""
    end = tokenizer.token_to_id(SPECIAL_TOKENS["end_of_text"])
    tokens = tokenizer(tf.constant([prompt]))
    tokens = tokens.to_list() if hasattr(tokens, "to_list") else tokens
    ids = [int(i) for i in tokens[0]][-(MAX_LENGTH - 2):]
    output = lm.generate_ids(np.array([[end] + ids], dtype="int32"), max_length=MAX_LENGTH,
                             sampler="greedy", end_token_id=end)
    tokens = output["token_ids"].numpy()[0][output["padding_mask"].numpy()[0]][1:]
    return " ".join(tokenizer.id_to_token(int(t)) for t in tokens if t != end)


def test_nnlm_pretrains_continues_and_pushes_a_generator(tmp_path, demo_data):
    corpus = small_corpus(demo_data, tmp_path / "corpus.txt", 120)
    recipe = load_recipe("nnlm_wikitext2", TINY_TRAINING + [
        f"data.corpus.path={corpus}", f"data.target_corpus.path={corpus}",
        "tokenizer.vocab_size=600", "tokenizer.min_frequency=2",
        "pretraining.learning_rate=0.03", "finetuning.learning_rate=0.01",
        "evaluation.threshold=1000000.0", "evaluation.max_batches=4",
        f"serving.generation.max_length={MAX_LENGTH}",
        "overrides={max_sequence_length: 32, hidden_dim: 16, embedding_dim: 8, order: 3}"])
    summary = runners.run_local(recipe, str(tmp_path / "runs"))
    root = summary["pipeline_root"]
    for component in ("VocabularyGen", "Pretrainer", "TargetLMExampleGen", "FineTuner"):
        assert tf.io.gfile.exists(f"{root}/{component}"), component
    outcome = summary["evaluation"]
    print(f"\nNNLM tiny DAG: held-out {outcome['metrics']}")
    assert outcome["blessed"] is True and outcome["metric"] == "perplexity"
    assert outcome["metrics"]["perplexity"] < 600  # better than uniform over the words

    fine_tuned = tf.io.gfile.glob(f"{root}/FineTuner/model/*")[0]
    config = read_model_config(fine_tuned)
    assert config["architecture"] == "nnlm"
    assert config["backbone_config"]["order"] == 3
    assert "weight_decay_penalty" in config["train_metrics"]
    lm = load_task_model(fine_tuned)
    assert isinstance(lm, NnlmCausalLM) and lm.weight_decay == pytest.approx(1e-4)
    tokenizer = load_tokenizer(vocabulary_dir_of(fine_tuned))
    assert tokenizer.vocabulary_size() == 600
    assert all(tokenizer.token_to_id(token) is not None for token in SPECIAL_TOKENS.values())

    loaded = tf.saved_model.load(summary["pushed_model"])
    long_prompt = " ".join(["the"] * 3 * MAX_LENGTH + ["city", "of"])
    prompts = ["the", "", "the zzzunknownword of", long_prompt]
    serve = loaded.signatures["serving_default"]
    outputs = serve(prompt=tf.constant(prompts), max_length=tf.constant(MAX_LENGTH),
                    sampler=tf.constant("greedy"), temperature=tf.constant(1.0),
                    k=tf.constant(1), p=tf.constant(1.0))
    texts = [text.decode("utf-8") for text in outputs["generated_text"].numpy()]
    print(f"NNLM tiny greedy generations: {texts}")
    for prompt, text in zip(prompts, texts):
        assert text == _keras_greedy(lm, tokenizer, prompt), (prompt, text)
    assert texts[0].startswith("the")
    assert texts[2].startswith("the <unk> of")  # an unknown word reads as <unk>
    # An over-long prompt keeps its last max_length - 2 words and still generates.
    assert texts[3].startswith(" ".join(long_prompt.split()[-(MAX_LENGTH - 2):]))
    assert all(n >= 1 for n in outputs["num_generated_tokens"].numpy())
    sampled = loaded.signatures["generate_default"](prompt=tf.constant(["the", ""]))
    assert sampled["generated_text"].shape == (2,)
    keras.backend.clear_session()
