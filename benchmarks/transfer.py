"""What pre-training buys, measured through the pipeline: transfer curves over label budgets.

For each recipe, each label budget and each seed, one local DAG run with
``evaluation.control: from_scratch`` and ``data.task.train_examples: N``: the FineTuner
fine-tunes the pretrained backbone and the Control stage fine-tunes a freshly initialised
one of the same configuration, with the same task model, data sample, steps, schedule and
seed; the Evaluator scores both on the whole eval split with the same code. The figure is
the evaluation's ``transfer_gain`` (pretrained minus control) of the recipe's metric, as
ULMFiT's Figure 3 and BERT's §5 plot it against the number of labelled examples.

Runs of one recipe and seed share an output folder, so the label budgets reuse its cached
pretraining (TFX's cache: ingestion, vocabulary, examples and Pretrainer are the same
executions); another seed pretrains again (``runtime.seed`` seeds every training stage).

    python benchmarks/transfer.py --recipes bert_tiny_sst2 --budgets 250,1000,4000 \\
        --seeds 0,1,2 --set finetuning.steps=320 --markdown transfer.md --plot transfer.png

``--budgets`` takes ``all`` for the whole train split. Nothing here asserts an effect: the
tables report each run, and per budget the mean gain, its standard deviation over the seeds
and how many seeds gained.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from common import REPO, Result, Table, line_plot  # noqa: E402

ALL = "all"


def budget_overrides(budget) -> list:
    return [] if budget == ALL else [f"data.task.train_examples={int(budget)}"]


def run_one(recipe_name: str, budget, seed: int, overrides: list, out_dir: str) -> dict:
    """One DAG run with its control; the figures of the recipe's metric."""
    from lmfactory.pipelines import runners
    from lmfactory.recipe import load_recipe

    recipe = load_recipe(recipe_name, [
        "evaluation.control=from_scratch", "evaluation.threshold=0.0",
        f"runtime.seed={seed}", *budget_overrides(budget), *overrides])
    started = time.time()
    summary = runners.run_local(recipe, os.path.join(out_dir, recipe_name, f"seed{seed}"))
    outcome = summary["evaluation"]
    metric = recipe["evaluation"]["metric"]
    if not outcome.get("control_metrics"):
        raise RuntimeError(f"{recipe_name}: the evaluation has no control metrics "
                           f"({outcome.get('transfer_reason')})")
    return {"recipe": recipe_name, "budget": budget, "seed": seed, "metric": metric,
            "pretrained": float(outcome["metrics"][metric]),
            "control": float(outcome["control_metrics"][metric]),
            "gain": float(outcome["transfer_gain"][metric]),
            "examples": int(outcome["metrics"].get("examples", 0)),
            "minutes": (time.time() - started) / 60}


def _mean_sd(values: list) -> tuple:
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, float("nan")
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def summarize(runs: list) -> list:
    """Per recipe and budget: mean of both models, mean gain, its s.d. over the seeds and
    the seeds that gained."""
    rows = []
    for recipe_name, budget in dict.fromkeys((r["recipe"], r["budget"]) for r in runs):
        group = [r for r in runs if r["recipe"] == recipe_name and r["budget"] == budget]
        gain, sd = _mean_sd([r["gain"] for r in group])
        rows.append([recipe_name, str(budget), group[0]["metric"], len(group),
                     _mean_sd([r["pretrained"] for r in group])[0],
                     _mean_sd([r["control"] for r in group])[0], gain, sd,
                     f"{sum(r['gain'] > 0 for r in group)}/{len(group)}"])
    return rows


def plot(runs: list, path: str) -> str:
    series = {}
    for recipe_name in dict.fromkeys(r["recipe"] for r in runs):
        budgets = [b for b in dict.fromkeys(r["budget"] for r in runs
                                            if r["recipe"] == recipe_name) if b != ALL]
        for side, label in (("pretrained", "pre-trained"), ("control", "from scratch")):
            means = [_mean_sd([r[side] for r in runs if r["recipe"] == recipe_name
                               and r["budget"] == b])[0] for b in budgets]
            series[f"{recipe_name} {label}"] = ([int(b) for b in budgets], means)
    metric = runs[0]["metric"]
    return line_plot(path, "Pre-trained vs from scratch, by label budget",
                     "labelled train examples", metric, series, log_x=True)


def run(recipes: list, budgets: list, seeds: list, overrides: list, out_dir: str,
        plot_path: str | None = None) -> Result:
    os.chdir(REPO)  # the recipes' data paths are relative to the checkout
    started, runs = time.time(), []
    for recipe_name in recipes:
        for seed in seeds:
            for budget in budgets:
                runs.append(run_one(recipe_name, budget, seed, overrides, out_dir))
                print(json.dumps(runs[-1]), flush=True)
    command = (f"`python benchmarks/transfer.py --recipes {','.join(recipes)} --budgets "
               f"{','.join(map(str, budgets))} --seeds {','.join(map(str, seeds))}"
               + "".join(f" --set {o}" for o in overrides) + "`")
    tables = [
        Table("Transfer gain by label budget",
              ["recipe", "train examples", "metric", "seeds", "pretrained", "from scratch",
               "mean gain", "s.d.", "seeds gained"], summarize(runs),
              note=f"{command}. Same task model, sample, steps, schedule and seed both ways "
                   f"(the DAG's Control stage); scored on the whole eval split."),
        Table("Every run", ["recipe", "train examples", "seed", "pretrained", "from scratch",
                            "gain", "minutes"],
              [[r["recipe"], str(r["budget"]), r["seed"], r["pretrained"], r["control"],
                r["gain"], r["minutes"]] for r in runs])]
    plots = [plot(runs, plot_path)] if plot_path and any(r["budget"] != ALL for r in runs) \
        else []
    return Result("Transfer: pre-trained vs from scratch", tables, plots=plots,
                  figures={"runs": runs}, seconds=time.time() - started)


def _budget(value: str):
    if value == ALL:
        return ALL
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"a label budget is a positive integer or 'all', "
                                         f"got {value!r}")
    return number


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", default="bert_tiny_sst2")
    parser.add_argument("--budgets", default="250,1000,4000")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--set", action="append", default=[], dest="overrides",
                        help="a recipe override for every run (repeatable)")
    parser.add_argument("--out-dir", default="/tmp/transfer_runs")
    parser.add_argument("--markdown", default=None)
    parser.add_argument("--plot", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    result = run([r for r in args.recipes.split(",") if r],
                 [_budget(b) for b in args.budgets.split(",") if b],
                 [int(s) for s in args.seeds.split(",") if s], args.overrides, args.out_dir,
                 args.plot)
    print(result.markdown())
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(result.markdown())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result.figures, f, indent=2)


if __name__ == "__main__":
    main()
