"""`FoldedDense` / `FoldedEinsumDense` and the project's `TransformerEncoder` /
`TransformerDecoder` (models/folded_dense.py): the same outputs and gradients as keras'
`Dense` / `EinsumDense` and keras-nlp's blocks on 3-D inputs, the same weight files, and
the decoder's cached call unchanged."""

import keras
import keras_nlp
import numpy as np
import tensorflow as tf

from lmfactory.models.folded_dense import (FoldedDense, FoldedEinsumDense, TransformerDecoder,
                                          TransformerEncoder)


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


def test_folded_einsum_dense_matches_attention_projections_values_and_gradients():
    x3 = tf.random.stateless_normal((3, 5, 16), seed=(5, 6))
    x4 = tf.random.stateless_normal((3, 5, 2, 8), seed=(7, 8))
    # MultiHeadAttention's Q/K/V and output projections, and an equation that does not fold.
    cases = [("abc,cde->abde", (None, 2, 8), "de", x3), ("abcd,cde->abe", (None, 16), "e", x4),
             ("abc,cd->abd", (None, 4), "", x3), ("abc,dc->abd", (None, 4), "d", x3)]
    for equation, output_shape, bias_axes, x in cases:
        plain = keras.layers.EinsumDense(equation, output_shape, bias_axes=bias_axes or None)
        folded = FoldedEinsumDense(equation, output_shape, bias_axes=bias_axes or None)
        plain.build(x.shape)
        folded.build(x.shape)
        folded.set_weights([w + 0.1 for w in plain.get_weights()])
        plain.set_weights(folded.get_weights())
        results = []
        for layer in (plain, folded):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = layer(x)
                loss = tf.reduce_sum(tf.square(y))
            results.append([y, *tape.gradient(loss, [x, *layer.trainable_weights])])
        for a, b in zip(*results):
            assert a.shape == b.shape, equation
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)


def test_decoder_block_folds_and_caches_like_keras_nlps():
    args = dict(intermediate_dim=32, num_heads=2, dropout=0.0)
    ours, theirs = TransformerDecoder(**args), keras_nlp.layers.TransformerDecoder(**args)
    x = tf.random.stateless_normal((2, 6, 16), seed=(9, 10))
    ours(x), theirs(x)
    attention = ours._self_attention_layer
    assert all(type(getattr(attention, name)) is FoldedEinsumDense
               for name in ("_query_dense", "_key_dense", "_value_dense", "_output_dense"))
    assert type(ours._feedforward_output_dense) is FoldedDense
    ours.set_weights(theirs.get_weights())
    np.testing.assert_allclose(ours(x).numpy(), theirs(x).numpy(), rtol=1e-5, atol=1e-5)
    # Cached decoding of position 3 given a cache of the first 4 positions' keys/values.
    cache = tf.zeros((2, 2, 6, 2, 8))
    outputs = []
    for block in (ours, theirs):
        _, filled = block(x, self_attention_cache=cache, self_attention_cache_update_index=0)
        y, _ = block(x[:, 3:4], self_attention_cache=filled,
                     self_attention_cache_update_index=3)
        outputs.append(y.numpy())
    np.testing.assert_allclose(outputs[0], outputs[1], rtol=1e-5, atol=1e-5)
