"""The Trainer's checkpointed fit (components/trainer/fit_loop.py): exactly the
steps asked (also after a resume), validation at every checkpoint recorded in the training
curve, ``keep: best``, and progress lines within an interval (with a fake clock).

The model is one weight ``w`` (a bias-free Dense on the constant input 1) trained by SGD
towards 2 while the eval split's target is 1: ``w_t = 2 (1 - 0.9^t)`` with learning rate
0.05 and MSE, so the validation loss ``(w - 1)^2`` falls, is lowest at step 6 among the
even steps, then rises: overfitting with a known best checkpoint.
"""

import logging
import time
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmfactory.components.trainer import fit_loop
from lmfactory.components.trainer.config import TrainerConfig
from lmfactory.components.trainer.progress import ProgressLogger, format_duration
from lmfactory.components.trainer.training_curve import load_curve, save_curve


def _data(target: float) -> tf.data.Dataset:
    x = np.ones((16, 1), "float32")
    return tf.data.Dataset.from_tensor_slices((x, target * x)).repeat().batch(4)


def _model():
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(
        1, use_bias=False, kernel_initializer="zeros")])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
    return model


def _w(step: int) -> float:
    return 2.0 * (1.0 - 0.9 ** step)


class _Interrupt(keras.callbacks.Callback):
    """Raises at the start of a given epoch: a run killed after that many checkpoints."""

    def __init__(self, epoch: int):
        super().__init__()
        self.epoch = epoch

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.epoch:
            raise KeyboardInterrupt("killed")


def _fit(backup, steps, every, keep="last", extra=(), monitor="loss"):
    model = _model()
    settings = fit_loop.FitSettings(total_steps=steps, steps_per_checkpoint=every,
                                    eval_steps=1, batch_size=4, keep=keep, monitor=monitor)
    metrics, curve = fit_loop.fit_checkpointed(model, _data(2.0), _data(1.0), settings,
                                               str(backup), extra_callbacks=extra)
    return model, metrics, curve


@pytest.mark.parametrize("steps,every", [(11, 4), (5, 7)])
def test_trains_exactly_the_steps_asked_also_after_a_resume(tmp_path, steps, every, caplog):
    caplog.set_level(logging.INFO)
    model, metrics, curve = _fit(tmp_path / "straight", steps, every)
    assert int(model.optimizer.iterations) == steps
    assert model.get_weights()[0][0, 0] == pytest.approx(_w(steps), rel=1e-5)
    # A validation point at every checkpoint, the last one at exactly `steps`.
    expected = list(range(every, steps, every)) + [steps]
    assert curve["validation"]["steps"] == expected
    assert curve["validation"]["metrics"]["loss"] == pytest.approx(
        [(_w(s) - 1) ** 2 for s in expected], rel=1e-4, abs=1e-7)
    assert metrics["loss"] == pytest.approx((_w(steps) - 1) ** 2, rel=1e-4, abs=1e-7)
    assert curve["steps"][-1] == steps
    if steps > every and steps % every:
        assert f"the last after {steps % every}" in caplog.text
    if steps <= every:
        return
    # Killed after the first checkpoint, run again: resumes there, ends at exactly `steps`.
    with pytest.raises(KeyboardInterrupt):
        _fit(tmp_path / "resumed", steps, every, extra=[_Interrupt(1)])
    caplog.clear()
    model, _, resumed_curve = _fit(tmp_path / "resumed", steps, every)
    assert f"at step {every} of {steps}" in caplog.text
    assert int(model.optimizer.iterations) == steps
    assert model.get_weights()[0][0, 0] == pytest.approx(_w(steps), rel=1e-5)
    assert resumed_curve["validation"] == curve["validation"]
    assert not (tmp_path / "resumed").exists()  # the backup is removed at the end


