"""Tasks of the COMPILED Vertex AI pipeline JSON executed the way Vertex executes them: for
each task, the container ``command`` + ``args`` of its executor in ``deploymentSpec`` run
in a new process of this venv's python (forked from a server that has imported TensorFlow,
Beam and TFX once: tests/forked_tasks.py), ``{{$}}`` replaced by the
KFP v2 ``ExecutorInput`` JSON (the task's constant parameters, its input artifacts as the
producing task's ``executor_output.json`` described them, output artifacts and the output
file at URIs under a local stand-in for the ``gs://`` pipeline root). Ingestion ->
vocabulary -> pretraining examples -> Pretrainer are chained at tiny size, each output
checked for what the next task reads. A spec with a wrong executor module path or a
missing parameter fails.
"""

import itertools
import json
import os
import re
import sys
import time
from pathlib import Path

import pytest
import tensorflow as tf
import yaml

import forked_tasks
from dag_helpers import TINY_TRAINING, small_corpus, small_tsv
from lmfactory.pipelines import runners
from lmfactory.recipe import load_recipe

IMAGE = "europe-docker.pkg.dev/my-project/lmfactory/lmfactory:test"
PROJECT_NUMBER, JOB_ID = "123456789", "bert-tiny-sst2-20260101000000"
CHAIN = ["CorpusExampleGen", "VocabularyGen", "PretrainingExampleGen", "Pretrainer"]
TASK_TIMEOUT_S = 300


class TaskFailed(AssertionError):
    """A task of the compiled spec could not be run, or its container exited non-zero."""


def _parameter_value(constant: dict):
    """KFP v2 legacy ``Value`` (what the 2.0.0 schema compiles constants to) -> the plain
    value Vertex also puts in ``parameterValues``."""
    (kind, value), = constant.items()
    return {"intValue": int, "doubleValue": float, "stringValue": str}[kind](value)


