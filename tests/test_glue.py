"""GLUE: the task presets' readers on the real CoLA / MRPC / STS-B files and on small files of
the MNLI / QNLI / QQP / RTE shapes, malformed files failing with the expected columns, the
official metrics against hand-computed values, recipe validation of GLUE sources, one DAG run
of STS-B (sentence pairs, regression) ending in a pushed SavedModel that scores two raw
strings, and run_fn + evaluator runs of CoLA (no header, Matthews correlation) and MRPC (BOM,
F1) from the same pretrained model."""

import json
import types
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (ops used by the serving graph)

from dag_helpers import TINY_TRAINING
from lmfactory.components.evaluator import executor as evaluator
from lmfactory.components.evaluator import metrics
from lmfactory.components.example_gen import executor as ingestion
from lmfactory.components.example_gen import glue
from lmfactory.components.trainer import run_fn as run_fn_lib
from lmfactory.components.trainer.model_artifact import read_model_config
from lmfactory.components.trainer.task_data import LabelReader
from lmfactory.pipelines import runners
from lmfactory.pipelines.pipeline import task_input_config, task_record, trainer_config
from lmfactory.recipe import RecipeError, load_recipe

BEAM_ARGS = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
CHECKPOINT = Path(__file__).resolve().parent / "fixtures" / "hf" / "bert"  # tiny, HF format
UTF8_BOM = b"\xef\xbb\xbf"


def _ingest(task: str, directory, out_dir) -> dict:
    return ingestion.ingest(glue.input_config(task, str(directory)), str(out_dir),
                            beam_pipeline_args=BEAM_ARGS)


def _records(out_dir, split: str) -> list:
    files = sorted(tf.io.gfile.glob(f"{out_dir}/Split-{split}/*"))
    return [tf.train.Example.FromString(record.numpy()) for record in
            tf.data.TFRecordDataset(files, compression_type="GZIP")]


def _feature(example, name):
    feature = example.features.feature[name]
    kind = feature.WhichOneof("kind")
    value = getattr(feature, kind).value[0]
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _slice(source: Path, target: Path, rows: int, header: bool, from_end: bool = False) -> None:
    """The first (or last) ``rows`` data rows of a GLUE file, bytes as they are (BOM, header,
    a missing final newline kept)."""
    data = source.read_bytes()
    lines = data.split(b"\n")
    final_newline = lines[-1] == b""
    lines = lines[:-1] if final_newline else lines
    head, body = (lines[:1], lines[1:]) if header else ([], lines)
    body = body[-rows:] if from_end else body[:rows]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"\n".join(head + body) + (b"\n" if final_newline else b""))


# --- readers on the real files ---------------------------------------------------------------

@pytest.mark.parametrize("task, train_rows, dev_rows", [
    ("CoLA", 8551, 1043), ("MRPC", 3667, 408), ("STS-B", 5749, 1500)])
def test_readers_on_the_real_glue_files(tmp_path, shared_data, task, train_rows, dev_rows):
    directory = shared_data / "glue" / task
    glue.check_files(task, str(directory))
    report = _ingest(task, directory, tmp_path)
    assert report["splits"]["train"]["good"] == train_rows
    assert report["splits"]["eval"]["good"] == dev_rows
    assert report["totals"]["bad"] == 0
    first = _records(tmp_path, "eval")[0]
    preset = glue.get(task)
    for name in preset.text_features:
        assert _feature(first, name).strip()
    if task == "CoLA":  # no header: the first line is a record
        assert _feature(first, "sentence") == "The sailors rode the breeze clear of the rocks."
        assert _feature(first, "label") == 1 and _feature(first, "source") == "gj04"
        last = _records(tmp_path, "eval")[-1]  # the dev file has no final newline
        assert _feature(last, "sentence").endswith("about himself.")
    elif task == "MRPC":  # the BOM is gone and the columns renamed
        assert _feature(first, "label") == 1 and _feature(first, "id1") == "1355540"
        assert _feature(first, "sentence2").startswith('" The foodservice pie business')
    else:  # STS-B: a float similarity in [0, 5]
        assert _feature(first, "label") == pytest.approx(5.0)
        scores = [_feature(example, "label") for example in _records(tmp_path, "eval")]
        assert min(scores) == 0.0 and max(scores) == 5.0
        assert len({round(score, 3) for score in scores}) > 50  # not a class id