def test_a_half_written_checkpoint_metadata_resumes_from_the_checkpoint_before_it(tmp_path,
                                                                                 caplog):
    """A kill while Keras writes training_metadata.json leaves it half-written beside the
    next interval's weights: the run resumes from the previous pair Keras keeps (.bkp), and
    without one starts over; either way it ends exactly where an uninterrupted run does."""
    caplog.set_level(logging.INFO)
    backup = tmp_path / "b"
    with pytest.raises(KeyboardInterrupt):  # killed after the checkpoints of steps 2 and 4
        _fit(backup, 8, 2, extra=[_Interrupt(2)])
    metadata = backup / fit_loop.BACKUP_METADATA
    assert fit_loop.checkpointed_epochs(str(backup)) == 2
    metadata.write_text('{"epoch": ')  # the kill came while it was written
    model, _, _ = _fit(backup, 8, 2)
    assert "resuming from the checkpoint before it" in caplog.text
    assert "at step 2 of 8" in caplog.text
    assert model.get_weights()[0][0, 0] == pytest.approx(_w(8), rel=1e-5)

    with pytest.raises(KeyboardInterrupt):
        _fit(backup, 8, 2, extra=[_Interrupt(1)])
    metadata.write_text("")
    for name in (fit_loop.BACKUP_METADATA, fit_loop.BACKUP_WEIGHTS):
        previous = backup / (name + fit_loop.PREVIOUS_SUFFIX)
        if previous.exists():
            previous.unlink()
    caplog.clear()
    model, _, _ = _fit(backup, 8, 2)
    assert "training starts over" in caplog.text and "Resuming" not in caplog.text
    assert int(model.optimizer.iterations) == 8
    assert model.get_weights()[0][0, 0] == pytest.approx(_w(8), rel=1e-5)


def test_weights_written_without_their_metadata_resume_from_the_checkpoint_before(tmp_path,
                                                                              caplog):
    """A kill after Keras wrote an interval's weights but before it wrote their metadata
    leaves newer weights beside the previous interval's step (after the first interval,
    beside no metadata at all): the run resumes from the previous pair, or starts over,
    and ends exactly where an uninterrupted run does."""
    import shutil

    caplog.set_level(logging.INFO)
    backup, ahead = tmp_path / "b", tmp_path / "ahead"
    with pytest.raises(KeyboardInterrupt):  # the checkpoints of steps 2 and 4
        _fit(backup, 8, 2, extra=[_Interrupt(2)])
    with pytest.raises(KeyboardInterrupt):  # the weights of step 6
        _fit(ahead, 8, 2, extra=[_Interrupt(3)])
    # The next checkpoint as Keras writes it, killed before the metadata: the pair copied to
    # .bkp, then the weights of step 6.
    for name in (fit_loop.BACKUP_WEIGHTS, fit_loop.BACKUP_METADATA):
        shutil.copy(backup / name, backup / (name + fit_loop.PREVIOUS_SUFFIX))
    time.sleep(0.01)
    shutil.copy(ahead / fit_loop.BACKUP_WEIGHTS, backup / fit_loop.BACKUP_WEIGHTS)
    model, _, _ = _fit(backup, 8, 2)
    assert "older than the weights" in caplog.text and "at step 4 of 8" in caplog.text
    assert model.get_weights()[0][0, 0] == pytest.approx(_w(8), rel=1e-5)

    # Killed between the first interval's weights and its metadata: no step to resume at.
    caplog.clear()
    first = tmp_path / "first"
    first.mkdir()
    shutil.copy(ahead / fit_loop.BACKUP_WEIGHTS, first / fit_loop.BACKUP_WEIGHTS)
    model, _, _ = _fit(first, 8, 2)
    assert "is missing beside its weights" in caplog.text and "Resuming" not in caplog.text
    assert model.get_weights()[0][0, 0] == pytest.approx(_w(8), rel=1e-5)


