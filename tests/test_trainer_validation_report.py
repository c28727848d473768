"""The evaluation report plots the validation loss and metric, evaluated at each
checkpoint, beside the training curve and names the kept (best) checkpoint."""

import io

import matplotlib.image as mpimg
import numpy as np

from lmfactory.components.evaluator import report

TRAINING = {"steps": [2, 4, 6, 8, 10], "metrics": {"loss": [1.0, 0.7, 0.5, 0.35, 0.2],
                                                   "accuracy": [0.5, 0.6, 0.7, 0.8, 0.9]}}
VALIDATION = {"steps": [5, 10], "metrics": {"loss": [0.6, 0.9], "accuracy": [0.72, 0.64]}}


def _pixels(data: bytes) -> np.ndarray:
    return mpimg.imread(io.BytesIO(data), format="png")


def test_report_plots_validation_beside_training_and_names_the_kept_checkpoint(tmp_path):
    curve = {**TRAINING, "validation": VALIDATION,
             "best": {"step": 5, "monitor": "val_loss", "value": 0.6}}
    written = report.write_report({"metric": "accuracy", "value": 0.72, "metrics": {},
                                   "blessed": True, "reason": "ok"}, str(tmp_path), curve=curve)
    assert "training_curve.png" in written
    md = (tmp_path / "report.md").read_text()
    section = md.split("### Validation at each checkpoint")[1]
    assert "evaluated at 2 checkpoints (steps 5 to 10)" in section
    assert "| metric | first (step 5) | kept (step 5) | last (step 10) |" in section
    assert "| loss | 0.6000 | 0.6000 | 0.9000 |" in section
    assert "| accuracy | 0.7200 | 0.7200 | 0.6400 |" in section
    assert "Kept checkpoint: step 5, the best val_loss (0.6000)" in section
    # The plot draws more than the training curve alone: the validation lines and the marker.
    with_validation = _pixels(report._training_curve_png(curve))
    training_only = _pixels(report._training_curve_png(TRAINING))
    assert with_validation.shape == training_only.shape  # one subplot per metric in both
    assert np.abs(with_validation - training_only).sum() > 100
    # A validation-only metric gets its own subplot.
    extra = {**TRAINING, "validation": {"steps": [5], "metrics": {"f1": [0.5]}}}
    assert _pixels(report._training_curve_png(extra)).shape[0] > training_only.shape[0]


def test_report_without_validation_has_no_validation_section(tmp_path):
    report.write_report({"metric": "accuracy", "value": 0.7, "metrics": {}, "blessed": True,
                         "reason": "ok"}, str(tmp_path), curve=TRAINING)
    assert "Validation at each checkpoint" not in (tmp_path / "report.md").read_text()
