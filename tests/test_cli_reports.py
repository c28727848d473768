"""Command-line friction: what a MODEL argument names, the exported model of an
unblessed run, the real size of an imported checkpoint, and metrics that say what they mean
(f1's class, the Evaluator's vs the FineTuner's accuracy, SQuAD 2.0 figures at a threshold
tuned on the scored split beside held-out ones)."""

import json
import os
import shutil

import pytest

from lmfactory.cli import describe, model_paths
from lmfactory.components.evaluator import metrics as metric_lib
from lmfactory.components.evaluator import report as report_lib
from lmfactory.components.evaluator import squad_metrics


def _saved_model(folder, content="graph"):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "saved_model.pb"), "w") as f:
        f.write(content)
    return str(folder)


def _artifact(folder, content):
    _saved_model(os.path.join(folder, "Format-Serving"), content)
    os.makedirs(os.path.join(folder, "keras"), exist_ok=True)
    with open(os.path.join(folder, "keras", "model_config.json"), "w") as f:
        json.dump({"task": {"kind": "classification"}}, f)
    return str(folder)


def test_model_arguments_resolve_to_saved_models_and_artifacts(tmp_path):
    run = tmp_path / "runs" / "r"
    old = _artifact(run / "pipeline" / "FineTuner" / "model" / "4", "old")
    new = _artifact(run / "pipeline" / "FineTuner" / "model" / "9", "new")
    pretrained = _artifact(run / "pipeline" / "Pretrainer" / "model" / "2", "pre")
    serving = run / "serving" / "r"
    _saved_model(serving / "100", "old")
    _saved_model(serving / "2000", "pre")  # the newest version: TF Serving serves it
    (serving / "3000").mkdir()  # incomplete (no saved_model.pb): skipped
    saved = model_paths.saved_model_dir
    assert saved(str(serving)) == str(serving / "2000")
    assert saved(str(run / "serving")) == str(serving / "2000")
    assert saved(old) == os.path.join(old, "Format-Serving")
    assert saved(str(serving / "100")) == str(serving / "100")
    assert saved(str(run)) == str(serving / "2000")  # a run folder: what it pushed
    artifact = model_paths.model_artifact
    assert artifact(str(serving / "100")) == old  # the artifact it was pushed from
    assert artifact(str(serving)) == pretrained
    assert artifact(os.path.join(new, "Format-Serving")) == new
    assert artifact(str(run)) == new  # no evaluation yet: the newest FineTuner model
    report = run / "pipeline" / "LMEvaluator" / "evaluation" / "12" / "metrics.json"
    report.parent.mkdir(parents=True)
    report.write_text(json.dumps({"blessed": False, "model": old}))
    assert artifact(str(run)) == old  # what the newest evaluation scored
    shutil.rmtree(run / "serving")
    assert saved(str(run)) == os.path.join(old, "Format-Serving")  # nothing pushed
    # a stage that only feeds a later one has keras/ and no SavedModel: said in one line
    feeding = run / "pipeline" / "Distiller" / "model" / "3"
    os.makedirs(feeding / "keras")
    (feeding / "keras" / "model_config.json").write_text('{"task": {"kind": "language_model"}}')
    with pytest.raises(model_paths.ModelPathError, match="runtime.export_every_stage: true"):
        saved(str(feeding))
    stray = _saved_model(tmp_path / "elsewhere" / "1", "lonely")
    with pytest.raises(model_paths.ModelPathError, match="without its Model artifact"):
        artifact(stray)
    (tmp_path / "empty").mkdir()
    with pytest.raises(model_paths.ModelPathError, match="is not a model"):
        saved(str(tmp_path / "empty"))


