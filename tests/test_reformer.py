"""The Reformer's own mechanisms (Kitaev et al. 2020): angular LSH (§2), no attending to
oneself unless alone (§2), multi-round combination (§2), reversible layers (§3) whose
backward pass equals the standard one, chunked feed-forward (§3), axial positions, padding
invariance of multi-chunk LSH, presets and their parameter counts."""

import numpy as np
import pytest
import tensorflow as tf

from lmfactory import models
from lmfactory.models.reformer import REFORMER_PRESETS, ReformerBackbone
from lmfactory.models.reformer.reformer_axial_position_embedding import \
    ReformerAxialPositionEmbedding
from lmfactory.models.reformer.reformer_chunked_feed_forward import ReformerChunkedFeedForward
from lmfactory.models.reformer.reformer_lsh_attention import ReformerLSHAttention

T, HEADS, HEAD_DIM = 16, 2, 16


def lsh_layer(num_hashes=2, chunk_length=4, num_buckets=4, **kwargs):
    layer = ReformerLSHAttention(hidden_dim=32, num_heads=HEADS, head_dim=HEAD_DIM,
                                 chunk_length=chunk_length, num_hashes=num_hashes,
                                 num_buckets=num_buckets, **kwargs)
    layer.build((None, None, 32))
    return layer


def small_backbone(**overrides):
    config = dict(vocabulary_size=50, num_layers=4, num_heads=2, hidden_dim=32, head_dim=16,
                  intermediate_dim=64, attention_layers=["local", "lsh"],
                  max_sequence_length=64, axial_pos_shape=[8, 8],
                  lsh_attn_chunk_length=4, local_attn_chunk_length=4, num_hashes=2,
                  num_buckets=4, dropout=0.1, lsh_attention_dropout=0.1,
                  local_attention_dropout=0.1)
    config.update(overrides)
    return ReformerBackbone(**config)


def test_hashing_is_angular():
    """h(x) = argmax([xR; -xR]) depends on the direction of x only."""
    layer = lsh_layer(num_hashes=3, num_buckets=8)
    vectors = tf.random.stateless_normal((2, HEADS, T, HEAD_DIM), seed=[1, 2])
    mask = tf.ones((2, T), "bool")
    rotations = layer.draw_rotations()
    buckets = layer.hash_buckets(vectors, mask, rotations).numpy()
    for scale in (0.01, 3.7, 250.0):
        np.testing.assert_array_equal(
            buckets, layer.hash_buckets(scale * vectors, mask, rotations).numpy())
    assert buckets.shape == (2, HEADS, 3, T) and buckets.min() >= 0 and buckets.max() < 8
    assert len(np.unique(buckets)) > 2  # not a constant hash
    # Opposite vectors land in the "opposite" bucket: argmax over [xR; -xR] flips halves.
    flipped = layer.hash_buckets(-vectors, mask, rotations).numpy()
    np.testing.assert_array_equal(flipped, (buckets + 4) % 8)
    # Padded positions go to the extra bucket.
    padded = tf.constant([[True] * (T - 3) + [False] * 3] * 2)
    assert (layer.hash_buckets(vectors, padded, rotations).numpy()[..., -3:] == 8).all()


def attention_weights(layer, num_hashes_rotations=None, seed=0):
    """The combined attention distribution of `_attend_hashed` [B, h, T(query), T(key)],
    read out by attending over one-hot values (head_dim = T)."""
    query_key = tf.random.stateless_normal((2, HEADS, T, HEAD_DIM), seed=[seed, 5])
    values = tf.broadcast_to(tf.eye(T), (2, HEADS, T, T))
    mask = tf.ones((2, T), "bool")
    rotations = num_hashes_rotations if num_hashes_rotations is not None \
        else layer.draw_rotations(tf.constant([seed, 3], "int64"))
    return layer._attend_hashed(query_key, values, mask, rotations,
                                tf.constant([0, 0], "int64"), False).numpy()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lsh_rounds_combine_into_a_causal_distribution_without_self(seed):
    layer = lsh_layer(num_hashes=3)
    weights = attention_weights(layer, seed=seed)
    assert weights.min() >= 0
    own = weights[..., np.arange(T), np.arange(T)]  # [B, h, T]
    alone = own > 0.5
    np.testing.assert_allclose(weights.sum(-1)[~alone], 1.0, atol=1e-5)
    # A query alone in every round has scores near the self-mask value -1e5, where float32
    # logsumexps are exact to ~4e-3 only (as in the reference).
    np.testing.assert_allclose(weights.sum(-1)[alone], 1.0, atol=1e-2)
    later = np.triu(np.ones((T, T), bool), k=1)
    assert np.abs(weights[..., later]).max() == 0  # causal on the original positions
    # A query attends to itself only when no other key was available in any round:
    # its own weight is then 1, otherwise 0 (never a mixture).
    assert np.all((own < 1e-6) | (own > 1 - 1e-2)), own
    np.testing.assert_allclose(own[..., 0], 1.0, atol=1e-2)  # position 0 has only itself
    assert (own[..., 1:] < 1e-6).mean() > 0.5  # most queries found other keys


