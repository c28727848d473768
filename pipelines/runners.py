"""Runners for the one DAG: local (LocalDagRunner + SQLite MLMD + Beam DirectRunner) and
Vertex AI / Kubeflow Pipelines v2 (KubeflowV2DagRunner -> pipeline JSON)."""

from __future__ import annotations

import glob
import json
import logging
import os

from tfx.orchestration.local.local_dag_runner import LocalDagRunner

from lmfactory.components.trainer.serving import SERVING_DIR
from lmfactory.pipelines import beam_workers, local_state, vertex
from lmfactory.pipelines.pipeline import create_pipeline

DEFAULT_IMAGE = "gcr.io/tfx-oss-public/tfx:1.16.0"


def local_layout(recipe: dict, output_dir: str) -> dict:
    root = os.path.abspath(os.path.join(output_dir, recipe["name"]))
    return {"pipeline_root": os.path.join(root, "pipeline"),
            "metadata_path": os.path.join(root, "metadata.sqlite"),
            "serving_dir": os.path.join(root, "serving")}


DIRECT_RUNNERS = (None, "DirectRunner", "direct", "SwitchingDirectRunner")


def skip_tfx_package_for_direct_runner() -> None:
    """Keeps TFX's Beam executors from packaging TFX when Beam runs in this environment.

    Before each Beam stage TFX (``tfx.utils.dependency_utils.make_beam_dependency_flags``)
    copies its installed package into a new temporary folder and builds an sdist of it for
    remote Beam workers, unless a dependency flag is given: ~3.5 s per stage, and 49 MB left
    in the temporary folder each time (1,287 such folders, 62 GB, were found on the shared
    test machine). The DirectRunner's workers are threads or subprocesses of this
    interpreter that import TFX from this environment and install nothing, so for it the
    arguments pass unchanged; any other runner still gets TFX's package. Idempotent."""
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
    from tfx.utils import dependency_utils

    if hasattr(dependency_utils.make_beam_dependency_flags, "tfx_package_flags"):
        return
    tfx_package_flags = dependency_utils.make_beam_dependency_flags

    def dependency_flags(beam_pipeline_args):
        runner = PipelineOptions(flags=list(beam_pipeline_args)).view_as(StandardOptions).runner
        if runner in DIRECT_RUNNERS:
            return list(beam_pipeline_args)
        return tfx_package_flags(beam_pipeline_args)

    dependency_flags.tfx_package_flags = tfx_package_flags
    dependency_utils.make_beam_dependency_flags = dependency_flags


def skip_redundant_dill_log_levels() -> None:
    """Keeps Beam's pickler from resetting dill's log level when it is already set.

    Beam pickles every transform, coder and function of a pipeline with dill, and after each
    pickle (``apache_beam.internal.dill_pickler.dumps``) calls ``dill._dill._trace(False)``,
    which sets the ``dill`` logger's level. ``Logger.setLevel`` clears the level cache of
    every logger of the process, and a process that imported TensorFlow, TFX and the Google
    clients holds thousands: about 1.5 ms a call, ~1,800 calls (2-3 s) per small DAG.
    Setting a level the logger already has changes nothing, so such calls are skipped;
    ``_trace(True)`` (dill's tracing, which Beam turns on only after a failed pickle) still
    sets it. Idempotent."""
    import logging

    try:
        from dill import _dill
    except ImportError:  # a dill without the private module: nothing to skip
        return
    if getattr(_dill._trace, "skips_redundant_levels", False):
        return
    set_level = _dill._trace

    def trace(boolean):
        if _dill.log.level != (logging.INFO if boolean else logging.WARN):
            set_level(boolean)

    trace.skips_redundant_levels = True
    _dill._trace = trace


def run_local(recipe: dict, output_dir: str = "runs", enable_cache: bool = True) -> dict:
    """Runs the pipeline locally; returns the evaluation outcome and the pushed model path."""
    beam_workers.install()  # Beam's worker processes die with this one, even on SIGKILL
    skip_tfx_package_for_direct_runner()
    skip_redundant_dill_log_levels()
    layout = local_layout(recipe, output_dir)
    with local_state.exclusive(os.path.dirname(layout["pipeline_root"])):
        local_state.clean_incomplete_outputs(layout["pipeline_root"], layout["metadata_path"])
        pipeline = create_pipeline(recipe, layout["pipeline_root"], layout["serving_dir"],
                                   metadata_path=layout["metadata_path"],
                                   enable_cache=enable_cache)
        LocalDagRunner().run(pipeline)
        return summarize_local_run(recipe, layout)