def test_keep_best_exports_the_best_validation_checkpoint_across_a_resume(tmp_path):
    with pytest.raises(KeyboardInterrupt):  # killed after the checkpoint of step 10
        _fit(tmp_path / "b", 20, 2, keep="best", extra=[_Interrupt(5)])
    assert (tmp_path / "b" / "best_checkpoint.json").exists()
    model, metrics, curve = _fit(tmp_path / "b", 20, 2, keep="best")
    assert curve["best"]["step"] == 6 and curve["best"]["monitor"] == "val_loss"
    assert model.get_weights()[0][0, 0] == pytest.approx(_w(6), rel=1e-5)
    assert metrics["loss"] == pytest.approx((_w(6) - 1) ** 2, rel=1e-3)
    val = curve["validation"]["metrics"]["loss"]
    assert curve["validation"]["steps"] == list(range(2, 21, 2))
    assert min(val) == val[2] and val[-1] > 10 * val[2]  # overfitting is visible
    # The curve with its validation points and best checkpoint survives JSON.
    save_curve(curve, str(tmp_path / "curve.json"))
    assert load_curve(str(tmp_path / "curve.json")) == {
        **curve, "best": {k: curve["best"][k] for k in ("step", "monitor", "value")}}
    # A metric the validation does not log is a clear error; a higher-is-better one works.
    with pytest.raises(ValueError, match="val_f1.*not among the validation metrics"):
        _fit(tmp_path / "c", 4, 2, keep="best", monitor="f1")


def test_recipe_and_trainer_config_check_keep_settings():
    from lmfactory.pipelines.pipeline import trainer_config
    from lmfactory.recipe import RecipeError, load_recipe

    recipe = load_recipe("bert_tiny_sst2", ["finetuning.keep=best",
                                            "finetuning.monitor=accuracy"])
    config = trainer_config(recipe, "finetuning")
    assert (config["keep"], config["monitor"], config["validate_checkpoints"],
            config["progress_seconds"]) == ("best", "accuracy", True, 30)
    with pytest.raises(RecipeError, match="'finetuning.keep': must be one of last, best"):
        load_recipe("bert_tiny_sst2", ["finetuning.keep=first"])
    with pytest.raises(RecipeError, match="'finetuning.keep': best needs runtime.validate"):
        load_recipe("bert_tiny_sst2", ["finetuning.keep=best",
                                       "runtime.validate_checkpoints=false"])
    with pytest.raises(RecipeError, match="'runtime.progress_seconds'"):
        load_recipe("bert_tiny_sst2", ["runtime.progress_seconds=0"])
    with pytest.raises(ValueError, match="keep must be one of"):
        TrainerConfig.from_dict({"architecture": "bert", "keep": "first"})
    with pytest.raises(ValueError, match="keep: best needs validate_checkpoints"):
        TrainerConfig.from_dict({"architecture": "bert", "keep": "best",
                                 "validate_checkpoints": False})


def test_recipe_and_trainer_config_agree_on_learning_rates_and_the_monitor():
    """A learning rate the recipe accepts is one the Trainer accepts (one range for both),
    and a stage without a monitor of its own watches the recipe's default."""
    from lmfactory.pipelines.pipeline import trainer_config
    from lmfactory.recipe import RecipeError, load_recipe

    for rate in (1e-8, 1.0):
        recipe = load_recipe("bert_tiny_sst2", [f"pretraining.learning_rate={rate}",
                                                f"finetuning.learning_rate={rate}"])
        for stage in ("pretraining", "finetuning"):
            config = TrainerConfig.from_dict(trainer_config(recipe, stage))
            assert config.learning_rate == rate
            assert config.monitor == recipe["finetuning"]["monitor"] == "loss"
    for rate in (0, 1.5):
        with pytest.raises(RecipeError, match="finetuning.learning_rate"):
            load_recipe("bert_tiny_sst2", [f"finetuning.learning_rate={rate}"])
        with pytest.raises(ValueError, match=r"learning_rate must be in \[1e-08, 1.0\]"):
            TrainerConfig.from_dict({"architecture": "bert", "learning_rate": rate})
    assert TrainerConfig.from_dict({"architecture": "bert"}).monitor == \
        fit_loop.FitSettings(total_steps=1, steps_per_checkpoint=1).monitor == "loss"


class _FakeModel:
    def __init__(self):
        self.optimizer = type("Optimizer", (), {"iterations": tf.Variable(0, dtype="int64")})()


def _drive(logger: ProgressLogger, times: list[float], losses=None) -> None:
    """Feeds the callback one batch end per time, as fit does."""
    clock = iter(times)
    logger.clock = lambda: next(clock)
    logger.set_model(_FakeModel())
    logger.on_train_begin()
    for index in range(len(times)):
        logger.model.optimizer.iterations.assign_add(1)
        logger.on_train_batch_end(index, {"loss": (losses or {}).get(index + 1, 1.5)})