class VertexEmulator:
    """Runs tasks of a compiled PipelineJob JSON as Vertex AI Pipelines' launcher does.

    It resolves what Vertex resolves before it starts a container (constant parameters,
    upstream artifacts, output URIs), starts the container's command with the executor
    input, and reads the ``ExecutorOutput`` the task wrote. Nothing of the pipeline's
    Python objects is used: only the JSON."""

    def __init__(self, spec_file: Path, root: Path):
        job = json.loads(spec_file.read_text())
        self.spec = job["pipelineSpec"]
        self.root = root
        # TFX's Beam executors leave a ~50 MB copy of TFX in the temporary folder
        # (dependency_utils.build_ephemeral_package): keep it under the test's folder.
        (root.parent / "task_tmp").mkdir(parents=True, exist_ok=True)
        self.env = {"TMPDIR": str(root.parent / "task_tmp")}
        self.outputs = {}  # task -> {output key: RuntimeArtifact dict}
        self._ids = itertools.count(1)

    def task(self, name: str) -> dict:
        return self.spec["root"]["dag"]["tasks"][name]

    def component(self, name: str) -> dict:
        return self.spec["components"][self.task(name)["componentRef"]["name"]]

    def container(self, name: str) -> dict:
        label = self.component(name)["executorLabel"]
        return self.spec["deploymentSpec"]["executors"][label]["container"]

    def executor_input(self, name: str) -> dict:
        task, component = self.task(name), self.component(name)
        missing = [producer for producer in task.get("dependentTasks", [])
                   if producer not in self.outputs]
        if missing:
            raise TaskFailed(f"{name}: upstream tasks {missing} have not run")
        declared = component.get("inputDefinitions", {})
        parameters, values = {}, {}
        given = task.get("inputs", {}).get("parameters", {})
        for key in declared.get("parameters", {}):
            if key not in given:
                raise TaskFailed(f"{name}: input parameter {key!r} is declared but not given")
            constant = given[key].get("runtimeValue", {}).get("constantValue")
            if constant is None:
                raise TaskFailed(f"{name}: parameter {key!r} is not a constant: {given[key]}")
            parameters[key] = constant
            values[key] = _parameter_value(constant)
        artifacts = {}
        for key, reference in task.get("inputs", {}).get("artifacts", {}).items():
            source = reference["taskOutputArtifact"]
            produced = self.outputs[source["producerTask"]].get(source["outputArtifactKey"])
            if produced is None:  # a resolver that found nothing
                artifacts[key] = {"artifacts": []}
                continue
            artifacts[key] = {"artifacts": [{
                "name": produced["name"], "uri": produced["uri"],
                "metadata": produced.get("metadata", {}),
                "type": declared["artifacts"][key]["artifactType"]}]}
        task_root = self.root / PROJECT_NUMBER / JOB_ID / f"{name}_{next(self._ids)}"
        outputs = {}
        for key, definition in component.get("outputDefinitions", {}).get(
                "artifacts", {}).items():
            uri = task_root / key
            uri.mkdir(parents=True)  # as the KFP launcher prepares local output folders
            outputs[key] = {"artifacts": [{
                "name": f"projects/{PROJECT_NUMBER}/locations/us-central1/metadataStores/"
                        f"default/artifacts/{next(self._ids)}",
                "uri": str(uri), "type": definition["artifactType"]}]}
        return {"inputs": {"parameters": parameters, "parameterValues": values,
                           "artifacts": artifacts},
                "outputs": {"artifacts": outputs,
                            "outputFile": str(task_root / "executor_output.json")}}

    def command(self, name: str, executor_input: dict) -> list[str]:
        container = self.container(name)
        line = [*container["command"], *container.get("args", [])]
        if line[0] != "python":
            raise TaskFailed(f"{name}: the container command starts with {line[0]!r}")
        line = [sys.executable] + [json.dumps(executor_input) if arg == "{{$}}" else arg
                                   for arg in line[1:]]
        unresolved = [arg for arg in line if "{{$" in arg]
        if unresolved:
            raise TaskFailed(f"{name}: placeholders this emulator does not fill: {unresolved}")
        return line

    def executor(self, name: str) -> dict:
        label = self.component(name)["executorLabel"]
        return self.spec["deploymentSpec"]["executors"][label]

    def resolve(self, name: str, store: list[dict]) -> dict:
        """A resolver task: Vertex runs its ``outputArtifactQueries`` (ML Metadata filters)
        and passes what they match on; ``store`` holds the artifacts of earlier runs,
        each ``{"schema_title", "name", "uri", "metadata"}``. A filter clause this emulator
        does not know fails the test."""
        produced = {}
        for key, query in self.executor(name)["resolver"]["outputArtifactQueries"].items():
            found = [artifact for artifact in store
                     if all(self._matches(name, clause, artifact)
                            for clause in query["filter"].split(" AND "))]
            produced[key] = found[-1] if found else None
        self.outputs[name] = {key: value for key, value in produced.items() if value}
        return self.outputs[name]

    def _matches(self, task: str, clause: str, artifact: dict) -> bool:
        def input_metadata(match):  # {{$.inputs.artifacts['input'].metadata['key']}}
            source = self.task(task)["inputs"]["artifacts"][match[1]]["taskOutputArtifact"]
            upstream = self.outputs[source["producerTask"]].get(source["outputArtifactKey"])
            return str(upstream["metadata"][match[2]]) if upstream else "<none>"

        clause = re.sub(r"\{\{\$\.inputs\.artifacts\['([^']+)'\]\.metadata\['([^']+)'\]\}\}",
                        input_metadata, clause.strip())
        if clause == "state=LIVE":
            return True
        if match := re.fullmatch(r'schema_title="([^"]+)"', clause):
            return artifact["schema_title"] == match[1]
        if match := re.fullmatch(r'name="([^"]*)"', clause):
            return artifact["name"] == match[1]
        if match := re.fullmatch(r"metadata\.(\w+)\.number_value=([\d.]+)", clause):
            return artifact["metadata"].get(match[1]) == float(match[2])
        raise TaskFailed(f"{task}: filter clause this emulator does not know: {clause}")

    def store(self) -> list[dict]:
        """The artifacts this run produced, as ML Metadata would hold them."""
        return [{**artifact, "schema_title": yaml.safe_load(
                     artifact["type"]["instanceSchema"])["title"]}
                for task, outputs in self.outputs.items()
                if "container" in self.executor(task) for artifact in outputs.values()]

    def run(self, name: str) -> dict:
        """Runs task ``name``; returns its outputs (key -> RuntimeArtifact dict)."""
        executor_input = self.executor_input(name)
        line = self.command(name, executor_input)
        env = {**os.environ, **self.env, **{item["name"]: item["value"] for item in
                                          self.container(name).get("env", [])}}
        started = time.monotonic()
        log = Path(executor_input["outputs"]["outputFile"]).parent / "task.log"
        status, output = forked_tasks.run(line, str(log), TASK_TIMEOUT_S, env=env)
        print(f"{name}: {time.monotonic() - started:.1f} s")  # shown with pytest -s
        if status != 0:
            tail = "\n".join(output.splitlines()[-40:])
            raise TaskFailed(f"{name} exited with {status}:\n{tail}")
        output_file = Path(executor_input["outputs"]["outputFile"])
        if not output_file.is_file():
            raise TaskFailed(f"{name} wrote no executor output {output_file}")
        written = json.loads(output_file.read_text())["artifacts"]
        produced = {}
        for key, given in executor_input["outputs"]["artifacts"].items():
            artifact, = written[key]["artifacts"]
            assert artifact["uri"] == given["artifacts"][0]["uri"], (name, key)
            assert artifact["name"] == given["artifacts"][0]["name"], (name, key)
            assert any(Path(artifact["uri"]).iterdir()), f"{name}.{key} is empty"
            produced[key] = {**artifact, "type": given["artifacts"][0]["type"]}
        self.outputs[name] = produced
        return produced


