"""The Evaluator's report (confusion matrix, plots, report.md / report.html) and the Trainer's
training-curve callback, its per-interval means and its resume from a checkpoint."""

import base64
import io
import json
import re

import keras
import numpy as np
import pytest
from matplotlib import image as mpimg

from lmfactory.components.evaluator import report
from lmfactory.components.trainer import training_curve as tc

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


# --- confusion matrix -------------------------------------------------------------------


def test_confusion_matrix_hand_computed():
    labels = [0, 0, 1, 2, 2, 3]
    predictions = [0, 1, 1, 2, 0, 2]  # class 3 is never predicted
    matrix = report.confusion_matrix(labels, predictions, num_classes=4)
    assert matrix.dtype == np.int64
    np.testing.assert_array_equal(matrix, [[1, 1, 0, 0],
                                           [0, 1, 0, 0],
                                           [1, 0, 1, 0],
                                           [0, 0, 1, 0]])
    assert matrix[:, 3].sum() == 0 and matrix.sum() == len(labels)


def test_confusion_matrix_rejects_bad_class_ids():
    with pytest.raises(ValueError, match=r"label 5 is outside \[0, 4\)"):
        report.confusion_matrix([0, 5], [0, 1], num_classes=4)
    with pytest.raises(ValueError, match=r"prediction -1 is outside \[0, 2\)"):
        report.confusion_matrix([0, 1], [0, -1], num_classes=2)
    with pytest.raises(ValueError, match="1.5 is not a class id"):
        report.confusion_matrix([0, 1], [0.0, 1.5], num_classes=2)
    with pytest.raises(ValueError, match="3 labels but 2 predictions"):
        report.confusion_matrix([0, 1, 1], [0, 1], num_classes=2)


# --- plots ------------------------------------------------------------------------------


def _read_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    return mpimg.imread(io.BytesIO(data), format="png")


def test_plots_are_real_non_trivial_pngs(tmp_path):
    one = {"steps": [10, 20, 30], "metrics": {"loss": [1.0, 0.6, 0.5]}}
    two = {"steps": [10, 20, 30], "metrics": {"accuracy": [0.5, 0.6, 0.7],
                                              "loss": [1.0, 0.6, 0.5]}}
    report.plot_training_curve(one, str(tmp_path / "one.png"))
    report.plot_training_curve(two, str(tmp_path / "sub" / "two.png"))
    report.plot_confusion_matrix(np.array([[5, 1], [2, 7]]), ["neg", "pos"],
                                 str(tmp_path / "cm.png"))
    one_pixels, two_pixels = _read_png(tmp_path / "one.png"), _read_png(tmp_path / "sub/two.png")
    cm_pixels = _read_png(tmp_path / "cm.png")
    for pixels in (one_pixels, two_pixels, cm_pixels):
        assert pixels.shape[0] > 200 and pixels.shape[1] > 200
        assert pixels[..., :3].std() > 0.05  # something is drawn, not a blank canvas
    assert two_pixels.shape[0] > 1.5 * one_pixels.shape[0]  # one subplot per metric
    with pytest.raises(ValueError, match="no recorded points"):
        report.plot_training_curve({"steps": [], "metrics": {}}, str(tmp_path / "x.png"))
    with pytest.raises(ValueError, match="3 class names for a 2-class"):
        report.plot_confusion_matrix(np.eye(2, dtype=int), ["a", "b", "c"],
                                     str(tmp_path / "x.png"))


# --- the report -------------------------------------------------------------------------


def _outcome(blessed=True, reason="accuracy=0.8000 passes"):
    return {"metric": "accuracy", "value": 0.8,
            "metrics": {"accuracy": 0.8, "matthews_corrcoef": 0.523456, "examples": 10,
                        "per_type": {"PER": {"precision": 0.5, "recall": 1.0, "support": 2},
                                     "LOC": {"precision": 0.25, "recall": 0.125,
                                             "support": 8}},
                        "histogram": [1, 2, 3]},
            "task": "CoLA", "official_metrics": {"matthews_corrcoef": 0.523456},
            "baseline_metrics": {"accuracy": 0.75, "matthews_corrcoef": 0.4},
            "threshold": 0.5, "blessed": blessed, "reason": reason}


