"""What a recipe needs before it runs on Vertex AI (pipelines/vertex.py): local
data paths refused in one line naming the field, or staged to the pipeline root
(tf.io.gfile; a local folder stands in for gs://) with the paths rewritten; Dataflow's flags
completed for the Beam stages; the `compile` command line."""

import json
import os
from pathlib import Path

import pytest
from tfx.dsl.components.base import base_beam_executor

from lmfactory import cli
from lmfactory.pipelines import runners, vertex
from lmfactory.recipe import RecipeError, load_recipe

IMAGE = "us-docker.pkg.dev/p/r/lmfactory:1"


def test_a_local_data_path_is_refused_in_one_line_naming_the_field(demo_data):
    recipe = load_recipe("bert_tiny_sst2")
    with pytest.raises(RecipeError) as raised:
        vertex.refuse_local_data(recipe)
    corpus = os.path.abspath(recipe["data"]["corpus"]["path"])
    assert str(raised.value) == (
        f"recipe field 'data.corpus.path': {corpus} is a local path; Vertex workers cannot "
        f"read it (use gs:// or --stage-data)")
    assert vertex.local_data_paths(recipe)[1][0] == "data.task.splits.train"


def test_cloud_and_packaged_paths_pass():
    recipe = load_recipe("bert_tiny_sst2", [
        "data.corpus.path=gs://b/corpus.txt", "data.task.splits.train=gs://b/train.tsv",
        "data.task.splits.eval=gs://b/dev.tsv", "pretraining.init_checkpoint=pkg://p/model"])
    assert vertex.local_data_paths(recipe) == []
    vertex.refuse_local_data(recipe)


@pytest.fixture
def local_data(tmp_path):
    data = tmp_path / "laptop"
    (data / "shards").mkdir(parents=True)
    (data / "corpus.txt").write_text("one sentence.\nanother one.\n\nsecond document.\n")
    for index in range(3):
        (data / "shards" / f"train-{index}.tsv").write_text(f"sentence\tlabel\nrow {index}\t1\n")
    (data / "shards" / "notes.md").write_text("not matched by the glob")
    (data / "dev.tsv").write_text("sentence\tlabel\nrow\t0\n")
    (data / "checkpoint" / "sub").mkdir(parents=True)
    (data / "checkpoint" / "config.json").write_text("{}")
    (data / "checkpoint" / "sub" / "weights.bin").write_bytes(b"\x00\x01")
    return data


def test_staging_copies_files_globs_and_folders_and_rewrites_the_paths(local_data, tmp_path):
    recipe = load_recipe("bert_tiny_sst2", [
        f"data.corpus.path={local_data / 'corpus.txt'}",
        f"data.task.splits.train={local_data / 'shards' / 'train-*.tsv'}",
        f"data.task.splits.eval={local_data / 'dev.tsv'}"])
    recipe["pretraining"]["tokenizer_dir"] = str(local_data / "checkpoint")
    root = tmp_path / "bucket" / "root"
    staged, report = vertex.stage_local_data(recipe, str(root))
    assert recipe["data"]["corpus"]["path"] == str(local_data / "corpus.txt")  # not modified
    assert vertex.local_data_paths(staged) != []  # a local root stays local ...
    assert all(Path(path).is_relative_to(root / vertex.STAGED_DATA_DIR)  # ... under the root
               for _, path in vertex.local_data_paths(staged))
    corpus = Path(staged["data"]["corpus"]["path"])
    assert corpus.name == "corpus.txt"
    assert corpus.read_bytes() == (local_data / "corpus.txt").read_bytes()
    train = staged["data"]["task"]["splits"]["train"]
    assert train.endswith("/train-*.tsv")
    assert sorted(Path(p).name for p in Path(train).parent.iterdir()) == [
        "train-0.tsv", "train-1.tsv", "train-2.tsv"]
    checkpoint = Path(staged["pretraining"]["tokenizer_dir"])
    assert (checkpoint / "sub" / "weights.bin").read_bytes() == b"\x00\x01"
    assert len(report) == 4 and "data.task.splits.train" in report[1] and "(3 files)" in report[1]
    # Staging again writes the same copies (one folder per source path).
    assert vertex.stage_local_data(recipe, str(root))[0] == staged


def test_staging_a_missing_path_names_the_field(local_data, tmp_path):
    recipe = load_recipe("bert_tiny_sst2", [
        f"data.corpus.path={local_data / 'corpus.txt'}",
        f"data.task.splits.train={local_data / 'nothing-*.tsv'}"])
    with pytest.raises(RecipeError, match=r"'data\.task\.splits\.train': .* matches no file"):
        vertex.stage_local_data(recipe, str(tmp_path / "root"))


def _dataflow(*flags):
    return load_recipe("bert_tiny_sst2", [
        "runtime.beam.extra_args=[" + ", ".join(["--runner=DataflowRunner", *flags]) + "]"])


