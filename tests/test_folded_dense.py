"""`FoldedDense` / the project's `TransformerEncoder` (models/folded_dense.py): the same
outputs and gradients as keras' `Dense` / keras-nlp's block on 3-D inputs, and the same
weight files."""

import keras
import keras_nlp
import numpy as np
import tensorflow as tf

from lmfactory.models.folded_dense import FoldedDense, TransformerEncoder


def test_folded_dense_matches_dense_values_and_gradients():
    plain = keras.layers.Dense(24, activation="gelu")
    folded = FoldedDense(24, activation="gelu")
    x = tf.random.stateless_normal((3, 5, 16), seed=(1, 2))
    plain.build(x.shape)
    folded.build(x.shape)
    folded.set_weights(plain.get_weights())
    results = []
    for layer in (plain, folded):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
            loss = tf.reduce_sum(tf.square(y))
        results.append([y, *tape.gradient(loss, [x, *layer.trainable_weights])])
    for a, b in zip(*results):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)
    assert folded(x[0]).shape == (5, 24)  # rank 2: Dense's own call


def test_block_is_keras_nlps_with_folded_feedforward_and_shares_weight_files(tmp_path):
    args = dict(intermediate_dim=32, num_heads=2, dropout=0.1)
    ours, theirs = TransformerEncoder(**args), keras_nlp.layers.TransformerEncoder(**args)
    x = tf.random.stateless_normal((2, 7, 16), seed=(3, 4))
    ours(x), theirs(x)
    assert type(ours._feedforward_intermediate_dense) is FoldedDense
    assert type(ours._feedforward_output_dense) is FoldedDense
    # In a model's list of layers, as a backbone holds its blocks.
    path = str(tmp_path / "block.weights.h5")
    keras.Sequential([keras.Input((7, 16)), theirs]).save_weights(path)
    keras.Sequential([keras.Input((7, 16)), ours]).load_weights(path)
    np.testing.assert_allclose(ours(x, training=False).numpy(),
                               theirs(x, training=False).numpy(), rtol=1e-5, atol=1e-5)