@pytest.fixture(scope="module")
def compiled(tmp_path_factory, demo_data):
    """bert_tiny_sst2 at tiny size compiled with its local data staged to a local folder
    standing in for the gs:// pipeline root."""
    tmp = tmp_path_factory.mktemp("vertex")
    local = tmp / "laptop"
    local.mkdir()
    corpus = small_corpus(demo_data, local / "corpus.txt", 60)
    train = small_tsv(demo_data / "sst2" / "train.tsv", local / "train.tsv", 40)
    dev = small_tsv(demo_data / "sst2" / "dev.tsv", local / "dev.tsv", 20)
    recipe = load_recipe("bert_tiny_sst2", TINY_TRAINING + [
        f"data.corpus.path={corpus}", f"data.task.splits.train={train}",
        f"data.task.splits.eval={dev}", "tokenizer.vocab_size=300",
        "pretraining.steps=4", "finetuning.steps=4", "runtime.steps_per_checkpoint=2",
        "finetuning.sequence_length=32", "evaluation.threshold=0.0"])
    root = tmp / "bucket" / "root"
    output = tmp / "pipeline.json"
    runners.compile_vertex(recipe, str(output), str(root), image=IMAGE, local_data="stage")
    return output, root, local


def test_compiled_spec_runs_the_image_and_reads_only_staged_data(compiled):
    output, root, local = compiled
    text = output.read_text()
    assert str(local) not in text  # no path of the compiling machine is left
    spec = json.loads(text)["pipelineSpec"]
    containers = [executor["container"] for executor in
                  spec["deploymentSpec"]["executors"].values() if "container" in executor]
    assert containers and {container["image"] for container in containers} == {IMAGE}
    config = json.loads(spec["root"]["dag"]["tasks"]["CorpusExampleGen"]["inputs"][
        "parameters"]["input_config"]["runtimeValue"]["constantValue"]["stringValue"])
    staged = Path(config["path"])
    assert staged.is_relative_to(root / "staged_data") and staged.name == "corpus.txt"
    assert staged.read_bytes() == (local / "corpus.txt").read_bytes()