def test_an_unblessed_run_names_its_exported_model(tmp_path):
    from lmfactory.pipelines import runners

    layout = runners.local_layout({"name": "r"}, str(tmp_path))
    report = os.path.join(layout["pipeline_root"], "LMEvaluator", "evaluation", "7",
                          "metrics.json")
    os.makedirs(os.path.dirname(report))
    model = os.path.join(layout["pipeline_root"], "FineTuner", "model", "5")
    with open(report, "w") as f:
        json.dump({"blessed": False, "model": model, "metrics": {}, "reason": "below"}, f)
    summary = runners.summarize_local_run({"serving": {"model_name": "r"}}, layout)
    assert summary["pushed_model"] is None
    assert summary["exported_model"] == os.path.join(model, "Format-Serving")
    assert summary["evaluation_report"] is None  # no report.md written
    open(os.path.join(os.path.dirname(report), "report.md"), "w").close()
    summary = runners.summarize_local_run({"serving": {"model_name": "r"}}, layout)
    assert summary["evaluation_report"] == os.path.join(os.path.dirname(report), "report.md")


def test_an_imported_checkpoint_is_described_by_its_own_sizes(tmp_path):
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({
        "model_type": "bert", "num_hidden_layers": 6, "hidden_size": 384,
        "num_attention_heads": 12, "vocab_size": 30522}))
    recipe = {"architecture": "bert", "preset": "tiny",
              "pretraining": {"init_checkpoint": str(hf)}}
    assert describe.describe_model(recipe) == (
        f"bert from checkpoint {hf}: 6 layers, hidden 384, 12 heads, vocabulary 30522")
    native = tmp_path / "native"
    native.mkdir()
    (native / "config.json").write_text(json.dumps({
        "format": "lmfactory.backbone", "config": {"num_layers": 2, "hidden_dim": 64}}))
    assert describe.checkpoint_sizes(str(native)) == {"layers": 2, "hidden": 64}
    assert describe.describe_model(dict(recipe, pretraining={})) == "bert/tiny"


def test_metric_meanings_and_notes():
    mrpc = {"kind": "classification", "label_vocabulary": ["different", "paraphrase"]}
    assert "F1 of class 1 ('paraphrase')" in metric_lib.describe("f1", mrpc)
    assert "F1 of class 1 against" in metric_lib.describe("f1", {"kind": "classification"})
    assert "token-overlap" in metric_lib.describe("f1", {"kind": "span_qa"})
    notes = metric_lib.notes({"accuracy": 0.8, "examples": 872}, mrpc)
    assert len(notes) == 1 and "872 examples of eval once" in notes[0]
    assert "eval_steps whole batches" in notes[0]
    squad2 = {"kind": "span_qa", "version": "2.0", "null_threshold": 1.5}
    tuned, = metric_lib.notes({"f1": 60.0}, squad2)
    assert "null_threshold = 1.5" in tuned and "tuned-split figures" in tuned
    new, = metric_lib.notes({"f1": 60.0}, squad2, split="new.json", tuned_on_scored=False)
    assert "on new.json, which it never saw" in new


def test_held_out_threshold_scores_never_tune_on_the_scored_question():
    """Questions whose best threshold fits only themselves: tuned on the scored split the
    score is perfect, held out it is not."""
    gold, spans, margins = {}, {}, {}
    for i in range(12):
        qid = f"q{i}"
        answerable = i % 2 == 0
        gold[qid] = ["paris"] if answerable else []
        spans[qid] = "paris" if answerable else "rome"
        # Answerable questions have low margins, unanswerable high: one threshold separates
        # them on the whole set; the halves differ in where the boundary falls.
        margins[qid] = float(i) if answerable else float(i) - 0.5
    _, tuned = squad_metrics.best_no_answer_threshold(gold, spans, margins, "f1")
    held = squad_metrics.held_out_threshold_scores(gold, spans, margins)
    assert held["held_out_folds"] == 2
    assert 0.0 <= held["held_out_f1"] < tuned
    folds = {qid: squad_metrics._fold(qid, 2) for qid in gold}
    # Re-derive the held-out F1 by hand from the two folds.
    expected = 0.0
    for fold in (0, 1):
        tuning = {q: a for q, a in gold.items() if folds[q] != fold}
        threshold, _ = squad_metrics.best_no_answer_threshold(tuning, spans, margins, "f1")
        for qid in (q for q in gold if folds[q] == fold):
            prediction = spans[qid] if margins[qid] <= threshold else ""
            expected += squad_metrics.question_scores(prediction, gold[qid])[1]
    assert held["held_out_f1"] == pytest.approx(100.0 * expected / len(gold))
    assert squad_metrics.held_out_threshold_scores({"a": ["x"]}, {"a": "x"}, {"a": 0.0}) == {}