CURVE = {"steps": [4, 8, 12], "metrics": {"accuracy": [0.5, 0.6, 0.75],
                                          "loss": [0.9, 0.7, 0.5]}}


def test_report_markdown(tmp_path):
    written = report.write_report(_outcome(), str(tmp_path), curve=CURVE,
                                  confusion=np.array([[3, 1], [2, 4]]),
                                  class_names=["unacceptable", "acceptable"])
    assert set(written) == {"report.md", "report.html", "training_curve.png",
                            "confusion_matrix.png"}
    for path in written.values():
        assert (tmp_path / path.rsplit("/", 1)[-1]).is_file()
    md = (tmp_path / "report.md").read_text()
    assert md.startswith("# Evaluation report: CoLA\n")
    assert "Task: CoLA" in md
    assert "**BLESSED**: accuracy=0.8000 passes" in md and "NOT BLESSED" not in md
    assert "Blessing metric: accuracy = 0.8000; threshold 0.5000; baseline 0.7500" in md
    official = md.split("## Official metrics")[1].split("##")[0]
    assert "| matthews_corrcoef | 0.5235 |" in official and "accuracy" not in official
    assert "| metric | value | baseline |" in md
    assert "| accuracy | 0.8000 | 0.7500 |" in md
    assert "| examples | 10 | — |" in md
    # the per-type breakdown as a nested table, a list as JSON
    assert "| name | precision | recall | support |" in md
    assert "| LOC | 0.2500 | 0.1250 | 8 |" in md
    assert re.search(r"### histogram\n\n```json\n\[\n  1,", md)
    # the confusion matrix, rows true and columns predicted
    assert "| true \\ predicted | unacceptable | acceptable |" in md
    assert "| unacceptable | 3 | 1 |\n| acceptable | 2 | 4 |" in md
    assert "![confusion matrix](confusion_matrix.png)" in md
    assert "![training curve](training_curve.png)" in md
    assert "| metric | first (step 4) | last (step 12) |" in md
    assert "| loss | 0.9000 | 0.5000 |" in md and "| accuracy | 0.5000 | 0.7500 |" in md
    assert md.index("| loss | 0.9000") < md.index("| accuracy | 0.5000")  # loss first


def test_report_html_is_self_contained_and_escaped(tmp_path):
    reason = "<script>alert('x')</script> worse than the baseline"
    report.write_report(_outcome(blessed=False, reason=reason), str(tmp_path), curve=CURVE,
                        confusion=np.array([[3, 1], [2, 4]]))
    page = (tmp_path / "report.html").read_text()
    assert "<script>" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; worse than the baseline" in page
    assert "NOT BLESSED</strong>" in page
    assert "<td>matthews_corrcoef</td><td>0.5235</td>" in page
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 2
    for data in images:
        assert base64.b64decode(data)[:8] == PNG_SIGNATURE
    assert base64.b64decode(images[0]) == (tmp_path / "confusion_matrix.png").read_bytes()
    assert "confusion_matrix.png" not in page  # no links to files beside it
    md = (tmp_path / "report.md").read_text()
    assert "**NOT BLESSED**: <script>" in md
    assert "| true \\ predicted | 0 | 1 |" in md  # default class names are the ids


def test_report_without_curve_or_confusion(tmp_path):
    outcome = dict(_outcome(), task=None, official_metrics={}, baseline_metrics=None)
    written = report.write_report(outcome, str(tmp_path / "eval"))
    assert set(written) == {"report.md", "report.html"}
    md = (tmp_path / "eval" / "report.md").read_text()
    assert md.startswith("# Evaluation report\n") and "Task: n/a" in md
    assert "No official metrics" in md and "| metric | value |\n" in md
    assert "baseline" not in md and "Confusion matrix" not in md and "Training curve" not in md
    assert "data:image/png" not in (tmp_path / "eval" / "report.html").read_text()


