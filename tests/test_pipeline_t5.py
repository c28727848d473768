"""T5 through the whole DAG at tiny size (LocalDagRunner): a SentencePiece vocabulary with
the sentinels at its top, span-corruption records built by Beam, span-corruption
pretraining, text-to-text fine-tuning on SST-2 ("sst2 sentence: ..." -> "negative" /
"positive"), evaluation by exact match through the exported model, and the pushed
SavedModel called on raw prompt strings returning text."""

import json

import tensorflow as tf
import tensorflow_text  # noqa: F401  (ops used by the serving graph)

from dag_helpers import TINY_TRAINING, small_tsv
from lmfactory.pipelines import runners
from lmfactory.recipe import load_recipe

PROMPTS = ["sst2 sentence: a gorgeous , witty film", "sst2 sentence:",
           "sst2 sentence: " + "unwatchable " * 80]


def test_t5_span_corruption_then_text_to_text_pushes_a_text_model(tmp_path, shared_data):
    corpus = tmp_path / "corpus.txt"
    lines = (shared_data / "wikitext-2" / "valid.txt").read_text(encoding="utf-8").splitlines()
    corpus.write_text("\n".join(lines[:300]) + "\n", encoding="utf-8")
    glue = shared_data / "glue" / "SST-2"
    train = small_tsv(glue / "train.tsv", tmp_path / "train.tsv", 200)
    dev = small_tsv(glue / "dev.tsv", tmp_path / "dev.tsv", 40)
    training = [t for t in TINY_TRAINING if not t.startswith(("overrides=", "objective."))]
    overrides = training + [
        f"data.corpus.path={corpus}", f"data.task.splits.train={train}",
        f"data.task.splits.eval={dev}", "tokenizer.vocab_size=700",
        "objective.max_seq_length=32", "finetuning.sequence_length=24",
        "evaluation.threshold=0.0", "finetuning.steps=40", "finetuning.learning_rate=0.01",
        "overrides={hidden_dim: 16, intermediate_dim: 32, num_heads: 2, num_layers: 1, "
        "max_sequence_length: 32}"]
    summary = runners.run_local(load_recipe("t5_span_corruption_sst2", overrides),
                                str(tmp_path / "runs"))
    root = summary["pipeline_root"]
    # Sentinels at the top of the learned vocabulary; 32 inputs from segments of 34 raw
    # tokens (random_spans_helper), each with round(0.15 * 34) = 5 noise tokens in 2 spans.
    with tf.io.gfile.GFile(tf.io.gfile.glob(f"{root}/PretrainingExampleGen/*/*/"
                                            f"pretraining_config.json")[0]) as f:
        described = json.load(f)
    vocabulary_size = described["vocabulary_size"]
    assert described["sentinel_ids"] == [vocabulary_size - 1, vocabulary_size - 2,
                                         vocabulary_size - 3]
    counts = described["counts"]["train"]
    assert counts["segments"] == -(-counts["tokens"] // 34)
    full = counts["tokens"] // 34
    assert counts["noise_tokens"] - 5 * full in range(0, 34) and counts["noise_spans"] - 2 * full \
        in range(0, 3)
    metrics = summary["evaluation"]["metrics"]
    assert metrics["examples_evaluated"] == 40 and 0.0 <= metrics["exact_match"] <= 1.0
    # 40 steps teach the output format: the generated text is a label word (§2.4 counts any
    # other text as wrong); telling the classes apart takes the recipe's 2,000 steps.
    assert metrics["valid_label_rate"] >= 0.8
    print("exact match", metrics["exact_match"], "valid", metrics["valid_label_rate"],
          metrics["examples"])
    serve = tf.saved_model.load(summary["pushed_model"]).signatures["serving_default"]
    outputs = serve(text=tf.constant(PROMPTS))["output"].numpy()
    assert outputs.shape == (3,) and all(isinstance(o, bytes) for o in outputs)
    assert all(len(o.split()) <= 24 for o in outputs)