def test_chained_tasks_of_the_compiled_spec_run_as_on_vertex(compiled):
    output, root, _ = compiled
    vertex = VertexEmulator(output, root)

    examples = vertex.run("CorpusExampleGen")["examples"]
    assert json.loads(examples["metadata"]["split_names"]) == ["train", "eval"]
    uri = Path(examples["uri"])
    assert list((uri / "Split-train").glob("data_tfrecord-*.gz"))
    report = json.loads((uri / "ingestion_report.json").read_text())
    assert report  # counts of good and bad records

    vocabulary = vertex.run("VocabularyGen")["vocabulary"]
    config = json.loads((Path(vocabulary["uri"]) / "tokenizer.json").read_text())
    assert config["kind"] == "wordpiece"
    words = (Path(vocabulary["uri"]) / config["vocabulary_file"]).read_text().splitlines()
    assert words[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] and len(words) <= 300

    pretraining = vertex.run("PretrainingExampleGen")["pretraining_examples"]
    uri = Path(pretraining["uri"])
    assert json.loads(pretraining["metadata"]["split_names"]) == ["train", "eval"]
    assert json.loads((uri / "pretraining_config.json").read_text())["objective"] == \
        "bert_mlm_nsp"
    assert (uri / "vocabulary" / "vocab.txt").read_text().splitlines() == words
    record = next(iter(tf.data.TFRecordDataset(
        sorted(map(str, (uri / "Split-train").glob("*.gz"))), compression_type="GZIP")))
    features = tf.train.Example.FromString(record.numpy()).features.feature
    ids = list(features["input_ids"].int64_list.value)
    assert len(ids) == 32 and 0 <= min(ids) and max(ids) < len(words)

    produced = vertex.run("Pretrainer")
    pretrained = Path(produced["model"]["uri"])
    model_config = json.loads((pretrained / "keras" / "model_config.json").read_text())
    assert model_config["architecture"] == "bert"
    assert (pretrained / "keras" / "model.keras").is_file()
    assert (pretrained / "keras" / "vocabulary" / "vocab.txt").read_text().splitlines() == words
    assert any(Path(produced["model_run"]["uri"]).iterdir())

    # The rest of the DAG: task data, fine-tuning from the Pretrainer's model, the blessing
    # gate (nothing blessed before: both resolvers find nothing), the push.
    task_examples = vertex.run("TaskExampleGen")["examples"]
    assert sorted(json.loads(task_examples["metadata"]["split_names"])) == ["eval", "train"]
    finetuned = vertex.run("FineTuner")["model"]
    assert json.loads((Path(finetuned["uri"]) / "keras" / "model_config.json").read_text())[
        "task"]["kind"] == "classification"
    assert (Path(finetuned["uri"]) / "Format-Serving" / "saved_model.pb").is_file()
    for resolver in ("LatestBlessedModelResolver-model-blessing-resolver",
                     "LatestBlessedModelResolver-model-resolver"):
        assert vertex.resolve(resolver, store=[]) == {}
    evaluated = vertex.run("LMEvaluator")
    metrics = json.loads((Path(evaluated["evaluation"]["uri"]) / "metrics.json").read_text())
    assert metrics["blessed"] is True and metrics["metrics"]["examples"] == 20
    assert (Path(evaluated["blessing"]["uri"]) / "BLESSED").is_file()
    pushed = vertex.run("Pusher")["pushed_model"]
    assert pushed["metadata"]["pushed"] == 1
    destination = Path(pushed["metadata"]["pushed_destination"])
    assert destination.is_relative_to(root / "serving") and destination.name.isdigit()
    assert (destination / "saved_model.pb").is_file()

    # The next run's baseline: the compiled resolver queries (ML Metadata filters on the
    # blessing's ``blessed`` and ``current_model_id``) must find this run's FineTuner model.
    store = vertex.store()
    blessing = vertex.resolve("LatestBlessedModelResolver-model-blessing-resolver", store)
    assert blessing["model_blessing"]["name"] == evaluated["blessing"]["name"]
    baseline = vertex.resolve("LatestBlessedModelResolver-model-resolver", store)
    assert baseline and baseline["model"]["name"] == finetuned["name"]
    # The Beam stages ran in the task's image: TFX built no package of itself for them.
    assert not list((root.parent / "task_tmp").glob("*/build/tfx"))


def _broken(output: Path, tmp_path: Path, task: str, edit) -> Path:
    job = json.loads(output.read_text())
    edit(job["pipelineSpec"], task)
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(job))
    return broken


def _wrong_module(spec: dict, task: str) -> None:
    label = spec["components"][task]["executorLabel"]
    args = spec["deploymentSpec"]["executors"][label]["container"]["args"]
    index = args.index("--executor_class_path") + 1
    args[index] = args[index].replace("example_gen.executor", "example_gen.executors")


def _dropped_parameter(spec: dict, task: str) -> None:
    """The parameter removed from the component AND the task: the spec is self-consistent,
    so only running the executor shows it is missing."""
    del spec["components"][task]["inputDefinitions"]["parameters"]["input_config"]
    del spec["root"]["dag"]["tasks"][task]["inputs"]["parameters"]["input_config"]


@pytest.mark.parametrize("edit,message", [(_wrong_module, "No module named"),
                                          (_dropped_parameter, "input_config")])
def test_a_broken_spec_fails_when_its_task_runs(compiled, tmp_path, edit, message):
    output, root, _ = compiled
    broken = _broken(output, tmp_path, "CorpusExampleGen", edit)
    with pytest.raises(TaskFailed, match=message) as failed:
        VertexEmulator(broken, tmp_path / "root").run("CorpusExampleGen")


def test_a_parameter_declared_but_not_given_is_refused(compiled, tmp_path):
    output, _, _ = compiled
    job = json.loads(output.read_text())
    del job["pipelineSpec"]["root"]["dag"]["tasks"]["VocabularyGen"]["inputs"]["parameters"][
        "vocab_size"]
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(job))
    vertex = VertexEmulator(broken, tmp_path / "root")
    vertex.outputs["CorpusExampleGen"] = {"examples": {"name": "n", "uri": str(tmp_path)}}
    with pytest.raises(TaskFailed, match="'vocab_size' is declared but not given"):
        vertex.executor_input("VocabularyGen")