# --- the training curve -----------------------------------------------------------------


def test_default_interval_and_curve_files(tmp_path):
    assert tc.default_interval(1000) == 10
    assert tc.default_interval(50) == 1 and tc.default_interval(0) == 1
    assert tc.default_interval(1000, points=20) == 50
    path = str(tmp_path / "state" / "curve.json")
    assert tc.load_curve(path) is None
    tc.save_curve({"steps": [2, 4], "metrics": {"loss": [1.5, float("nan")]}}, path)
    assert tc.load_curve(path) == {"steps": [2, 4], "metrics": {"loss": [1.5, None]}}
    assert [p.name for p in (tmp_path / "state").iterdir()] == ["curve.json"]  # no temp left


@pytest.mark.parametrize("text, problem", [
    ("not json", "not JSON"),
    ('[1, 2]', "expected a JSON object"),
    ('{"steps": [4, 2], "metrics": {}}', "strictly increasing"),
    ('{"steps": [4], "metrics": {"loss": [1.0, 2.0]}}', "has 2 values for 1 steps"),
    ('{"steps": [4], "metrics": {"loss": ["a"]}}', "list of numbers"),
    ('{"steps": [4], "metrics": {}, "pending": {"step": 5}}', "'pending' must hold"),
])
def test_malformed_curve_file(tmp_path, text, problem):
    path = tmp_path / "curve.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"Malformed training curve {re.escape(str(path))}: "
                                         f".*{re.escape(problem)}"):
        tc.load_curve(str(path))


X = np.random.default_rng(0).normal(size=(8, 3)).astype("float32")
Y = (X @ np.array([[1.0], [-2.0], [0.5]], "float32") + 0.3).astype("float32")


def _model():
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.02), loss="mse", metrics=["mae"])
    return model


def _data():
    import tensorflow as tf

    return tf.data.Dataset.from_tensors((X, Y)).repeat()  # the same full batch every step


class StepLosses(keras.callbacks.Callback):
    """The loss and MAE of each global step, computed directly from the weights the step
    starts from (independent of Keras's running means); a step trained again overwrites."""

    def __init__(self):
        super().__init__()
        self.by_step = {}

    def on_train_batch_begin(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy()) + 1
        error = self.model(X).numpy() - Y
        self.by_step[step] = {"loss": float(np.mean(error ** 2)),
                              "mae": float(np.mean(np.abs(error)))}


def _interval_means(by_step, bounds, name):
    return [np.mean([by_step[s][name] for s in range(start + 1, end + 1)])
            for start, end in bounds]


class KillAt(keras.callbacks.Callback):
    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == self.step:
            raise RuntimeError("killed")


def test_training_curve_records_interval_means():
    model, losses, curve = _model(), StepLosses(), tc.TrainingCurve(every_n_steps=4)
    model.fit(_data(), epochs=2, steps_per_epoch=6, callbacks=[losses, curve], verbose=0)
    assert curve.curve["steps"] == [4, 8, 12]
    assert set(curve.curve["metrics"]) == {"loss", "mae"}
    bounds = [(0, 4), (4, 8), (8, 12)]
    expected = _interval_means(losses.by_step, bounds, "loss")
    np.testing.assert_allclose(curve.curve["metrics"]["loss"], expected, rtol=1e-5)
    np.testing.assert_allclose(curve.curve["metrics"]["mae"],
                               _interval_means(losses.by_step, bounds, "mae"), rtol=1e-5)
    # The check can tell the interval mean (5..8, across the epoch boundary) from Keras's
    # running mean of the second epoch (7..8) and from the last step's loss.
    epoch_two_running = np.mean([losses.by_step[s]["loss"] for s in (7, 8)])
    assert abs(expected[1] - epoch_two_running) > 1e-3 * expected[1]
    assert abs(expected[1] - losses.by_step[8]["loss"]) > 1e-3 * expected[1]
    assert expected[0] > expected[2]


