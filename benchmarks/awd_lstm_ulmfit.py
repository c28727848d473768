"""AWD-LSTM and ULMFiT figures: held-out WikiText-2 perplexity of a small AWD-LSTM trained
for a few minutes, and SST-2 dev accuracy of the ULMFiT classifier built on it.

One run of the ``ulmfit_sst2`` recipe through the local DAG (fewer steps than the recipe,
so the whole run stays near 10 minutes on the 2-core CPU): the small AWD-LSTM (3 layers,
256 units, embedding 128) is pretrained as a word-level LM on WikiText-2 (valid.txt, 10% of
its paragraphs held out by hash), fine-tuned as an LM on the SST-2 training sentences, then
fine-tuned as a classifier with ULMFiT's schedule and scored on the 872 SST-2 dev sentences
through the pushed SavedModel. The held-out perplexity is that of the Pretrainer's model on
the held-out WikiText paragraphs (the whole eval split), per word of the
pipeline's word vocabulary (words outside it are one <unk>), with the LSTM state carried
over the held-out streams (objective ``causal_lm_bptt``, as in training).

    python benchmarks/awd_lstm_ulmfit.py [--pretraining-steps 500] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import glob
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from common import REPO, Table  # noqa: E402


def _newest(pattern: str) -> str:
    paths = sorted(glob.glob(pattern), key=lambda path: int(path.rstrip("/").split("/")[-1]))
    if not paths:
        raise FileNotFoundError(pattern)
    return paths[-1]


def held_out_perplexity(pipeline_root: str) -> dict:
    """Perplexity of the Pretrainer's LM on the eval split of its pretraining examples."""
    from lmfactory.components.tasks.language_model import evaluate_language_model

    model = _newest(os.path.join(pipeline_root, "Pretrainer", "model", "*"))
    examples = _newest(os.path.join(pipeline_root, "PretrainingExampleGen",
                                    "pretraining_examples", "*"))
    return evaluate_language_model(model, os.path.join(examples, "Split-eval", "*"),
                                   batch_size=32)


def run(pretraining_steps: int, lm_steps: int, classifier_steps: int, out_dir: str,
        classifier_learning_rate: float, cache: bool) -> Table:
    from lmfactory.pipelines import runners
    from lmfactory.recipe import load_recipe

    os.chdir(REPO)  # the recipe's data paths are relative to the checkout
    recipe = load_recipe("ulmfit_sst2", [
        f"pretraining.steps={pretraining_steps}", f"lm_finetuning.steps={lm_steps}",
        f"finetuning.steps={classifier_steps}", "runtime.steps_per_checkpoint=1000",
        f"finetuning.learning_rate={classifier_learning_rate}"])
    start = time.time()
    summary = runners.run_local(recipe, out_dir, enable_cache=cache)
    wall = (time.time() - start) / 60
    language_model = held_out_perplexity(summary["pipeline_root"])
    accuracy = summary["evaluation"]["metrics"]["accuracy"]
    return Table(
        "AWD-LSTM (small) and ULMFiT on the 2-core CPU",
        ["figure", "value", "over", "steps"],
        [["WikiText-2 held-out perplexity (word vocabulary)", language_model["perplexity"],
          f"{language_model['tokens']:,} tokens", pretraining_steps],
         ["SST-2 dev accuracy (ULMFiT classifier)", accuracy,
          f"{summary['evaluation']['metrics']['examples']} sentences",
          f"LM fine-tuning {lm_steps} + classifier {classifier_steps} "
          f"(lr {classifier_learning_rate})"]],
        note=f"`python benchmarks/awd_lstm_ulmfit.py --pretraining-steps {pretraining_steps} "
             f"--lm-steps {lm_steps} --classifier-steps {classifier_steps} "
             f"--classifier-learning-rate {classifier_learning_rate}"
             f"{' --cache' if cache else ''}`: {wall:.1f} min for the DAG"
             f"{' (stages cached by an earlier run in the same folder are reused)' if cache else ''}"
             f" (batch 32: 32 parallel streams read in windows of ~N(70, 5) words, the "
             f"LSTM state carried across them, objective causal_lm_bptt).")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pretraining-steps", type=int, default=500)
    parser.add_argument("--lm-steps", type=int, default=100)
    parser.add_argument("--classifier-steps", type=int, default=300)
    parser.add_argument("--classifier-learning-rate", type=float, default=0.01)
    parser.add_argument("--cache", action="store_true",
                        help="reuse the stages an earlier run in --out-dir cached")
    parser.add_argument("--out-dir", default="/tmp/awd_lstm_ulmfit_runs")
    parser.add_argument("--markdown", default=None)
    args = parser.parse_args(argv)
    table = run(args.pretraining_steps, args.lm_steps, args.classifier_steps, args.out_dir,
                args.classifier_learning_rate, args.cache)
    print(table.markdown())
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(table.markdown())


if __name__ == "__main__":
    main()
