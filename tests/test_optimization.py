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