def _newest(pattern: str) -> str | None:
    """The output of the newest execution: TFX names execution folders by increasing id."""
    paths = glob.glob(pattern)
    return max(paths, key=lambda p: int(p.split(os.sep)[-2])) if paths else None


def summarize_local_run(recipe: dict, layout: dict) -> dict:
    evaluation = _newest(os.path.join(layout["pipeline_root"], "LMEvaluator", "evaluation",
                                      "*", "metrics.json"))
    outcome = json.load(open(evaluation)) if evaluation else None
    model_dir = os.path.join(layout["serving_dir"], recipe["serving"]["model_name"])
    versions = sorted((v for v in os.listdir(model_dir) if v.isdigit()), key=int) \
        if os.path.isdir(model_dir) else []
    pushed = os.path.join(model_dir, versions[-1]) if versions else None
    if outcome and not outcome["blessed"]:
        pushed = None
    # The evaluated model's SavedModel, pushed or not (the Evaluator records its artifact).
    exported = os.path.join(outcome["model"], SERVING_DIR) \
        if outcome and outcome.get("model") else None
    report = os.path.join(os.path.dirname(evaluation), "report.md") if evaluation else None
    return {"evaluation": outcome, "pushed_model": pushed, "exported_model": exported,
            "evaluation_report": report if report and os.path.exists(report) else None,
            **layout}


def compile_vertex(recipe: dict, output_file: str, pipeline_root: str,
                   image: str = DEFAULT_IMAGE, serving_dir: str | None = None,
                   local_data: str = "refuse", project: str | None = None,
                   region: str | None = None) -> str:
    """Compiles the same DAG to a Vertex AI / KFP v2 pipeline JSON whose every task runs
    ``image`` (built from the Dockerfile: this package on the pinned TFX image).

    ``local_data``: what to do with data paths a Vertex worker cannot read (pipelines/
    vertex.py): ``"refuse"`` (a RecipeError naming the first field), ``"stage"`` (copy them
    under ``<pipeline_root>/staged_data/`` and compile the copies' paths) or ``"as_is"``
    (compile them unchanged: only to inspect the DAG's shape). A recipe whose
    ``runtime.beam.extra_args`` ask for ``--runner=DataflowRunner`` gets the flags Dataflow
    needs (``vertex.vertex_beam_args``)."""
    if local_data == "refuse":
        vertex.refuse_local_data(recipe)
    elif local_data == "stage":
        recipe, staged = vertex.stage_local_data(recipe, pipeline_root)
        for line in staged:
            logging.info("Staged %s", line)
    elif local_data != "as_is":
        raise ValueError(f"local_data must be refuse, stage or as_is, got {local_data!r}")
    if image == DEFAULT_IMAGE:
        logging.warning("Vertex tasks will run %s, which does not contain lmfactory: build "
                        "and push the Dockerfile's image and pass it", image)
    recipe = vertex.with_beam_args(recipe, vertex.vertex_beam_args(
        recipe, image, pipeline_root, project=project, region=region))
    serving_dir = serving_dir or os.path.join(pipeline_root, "serving")
    pipeline = create_pipeline(recipe, pipeline_root, serving_dir)
    from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner as kubeflow_v2

    runner = kubeflow_v2.KubeflowV2DagRunner(
        config=kubeflow_v2.KubeflowV2DagRunnerConfig(default_image=image),
        output_filename=output_file)
    runner.run(pipeline, write_out=True)
    logging.info("Wrote Vertex AI pipeline spec %s", output_file)
    return output_file


def submit_vertex(pipeline_file: str, project: str, region: str, pipeline_root: str) -> None:
    """Submits a compiled pipeline with google-cloud-aiplatform's PipelineJob."""
    from google.cloud import aiplatform

    aiplatform.init(project=project, location=region)
    job = aiplatform.PipelineJob(
        display_name=os.path.splitext(os.path.basename(pipeline_file))[0],
        template_path=pipeline_file, pipeline_root=pipeline_root, enable_caching=True)
    job.submit()
