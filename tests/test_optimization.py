"""The learning-rate schedule: linear warmup to the peak, then linear decay to zero."""

import pytest

from lmfactory.components.trainer.optimization import WarmupLinearDecay, make_optimizer


def test_warmup_then_linear_decay():
    schedule = WarmupLinearDecay(1e-3, warmup_steps=10, total_steps=110)
    values = {step: float(schedule(step)) for step in (0, 5, 10, 60, 110, 200)}
    assert values[0] == 0.0
    assert values[5] == pytest.approx(5e-4)
    assert values[10] == pytest.approx(1e-3)
    assert values[60] == pytest.approx(5e-4)
    assert values[110] == 0.0 and values[200] == 0.0


def test_no_warmup_starts_at_the_peak():
    assert float(WarmupLinearDecay(1e-3, 0, 100)(0)) == pytest.approx(1e-3)


def test_optimizer_is_adamw_with_clipping_and_schedule_round_trips():
    optimizer = make_optimizer(1e-3, total_steps=100, clip_norm=1.0, weight_decay=0.01)
    assert optimizer.clip_global_norm == 1.0 and optimizer.weight_decay == 0.01
    config = optimizer._learning_rate.get_config()
    assert WarmupLinearDecay(**config).get_config() == config


def test_clipping_scales_to_the_global_norm():
    import tensorflow as tf

    optimizer = make_optimizer(1e-3, total_steps=10, clip_norm=1.0)
    grads = [tf.constant([3.0, 0.0]), tf.constant([[4.0]])]  # global norm 5
    clipped = optimizer._clip_gradients(grads)
    assert float(tf.linalg.global_norm(clipped)) == pytest.approx(1.0)
    assert clipped[0].numpy().tolist() == pytest.approx([0.6, 0.0])


def test_fused_update_equals_keras_adamw_step():
    """The fused kernel (ResourceApplyAdam + one-op weight decay) takes Keras AdamW's step:
    same moments, bias correction and decoupled decay, the excluded variables undecayed, a
    sparse (embedding) gradient densified, over several steps of a decaying schedule.
    (Rows are unique here: for a row gathered twice Keras squares each slice before summing
    them into v, where the fused step squares the summed gradient, which is Adam's v.)"""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    shapes = {"kernel": (6, 4), "bias": (4,), "embeddings": (10, 4)}
    values = {name: rng.normal(size=shape).astype("float32") for name, shape in shapes.items()}

    def run(fused):
        import keras

        variables = [keras.Variable(values[name], name=name) for name in shapes]
        optimizer = make_optimizer(1e-2, total_steps=5, warmup_fraction=0.2, weight_decay=0.1,
                                   clip_norm=0.0)
        optimizer.fused = fused
        for step in range(4):
            grads = [tf.constant(rng_step.normal(size=shapes[name]).astype("float32"))
                     for name, rng_step in zip(shapes, [np.random.default_rng(step)] * 3)]
            grads[2] = tf.IndexedSlices(grads[2][:3], tf.constant([1, 7, 4]),
                                        tf.constant(shapes["embeddings"]))
            optimizer.apply_gradients(zip(grads, variables))
        return [v.numpy() for v in variables], optimizer

    fused, fused_optimizer = run(True)
    reference, _ = run(False)
    assert fused_optimizer._fuses(fused_optimizer._trainable_variables[0])
    for name, got, want in zip(shapes, fused, reference):
        assert np.abs(got - values[name]).max() > 1e-3, name  # the steps moved it
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)
    untouched = np.delete(np.arange(10), [1, 4, 7])  # rows with no gradient: decay only
    np.testing.assert_allclose(fused[2][untouched], reference[2][untouched], rtol=1e-6)