MNLI_TRAIN_HEADER = ("index promptID pairID genre sentence1_binary_parse sentence2_binary_parse "
                     "sentence1_parse sentence2_parse sentence1 sentence2 label1 gold_label")
MNLI_DEV_HEADER = ("index promptID pairID genre sentence1_binary_parse sentence2_binary_parse "
                   "sentence1_parse sentence2_parse sentence1 sentence2 label1 label2 label3 "
                   "label4 label5 gold_label")


def _write_table(path: Path, header: str, rows: list) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["\t".join(header.split(" ")) if " " in header else header]
    lines += ["\t".join(str(value) for value in row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_mnli_files_with_different_label_columns_and_word_labels(tmp_path):
    directory = tmp_path / "MNLI"
    words = ["neutral", "contradiction", "entailment"]
    _write_table(directory / "train.tsv", MNLI_TRAIN_HEADER, [
        (i, 1, 2, "fiction", "( a )", "( b )", "(ROOT a)", "(ROOT b)", f"premise {i}",
         f"hypothesis {i}", words[i % 3], words[i % 3]) for i in range(6)])
    _write_table(directory / "dev_matched.tsv", MNLI_DEV_HEADER, [
        (i, 1, 2, "slate", "( a )", "( b )", "(ROOT a)", "(ROOT b)", f"p {i}", f"h {i}",
         *[words[(i + 1) % 3]] * 6) for i in range(3)])
    glue.check_files("MNLI", str(directory))
    report = _ingest("MNLI", directory, tmp_path / "out")
    assert (report["splits"]["train"]["good"], report["splits"]["eval"]["good"]) == (6, 3)
    train = _records(tmp_path / "out", "train")
    assert _feature(train[1], "gold_label") == "contradiction"
    record = glue.task_record("MNLI")
    assert record["label_vocabulary"] == ["contradiction", "entailment", "neutral"]
    reader = LabelReader.for_task({"kind": "classification", **record})
    parsed = tf.io.parse_example([example.SerializeToString() for example in train],
                                 reader.spec)
    assert reader(parsed).numpy().tolist() == [2, 0, 1, 2, 0, 1]
    bad = {"gold_label": tf.constant(["entailment", "-"])}  # MNLI's "no gold label" marker
    with pytest.raises(tf.errors.InvalidArgumentError, match="not one of the label_vocabulary"):
        reader(bad)


def test_qqp_qnli_rte_shapes(tmp_path):
    qqp = tmp_path / "QQP"
    _write_table(qqp / "train.tsv", "id qid1 qid2 question1 question2 is_duplicate",
                 [(i, 2 * i, 2 * i + 1, f"how do i {i}?", f"what is {i}?", i % 2)
                  for i in range(5)])
    _write_table(qqp / "dev.tsv", "id qid1 qid2 question1 question2 is_duplicate",
                 [(9, 18, 19, "why?", "why not?", 1)])
    report = _ingest("QQP", qqp, tmp_path / "qqp_out")
    assert report["splits"]["train"]["good"] == 5
    assert [_feature(e, "label") for e in _records(tmp_path / "qqp_out", "train")] == [
        0, 1, 0, 1, 0]
    for task, header in (("QNLI", "index question sentence label"),
                         ("RTE", "index sentence1 sentence2 label")):
        directory = tmp_path / task
        for name in ("train.tsv", "dev.tsv"):
            _write_table(directory / name, header, [(0, "a b", "c d", "entailment"),
                                                    (1, "e f", "g h", "not_entailment")])
        glue.check_files(task, str(directory))
        report = _ingest(task, directory, tmp_path / f"{task}_out")
        assert report["splits"]["eval"]["good"] == 2
        examples = _records(tmp_path / f"{task}_out", "eval")
        reader = LabelReader.for_task({"kind": "classification", **glue.task_record(task)})
        parsed = tf.io.parse_example([e.SerializeToString() for e in examples], reader.spec)
        assert reader(parsed).numpy().tolist() == [0, 1]


# --- malformed files -------------------------------------------------------------------------

def test_a_file_of_another_shape_fails_naming_the_file_and_the_columns(tmp_path, shared_data):
    cola = tmp_path / "CoLA"
    # CoLA's test.tsv shape (a header, two columns) where train.tsv should be.
    _write_table(cola / "train.tsv", "index sentence", [(0, "Bill whistled past the house.")])
    _write_table(cola / "dev.tsv", "index sentence", [(0, "x")])
    with pytest.raises(ValueError, match=r"CoLA/train\.tsv.*\['source', 'label', 'star', "
                                         r"'sentence'\].*no header"):
        glue.check_files("CoLA", str(cola))
    # The DAG's entry point checks the same way before any component runs.
    with pytest.raises(ValueError, match=r"CoLA/train\.tsv"):
        task_input_config({"glue": "CoLA", "dir": str(cola)})

    mrpc = tmp_path / "MRPC"  # SST-2's files in the MRPC folder
    for name in ("train.tsv", "dev.tsv"):
        (mrpc / name).parent.mkdir(parents=True, exist_ok=True)
        (mrpc / name).write_bytes((shared_data / "glue" / "SST-2" / "dev.tsv").read_bytes())
    with pytest.raises(ValueError, match=r"MRPC/train\.tsv.*'Quality', '#1 ID', '#2 ID', "
                                         r"'#1 String', '#2 String'.*got \['sentence', 'label'\]"):
        glue.check_files("MRPC", str(mrpc))

    stsb = tmp_path / "STS-B"  # the score column missing
    for name in ("train.tsv", "dev.tsv"):
        _write_table(stsb / name, "index genre filename year old_index source1 source2 "
                                  "sentence1 sentence2", [(0, "g", "f", "y", 1, "n", "n", "a", "b")])
    with pytest.raises(ValueError, match=r"STS-B/train\.tsv.*'sentence2', 'score'\]"):
        glue.check_files("STS-B", str(stsb))

    mnli = tmp_path / "MNLI"
    _write_table(mnli / "train.tsv", "index sentence1 sentence2", [(0, "a", "b")])
    with pytest.raises(ValueError, match=r"MNLI/train\.tsv.*\['sentence1', 'sentence2', "
                                         r"'gold_label'\].*missing \['gold_label'\]"):
        glue.check_files("MNLI", str(mnli))
    with pytest.raises(FileNotFoundError, match=r"RTE/train\.tsv"):
        glue.check_files("RTE", str(tmp_path / "RTE"))
    with pytest.raises(ValueError, match="unknown GLUE task 'CoLa'"):
        glue.get("CoLa")


def test_bad_rows_inside_a_good_file_are_counted_not_fatal(tmp_path, shared_data):
    cola = tmp_path / "CoLA"
    _slice(shared_data / "glue" / "CoLA" / "train.tsv", cola / "train.tsv", 20, header=False)
    with open(cola / "train.tsv", "a", encoding="utf-8") as f:
        f.write("gj04\tnot-a-number\t\tA sentence.\ngj04\t1\tonly three fields\n")
    _slice(shared_data / "glue" / "CoLA" / "dev.tsv", cola / "dev.tsv", 5, header=False,
           from_end=True)
    report = _ingest("CoLA", cola, tmp_path / "out")
    assert report["splits"]["train"]["good"] == 20
    assert report["splits"]["train"]["malformed"] == 2
    assert report["splits"]["eval"]["good"] == 5


# --- metrics by hand --------------------------------------------------------------------------

def test_matthews_correlation_by_hand():
    labels = [1, 1, 1, 0, 0, 0, 1, 0]
    predictions = [1, 0, 1, 0, 0, 1, 1, 0]  # TP 3, FN 1, FP 1, TN 3: (9 - 1) / sqrt(4^4)
    assert metrics.matthews_corrcoef(labels, predictions) == pytest.approx(0.5)
    assert metrics.matthews_corrcoef(labels, labels) == pytest.approx(1.0)
    assert metrics.matthews_corrcoef(labels, [1 - y for y in labels]) == pytest.approx(-1.0)
    # TP 2, FN 2, FP 0, TN 4: (8 - 0) / sqrt(2 * 4 * 6 * 4)
    assert metrics.matthews_corrcoef([1, 1, 1, 1, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0, 0]) == (
        pytest.approx(8 / np.sqrt(2 * 4 * 6 * 4)))
    # One predicted class: undefined, 0.0 (scikit-learn's convention).
    assert metrics.matthews_corrcoef(labels, [1] * 8) == 0.0
    # Three classes (Gorodkin): c = 4, s = 6, p = t = (2, 2, 2): (24 - 12) / (36 - 12)
    assert metrics.matthews_corrcoef([0, 1, 2, 0, 1, 2], [0, 2, 1, 0, 1, 2]) == (
        pytest.approx(0.5))
    assert metrics.classification_metrics(labels, predictions)["matthews_corrcoef"] == (
        pytest.approx(0.5))


def test_pearson_spearman_and_mse_by_hand():
    # dx = (-1.5, -.5, .5, 1.5), dy = (-3, -1, 0, 4): 11 / sqrt(5 * 26)
    assert metrics.pearson([1, 2, 3, 4], [2, 4, 5, 9]) == pytest.approx(11 / np.sqrt(130))
    assert metrics.pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert metrics.pearson([1, 2, 3], [2, 2, 2]) == 0.0  # constant predictions
    # Average ranks for ties.
    assert metrics.average_ranks([3, 1, 3, 3, 2]).tolist() == [4, 1, 4, 4, 2]
    assert metrics.average_ranks([10, 20, 20, 30]).tolist() == [1, 2.5, 2.5, 4]
    # ranks (1, 2.5, 2.5, 4) vs (1, 3, 2, 4): 4.5 / sqrt(4.5 * 5) = 3 / sqrt(10)
    assert metrics.spearman([10, 20, 20, 30], [1, 3, 2, 4]) == pytest.approx(3 / np.sqrt(10))
    # Spearman sees only the order: a monotone transform does not change it.
    assert metrics.spearman([1, 2, 3, 4], [1, 8, 27, 1000]) == pytest.approx(1.0)
    assert metrics.mse([0, 1, 5], [1, 1, 3]) == pytest.approx(5 / 3)
    result = metrics.regression_metrics([1, 2, 3, 4], [2, 4, 5, 9])
    assert set(result) == {"pearson", "spearman", "mse", "examples"}
    assert result["spearman"] == pytest.approx(1.0) and result["examples"] == 4
    with pytest.raises(ValueError, match="at least two pairs"):
        metrics.pearson([1], [1])
    # Correlation thresholds may be negative; MSE is lower-is-better.
    assert metrics.passes("pearson", -0.2, -0.5, None)[0]
    assert not metrics.passes("mse", 0.9, 0.5, None)[0]


# --- recipes ---------------------------------------------------------------------------------

def test_glue_recipes_name_the_task_instead_of_columns():
    cola, mrpc, stsb = (load_recipe(f"bert_tiny_{name}") for name in ("cola", "mrpc", "stsb"))
    assert cola["finetuning"]["text_features"] == ["sentence"]
    assert cola["evaluation"]["metric"] == "matthews_corrcoef"
    assert mrpc["finetuning"]["text_features"] == ["sentence1", "sentence2"]
    assert (stsb["finetuning"]["task"], stsb["finetuning"]["num_classes"]) == ("regression", 1)
    assert stsb["evaluation"]["metric"] == "pearson"
    assert task_record(stsb)["official_metrics"] == ["pearson", "spearman"]
    config = task_input_config(cola["data"]["task"])
    assert config["has_header"] is False and config["column_names"][1] == "label"
    assert config["splits"]["eval"].endswith("/glue/CoLA/dev.tsv")
    # The pipeline bounds integer labels by the task's classes; regression takes any float.
    assert task_input_config(cola["data"]["task"], 2)["num_classes"] == 2
    assert "num_classes" not in task_input_config(stsb["data"]["task"], 1)
    assert "num_classes" not in config


@pytest.mark.parametrize("override, field, message", [
    ("data.task.glue=CoLa", "data.task.glue", "expected one of CoLA, SST-2"),
    ("evaluation.metric=accuracy", "evaluation.metric", "pearson, spearman, mse"),
    ("finetuning.text_features=[sentence]", "finetuning.text_features", "sentence1"),
    ("finetuning.task=classification", "finetuning.task", "regression task"),
    ("data.task.path=x.tsv", "data.task", "'glue' and 'dir' only"),
    ("data.task.dir=3", "data.task.dir", "folder"),
])
def test_glue_recipe_errors_name_the_field(override, field, message):
    with pytest.raises(RecipeError, match=message) as error:
        load_recipe("bert_tiny_stsb", [override])
    assert error.value.field == field


def test_a_regression_recipe_without_a_preset_has_one_output(tmp_path):
    text = (Path(__file__).parent.parent / "recipes" / "bert_tiny_stsb.yaml").read_text()
    text = text.replace("task: {glue: STS-B, dir: ../shared/data/glue/STS-B}",
                        "task: {format: tsv, splits: {train: a.tsv, eval: b.tsv}, "
                        "label_column: score, label_type: float}")
    recipe = tmp_path / "my_regression.yaml"
    recipe.write_text(text + "finetuning:\n  task: regression\n  text_features: [s1, s2]\n"
                      if "finetuning:" not in text else text.replace(
                          "finetuning:\n", "finetuning:\n  task: regression\n"
                                           "  text_features: [s1, s2]\n", 1))
    loaded = load_recipe(str(recipe))
    assert (loaded["finetuning"]["task"], loaded["finetuning"]["num_classes"]) == (
        "regression", 1)
    assert task_record(loaded) == {"kind": "regression", "text_features": ["s1", "s2"],
                                   "num_classes": 1, "sequence_length": 64}
    with pytest.raises(RecipeError, match="one output"):
        load_recipe(str(recipe), ["finetuning.num_classes=2"])


# --- the DAG: STS-B (pairs, regression) -------------------------------------------------------

@pytest.fixture(scope="module")
def stsb_run(tmp_path_factory, shared_data):
    """The regression DAG from the tiny published-format BERT checkpoint (CheckpointImporter):
    BERT's pretraining DAG runs in test_pipeline_e2e.py."""
    tmp = tmp_path_factory.mktemp("stsb")
    source = shared_data / "glue" / "STS-B"
    _slice(source / "train.tsv", tmp / "STS-B" / "train.tsv", 240, header=True)
    _slice(source / "dev.tsv", tmp / "STS-B" / "dev.tsv", 60, header=True)
    recipe = load_recipe("bert_tiny_stsb", [
        *(setting for setting in TINY_TRAINING if setting.startswith(("finetuning.", "runtime."))),
        f"pretraining.init_checkpoint={CHECKPOINT}", f"data.task.dir={tmp / 'STS-B'}",
        "finetuning.sequence_length=32", "evaluation.threshold=-1.0"])
    summary = runners.run_local(recipe, str(tmp / "runs"))
    return recipe, summary, tmp


def test_stsb_dag_pushes_a_model_that_scores_two_raw_strings(stsb_run):
    recipe, summary, tmp = stsb_run
    outcome = summary["evaluation"]
    assert outcome["blessed"] is True and outcome["metric"] == "pearson"
    assert outcome["metrics"]["examples"] == 60
    assert set(outcome["official_metrics"]) == {"pearson", "spearman"}
    assert -1.0 <= outcome["official_metrics"]["spearman"] <= 1.0
    pushed = summary["pushed_model"]
    assert Path(pushed).parent.name == recipe["serving"]["model_name"]
    serve = tf.saved_model.load(pushed).signatures["serving_default"]
    outputs = serve(sentence1=tf.constant(["A plane is taking off.", "", "caf\u00e9"]),
                    sentence2=tf.constant(["An air plane is taking off.", "x", "\u4e2d\u6587"]))
    assert set(outputs) == {"score"}
    assert outputs["score"].dtype == tf.float32 and outputs["score"].shape == (3,)
    with pytest.raises(tf.errors.InvalidArgumentError, match="1-D batch of UTF-8 strings"):
        serve(sentence1=tf.constant([["a"]]), sentence2=tf.constant(["b"]))
    # The evaluator's figures are those of the pushed model on the dev slice.
    rows = [line.split("\t") for line in
            (tmp / "STS-B" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    scores = serve(sentence1=tf.constant([row[7] for row in rows]),
                   sentence2=tf.constant([row[8] for row in rows]))["score"].numpy()
    labels = [float(row[9]) for row in rows]
    assert outcome["metrics"]["pearson"] == pytest.approx(metrics.pearson(labels, scores),
                                                          abs=1e-4)
    assert outcome["metrics"]["mse"] == pytest.approx(metrics.mse(labels, scores), rel=1e-4)
    model_config = read_model_config(_newest_model(summary, "FineTuner"))
    assert model_config["task"]["kind"] == "regression"
    assert model_config["task"]["glue_task"] == "STS-B"


def _newest_model(summary, component: str) -> str:
    models_dir = Path(summary["pipeline_root"]) / component / "model"
    return str(max(models_dir.iterdir(), key=lambda p: int(p.name)))


def test_run_fn_and_evaluator_on_mrpc(tmp_path, stsb_run, shared_data):
    """A pair task with a BOM'd file and F1 (CoLA's reader and the Matthews correlation are
    checked above on the real files and by hand)."""
    task, recipe_name, rows, metric = "MRPC", "bert_tiny_mrpc", 100, "f1"
    directory = tmp_path / task
    has_header = glue.get(task).has_header
    _slice(shared_data / "glue" / task / "train.tsv", directory / "train.tsv", rows, has_header)
    _slice(shared_data / "glue" / task / "dev.tsv", directory / "dev.tsv", 40, has_header,
           from_end=True)
    assert (directory / "train.tsv").read_bytes().startswith(UTF8_BOM)
    recipe = load_recipe(recipe_name, TINY_TRAINING + [
        f"data.task.dir={directory}", "finetuning.sequence_length=32"])
    examples = tmp_path / "examples"
    ingestion.ingest(task_input_config(recipe["data"]["task"]), str(examples),
                     beam_pipeline_args=BEAM_ARGS)
    settings = recipe["finetuning"]
    config = trainer_config(recipe, "finetuning", task_record(recipe), serves=True)
    model_uri = tmp_path / "FineTuner" / "model" / "1"
    run_dir = tmp_path / "FineTuner" / "model_run" / "1"
    run_fn_lib.run_fn(types.SimpleNamespace(
        custom_config=config, train_files=[f"{examples}/Split-train/*"],
        eval_files=[f"{examples}/Split-eval/*"],
        base_model=_newest_model(stsb_run[1], "CheckpointImporter"),
        train_steps=settings["steps"], eval_steps=1, model_run_dir=str(run_dir),
        serving_model_dir=str(model_uri / "Format-Serving")))
    assert json.loads((run_dir / "metrics.json").read_text())["loss"] > 0
    outcome = evaluator.evaluate_and_bless(str(model_uri), f"{examples}/Split-eval/*",
                                           {"metric": metric, "threshold": None})
    assert outcome["blessed"] and outcome["metrics"]["examples"] == 40
    assert outcome["official_metrics"].keys() == set(glue.get(task).metrics)
    assert 0.0 <= outcome["official_metrics"]["f1"] <= 1.0
    evaluator.write_report(outcome, str(tmp_path / "evaluation"))
    written = json.loads((tmp_path / "evaluation" / "metrics.json").read_text())
    assert written["official_metrics"] == outcome["official_metrics"]
    assert read_model_config(str(model_uri))["task"]["text_features"] == list(
        glue.get(task).text_features)