def test_dataflow_flags_are_completed_from_the_command_line_and_the_image():
    args = vertex.vertex_beam_args(_dataflow(), IMAGE, "gs://b/root", project="p", region="r")
    assert args == ["--runner=DataflowRunner", "--project=p", "--region=r",
                    "--temp_location=gs://b/root/beam_tmp", f"--sdk_container_image={IMAGE}"]
    # The recipe's own flags win.
    own = vertex.vertex_beam_args(_dataflow("--project=q", "--sdk_container_image=other"),
                                  IMAGE, "gs://b/root", project="p", region="r")
    assert "--project=q" in own and "--project=p" not in own
    assert "--sdk_container_image=other" in own and f"--sdk_container_image={IMAGE}" not in own
    # No runner asked: the DirectRunner in each task's container, whose image is the SDK's.
    assert vertex.vertex_beam_args(load_recipe("bert_tiny_sst2"), IMAGE, "gs://b/root") == [
        f"--sdk_container_image={IMAGE}"]
    flink = load_recipe("bert_tiny_sst2", ["runtime.beam.extra_args=[--runner=FlinkRunner]"])
    assert vertex.vertex_beam_args(flink, IMAGE, "gs://b/root") == ["--runner=FlinkRunner"]


def test_dataflow_without_a_project_or_a_cloud_temp_location_is_refused():
    with pytest.raises(RecipeError, match=r"'runtime\.beam\.extra_args': DataflowRunner needs "
                                          r"--project="):
        vertex.vertex_beam_args(_dataflow(), IMAGE, "gs://b/root", region="r")
    with pytest.raises(RecipeError, match="--temp_location must be a gs:// path"):
        vertex.vertex_beam_args(_dataflow("--temp_location=/tmp/x"), IMAGE, "gs://b/root",
                                project="p", region="r")


def test_compiled_beam_stages_run_on_dataflow_with_the_image(local_data, tmp_path):
    recipe = load_recipe("bert_tiny_sst2", [
        f"data.corpus.path={local_data / 'corpus.txt'}",
        f"data.task.splits.train={local_data / 'shards' / 'train-*.tsv'}",
        f"data.task.splits.eval={local_data / 'dev.tsv'}",
        "runtime.beam.extra_args=[--runner=DataflowRunner, --temp_location=gs://b/tmp]"])
    output = tmp_path / "pipeline.json"
    runners.compile_vertex(recipe, str(output), str(tmp_path / "root"), image=IMAGE,
                           local_data="stage", project="p", region="europe-west4")
    executors = json.loads(output.read_text())["pipelineSpec"]["deploymentSpec"]["executors"]
    beam_stages = {"CorpusExampleGen", "VocabularyGen", "PretrainingExampleGen",
                   "TaskExampleGen"}
    for stage in beam_stages:
        args = executors[f"{stage}_executor"]["container"]["args"]
        for flag in ("--runner=DataflowRunner", "--project=p", "--region=europe-west4",
                     "--temp_location=gs://b/tmp", f"--sdk_container_image={IMAGE}"):
            assert flag in args, (stage, flag)


def test_compile_command_refuses_local_data_or_stages_it(local_data, tmp_path, capsys):
    data = [f"data.corpus.path={local_data / 'corpus.txt'}",
            f"data.task.splits.train={local_data / 'dev.tsv'}",
            f"data.task.splits.eval={local_data / 'dev.tsv'}"]
    sets = [arg for assignment in data for arg in ("--set", assignment)]
    output = tmp_path / "pipeline.json"
    common = ["compile", "bert_tiny_sst2", *sets, "--output", str(output)]
    assert cli.main([*common, "--pipeline-root", "gs://b/root", "--image", IMAGE]) == 2
    error = capsys.readouterr().err.strip()
    assert error == (f"lmfactory: recipe field 'data.corpus.path': {local_data / 'corpus.txt'} "
                     f"is a local path; Vertex workers cannot read it (use gs:// or "
                     f"--stage-data)")
    assert not output.exists()
    with pytest.raises(SystemExit, match="--image is required"):
        cli.main([*common, "--pipeline-root", "gs://b/root"])
    root = tmp_path / "root"
    assert cli.main([*common, "--pipeline-root", str(root), "--image", IMAGE,
                     "--stage-data"]) == 0
    spec = output.read_text()
    assert str(local_data) not in spec and str(root / vertex.STAGED_DATA_DIR) in spec
    assert f'"image": "{IMAGE}"' in spec


class BeamStage(base_beam_executor.BaseBeamExecutor):
    def Do(self, input_dict, output_dict, exec_properties):
        raise AssertionError("not run")


def test_local_runs_build_no_tfx_package_for_the_direct_runner(monkeypatch):
    """TFX packages itself for remote Beam workers before each Beam stage (3.5 s, 49 MB of
    temporary files); a local run's DirectRunner needs none, another runner still gets it."""
    from tfx.utils import dependency_utils

    built = []
    monkeypatch.setattr(dependency_utils, "make_beam_dependency_flags",
                        lambda args: built.append(args) or [*args, "--extra_package=tfx.tgz"])
    runners.skip_tfx_package_for_direct_runner()
    local = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
    executor = BeamStage(base_beam_executor.BaseBeamExecutor.Context(beam_pipeline_args=local))
    assert not built and "--extra_package=tfx.tgz" not in executor._beam_pipeline_args
    remote = ["--runner=DataflowRunner", "--project=p"]
    assert dependency_utils.make_beam_dependency_flags(remote)[-1] == "--extra_package=tfx.tgz"
    assert built == [remote]