def test_duplicated_rounds_equal_one_round():
    """Two identical hashing rounds, each weighted by its normaliser, give the one-round
    distribution (the rounds' combination is a proper mixture)."""
    one = lsh_layer(num_hashes=1)
    two = lsh_layer(num_hashes=2)
    rotations = one.draw_rotations(tf.constant([4, 4], "int64"))
    doubled = tf.concat([rotations, rotations], axis=2)
    single, double = attention_weights(one, rotations), attention_weights(two, doubled)
    alone = single[..., np.arange(T), np.arange(T)] > 0.5  # self-only queries (see above)
    np.testing.assert_allclose(single[~alone], double[~alone], atol=1e-6)
    np.testing.assert_allclose(single[alone], double[alone], atol=1e-2)
    assert (~alone).sum() > alone.sum()


def test_single_chunk_excludes_self_unless_alone():
    """A sequence within one chunk: position 1 may attend to 0 and (masked) itself, so its
    output is position 0's value, which position 0 itself gets (it is alone)."""
    layer = lsh_layer(chunk_length=T)
    hidden = tf.random.stateless_normal((1, T, 32), seed=[3, 3])
    out = layer(hidden, tf.ones((1, T), "int32")).numpy()
    np.testing.assert_allclose(out[0, 1], out[0, 0], atol=1e-5)
    assert not np.allclose(out[0, 2], out[0, 0], atol=1e-4)


def test_multi_chunk_lsh_is_padding_invariant():
    backbone = small_backbone(dropout=0.0)
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 50, (2, 24)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, 17:] = 0
    changed = ids.copy()
    changed[1, 17:] = 49
    a = backbone({"token_ids": ids, "padding_mask": mask})["sequence_output"].numpy()
    b = backbone({"token_ids": changed, "padding_mask": mask})["sequence_output"].numpy()
    np.testing.assert_allclose(a[mask == 1], b[mask == 1], atol=1e-5)


def test_multi_chunk_lsh_outputs_depend_on_the_padded_length():
    """With several LSH chunks the chunk a key lands in depends on the sorted buckets of the
    whole (padded) sequence, so cutting trailing padding changes real positions' outputs:
    the registry keeps Reformer's serving signatures at the packed length."""
    from lmfactory.models.request_length import call_on_longest

    backbone = small_backbone(dropout=0.0, lsh_attn_chunk_length=8, local_attn_chunk_length=8)
    assert models.get("reformer").serving_length_multiple is None
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 50, (2, 64)).astype("int32")
    mask = np.ones_like(ids)
    mask[0, 21:] = 0
    mask[1, 13:] = 0
    inputs = {"token_ids": tf.constant(ids * mask), "padding_mask": tf.constant(mask)}
    full = backbone(inputs, training=False)["sequence_output"].numpy()
    cut = call_on_longest(backbone, inputs, 8, sequence_outputs=("sequence_output",))
    difference = np.abs(full[mask == 1] - cut["sequence_output"].numpy()[mask == 1]).max()
    assert difference > 1e-4, difference


@pytest.mark.dag  # the slow tier (conftest.py)
def test_reversible_backward_equals_standard_backward():
    """Same layers, same dropout and hash seeds: gradients of the reversible stack's
    recomputing backward pass equal those of storing all activations (§3)."""
    backbone = small_backbone()
    stack = backbone.reversible_stack
    hidden = tf.random.stateless_normal((2, 24, 32), seed=[7, 7])
    mask = tf.constant(np.array([[1] * 24, [1] * 20 + [0] * 4], "int32"))
    seeds = stack.layer_seeds(training=True)

    def gradients(reversible):
        with tf.GradientTape() as tape:
            tape.watch(hidden)
            y1, y2 = stack(hidden, mask, seeds=seeds, reversible=reversible, training=True)
            loss = tf.reduce_mean(tf.square(y1)) + tf.reduce_mean(y1 * tf.tanh(y2))
        return loss, tape.gradient(loss, [hidden] + stack.trainable_variables)

    loss_rev, rev = gradients(True)
    loss_std, std = gradients(False)
    # The same in a graph (as `fit` runs it), where the recomputation is ordered by control
    # dependencies.
    _, graph_rev = tf.function(lambda: gradients(True))()
    for a, b in zip(graph_rev, std):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=1e-5)
    assert abs(float(loss_rev) - float(loss_std)) <= 1e-6
    assert len(rev) == len(std) == 1 + len(stack.trainable_variables)
    for a, b in zip(rev, std):
        assert a is not None and b is not None
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=1e-5)
    assert max(float(tf.reduce_max(tf.abs(g))) for g in std) > 1e-3  # not vacuous
    # Dropout is on: another seed gives another loss.
    other = [seed + 1 for seed in seeds]
    y1, _ = stack(hidden, mask, seeds=other, reversible=False, training=True)
    assert abs(float(tf.reduce_mean(tf.square(y1))) - float(loss_std)) > 1e-6


