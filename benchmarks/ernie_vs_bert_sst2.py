"""ERNIE-tiny vs BERT-tiny, same size (2 Transformer layers, H 128), same corpus, vocabulary
settings, pretraining / fine-tuning steps and SST-2 data (dev: 872 examples), through the whole DAG.

Usage (from the repository root, PYTHONPATH holding lmfactory):
    nice python benchmarks/ernie_vs_bert_sst2.py ernie|bert [output folder]
Measured (2 shared CPU cores): ERNIE dev accuracy 0.7557 (696 s, KG stages included),
BERT 0.7649 (123 s)."""
import json, sys, time
from lmfactory.pipelines import runners
from lmfactory.recipe import load_recipe

which = sys.argv[1]
common = [
    "data.corpus.path=../shared/data/wikitext-2/valid.txt",
    "data.task.splits.train=../shared/data/glue/SST-2/train.tsv",
    "data.task.splits.eval=../shared/data/glue/SST-2/dev.tsv",
    "tokenizer.vocab_size=8000", "objective.max_seq_length=64",
    "objective.max_predictions_per_seq=10", "objective.dupe_factor=2",
    "pretraining.steps=600", "pretraining.batch_size=32", "pretraining.learning_rate=0.001",
    "finetuning.steps=1000", "finetuning.batch_size=32", "finetuning.learning_rate=0.0003",
    "finetuning.sequence_length=64", "evaluation.threshold=0.0",
    "runtime.beam.direct_running_mode=in_memory", "runtime.beam.direct_num_workers=1",
    f"serving.model_name=cmp_{which}",
]
name = {"ernie": "ernie_fb15k237_sst2", "bert": "bert_tiny_sst2"}[which]
recipe = load_recipe(name, common)
root = sys.argv[2] if len(sys.argv) > 2 else "/tmp/ernie_vs_bert"
start = time.time()
summary = runners.run_local(recipe, f"{root}/runs_{which}")
print("RESULT", which, json.dumps(summary["evaluation"]["metrics"], default=str),
      "seconds", round(time.time() - start))
