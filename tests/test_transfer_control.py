"""The transfer control's recipe fields, DAG wiring, blessing rule and report (the DAG run
itself: tests/test_pipeline_e2e.py's BERT run carries a control)."""

import json
from pathlib import Path

import pytest

from lmfactory.components.evaluator import executor as evaluator
from lmfactory.components.evaluator import transfer
from lmfactory.components.evaluator.report import write_report
from lmfactory.pipelines.pipeline import create_components
from lmfactory.recipe import RecipeError, load_recipe


@pytest.mark.parametrize("overrides, field, message", [
    (["evaluation.control=pretrained"], "evaluation.control", "must be one of"),
    (["evaluation.control=from_scratch", "pretraining=null"], "evaluation.control",
     "no pretrained model to compare"),
    (["evaluation.require_transfer_gain=true"], "evaluation.require_transfer_gain",
     "needs evaluation.control: from_scratch"),
    (["evaluation.control=from_scratch", "evaluation.require_transfer_gain=1"],
     "evaluation.require_transfer_gain", "must be true or false"),
])
def test_control_recipe_errors_name_the_field(overrides, field, message):
    with pytest.raises(RecipeError, match=message) as error:
        load_recipe("bert_tiny_sst2", overrides)
    assert error.value.field == field
    assert "\n" not in str(error.value)


REPO = Path(__file__).resolve().parent.parent


def _by_id(recipe):
    return {component.id: component for component in create_components(recipe, "/tmp/serving")}


@pytest.mark.parametrize("name, stage", [("bert_tiny_sst2", "FineTuner"),
                                         ("tinybert_tiny_sst2", "TaskDistiller"),
                                         ("ulmfit_sst2", "FineTuner"),
                                         ("ernie_fb15k237_sst2", "FineTuner"),
                                         ("minilm_sst2", "FineTuner")])
def test_the_control_trains_the_same_stage_from_a_fresh_backbone_like_the_pretrained(
        name, stage, monkeypatch):
    monkeypatch.chdir(REPO)  # the recipes' data paths are relative to the repository
    plain = _by_id(load_recipe(name))
    assert not {"ControlInitializer", "Control", "ControlTaskDistiller"} & set(plain)
    assert "control_model" not in plain["LMEvaluator"].inputs
    components = _by_id(load_recipe(name, ["evaluation.control=from_scratch",
                                           "evaluation.require_transfer_gain=true"]))
    finetuner = components[stage]
    control = components["Control" + ("TaskDistiller" if stage == "TaskDistiller" else "")]
    initializer = components["ControlInitializer"]
    # the fresh backbone is shaped like the model the fine-tuning starts from
    assert initializer.inputs["base_model"] is finetuner.inputs["base_model"]
    assert control.inputs["base_model"] is initializer.outputs["model"]
    # same data, settings, schedule and seed; only the starting weights differ
    assert control.inputs["examples"] is finetuner.inputs["examples"]
    assert control.exec_properties["custom_config"] == finetuner.exec_properties[
        "custom_config"]
    assert control.exec_properties["train_args"] == finetuner.exec_properties["train_args"]
    config = json.loads(finetuner.exec_properties["custom_config"])
    assert config["export_serving"] is True  # the Evaluator scores its serving model
    evaluator_component = components["LMEvaluator"]
    assert evaluator_component.inputs["control_model"] is control.outputs["model"]
    assert json.loads(evaluator_component.exec_properties["config"])[
        "require_transfer_gain"] is True
    assert initializer.exec_properties["seed"] == load_recipe(name)["runtime"]["seed"]


def test_gains_cover_every_scalar_metric_and_the_rule_follows_its_direction():
    results = {"accuracy": 0.8, "macro_f1": 0.7, "examples": 60, "name": "x",
               "confusion_matrix": {"matrix": [[1]]}, "flag": True}
    control = {"accuracy": 0.75, "macro_f1": 0.72, "examples": 60, "name": "y"}
    gain = transfer.gains(results, control)
    assert gain == pytest.approx({"accuracy": 0.05, "macro_f1": -0.02, "examples": 0.0})
    assert transfer.passes("accuracy", 0.05, True)[0] is True
    assert transfer.passes("accuracy", 0.0, True)[0] is False
    assert transfer.passes("perplexity", -3.0, False)[0] is True  # lower is better
    assert transfer.passes("perplexity", 2.0, False)[0] is False
    assert transfer.passes("accuracy", None, True)[0] is False


def test_blessing_can_require_a_transfer_gain(monkeypatch):
    scores = {"model": {"accuracy": 0.6}, "control": {"accuracy": 0.7}}
    monkeypatch.setattr(evaluator, "evaluate", lambda uri, pattern, config: dict(scores[uri]))
    monkeypatch.setattr(evaluator, "_model_config", lambda uri: {"task": {"kind": "x"}})
    config = {"metric": "accuracy", "threshold": 0.5}
    kept = evaluator.evaluate_and_bless("model", "*", config, control_uri="control")
    assert kept["blessed"] is True  # the gain is reported, not required
    assert kept["transfer_gain"]["accuracy"] == pytest.approx(-0.1)
    assert kept["control_metrics"] == {"accuracy": 0.7}
    refused = evaluator.evaluate_and_bless("model", "*", {**config,
                                                          "require_transfer_gain": True},
                                           control_uri="control")
    assert refused["blessed"] is False
    assert refused["reason"].startswith("the pretrained model does not beat")
    scores["control"] = {"accuracy": 0.55}
    assert evaluator.evaluate_and_bless("model", "*", {**config, "require_transfer_gain":
                                                       True}, control_uri="control")["blessed"]


def _curve(losses):
    steps = list(range(1, len(losses) + 1))
    return {"steps": steps, "metrics": {"loss": losses},
            "validation": {"steps": steps, "metrics": {"loss": losses,
                                                       "accuracy": [0.5] * len(losses)}}}


def test_report_shows_both_models_the_gain_and_both_validation_curves(tmp_path):
    outcome = {"metric": "accuracy", "value": 0.8, "metrics": {"accuracy": 0.8},
               "control_metrics": {"accuracy": 0.7}, "transfer_gain": {"accuracy": 0.1},
               "transfer_reason": "the pretrained model beats the from-scratch control",
               "blessed": True, "reason": "passes", "task": "classification"}
    written = write_report(outcome, str(tmp_path), curve=_curve([0.9, 0.6, 0.5]),
                           control_curve=_curve([0.9, 0.8, 0.75]))
    report = (tmp_path / "report.md").read_text()
    assert "| accuracy | 0.8000 | 0.7000 | +0.1000 |" in report
    assert "0.8000 pretrained, 0.7000 from scratch, transfer gain +0.1000" in report
    assert "transfer_curves.png" in written
    assert (tmp_path / "transfer_curves.png").read_bytes()[:4] == b"\x89PNG"
    assert "data:image/png;base64" in (tmp_path / "report.html").read_text()
    without = write_report({k: v for k, v in outcome.items() if "control" not in k
                            and "transfer" not in k}, str(tmp_path / "plain"),
                           curve=_curve([0.9, 0.6]))
    assert "transfer_curves.png" not in without