def test_report_shows_meanings_and_notes(tmp_path):
    outcome = {"metric": "accuracy", "value": 0.8, "blessed": True, "reason": "passes",
               "metrics": {"accuracy": 0.8, "f1": 0.75, "examples": 10},
               "meanings": {"f1": "F1 of class 1 ('yes') against all others"},
               "notes": ["accuracy counts each of the 10 examples of eval once."]}
    written = report_lib.write_report(outcome, str(tmp_path))
    text = open(written["report.md"]).read()
    assert "| metric | value | meaning |" in text
    assert "| f1 | 0.7500 | F1 of class 1 ('yes') against all others |" in text
    assert "accuracy counts each of the 10 examples of eval once." in text


def test_run_prints_the_checkpoint_size_meanings_and_the_unpushed_model(tmp_path, capsys,
                                                                        monkeypatch):
    from lmfactory import cli
    from lmfactory.pipelines import runners

    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({"model_type": "bert", "num_hidden_layers": 6,
                                                "hidden_size": 384}))
    exported = str(tmp_path / "FineTuner" / "model" / "5" / "Format-Serving")
    outcome = {"blessed": False, "reason": "accuracy=0.5000 does not pass threshold 0.8",
               "metrics": {"accuracy": 0.5, "examples": 8,
                           "confusion_matrix": {"labels": ["0", "1"], "matrix": [[4, 0],
                                                                                 [4, 0]]}},
               "meanings": {"accuracy": "fraction right"}, "notes": ["a note"]}
    monkeypatch.setattr(runners, "run_local", lambda recipe, output_dir, enable_cache: {
        "evaluation": outcome, "pushed_model": None, "exported_model": exported,
        "evaluation_report": "/r/report.md"})
    assert cli.main(["run", "bert_tiny_sst2", "--output-dir", str(tmp_path / "runs"),
                     "--set", f"pretraining.init_checkpoint={hf}"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"Running recipe bert_tiny_sst2 (bert from checkpoint {hf}: "
                             f"6 layers, hidden 384) locally")
    assert out[-7:] == ["accuracy: 0.5000  - fraction right", "examples: 8", "note: a note",
                        "blessed: False (accuracy=0.5000 does not pass threshold 0.8)",
                        "evaluation report: /r/report.md", "pushed model: none (not blessed)",
                        f"exported model (not pushed): {exported}"]


def test_a_keras_file_keras_refuses_is_one_line_naming_it(tmp_path):
    """Safe mode's refusal of stored Python code, and a class Keras cannot find, are a
    one-line ValueError naming the file (`lmfactory evaluate` / `few-shot` print it)."""
    import zipfile

    import keras

    from lmfactory.components.trainer.model_artifact import load_task_model

    inputs = keras.Input((3,))
    lambda_model = keras.Model(inputs, keras.layers.Lambda(lambda x: x * 2)(inputs))
    artifact = tmp_path / "artifact"
    (artifact / "keras").mkdir(parents=True)
    path = artifact / "keras" / "model.keras"
    lambda_model.save(path)
    with pytest.raises(ValueError) as refused:
        load_task_model(str(artifact))
    message = str(refused.value)
    assert len(message.splitlines()) == 1 and str(path) in message and "safe mode" in message

    dense = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    dense.save(path)
    with zipfile.ZipFile(path) as archive:  # the same file naming a class nobody registered
        files = {name: archive.read(name) for name in archive.namelist()}
    files["config.json"] = files["config.json"].replace(b'"Dense"', b'"NoSuchLayer"')
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    with pytest.raises(ValueError) as unknown:
        load_task_model(str(artifact))
    message = str(unknown.value)
    assert len(message.splitlines()) == 1 and "NoSuchLayer" in message
