"""What a small pipeline run costs before any real work: the tiny BERT and GPT-2 DAGs.

Each DAG runs in a fresh interpreter, as ``lmfactory run`` does, on the sizes of the tests'
DAGs (tests/dag_helpers.py: 150 documents of the demo corpus, 12 training steps per stage,
sequences of 32): the time is then almost all fixed cost (imports, Beam start-up, tracing,
serving exports, warm-up requests, the Pusher's checks), which every user pays on every run
whatever the data. The breakdown comes from the run's own ML Metadata: each component's
execution, from its creation to its last update; "imports" is the interpreter's start and
the imports of the runner, and "orchestration" what the wall time leaves (LocalDagRunner's
resolution of inputs, MLMD, the launcher between components).

    .venv/bin/python benchmarks/fixed_cost.py [--out-dir DIR] [--only bert,gpt2]

Nothing is asserted: the script prints and records figures (docs/benchmarks/report.md's
"Fixed cost" section).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

# The tests' tiny training settings (tests/dag_helpers.py), so the figures are the tests'.
sys.path.insert(0, os.path.join(common.REPO, "tests"))
from dag_helpers import TINY_TRAINING  # noqa: E402

SHAKESPEARE = os.path.join(os.path.dirname(common.REPO), "shared", "data", "tiny_shakespeare",
                           "input.txt")
SST2 = os.path.join(common.REPO, "data", "demo", "sst2")


def _head(source: str, target: str, lines: int) -> str:
    with open(source, encoding="utf-8") as f:
        head = f.read().splitlines()[:lines]
    with open(target, "w", encoding="utf-8") as f:
        f.write("\n".join(head) + "\n")
    return target


def dag_settings(name: str, folder: str) -> tuple[str, list]:
    """``(recipe, --set overrides)`` of the tiny DAG ``name`` (bert or gpt2), data in
    ``folder``."""
    with open(common.DEMO_CORPUS, encoding="utf-8") as f:
        documents = f.read().split("\n\n")[:150]
    corpus = os.path.join(folder, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("\n\n".join(documents) + "\n")
    if name == "bert":
        train = _head(os.path.join(SST2, "train.tsv"), os.path.join(folder, "train.tsv"), 301)
        dev = _head(os.path.join(SST2, "dev.tsv"), os.path.join(folder, "dev.tsv"), 61)
        return "bert_tiny_sst2", TINY_TRAINING + [
            f"data.corpus.path={corpus}", f"data.task.splits.train={train}",
            f"data.task.splits.eval={dev}", "tokenizer.vocab_size=600",
            "finetuning.sequence_length=32", "evaluation.threshold=0.0"]
    target = os.path.join(folder, "shakespeare.txt")
    with open(SHAKESPEARE, encoding="utf-8") as f:
        text = f.read()[:30_000]
    with open(target, "w", encoding="utf-8") as f:
        f.write(text)
    return "gpt2_tiny_shakespeare", TINY_TRAINING + [
        f"data.corpus.path={corpus}", f"data.target_corpus.path={target}",
        "tokenizer.vocab_size=400", "evaluation.threshold=1000000.0",
        "evaluation.max_batches=4", "serving.generation.max_length=24"]


DRIVER = r"""
import json, sys, time
started = time.time()
from lmfactory.pipelines import runners
from lmfactory.recipe import load_recipe
imported = time.time()
summary = runners.run_local(load_recipe(sys.argv[1], json.loads(sys.argv[2])), sys.argv[3])
print(json.dumps({"started": started, "imported": imported, "finished": time.time(),
                  "metadata": summary.get("metadata_path"),
                  "pipeline_root": summary["pipeline_root"],
                  "blessed": summary["evaluation"]["blessed"],
                  "pushed_model": summary.get("pushed_model")}))
"""


def component_seconds(metadata_path: str) -> list:
    """``[(component, seconds)]`` of a local run's executions, in the order they ran: each
    execution's creation to its last update in MLMD (milliseconds in the store)."""
    connection = sqlite3.connect(metadata_path)
    try:
        rows = connection.execute(
            "SELECT c.name, e.create_time_since_epoch, e.last_update_time_since_epoch "
            "FROM Execution e JOIN Association a ON a.execution_id = e.id "
            "JOIN Context c ON c.id = a.context_id JOIN Type t ON t.id = c.type_id "
            "WHERE t.name = 'node' ORDER BY e.create_time_since_epoch").fetchall()
    finally:
        connection.close()
    return [(name.split(".")[-1], (end - start) / 1000.0) for name, start, end in rows]


def run_dag(name: str) -> dict:
    """Runs the tiny DAG ``name`` in a fresh interpreter; its wall time and breakdown."""
    with tempfile.TemporaryDirectory(prefix=f"fixed_cost_{name}_") as folder:
        recipe, overrides = dag_settings(name, folder)
        launched = time.time()
        done = subprocess.run([sys.executable, "-c", DRIVER, recipe, json.dumps(overrides),
                               os.path.join(folder, "runs")], capture_output=True, text=True,
                              check=False, cwd=common.REPO)
        wall = time.time() - launched
        if done.returncode != 0:
            raise RuntimeError(f"The {name} DAG failed: {done.stderr[-3000:]}")
        outcome = json.loads(done.stdout.strip().splitlines()[-1])
        metadata = outcome["metadata"] or os.path.join(
            os.path.dirname(outcome["pipeline_root"]), "metadata.sqlite")
        components = component_seconds(metadata)
    imports = outcome["imported"] - launched
    return {"dag": name, "recipe": recipe, "wall_seconds": wall, "imports_seconds": imports,
            "components": components, "blessed": outcome["blessed"],
            "orchestration_seconds": wall - imports - sum(s for _, s in components)}


def run(scales=(1,), out_dir: str = "benchmarks/out/fixed_cost", quick: bool = False,
        dags=("bert", "gpt2")) -> common.Result:
    del scales, quick  # one size: the tests' tiny DAGs
    results = [run_dag(name) for name in dags]
    tables = []
    for result in results:
        rows = [["imports (interpreter start, runner modules)", result["imports_seconds"]]]
        rows += [[component, seconds] for component, seconds in result["components"]]
        rows += [["orchestration (LocalDagRunner between components)",
                  result["orchestration_seconds"]],
                 ["**wall**", result["wall_seconds"]]]
        tables.append(common.Table(
            f"Tiny {result['dag']} DAG ({result['recipe']}): seconds by stage",
            ["stage", "seconds"], rows, digits=3))
    findings = [f"{r['dag']}: {r['wall_seconds']:.1f} s wall, imports included" for r in results]
    return common.Result(name="fixed_cost", tables=tables, findings=findings,
                         figures={"dags": results})


def main() -> None:
    parser = common.argument_parser(__doc__)
    parser.add_argument("--only", default="bert,gpt2", help="the DAGs: bert, gpt2")
    args = parser.parse_args()
    result = run(out_dir=args.out_dir, dags=tuple(args.only.split(",")))
    common.print_and_save(result, args.out_dir, "fixed_cost.json")


if __name__ == "__main__":
    main()
