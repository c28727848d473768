"""``lmfactory`` command line: list, run, compile, few-shot.

    lmfactory list                       architectures and recipes, one name per line
    lmfactory run RECIPE [--runner local|vertex] [--set field.path=value ...]
    lmfactory compile RECIPE --pipeline-root gs://... --image IMAGE [--stage-data] [--output F]
    lmfactory few-shot --model MODEL --task sst2|commonsenseqa [--k 0,1,4,8] [--max-examples N]
                       [--scoring mean|sum|unconditional] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time


class _ProgressFilter(logging.Filter):
    """Keeps what a user follows a run by: components starting and finishing, this package's
    own summaries, and every error."""

    PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True
        if (record.pathname.startswith(self.PACKAGE_DIR + os.sep)
                and "site-packages" not in record.pathname):
            return record.levelno >= logging.INFO
        message = record.getMessage()
        return message.startswith("Component ") and message.endswith(
            ("is running.", "is finished."))


def _configure_logging(verbose: bool) -> None:
    if not verbose:
        # Inherited by Beam's worker processes too.
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        os.environ.setdefault("PYTHONWARNINGS", "ignore")
        import warnings

        warnings.simplefilter("ignore")
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    if not verbose:
        handler.addFilter(_ProgressFilter())
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    from absl import logging as absl_logging

    absl_logging.set_verbosity(absl_logging.INFO)
    absl_logging.use_python_logging(quiet=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lmfactory", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="print architectures and recipes, one name per line")
    for name in ("run", "compile", "validate"):
        command = commands.add_parser(name)
        command.add_argument("recipe", help="a registered recipe name or a YAML file")
        command.add_argument("--set", dest="overrides", action="append", default=[],
                             metavar="FIELD=VALUE", help="override a recipe field")
        command.add_argument("-v", "--verbose", action="store_true")
        if name == "run":
            command.add_argument("--runner", choices=("local", "vertex"), default="local")
            command.add_argument("--output-dir", default="runs",
                                 help="local runs: pipeline root, MLMD and serving dir")
            command.add_argument("--no-cache", action="store_true")
        if name in ("run", "compile"):
            command.add_argument("--pipeline-root", help="vertex: gs:// pipeline root")
            command.add_argument("--output", help="vertex: pipeline JSON path")
            command.add_argument("--image", help="vertex: container image with lmfactory "
                                                 "(built from the Dockerfile; required)")
            command.add_argument("--stage-data", action="store_true",
                                 help="vertex: copy local data files to the pipeline root "
                                      "instead of refusing them")
            command.add_argument("--project", help="vertex: GCP project")
            command.add_argument("--region", default="us-central1", help="vertex: region")
    _add_few_shot_parser(commands)
    return parser


def _add_few_shot_parser(commands) -> None:
    command = commands.add_parser(
        "few-shot", help="in-context accuracy of a trained causal LM vs the number of "
                         "demonstrations k (Brown et al. 2020)")
    command.add_argument("--model", required=True,
                         help="a Model artifact folder, a run folder (runs/<recipe>) or a "
                              "pushed model of a local run")
    command.add_argument("--task", required=True, choices=("sst2", "commonsenseqa"))
    command.add_argument("--k", default="0,1,4,8",
                         help="numbers of demonstrations, comma-separated (default 0,1,4,8)")
    command.add_argument("--max-examples", type=int, default=None,
                         help="evaluate this many dev examples, drawn with --seed (default all)")
    command.add_argument("--scoring", choices=("mean", "sum", "unconditional"), default="mean")
    command.add_argument("--seed", type=int, default=0)
    command.add_argument("--markdown", help="also write the table to this Markdown file")
    command.add_argument("--json", help="also write the result to this JSON file")
    command.add_argument("--data-dir", help="the folder holding glue/ and commonsenseqa/ "
                                            "(default ../shared/data beside the package)")
    command.add_argument("--context-length", type=int, default=None,
                         help="prompt + completion budget in tokens (default: the sequence "
                              "length the model was trained on, else its positions)")
    command.add_argument("--batch-size", type=int, default=16)
    command.add_argument("--skip-malformed", action="store_true",
                         help="skip and count malformed data lines instead of stopping")
    command.add_argument("-v", "--verbose", action="store_true")


def _parse_ks(text: str) -> list[int]:
    try:
        ks = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        ks = []
    if not ks or min(ks) < 0:
        raise SystemExit(f"lmfactory: --k must be comma-separated numbers >= 0, got {text!r}")
    return ks


def _few_shot(args) -> int:
    import json

    from lmfactory.components.evaluator import few_shot

    ks = _parse_ks(args.k)
    if args.max_examples is not None and args.max_examples < 1:
        raise SystemExit(f"lmfactory: --max-examples must be >= 1, got {args.max_examples}")
    try:
        loaded = few_shot.load_causal_lm(args.model)
    except (FileNotFoundError, ValueError) as error:
        print(f"lmfactory: {error}", file=sys.stderr)
        return 2
    positions = few_shot.model_context_length(loaded.task_model)
    known = [n for n in (loaded.trained_length, positions) if n]
    context_length = args.context_length or (min(known) if known else None)
    print(f"Few-shot {args.task} with {loaded.model_config['architecture']} from "
          f"{loaded.artifact} (context {context_length} tokens)", flush=True)
    try:
        result = few_shot.evaluate_few_shot(
            loaded.task_model, loaded.tokenizer, args.task, ks=ks,
            max_examples=args.max_examples, scoring=args.scoring, seed=args.seed,
            data_dir=args.data_dir, skip_malformed=args.skip_malformed,
            context_length=context_length, start_token_id=loaded.start_token_id,
            batch_size=args.batch_size, model_name=loaded.artifact)
    except (FileNotFoundError, ValueError) as error:
        print(f"lmfactory: {error}", file=sys.stderr)
        return 2
    table = few_shot.format_markdown(result)
    print(table, end="")
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(table)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result.to_dict(), f, indent=2)
    return 0


def _list() -> int:
    from lmfactory import models
    from lmfactory.recipe import recipe_names

    for name in [*models.names(), *recipe_names()]:
        print(name)
    return 0


def _compile(args, recipe) -> str:
    from lmfactory.pipelines import runners

    if not args.pipeline_root:
        raise SystemExit("lmfactory: --pipeline-root (gs://bucket/path) is required for Vertex")
    if not args.image:
        raise SystemExit("lmfactory: --image is required for Vertex: an image with lmfactory "
                         "installed, built from the Dockerfile (README, 'Vertex AI / Kubeflow')")
    output = args.output or f"{recipe['name']}_pipeline.json"
    runners.compile_vertex(recipe, output, args.pipeline_root, image=args.image,
                           local_data="stage" if args.stage_data else "refuse",
                           project=args.project, region=args.region)
    print(f"Pipeline spec: {os.path.abspath(output)}")
    return output


# What bad or missing data raises in a stage (a file that is missing, empty, a directory,
# of the wrong shape or encoding): reported in one line like a recipe error; -v re-raises.
DATA_ERRORS = (OSError, ValueError)


def _one_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def _run_local(args, recipe) -> int:
    from lmfactory.pipelines import runners

    started = time.time()
    print(f"Running recipe {recipe['name']} ({recipe['architecture']}/{recipe['preset']}) "
          f"locally; outputs under {os.path.abspath(args.output_dir)}", flush=True)
    try:
        summary = runners.run_local(recipe, args.output_dir, enable_cache=not args.no_cache)
    except DATA_ERRORS as error:
        if args.verbose:
            raise
        print(f"lmfactory: {_one_line(error)} (-v shows the traceback)", file=sys.stderr)
        return 2
    minutes = (time.time() - started) / 60
    outcome = summary["evaluation"]
    print(f"\n== Finished in {minutes:.1f} min")
    if outcome:
        for name, value in outcome["metrics"].items():
            print(f"{name}: {value:.4f}" if isinstance(value, float) else f"{name}: {value}")
        print(f"blessed: {outcome['blessed']} ({outcome['reason']})")
    print(f"pushed model: {summary['pushed_model'] or 'none (not blessed)'}")
    return 0 if summary["pushed_model"] else 1


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "list":
        return _list()
    _configure_logging(args.verbose)
    if args.command == "few-shot":
        return _few_shot(args)
    from lmfactory.recipe import RecipeError, load_recipe

    try:
        recipe = load_recipe(args.recipe, args.overrides)
    except (RecipeError, FileNotFoundError) as error:
        print(f"lmfactory: {error}", file=sys.stderr)
        return 2
    if args.command == "validate":
        print(f"recipe {recipe['name']} is valid")
        return 0
    if args.command == "compile" or args.runner == "vertex":
        try:
            output = _compile(args, recipe)
        except RecipeError as error:  # e.g. gs:// data without credentials
            print(f"lmfactory: {error}", file=sys.stderr)
            return 2
        if args.command == "run":
            from lmfactory.pipelines import runners

            if not args.project:
                raise SystemExit("lmfactory: --project is required to submit to Vertex AI")
            runners.submit_vertex(output, args.project, args.region, args.pipeline_root)
        return 0
    return _run_local(args, recipe)


if __name__ == "__main__":
    sys.exit(main())
