"""ERNIE-tiny vs BERT-tiny, same size (2 Transformer layers, H 128), same corpus, vocabulary
settings, pretraining / fine-tuning steps and task data, through the whole DAG.

Tasks: ``sst2`` (GLUE SST-2, dev: 872 examples) or ``relations`` (relation classification
on KG-linked text, ERNIE §3.5 / §4.4: WikiText-2 valid + SQuAD dev sentences with two
related FB15k-237 entities, the 10 most frequent relations, split by entity pair; built
by components/knowledge_graph/relation_data.py into <output folder>/relations first). For
``relations`` both models read the same marked sequence ("*" around the head mention,
"~" around the tail, §3.5's [HD] / [TL]) and classify it from [CLS]. ``typing`` (entity
typing, ERNIE §3.5 / §4.1: every linked FB15k-237 mention of the same sentences, labelled
with its entity's types from the relations it heads, the 10 most common types,
multi-label, split by entity; built by components/knowledge_graph/typing_data.py into
<output folder>/typing): "*" around the mention ([ENT]), one sigmoid per type on [CLS];
strict accuracy, loose macro-F1 and loose micro-F1 (Ling & Weld 2012).

Usage (from the repository root, PYTHONPATH holding lmfactory):
    nice python benchmarks/ernie_vs_bert_sst2.py ernie|bert [output folder] \
        [sst2|relations|typing] [recipe overrides...]
(A second run in the same output folder with other fine-tuning overrides reuses the cached
pretraining stages of the first.)
Measured (2 shared CPU cores): SST-2 dev accuracy ERNIE 0.7557 (696 s, KG stages
included), BERT 0.7649 (123 s). Relations: see docs/benchmarks/report.md. Typing (600
pretraining + 500 fine-tuning steps, eval 1,459 mentions of 249 unseen entities; machine
load 10-17 on the 2 cores): with finetuning.learning_rate=0.001 strict accuracy / loose
macro-F1 / loose micro-F1 ERNIE 0.027 / 0.097 / 0.157, BERT 0.026 / 0.112 / 0.177; at the
default 0.0003 neither model puts any type above 0.5 (all 0; with the most probable type
always predicted: ERNIE 0.127 / 0.280 / 0.285, BERT 0.126 / 0.281 / 0.287)."""
import json, os, sys, time
from lmfactory.pipelines import runners
from lmfactory.recipe import load_recipe

which = sys.argv[1]
root = sys.argv[2] if len(sys.argv) > 2 else "/tmp/ernie_vs_bert"
task = sys.argv[3] if len(sys.argv) > 3 else "sst2"
common = [
    "data.corpus.path=../shared/data/wikitext-2/valid.txt",
    "tokenizer.vocab_size=8000", "objective.max_seq_length=64",
    "objective.max_predictions_per_seq=10", "objective.dupe_factor=2",
    "pretraining.steps=600", "pretraining.batch_size=32", "pretraining.learning_rate=0.001",
    "finetuning.batch_size=32", "finetuning.learning_rate=0.0003",
    "finetuning.sequence_length=64", "evaluation.threshold=0.0",
    "runtime.beam.direct_running_mode=in_memory", "runtime.beam.direct_num_workers=1",
    f"serving.model_name=cmp_{which}_{task}",
]
if task == "sst2":
    common += ["data.task.splits.train=../shared/data/glue/SST-2/train.tsv",
               "data.task.splits.eval=../shared/data/glue/SST-2/dev.tsv",
               "finetuning.steps=1000"]
    name = {"ernie": "ernie_fb15k237_sst2", "bert": "bert_tiny_sst2"}[which]
elif task == "relations":
    from lmfactory.components.knowledge_graph import relation_data

    data = f"{root}/relations"
    if not os.path.exists(f"{data}/counts.json"):
        relation_data.build(data, "../shared/data")
    print("DATA", json.dumps(json.load(open(f"{data}/counts.json"))["examples"]))
    common += [f"data.task={{format: tsv, splits: {{train: {data}/train.tsv, "
               f"eval: {data}/eval.tsv}}}}", "finetuning.task=relation_classification",
               "finetuning.text_features=[text, head, tail]",
               'finetuning.task_args={head_marker: "*", tail_marker: "~"}',
               "finetuning.steps=500", "finetuning.eval_steps=8", "evaluation.metric=macro_f1"]
    name = {"ernie": "ernie_fb15k237_relations", "bert": "bert_tiny_sst2"}[which]
elif task == "typing":
    from lmfactory.components.knowledge_graph import typing_data

    data = f"{root}/typing"
    if not os.path.exists(f"{data}/counts.json"):
        typing_data.build(data, "../shared/data")
    print("DATA", json.dumps(json.load(open(f"{data}/counts.json"))["examples"]))
    common += [f"data.task={{format: tsv, splits: {{train: {data}/train.tsv, "
               f"eval: {data}/eval.tsv}}}}", "finetuning.task=entity_typing",
               "finetuning.text_features=[text, mention]",
               'finetuning.task_args={entity_marker: "*"}',
               "finetuning.steps=500", "finetuning.eval_steps=8",
               "evaluation.metric=loose_micro_f1"]
    name = {"ernie": "ernie_fb15k237_typing", "bert": "bert_tiny_sst2"}[which]
else:
    sys.exit(f"task must be sst2, relations or typing, got {task!r}")
common += sys.argv[4:]  # further overrides, the same for both models (e.g. a learning rate)
recipe = load_recipe(name, common)
start = time.time()
summary = runners.run_local(recipe, f"{root}/runs_{which}_{task}")
metrics = {key: value for key, value in summary["evaluation"]["metrics"].items()
           if key != "confusion_matrix"}
print("RESULT", which, task, json.dumps(metrics, default=str),
      "seconds", round(time.time() - start))