def test_training_curve_records_the_last_partial_interval():
    model, losses, curve = _model(), StepLosses(), tc.TrainingCurve(every_n_steps=4)
    model.fit(_data(), epochs=2, steps_per_epoch=5, callbacks=[losses, curve], verbose=0)
    assert curve.curve["steps"] == [4, 8, 10]
    np.testing.assert_allclose(curve.curve["metrics"]["loss"],
                               _interval_means(losses.by_step, [(0, 4), (4, 8), (8, 10)],
                                               "loss"), rtol=1e-5)


def test_training_curve_resumes_with_backup_and_restore(tmp_path):
    state, backup = str(tmp_path / "curve.json"), str(tmp_path / "backup")
    model, losses = _model(), StepLosses()
    with pytest.raises(RuntimeError, match="killed"):
        model.fit(_data(), epochs=2, steps_per_epoch=6, verbose=0,
                  callbacks=[losses, tc.TrainingCurve(4, state),
                             keras.callbacks.BackupAndRestore(backup), KillAt(9)])
    saved = tc.load_curve(state)  # written at the end of epoch 1
    assert saved["steps"] == [4] and saved["pending"]["step"] == 6
    assert saved["pending"]["count"] == 2
    assert int(model.optimizer.iterations.numpy()) == 9

    curve = tc.TrainingCurve(4, state)  # before BackupAndRestore: loads, trims after restore
    model.fit(_data(), epochs=2, steps_per_epoch=6, verbose=0,
              callbacks=[losses, curve, keras.callbacks.BackupAndRestore(backup)])
    assert int(model.optimizer.iterations.numpy()) == 12
    assert curve.curve["steps"] == [4, 8, 12]
    # Point 8 joins steps 5-6 of the killed run with steps 7-8 of the resumed one.
    np.testing.assert_allclose(
        curve.curve["metrics"]["loss"],
        _interval_means(losses.by_step, [(0, 4), (4, 8), (8, 12)], "loss"), rtol=1e-5)
    assert tc.load_curve(state) == curve.curve  # the final curve, nothing pending


def test_training_curve_drops_points_after_the_restored_step(tmp_path):
    state = str(tmp_path / "curve.json")
    model = _model()
    model.fit(_data(), epochs=2, steps_per_epoch=6, verbose=0,
              callbacks=[tc.TrainingCurve(4, state)])
    assert tc.load_curve(state)["steps"] == [4, 8, 12]
    first_point = tc.load_curve(state)["metrics"]["loss"][0]

    model.optimizer.iterations.assign(6)  # as if the checkpoint were the one of epoch 1
    losses, curve = StepLosses(), tc.TrainingCurve(4, state)
    model.fit(_data(), epochs=2, initial_epoch=1, steps_per_epoch=6, verbose=0,
              callbacks=[losses, curve])
    assert curve.curve["steps"] == [4, 8, 12]  # no duplicates
    assert curve.curve["metrics"]["loss"][0] == first_point
    # steps 5-6 were never seen by this run: point 8 is the mean of 7-8 alone
    np.testing.assert_allclose(
        curve.curve["metrics"]["loss"][1:],
        _interval_means(losses.by_step, [(6, 8), (8, 12)], "loss"), rtol=1e-5)


def test_training_curve_reports_a_malformed_state_file(tmp_path):
    state = tmp_path / "curve.json"
    state.write_text(json.dumps({"steps": [4], "metrics": {"loss": [1.0, 0.5]}}))
    with pytest.raises(ValueError, match=f"Malformed training curve {re.escape(str(state))}"):
        _model().fit(_data(), epochs=1, steps_per_epoch=2, verbose=0,
                     callbacks=[tc.TrainingCurve(1, str(state))])
    with pytest.raises(ValueError, match="every_n_steps must be at least 1"):
        tc.TrainingCurve(0)
