"""``runtime.precision: mixed_bfloat16``: a tiny BERT pretraining run (run_fn, as the TFX
Trainer calls it) in bfloat16 follows the float32 run's loss curve from the same seed, keeps
float32 variables, restores the float32 policy afterwards, and exports a SavedModel that
takes strings and returns float32 encodings; a precision outside the choices is a one-line
recipe error."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from tfx.components.trainer.fn_args_utils import FnArgs

import resume_runs
from lmfactory.components.trainer.model_artifact import load_model_backbone
from lmfactory.components.trainer.run_fn import run_fn
from lmfactory.recipe import RecipeError, load_recipe

STEPS = 20


@pytest.fixture(scope="module")
def runs(tmp_path_factory, demo_data):
    """{precision: Model artifact folder} of two 20-step runs on the same records and seed."""
    tmp = tmp_path_factory.mktemp("precision")
    documents, raw = resume_runs.corpus_records(demo_data, tmp, 60)
    vocab = resume_runs.word_vocabulary(tmp / "vocab", documents, size=800)
    examples = resume_runs.pretraining_examples(raw, vocab, tmp / "examples", {
        "objective": "bert_mlm_nsp", "max_seq_length": 32, "dupe_factor": 1,
        "max_predictions_per_seq": 5})
    models = {}
    for precision in ("float32", "mixed_bfloat16"):
        run = tmp / precision
        run_fn(FnArgs(
            train_files=[str(examples / "Split-train" / "*")],
            eval_files=[str(examples / "Split-eval" / "*")],
            serving_model_dir=str(run / "model" / "Format-Serving"),
            model_run_dir=str(run / "model_run"), train_steps=STEPS, eval_steps=1,
            custom_config={"architecture": "bert", "preset": "tiny", "batch_size": 8,
                           "learning_rate": 1e-3, "steps_per_checkpoint": STEPS,
                           "overrides": {"max_sequence_length": 32}, "seed": 3,
                           "precision": precision, "progress_seconds": 1e6,
                           "checkpoint_dir": str(run / "backup")}))
        # The stage restores the policy it found: the next one builds float32 layers.
        assert keras.config.dtype_policy().name == "float32"
        models[precision] = run / "model"
    return models


def _curve(model_dir) -> dict:
    return json.loads((model_dir / "keras" / "training_curve.json").read_text())


def test_bfloat16_loss_curve_tracks_float32_and_the_export_serves(runs):
    single, mixed = _curve(runs["float32"]), _curve(runs["mixed_bfloat16"])
    assert single["steps"] == mixed["steps"] and len(single["steps"]) >= 10
    losses = {name: np.asarray(curve["metrics"]["loss"]) for name, curve in
              (("float32", single), ("mixed", mixed))}
    # Both runs learn (MLM + NSP loss starts near ln(805) + ln(2) = 7.4): the comparison
    # below is between two descending curves, not two flat ones.
    for loss in losses.values():
        assert loss[-5:].mean() < loss[:5].mean() - 0.5, loss
    # Same seed, same batches, same initial weights (float32 variables in both runs): the
    # runs differ only by bfloat16's rounding of activations and matmul inputs (8-bit
    # mantissa, relative error about 0.4% per value), which perturbs the trajectory a
    # little more at each of the 20 steps. 5% of the loss is several times the drift two
    # float32 runs with different dropout draws show at this step count, and far below
    # the ~1.5 nats the loss falls over the run, so a broken bfloat16 path (a wrong cast,
    # an overflow, a loss computed in bfloat16) fails it.
    relative = np.abs(losses["mixed"] - losses["float32"]) / losses["float32"]
    assert relative.max() < 0.05, relative

    trained = keras.saving.load_model(runs["mixed_bfloat16"] / "keras" / "model.keras",
                                      compile=False)
    assert trained.backbone.dtype_policy.name == "mixed_bfloat16"
    assert {w.dtype for w in trained.weights} == {"float32"}  # float32 master weights
    # A later stage loads the backbone in its own precision (float32 here).
    backbone, _ = load_model_backbone(str(runs["mixed_bfloat16"]))
    assert backbone.compute_dtype == "float32"

    import tensorflow_text  # noqa: F401  (the tokenizer ops of the SavedModel)

    served = tf.saved_model.load(str(runs["mixed_bfloat16"] / "Format-Serving"))
    outputs = served.signatures["serving_default"](
        text=tf.constant(["the cat sat on the mat", "a second sentence"]))
    assert outputs["pooled_output"].dtype == tf.float32
    assert outputs["sequence_output"].dtype == tf.float32
    assert outputs["pooled_output"].shape[0] == 2
    assert np.all(np.isfinite(outputs["sequence_output"].numpy()))


def test_precision_outside_the_choices_is_a_one_line_recipe_error():
    recipe = load_recipe("bert_tiny_sst2", ["runtime.precision=mixed_bfloat16"])
    assert recipe["runtime"]["precision"] == "mixed_bfloat16"
    with pytest.raises(RecipeError) as error:
        load_recipe("bert_tiny_sst2", ["runtime.precision=float16"])
    assert str(error.value) == ("recipe field 'runtime.precision': must be one of float32, "
                                "mixed_bfloat16; got 'float16'")
