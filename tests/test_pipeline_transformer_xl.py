"""Transformer-XL through the whole DAG at tiny size (LocalDagRunner): a word vocabulary,
ordered-stream records (causal_lm_streams), training with the memory carried across steps,
continued training on the target corpus, held-out perplexity, and a pushed SavedModel that
continues raw-string prompts."""

import tensorflow as tf
import tensorflow_text  # noqa: F401  (ops used by the serving graph)

from dag_helpers import TINY_TRAINING, small_corpus
from lmfactory.components.trainer.model_artifact import load_task_model
from lmfactory.pipelines import runners
from lmfactory.recipe import load_recipe


def test_transformer_xl_trains_on_ordered_streams_and_pushes_a_generator(tmp_path,
                                                                        demo_data):
    corpus = small_corpus(demo_data, tmp_path / "corpus.txt", 120)
    recipe = load_recipe("transformer_xl_wikitext2", TINY_TRAINING + [
        f"data.corpus.path={corpus}", f"data.target_corpus.path={corpus}",
        "tokenizer.vocab_size=600", "pretraining.learning_rate=0.003",
        "finetuning.learning_rate=0.001", "pretraining.batch_size=4",
        "finetuning.batch_size=4", "evaluation.threshold=1000000.0",
        "evaluation.max_batches=4", "serving.generation.max_length=16",
        "preset=tiny", "finetuning.sequence_length=32",
        "overrides={max_sequence_length: 32, mem_len: 16, cutoffs: [100, 300]}"])
    summary = runners.run_local(recipe, str(tmp_path / "runs"))
    root = summary["pipeline_root"]
    for component in ("Pretrainer", "TargetLMExampleGen", "FineTuner"):
        assert tf.io.gfile.exists(f"{root}/{component}"), component
    outcome = summary["evaluation"]
    print(f"\nTransformer-XL tiny DAG: held-out {outcome['metrics']}")
    assert outcome["blessed"] is True and outcome["metric"] == "perplexity"
    assert outcome["metrics"]["perplexity"] < 600  # better than uniform over the words

    # The trained model carried its memory across steps on 4 parallel streams.
    lm = load_task_model(tf.io.gfile.glob(f"{root}/FineTuner/model/*")[0])
    assert lm.stream_batch_size == 4
    variables, filled = lm.memories["train"]
    assert int(filled.numpy()) == 16 and float(tf.reduce_max(tf.abs(variables[0]))) > 0

    loaded = tf.saved_model.load(summary["pushed_model"])
    signature = ("generate_default" if "generate_default" in loaded.signatures
                 else "serving_default")
    prompts = ["the history of", "unknownword zzz", ""]
    generated = loaded.signatures[signature](prompt=tf.constant(prompts))
    texts = [text.decode("utf-8") for text in generated["generated_text"].numpy()]
    print(f"Transformer-XL tiny generations: {texts}")
    assert len(texts) == 3
    assert any(len(text.split()) > len(prompt.split()) for prompt, text in
               zip(prompts, texts)), texts
