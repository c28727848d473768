"""The Quaternion Transformer (Tay et al. 2019): what the conformance harness cannot know.

* the quaternion linear layer is the Hamilton product W ⊗ x of the quaternion algebra
  (checked against quaternion multiplication written out term by term), with 1/4 of a real
  layer's weights and the split activation;
* the attention scores are Hamilton products of query and key quaternions, one softmax
  per component weighting its own value component;
* the polar chi(4) initialisation's statistics (Parcollet et al. 2019);
* exact parameter counts of the quaternion and real models at the presets' sizes;
* the registry records, the ``quaternion`` switch and the size checks (at recipe load).
"""

import math

import keras
import numpy as np
import pytest
from scipy import stats

from lmfactory import models
from lmfactory.models.quaternion_encoder import QuaternionEncoderBackbone
from lmfactory.models.quaternion_transformer import QuaternionTransformerBackbone
from lmfactory.models.quaternion_transformer.quaternion_attention import (
    QuaternionMultiHeadAttention)
from lmfactory.models.quaternion_transformer.quaternion_blocks import (
    QuaternionTransformerDecoder, QuaternionTransformerEncoder)
from lmfactory.models.quaternion_transformer.quaternion_dense import QuaternionDense
from lmfactory.models.quaternion_transformer.quaternion_initializer import (
    QuaternionInitializer)
from lmfactory.recipe import RecipeError, load_recipe


def quaternion_product(p, q):
    """p ⊗ q for quaternions given as (r, x, y, z) arrays (broadcasting), term by term from
    i^2 = j^2 = k^2 = ijk = -1."""
    a1, b1, c1, d1 = p
    a2, b2, c2, d2 = q
    return np.stack([a1 * a2 - b1 * b2 - c1 * c2 - d1 * d2,
                     a1 * b2 + b1 * a2 + c1 * d2 - d1 * c2,
                     a1 * c2 - b1 * d2 + c1 * a2 + d1 * b2,
                     a1 * d2 + b1 * c2 - c1 * b2 + d1 * a2])


def components(x):
    """[..., 4n] laid out [r | x | y | z] -> [4, ..., n]."""
    return np.stack(np.split(np.asarray(x, dtype="float64"), 4, axis=-1))


def test_the_product_helper_is_the_quaternion_algebra():
    one, i, j, k = np.eye(4)
    assert np.allclose(quaternion_product(i, j), k)
    assert np.allclose(quaternion_product(j, i), -k)
    assert np.allclose(quaternion_product(quaternion_product(i, j), k), -one)


def test_quaternion_dense_is_the_hamilton_product():
    rng = np.random.default_rng(0)
    n_in, n_out, batch = 3, 5, 7
    layer = QuaternionDense(4 * n_out, use_bias=False)
    layer.build((None, 4 * n_in))
    kernel = rng.normal(size=(4, n_in, n_out)).astype("float32")
    layer.kernel.assign(kernel)
    x = rng.normal(size=(batch, 4 * n_in)).astype("float32")
    y = components(layer(x).numpy())  # [4, batch, n_out]
    # Output quaternion o = sum_i W[i, o] ⊗ x_i.
    q = components(x)  # [4, batch, n_in]
    expected = np.zeros((4, batch, n_out))
    for o in range(n_out):
        for d in range(n_in):
            expected[:, :, o] += quaternion_product(kernel[:, d, o][:, None], q[:, :, d])
    assert np.allclose(y, expected, atol=1e-5)
    # The real [4n, 4m] matrix holds 16 blocks of only 4 n m free numbers (1/4 of a Dense).
    assert layer.hamilton_kernel().shape == (4 * n_in, 4 * n_out)
    assert sum(int(np.prod(w.shape)) for w in layer.weights) == (4 * n_in) * (4 * n_out) // 4


def test_split_activation_bias_and_bad_activations():
    keras.utils.set_random_seed(1)
    linear = QuaternionDense(8)
    relu = QuaternionDense(8, activation="relu")
    x = np.random.default_rng(1).normal(size=(3, 12)).astype("float32")
    linear.build(x.shape)
    relu.build(x.shape)
    linear.bias.assign(np.arange(8, dtype="float32") - 4.0)
    relu.set_weights(linear.get_weights())
    pre = components(linear(x).numpy())
    # α(Q) = α(r) + α(x) i + α(y) j + α(z) k: the activation of each component on its own.
    assert np.allclose(components(relu(x).numpy()), np.maximum(pre, 0.0), atol=1e-6)
    assert linear.bias.shape == (8,)
    with pytest.raises(ValueError, match="element-wise"):
        QuaternionDense(8, activation="softmax")
    with pytest.raises(ValueError, match="multiple of 4"):
        QuaternionDense(6)
    clone = QuaternionDense.from_config(relu.get_config())
    clone.build(x.shape)
    clone.set_weights(relu.get_weights())
    assert np.allclose(clone(x), relu(x))


