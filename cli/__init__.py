"""``lmfactory`` command line.

    lmfactory list                       architectures and recipes, one name per line
    lmfactory validate RECIPE [--set field.path=value ...] [--print]
                                         check a recipe, run nothing; --print: the
                                         resolved recipe (every default filled in), YAML
    lmfactory run RECIPE [--runner local|vertex] [--set field.path=value ...]
    lmfactory compile RECIPE --pipeline-root gs://... --image IMAGE [--stage-data] [--output F]
    lmfactory predict MODEL [TEXT ...] [--file FILE|-] [--set input=value]   JSON lines out
    lmfactory evaluate MODEL --data FILE [--format tsv] [--option key=value]
    lmfactory few-shot --model MODEL --task sst2|commonsenseqa [--k 0,1,4,8] [--max-examples N]
                       [--scoring mean|sum|unconditional] [--markdown out.md]

MODEL: a pushed SavedModel, a serving folder of versions (the newest is used), a Model
artifact or a run folder (runs/<recipe>). -v (every command but list) shows TensorFlow's
and the Google libraries' own log lines and warnings, hidden by default.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time


class _ProgressFilter(logging.Filter):
    """Keeps what a user follows a run by: components starting and finishing, this package's
    own summaries, and every error."""

    PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True
        if (record.pathname.startswith(self.PACKAGE_DIR + os.sep)
                and "site-packages" not in record.pathname):
            return record.levelno >= logging.INFO
        message = record.getMessage()
        return message.startswith("Component ") and message.endswith(
            ("is running.", "is finished."))


# Start-up noise of TensorFlow's C++ core, gRPC and glog (the oneDNN / CUDA / cuDNN / cuBLAS
# registration and TF-TRT lines), hidden unless -v. Environment variables, so Beam's worker
# processes inherit them too; they only work when set before TensorFlow is imported, which
# `main` does first. XLA's absl C++ log lines ignore them: cli/quiet.py hides those.
QUIET_ENVIRONMENT = {"TF_CPP_MIN_LOG_LEVEL": "3", "GRPC_VERBOSITY": "ERROR",
                     "GLOG_minloglevel": "2", "PYTHONWARNINGS": "ignore"}


def _configure_logging(verbose: bool) -> None:
    """Default: TensorFlow's, absl's and the Google client libraries' start-up lines and
    warnings (e.g. google.api_core's Python-version FutureWarnings) hidden, this package's
    progress shown; -v: everything."""
    if not verbose:
        for name, value in QUIET_ENVIRONMENT.items():
            os.environ.setdefault(name, value)
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
    helps = {"validate": "check every field of a recipe; runs nothing",
             "run": "run a recipe's pipeline (locally, or submit it to Vertex AI)",
             "compile": "write a recipe's Vertex AI / Kubeflow pipeline JSON"}
    for name in ("validate", "run", "compile"):
        command = commands.add_parser(name, help=helps[name])
        command.add_argument("recipe", help="a registered recipe name or a YAML file")
        command.add_argument("--set", dest="overrides", action="append", default=[],
                             metavar="FIELD=VALUE", help="override a recipe field")
        command.add_argument("-v", "--verbose", action="store_true")
        if name == "validate":
            command.add_argument("--print", dest="print_recipe", action="store_true",
                                 help="print the resolved recipe (every default filled in) "
                                      "as YAML")
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
    _add_predict_parser(commands)
    _add_evaluate_parser(commands)
    _add_few_shot_parser(commands)
    return parser


MODEL_HELP = ("a pushed SavedModel, a serving folder of versions (the newest is used), a Model "
              "artifact or a run folder (runs/<recipe>)")


def _add_predict_parser(commands) -> None:
    command = commands.add_parser(
        "predict", help="call a model's serving signature on text; one JSON line per input",
        description="Each TEXT (or line of --file / stdin) is one example: plain text for a "
                    "model with one text input, tab-separated fields (in --fields order, "
                    "default the input names sorted; surplus fields go to the last input as "
                    "a list) or a JSON object of input name -> value.")
    command.add_argument("model", help=MODEL_HELP)
    command.add_argument("texts", nargs="*", metavar="TEXT", help="inputs (default: stdin)")
    command.add_argument("--file", help="one input per line ('-': stdin)")
    command.add_argument("--set", dest="settings", action="append", default=[],
                         metavar="INPUT=VALUE",
                         help="a non-text input for every example (e.g. max_length=40, "
                              "sampler=top_k for a generator's serving_default)")
    command.add_argument("--signature", help="signature to call (default serving_default, or "
                                             "the one the inputs fill)")
    command.add_argument("--fields", help="comma-separated input names of the tab-separated "
                                          "fields, e.g. question,context")
    command.add_argument("--batch-size", type=int, default=32)
    command.add_argument("--trust-model", action="store_true",
                         help="load the model even when its served graph runs ops that reach "
                              "outside the process (files, event writers, RPC); refused "
                              "otherwise, naming the ops")
    command.add_argument("-v", "--verbose", action="store_true")


def _add_evaluate_parser(commands) -> None:
    command = commands.add_parser(
        "evaluate", help="a model's official metrics on a new held-out file (perplexity, "
                         "accuracy / F1, entity F1, EM / F1, ...)")
    command.add_argument("model", help=MODEL_HELP)
    command.add_argument("--data", required=True, help="the held-out file")
    command.add_argument("--format", help="its format (default: the task's; text for an LM)")
    command.add_argument("--option", dest="options", action="append", default=[],
                         metavar="KEY=VALUE",
                         help="an ingestion input_config key, e.g. label_column=score, "
                              "has_header=false, column_names=[label,sentence]")
    command.add_argument("--batch-size", type=int, default=64)
    command.add_argument("--max-batches", type=int, default=None,
                         help="score at most this many batches (language models)")
    command.add_argument("--json", help="also write the result to this JSON file")
    command.add_argument("--trust-model", action="store_true",
                         help="load the model even when its served graph runs ops that reach "
                              "outside the process (files, event writers, RPC); refused "
                              "otherwise, naming the ops")
    command.add_argument("-v", "--verbose", action="store_true")


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
                                            "(e.g. ../shared/data)")
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
    from lmfactory.components.evaluator import few_shot

    ks = _parse_ks(args.k)
    if args.max_examples is not None and args.max_examples < 1:
        raise SystemExit(f"lmfactory: --max-examples must be >= 1, got {args.max_examples}")
    problem = _unwritable(args.markdown, "--markdown") or _unwritable(args.json, "--json")
    if problem:
        print(f"lmfactory: {problem}", file=sys.stderr)
        return 2
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
    problem = (_write_output(args.markdown, table, "--markdown")
               or _write_output(args.json, json.dumps(result.to_dict(), indent=2), "--json"))
    if problem:
        print(f"lmfactory: {problem}", file=sys.stderr)
        return 2
    return 0


def _write_output(path: str | None, text: str, option: str) -> str | None:
    """Writes ``text`` to ``path`` (an output file option) whole or not at all: a temporary
    file beside it, renamed over it once written. Returns why it failed (a full disk named
    as such) in one line, None when written or not asked for; a failed write leaves no file
    behind and an existing one as it was."""
    if not path:
        return None
    folder = os.path.dirname(os.path.abspath(path))
    staging = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.incomplete")
    try:
        with open(staging, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(staging, path)
    except OSError as error:
        if os.path.exists(staging):
            os.remove(staging)
        return f"{option} {path}: {disk_full(error) or error.strerror or error}"
    return None


def _unwritable(path: str | None, option: str) -> str | None:
    """Why ``path`` (an output file option) cannot be written, checked before any work;
    None when it can (or is not given)."""
    if not path:
        return None
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"{option} {path}: the folder {folder} does not exist"
    if os.path.isdir(path):
        return f"{option} {path}: is a folder"
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        return f"{option} {path}: not writable"
    return None


def _loadable_signatures(model: str, trusted: bool = False):
    """``(SavedModel folder, its signatures)`` of MODEL: for a serving folder, its newest
    version that loads (a broken newer one is named on stderr and passed over, as a model
    server keeps serving the version it has). Unless ``trusted``, a model whose served graph
    reaches outside the process is refused before it is loaded (model_guard.py)."""
    from lmfactory.cli.model_paths import saved_model_dirs
    from lmfactory.cli.predict import PredictError, load_signatures

    candidates = saved_model_dirs(model)
    for index, model_dir in enumerate(candidates):
        try:
            if not trusted:
                _check_trusted(model_dir, PredictError)
            return model_dir, load_signatures(model_dir)
        except PredictError as error:
            if index == len(candidates) - 1:
                raise
            print(f"lmfactory: {error}; trying the version before it, "
                  f"{candidates[index + 1]}", file=sys.stderr)
    raise AssertionError("saved_model_dirs gives at least one folder")


def _check_trusted(model_dir: str, error_class) -> None:
    """``error_class`` (one line, naming the ops) when the SavedModel's served graph runs
    ops that reach outside the process; ``--trust-model`` skips this check."""
    from lmfactory.components.pusher import model_guard

    try:
        found = model_guard.outside_ops(model_dir)
    except Exception:  # noqa: BLE001  (a graph that does not parse: loading says why)
        return
    if found:
        raise error_class(f"refusing {model_dir}: its served graph runs "
                          f"{model_guard.describe(found)}; give --trust-model to load it "
                          f"anyway")


def _predict(args) -> int:
    from lmfactory.cli.model_paths import ModelPathError
    from lmfactory.cli.predict import PredictError, predict, read_inputs

    fields = [f.strip() for f in args.fields.split(",") if f.strip()] if args.fields else None
    try:
        if args.batch_size < 1:
            raise PredictError(f"--batch-size must be >= 1, got {args.batch_size}")
        lines, blank = read_inputs(args.texts, args.file)
        if blank:
            print(f"lmfactory: skipped {blank} blank input line(s)", file=sys.stderr)
        model_dir, signatures = _loadable_signatures(args.model, args.trust_model)
        predict(model_dir, lines, signature=args.signature, settings=args.settings,
                fields=fields, batch_size=args.batch_size, signatures=signatures)
        sys.stdout.flush()  # a failing write surfaces here, not at the interpreter's exit
    except (PredictError, ModelPathError) as error:
        print(f"lmfactory: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader stopped early (`| head`): nothing more to say
        # What is still buffered would fail again when Python flushes it at exit; a stdout
        # without a file descriptor (OSError, ValueError) has nothing to redirect.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as error:  # writing the answers: a full disk, a closed stdout
        print(f"lmfactory: writing the predictions: {disk_full(error) or _one_line(error)}",
              file=sys.stderr)
        return 2
    return 0


def _evaluate(args) -> int:
    from lmfactory.cli.evaluate import EvaluateError, evaluate, format_result, parse_options
    from lmfactory.cli.model_paths import ModelPathError

    problem = _unwritable(args.json, "--json")
    if problem:
        print(f"lmfactory: {problem}", file=sys.stderr)
        return 2
    try:
        result = evaluate(args.model, args.data, file_format=args.format,
                          options=parse_options(args.options), batch_size=args.batch_size,
                          max_batches=args.max_batches,
                          check_model=None if args.trust_model else
                          lambda served: _check_trusted(served, EvaluateError))
    except (EvaluateError, ModelPathError) as error:
        print(f"lmfactory: {error}", file=sys.stderr)
        return 2
    except DATA_ERRORS as error:
        if args.verbose:
            raise
        print(f"lmfactory: {_one_line(error)} (-v shows the traceback)", file=sys.stderr)
        return 2
    print(format_result(result), end="")
    problem = _write_output(args.json, json.dumps(result, indent=2, sort_keys=True,
                                                  default=str), "--json")
    if problem:
        print(f"lmfactory: {problem}", file=sys.stderr)
        return 2
    return 0


def _list() -> int:
    """Architectures, then recipes, read from the source tree (cli/names.py): no
    TensorFlow import, so it answers at once and prints nothing else."""
    from lmfactory.cli.names import architecture_names, recipe_names

    for name in [*architecture_names(), *recipe_names()]:
        print(name)
    return 0


def _compile(args, recipe) -> str:
    from lmfactory.pipelines import runners

    if not args.pipeline_root:
        raise SystemExit("lmfactory: --pipeline-root (gs://bucket/path) is required for Vertex")
    if not args.image:
        raise SystemExit("lmfactory: --image is required for Vertex: an image with lmfactory "
                         "installed, built from the Dockerfile (docs/vertex.md)")
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


DISK_FULL = "No space left on device"


def disk_full(error: BaseException) -> str | None:
    """The one-line message of a full disk anywhere in ``error``'s chain (an OSError with
    ENOSPC, or TensorFlow's and Beam's errors, which carry the OS message), else None."""
    import errno

    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            where = f" writing {error.filename}" if error.filename else ""
            return f"the disk is full{where} ({DISK_FULL})"
        text = str(error)
        if DISK_FULL in text:
            line = next(line.strip() for line in text.splitlines() if DISK_FULL in line)
            return f"the disk is full: {line[:300]}"
        error = error.__cause__ or error.__context__
    return None


def _run_local(args, recipe) -> int:
    from lmfactory.pipelines import runners

    started = time.time()
    from lmfactory.cli.describe import describe_model

    print(f"Running recipe {recipe['name']} ({describe_model(recipe)}) "
          f"locally; outputs under {os.path.abspath(args.output_dir)}", flush=True)
    try:
        summary = runners.run_local(recipe, args.output_dir, enable_cache=not args.no_cache)
    except DATA_ERRORS as error:
        if args.verbose:
            raise
        message = disk_full(error) or _one_line(error)
        print(f"lmfactory: {message} (-v shows the traceback)", file=sys.stderr)
        return 2
    except Exception as error:  # noqa: BLE001  (only a full disk is reported in one line)
        message = disk_full(error)
        if message is None or args.verbose:
            raise
        print(f"lmfactory: {message}; the run's finished artifacts are kept (-v shows the "
              f"traceback)", file=sys.stderr)
        return 2
    minutes = (time.time() - started) / 60
    outcome = summary["evaluation"]
    print(f"\n== Finished in {minutes:.1f} min")
    if outcome:
        for name, value in outcome["metrics"].items():
            if isinstance(value, dict) and "matrix" in value:
                continue  # a confusion matrix: drawn in the evaluation report
            shown = (f"{value:.4f}" if isinstance(value, float) else
                     json.dumps(value) if isinstance(value, (dict, list)) else f"{value}")
            meaning = (outcome.get("meanings") or {}).get(name)
            print(f"{name}: {shown}" + (f"  - {meaning}" if meaning else ""))
        for note in outcome.get("notes") or []:
            print(f"note: {note}")
        if outcome.get("control_metrics") is not None:
            metric = outcome["metric"]
            control = outcome["control_metrics"].get(metric)
            gain = (outcome.get("transfer_gain") or {}).get(metric)
            print(f"transfer: {metric} {outcome['value']:.4f} pretrained, "
                  + (f"{control:.4f} from scratch, gain {gain:+.4f}"
                     if gain is not None else "no figure from scratch"))
        print(f"blessed: {outcome['blessed']} ({outcome['reason']})")
        if summary.get("evaluation_report"):
            print(f"evaluation report: {summary['evaluation_report']}")
    if summary["pushed_model"]:
        print(f"pushed model: {summary['pushed_model']}")
    else:
        print("pushed model: none (not blessed)")
        if summary.get("exported_model"):
            print(f"exported model (not pushed): {summary['exported_model']}")
    return 0 if summary["pushed_model"] else 1


def main(argv=None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "predict":  # TEXTs may follow options (argparse stops at them)
        args.texts += [text for text in extra if not text.startswith("-")]
        extra = [text for text in extra if text.startswith("-")]
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "list":
        return _list()
    _configure_logging(args.verbose)
    commands = {"few-shot": _few_shot, "predict": _predict, "evaluate": _evaluate}
    if args.command in commands:
        from lmfactory.cli.quiet import native_stderr_hidden

        with native_stderr_hidden(not args.verbose):
            return commands[args.command](args)
    from lmfactory.recipe import RecipeError, load_recipe

    try:
        recipe = load_recipe(args.recipe, args.overrides)
    except (RecipeError, FileNotFoundError) as error:
        print(f"lmfactory: {error}", file=sys.stderr)
        return 2
    if args.command == "validate":
        if args.print_recipe:
            import yaml

            print(yaml.safe_dump(recipe, sort_keys=False, default_flow_style=False), end="")
        else:
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