def test_progress_logs_on_the_time_or_step_cadence_with_rate_and_eta(caplog):
    caplog.set_level(logging.INFO)
    # 10 s per step after the first: the 30 s cadence fires every 3 steps.
    logger = ProgressLogger(100, batch_size=8, every_seconds=30, every_steps=50)
    _drive(logger, [0.0] + [10.0 * i for i in range(1, 10)], losses={4: 2.25})
    lines = [r.getMessage() for r in caplog.records if "Training progress" in r.getMessage()]
    assert lines == [
        "Training progress: step 4/100 (4%), loss 2.2500, 0.10 steps/s (0.8 examples/s), "
        "ETA 0:16:00",
        "Training progress: step 7/100 (7%), loss 1.5000, 0.10 steps/s (0.8 examples/s), "
        "ETA 0:15:30",
        "Training progress: step 10/100 (10%), loss 1.5000, 0.10 steps/s (0.8 examples/s), "
        "ETA 0:15:00"]
    caplog.clear()
    # A fast run: the step cadence fires first, and the last step is always logged.
    logger = ProgressLogger(12, every_seconds=30, every_steps=5)
    _drive(logger, [0.5 * i for i in range(12)])
    steps = [r.getMessage().split("/")[0].rsplit(" ", 1)[1] for r in caplog.records
             if "Training progress" in r.getMessage()]
    assert steps == ["6", "11", "12"]
    assert "2.00 steps/s, ETA 0:00:00" in caplog.records[-1].getMessage()
    assert format_duration(3725.2) == "1:02:05" and format_duration(float("nan")) == "?"


def test_a_non_chief_worker_writes_its_outputs_to_a_removed_scratch_folder(tmp_path,
                                                                          monkeypatch):
    """run_fn on a non-chief worker trains the same way but writes the Model artifact and run
    files into a temporary folder, removed at the end, and resumes from the chief's backup
    folder (the same key as the chief's)."""
    from types import SimpleNamespace

    from lmfactory.components.trainer import run_fn as trainer

    seen = {}

    def train(context):
        seen.update(serving=context.fn_args.serving_model_dir,
                    run=context.fn_args.model_run_dir, backup=context.config.checkpoint_dir)
        return {"vocab_dir": str(tmp_path / "vocab")}  # what every task kind's train returns

    def write_outputs(fn_args, config, vocab_dir):
        assert vocab_dir == str(tmp_path / "vocab")  # no knowledge graph: the folder as is
        seen["written_to"] = fn_args.serving_model_dir
        assert tmp_path.as_posix() not in fn_args.serving_model_dir
        (Path(fn_args.serving_model_dir)).mkdir(parents=True)

    fn_args = SimpleNamespace(
        custom_config={"architecture": "bert"},
        train_files=[str(tmp_path / "examples" / "Split-train" / "*")],
        eval_files=[str(tmp_path / "examples" / "Split-eval" / "*")], base_model=None,
        train_steps=10, eval_steps=1,
        serving_model_dir=str(tmp_path / "Trainer" / "model" / "5" / "Format-Serving"),
        model_run_dir=str(tmp_path / "Trainer" / "model_run" / "5"))
    chief_backup = trainer._checkpoint_dir(fn_args, TrainerConfig.from_dict(
        fn_args.custom_config))
    monkeypatch.setattr(trainer, "is_chief", lambda strategy: False)
    monkeypatch.setattr(trainer.task_kinds, "get",
                        lambda name: SimpleNamespace(train=train))
    monkeypatch.setattr(trainer, "_write_outputs", write_outputs)
    trainer.run_fn(fn_args)
    assert seen["backup"] == chief_backup and chief_backup.startswith(str(tmp_path))
    assert seen["written_to"] == seen["serving"] and "lmfactory-worker-outputs-" in seen["run"]
    assert not Path(seen["serving"]).exists()  # the scratch folder is removed
    assert fn_args.serving_model_dir.startswith(str(tmp_path))  # the caller's args unchanged
