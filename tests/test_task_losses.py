"""The loss and metric pieces of models/task_losses.py that replace keras' own for speed:
`sparse_softmax_nll` (values and gradients equal to TensorFlow's cross-entropy kernel) and
`SparseCategoricalAccuracy` (results, config and direction equal to keras' metric)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmfactory.models.task_losses import SparseCategoricalAccuracy, sparse_softmax_nll


@pytest.mark.parametrize("shape", [(6,), (2, 3), (2, 3, 1)])
def test_sparse_softmax_nll_matches_tensorflow_values_and_gradients(shape):
    rows = int(np.prod(shape[:2]))
    logits = tf.random.stateless_normal(shape[:2] + (11,), seed=(1, rows)) * 4.0
    logits = tf.tensor_scatter_nd_update(  # a large logit: the max shift must hold
        tf.reshape(logits, (rows, 11)), [[0, 3]], [80.0])
    logits = tf.reshape(logits, shape[:2] + (11,))
    labels = tf.reshape(tf.constant([3, 0, 10, 5, 5, 1][:rows]), shape)
    weights = tf.random.stateless_uniform(shape[:2], seed=(2, rows))
    results = []
    for loss_fn in (sparse_softmax_nll,
                    lambda y, x: tf.nn.sparse_softmax_cross_entropy_with_logits(
                        tf.reshape(y, shape[:2]), x)):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            nll = loss_fn(labels, logits)
            loss = tf.reduce_sum(weights * nll)
        results.append((nll.numpy(), tape.gradient(loss, logits).numpy()))
    assert results[0][0].shape == shape[:2]
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-5, atol=1e-6)


def test_sparse_softmax_nll_rejects_labels_outside_the_vocabulary():
    with pytest.raises(tf.errors.InvalidArgumentError):
        sparse_softmax_nll(tf.constant([0, 7]), tf.zeros((2, 5)))


def test_accuracy_equals_keras_metric():
    labels = np.array([[1, 2, 0], [3, 3, 1]])
    logits = tf.random.stateless_normal((2, 3, 4), seed=(5, 6)).numpy()
    logits[0, 0, 1] = 9.0  # at least one hit
    weights = np.array([[1.0, 1.0, 0.0], [1.0, 0.5, 1.0]])
    ours = SparseCategoricalAccuracy(name="mlm_accuracy")
    theirs = keras.metrics.SparseCategoricalAccuracy(name="mlm_accuracy")
    for metric in (ours, theirs):
        metric.update_state(labels, logits, sample_weight=weights)
        metric.update_state(labels[:, :1], logits[:, 0])  # [B, 1] labels, no weights
    assert float(ours.result()) == pytest.approx(float(theirs.result()))
    assert 0.0 < float(ours.result()) < 1.0
    assert ours.get_config() == theirs.get_config()
    assert ours._direction == "up"
    restored = keras.metrics.deserialize(keras.metrics.serialize(ours))
    assert type(restored) is SparseCategoricalAccuracy and restored.name == "mlm_accuracy"