def test_attention_scores_are_hamilton_products_with_one_softmax_per_component():
    keras.utils.set_random_seed(2)
    heads, head_dim, width = 2, 8, 16
    layer = QuaternionMultiHeadAttention(num_heads=heads, key_dim=head_dim)
    rng = np.random.default_rng(2)
    query = rng.normal(size=(2, 3, width)).astype("float32")
    value = rng.normal(size=(2, 5, width)).astype("float32")
    mask = np.ones((2, 3, 5), bool)
    mask[1, :, 3:] = False  # the second example's last two keys are padding
    output, scores = layer(query, value, attention_mask=mask, return_attention_scores=True)
    q = layer._query_dense(query).numpy().astype("float64")  # [B, T, N, head_dim]
    k = layer._key_dense(value).numpy().astype("float64")
    v = layer._value_dense(value).numpy().astype("float64")
    heads_out = np.zeros_like(layer._query_dense(query).numpy(), dtype="float64")
    mean = np.zeros((2, heads, 3, 5))
    for b in range(2):
        for h in range(heads):
            qc, kc, vc = components(q[b, :, h]), components(k[b, :, h]), components(v[b, :, h])
            # S(t, s) = sum_d q_t,d ⊗ k_s,d: [4, T, S]
            s = quaternion_product(qc[:, :, None, :], kc[:, None, :, :]).sum(-1)
            s = s / math.sqrt(head_dim)
            s = np.where(mask[b][None], s, -1e9)
            weights = np.exp(s - s.max(-1, keepdims=True))
            weights /= weights.sum(-1, keepdims=True)  # one softmax per component
            mean[b, h] = weights.mean(0)
            out = np.einsum("cts,csd->ctd", weights, vc)  # component c weights V_c
            heads_out[b, :, h] = np.concatenate(list(out), axis=-1)
    assert np.allclose(scores.numpy(), mean, atol=1e-5)
    assert np.allclose(mean[1, :, :, 3:], 0.0)
    expected = layer._output_dense(heads_out.astype("float32")).numpy()
    assert np.allclose(output.numpy(), expected, atol=1e-4)
    clone = QuaternionMultiHeadAttention.from_config(layer.get_config())
    clone.build(query.shape, value.shape)
    clone.set_weights(layer.get_weights())
    assert np.allclose(clone(query, value, attention_mask=mask), output, atol=1e-6)


def test_polar_initialisation_statistics():
    n_in, n_out = 96, 160
    initializer = QuaternionInitializer(seed=3)
    kernel = np.asarray(initializer((4, n_in, n_out)), dtype="float64")
    sigma = 1.0 / math.sqrt(2.0 * (n_in + n_out))
    modulus = np.sqrt((kernel ** 2).sum(0))
    # |w| / sigma follows a chi distribution with 4 degrees of freedom.
    assert stats.kstest(modulus.ravel() / sigma, stats.chi(4).cdf).pvalue > 1e-3
    assert np.mean(modulus ** 2) == pytest.approx(4 * sigma ** 2, rel=0.03)
    # Phase uniform: E cos^2 = 1/2, so the real part holds half the energy; the imaginary
    # direction is uniform on the sphere (a third of the rest each).
    assert np.var(kernel[0]) == pytest.approx(2 * sigma ** 2, rel=0.05)
    for c in (1, 2, 3):
        assert np.var(kernel[c]) == pytest.approx(2 * sigma ** 2 / 3, rel=0.06)
    assert np.abs(kernel.mean(axis=(1, 2))).max() < 0.05 * sigma
    # The real block matrix has a Glorot real layer's variance: 2 / (fan_in + fan_out).
    layer = QuaternionDense(4 * n_out, kernel_initializer=QuaternionInitializer(seed=3))
    layer.build((None, 4 * n_in))
    matrix = np.asarray(layer.hamilton_kernel())
    assert np.var(matrix) == pytest.approx(2.0 / (4 * n_in + 4 * n_out), rel=0.05)
    # He criterion; seeded draws repeat, unseeded ones differ from call to call.
    he = np.asarray(QuaternionInitializer("he", seed=3)((4, n_in, n_out)))
    assert np.mean((he ** 2).sum(0)) == pytest.approx(4 / (2.0 * n_in), rel=0.03)
    assert np.array_equal(kernel, np.asarray(QuaternionInitializer(seed=3)((4, n_in, n_out))))
    fresh = QuaternionInitializer()
    assert not np.allclose(fresh((4, 2, 2)), fresh((4, 2, 2)))
    with pytest.raises(ValueError, match=r"\[4, n_in, n_out\]"):
        initializer((8, 8))