def test_reversible_layers_invert():
    """x2 = y2 - FF(y1), x1 = y1 - Attention(x2) recovers the inputs."""
    backbone = small_backbone(dropout=0.0, num_layers=2)
    stack = backbone.reversible_stack
    x1 = tf.random.stateless_normal((1, 12, 32), seed=[1, 1])
    x2 = tf.random.stateless_normal((1, 12, 32), seed=[2, 1])
    mask = tf.ones((1, 12), "int32")
    seeds = stack.layer_seeds(False)
    rotations = [None, None]
    y1 = x1 + stack._attention(0, x2, mask, seeds, rotations, False)
    y2 = x2 + stack._feed_forward(0, y1, seeds, False)
    back2 = y2 - stack._feed_forward(0, y1, seeds, False)
    back1 = y1 - stack._attention(0, back2, mask, seeds, rotations, False)
    np.testing.assert_allclose(back2.numpy(), x2.numpy(), atol=1e-5)
    np.testing.assert_allclose(back1.numpy(), x1.numpy(), atol=1e-5)


def test_chunked_feed_forward_equals_unchunked():
    full = ReformerChunkedFeedForward(32, 64, chunk_size_feed_forward=0)
    chunked = ReformerChunkedFeedForward(32, 64, chunk_size_feed_forward=5)
    full.build((None, None, 32))
    chunked.build((None, None, 32))
    chunked.set_weights(full.get_weights())
    hidden = tf.random.stateless_normal((2, 23, 32), seed=[9, 9])
    np.testing.assert_allclose(chunked(hidden).numpy(), full(hidden).numpy(), atol=1e-6)
    seed = tf.constant([1, 2], "int64")
    np.testing.assert_allclose(chunked(hidden, seed=seed, training=True).numpy(),
                               full(hidden, seed=seed, training=True).numpy(), atol=1e-6)


def test_axial_position_embedding_concatenates_two_tables():
    layer = ReformerAxialPositionEmbedding([4, 8], [6, 10])
    out = layer(tf.zeros((1, 32), "int32")).numpy()[0]
    first, second = (table.numpy() for table in layer.tables)
    assert out.shape == (32, 16) and first.shape == (4, 6) and second.shape == (8, 10)
    for position in (0, 7, 8, 29):
        np.testing.assert_array_equal(out[position], np.concatenate(
            [first[position // 8], second[position % 8]]))


def test_bad_configs_raise_value_errors():
    with pytest.raises(ValueError, match="attention_layers"):
        small_backbone(attention_layers=["global"])
    with pytest.raises(ValueError, match="axial_pos_shape"):
        small_backbone(axial_pos_shape=[4, 4])
    with pytest.raises(ValueError, match="even"):
        small_backbone(num_buckets=5)
    with pytest.raises(ValueError, match="sum to"):
        small_backbone(axial_pos_embds_dim=[8, 8])


def preset_parameters(config):
    """Parameter count of a preset from its sizes (checked against built models below)."""
    h, v = config["hidden_dim"], config["vocabulary_size"]
    inner = config["num_heads"] * config["head_dim"]
    ff = config["intermediate_dim"]
    kinds = config["attention_layers"]
    total = v * h + sum(n * d for n, d in zip(config["axial_pos_shape"],
                                              config["axial_pos_embds_dim"]))
    for i in range(config["num_layers"]):
        projections = 2 if kinds[i % len(kinds)] == "lsh" else 3
        total += 2 * h + projections * h * inner + inner * h  # LayerNorm, q(k)/(k)/v, out
        total += 2 * h + h * ff + ff + ff * h + h  # LayerNorm, two dense layers
    return total + 2 * (2 * h)  # final LayerNorm over both streams


def test_presets_and_parameter_counts():
    assert set(REFORMER_PRESETS) == {"small", "crime_and_punishment", "enwik8"}
    for name in ("small", "crime_and_punishment"):
        backbone = models.build("reformer", name)
        assert backbone.count_params() == preset_parameters(REFORMER_PRESETS[name]), name
    assert preset_parameters(REFORMER_PRESETS["small"]) == 532_736
    assert preset_parameters(REFORMER_PRESETS["crime_and_punishment"]) == 2_584_064
    assert preset_parameters(REFORMER_PRESETS["enwik8"]) == 139_216_896