def _layer_parameters(d, f, quaternion):
    """Weights + biases of one attention block (4 projections) and one FFN."""
    scale = 4 if quaternion else 1
    attention = 4 * (d * d // scale + d)
    feedforward = d * f // scale + f + f * d // scale + d
    return attention, feedforward


@pytest.mark.parametrize("quaternion", [True, False])
def test_parameter_counts_follow_the_formula(quaternion):
    sizes = dict(models.presets("quaternion_transformer")["small"], vocabulary_size=1000)
    V, N, d, f = (sizes[key] for key in ("vocabulary_size", "num_layers", "hidden_dim",
                                         "intermediate_dim"))
    backbone = QuaternionTransformerBackbone(**dict(sizes, quaternion=quaternion))
    attention, feedforward = _layer_parameters(d, f, quaternion)
    layer_norm = 2 * d
    encoder_layer = attention + feedforward + 2 * layer_norm
    decoder_layer = 2 * attention + feedforward + 3 * layer_norm
    assert backbone.count_params() == V * d + N * (encoder_layer + decoder_layer)
    # The encoder-only model at its preset: embeddings + N encoder layers.
    sizes = dict(models.presets("quaternion_encoder")["small"], vocabulary_size=1000)
    V, N, d, f = (sizes[key] for key in ("vocabulary_size", "num_layers", "hidden_dim",
                                         "intermediate_dim"))
    encoder = QuaternionEncoderBackbone(**dict(sizes, quaternion=quaternion))
    attention, feedforward = _layer_parameters(d, f, quaternion)
    assert encoder.count_params() == V * d + N * (attention + feedforward + 4 * d)


def test_quaternion_kernels_are_a_quarter_of_the_real_ones():
    sizes = dict(vocabulary_size=50, num_layers=2, num_heads=2, hidden_dim=16,
                 intermediate_dim=32, max_sequence_length=16)
    quaternion = QuaternionTransformerBackbone(**sizes)
    real = QuaternionTransformerBackbone(**sizes, quaternion=False)

    def kernels(model):
        return sum(int(np.prod(w.shape)) for w in model.weights if w.name == "kernel")

    assert kernels(real) == 4 * kernels(quaternion)
    assert all(isinstance(b, QuaternionTransformerEncoder) for b in quaternion.encoder_layers)
    assert all(isinstance(b, QuaternionTransformerDecoder) for b in quaternion.decoder_layers)
    assert not any(isinstance(b, (QuaternionTransformerEncoder, QuaternionTransformerDecoder))
                   for b in real.encoder_layers + real.decoder_layers)
    block = quaternion.decoder_layers[0]
    assert isinstance(block._cross_attention_layer, QuaternionMultiHeadAttention)
    assert isinstance(block._feedforward_intermediate_dense, QuaternionDense)
    config = block.get_config()
    assert config["kernel_initializer"]["class_name"].endswith("QuaternionInitializer")
    clone = QuaternionTransformerDecoder.from_config(config)
    assert isinstance(clone, QuaternionTransformerDecoder)


def test_registry_records_and_size_checks():
    transformer = models.get("quaternion_transformer")
    assert transformer.family == "encoder_decoder" and "seq2seq_lm" in transformer.task_kinds
    encoder = models.get("quaternion_encoder")
    assert encoder.family == "encoder" and "classification" in encoder.task_kinds
    for name in ("quaternion_transformer", "quaternion_encoder"):
        assert models.get(name).objectives == ()
        for preset in models.presets(name).values():
            d, h, f = preset["hidden_dim"], preset["num_heads"], preset["intermediate_dim"]
            assert preset["quaternion"] is True and d % 4 == f % 4 == (d // h) % 4 == 0
    with pytest.raises(ValueError, match="head width"):
        QuaternionEncoderBackbone(50, 1, num_heads=4, hidden_dim=24, intermediate_dim=32)
    with pytest.raises(ValueError, match="intermediate_dim must be a positive multiple of 4"):
        QuaternionTransformerBackbone(50, 1, num_heads=2, hidden_dim=16, intermediate_dim=30)
    with pytest.raises(ValueError, match="quaternion must be True or False"):
        QuaternionEncoderBackbone(50, 1, 2, 16, 32, quaternion="yes")
    # The real model takes sizes the quaternion one refuses.
    QuaternionEncoderBackbone(50, 1, num_heads=4, hidden_dim=24, intermediate_dim=30,
                              quaternion=False)
    # A recipe asking for such sizes fails when it is loaded, naming the field.
    with pytest.raises(RecipeError, match="overrides.*head width"):
        load_recipe("quaternion_encoder_sst2", ["overrides={hidden_dim: 24, num_heads: 4}"])
    load_recipe("quaternion_encoder_sst2",
                ["overrides={hidden_dim: 24, num_heads: 4, quaternion: false}"])
