"""Tests of lmfactory.models.attention: the factorised sparse attention patterns of Child et
al. 2019 (§4.2-4.3) as masks, the blocked sparse computation against masked-dense
attention, and the Keras attention layer / decoder block built on them."""

import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmfactory.models.attention import (
    SparseMultiHeadAttention,
    SparseTransformerDecoder,
    blocked_sparse_attention,
    causal_sparse_mask,
    interleaved_components,
    masked_dense_attention,
    sparse_attention_mask,
)

# --------------------------------------------------------------------------- reference


def _brute_force(pattern, component, length, l, c, num_heads=4):
    """The connectivity sets written out element by element from the paper's definitions,
    with causality (j <= i)."""
    def a1(i, j):
        if pattern == "strided":
            return max(0, i - l) <= j <= i  # {t, ..., i}, t = max(0, i - l)
        if pattern == "fixed":
            return j // l == i // l
        if pattern == "local":
            return i - l < j
        return True  # dense

    def a2(i, j):
        if pattern == "strided":
            return (i - j) % l == 0
        if pattern == "fixed":
            return j % l in range(l - c, l)
        return False

    def allowed(i, j, which):
        if j > i:
            return False
        if pattern in ("dense", "local"):
            return a1(i, j)
        return {"A1": a1(i, j), "A2": a2(i, j), "union": a1(i, j) or a2(i, j)}[which]

    def table(which):
        return np.array([[allowed(i, j, which) for j in range(length)] for i in range(length)],
                        dtype=bool)

    if component == "heads":
        half = num_heads // 2
        return np.stack([table("A1")] * half + [table("A2")] * half)
    return table(component)


CASES = [
    (pattern, component)
    for pattern in ("strided", "fixed")
    for component in ("union", "A1", "A2", "heads")
] + [("local", "union"), ("local", "A1"), ("dense", "union")]


def _inputs(batch, length, heads, depth, seed):
    rng = np.random.default_rng(seed)
    return [tf.constant(rng.normal(size=(batch, length, heads, depth)).astype("float32"))
            for _ in range(3)]


# --------------------------------------------------------------------------- masks


@pytest.mark.parametrize("pattern,component", CASES)
def test_masks_match_brute_force_definition(pattern, component):
    for length, l in itertools.product((1, 5, 12, 17), (1, 2, 3, 4, 6)):
        for c in sorted({1, min(2, l), l}) if pattern == "fixed" else [1]:
            mask = np.asarray(causal_sparse_mask(length, pattern, l, c, component, 4))
            expected = _brute_force(pattern, component, length, l, c)
            np.testing.assert_array_equal(mask, expected,
                                          err_msg=f"{pattern} {component} T={length} "
                                                  f"l={l} c={c}")


@pytest.mark.parametrize("pattern,component", CASES)
def test_masks_are_causal_and_keep_the_diagonal(pattern, component):
    mask = np.asarray(causal_sparse_mask(23, pattern, 4, 2, component, 2))
    mask = mask.reshape((-1, 23, 23))
    assert not np.triu(mask, k=1).any()  # never a future key
    if component in ("union", "A1") or pattern in ("dense", "local"):
        assert all(np.diag(m).all() for m in mask)  # every query sees itself


def test_union_is_a1_or_a2_and_factors_cover_dense_in_two_steps():
    length, l = 36, 6
    for pattern in ("strided", "fixed"):
        a1 = np.asarray(causal_sparse_mask(length, pattern, l, 1, "A1"))
        a2 = np.asarray(causal_sparse_mask(length, pattern, l, 1, "A2"))
        union = np.asarray(causal_sparse_mask(length, pattern, l, 1, "union"))
        np.testing.assert_array_equal(union, a1 | a2)
        # §4.2: with p = 2 factors every earlier position is reachable in two steps: a
        # layer on A^(1) then a layer on A^(2) (i -> k in A^(2)_i, k -> j in A^(1)_k).
        two_steps = (a2.astype(int) @ a1.astype(int)) > 0
        np.testing.assert_array_equal(two_steps | a1, np.tril(np.ones((length, length), bool)))
        # and each factor alone is sparse: O(l) or O(T/l) keys per query
        assert a1.sum(-1).max() <= l + 1 and a2.sum(-1).max() <= length // l + 1


def test_masks_at_offset_query_positions_are_rows_of_the_full_mask():
    full = np.asarray(causal_sparse_mask(20, "strided", 4))
    rows = np.asarray(sparse_attention_mask(tf.range(7, 10), tf.range(20), "strided", 4))
    np.testing.assert_array_equal(rows, full[7:10])


def test_masks_build_for_a_length_known_only_at_run_time():
    @tf.function(input_signature=[tf.TensorSpec([], tf.int32)])
    def build(length):
        return causal_sparse_mask(length, "fixed", 3, 1)

    np.testing.assert_array_equal(np.asarray(build(tf.constant(10))),
                                  _brute_force("fixed", "union", 10, 3, 1))


def test_interleaved_components():
    assert interleaved_components("interleaved", 5) == ["A1", "A2", "A1", "A2", "A1"]
    assert interleaved_components("union", 3) == ["union"] * 3
    assert interleaved_components("heads", 2) == ["heads"] * 2
    with pytest.raises(ValueError, match="Unknown combination 'stacked'"):
        interleaved_components("stacked", 2)


@pytest.mark.parametrize("kwargs,message", [
    ({"pattern": "axial", "stride": 4}, "Unknown sparse attention pattern 'axial'"),
    ({"pattern": "strided", "stride": 0}, "positive integer stride"),
    ({"pattern": "strided", "stride": None}, "positive integer stride"),
    ({"pattern": "fixed", "stride": 4, "summary": 5}, r"summary \(c\) <= stride"),
    ({"pattern": "local", "stride": 4, "component": "A2"}, "single band"),
    ({"pattern": "strided", "stride": 4, "component": "both"}, "Unknown pattern component"),
])
def test_bad_pattern_settings_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        causal_sparse_mask(8, **kwargs)
    with pytest.raises(ValueError, match=message):
        SparseMultiHeadAttention(num_heads=2, key_dim=4, **kwargs)


def test_heads_component_needs_an_even_number_of_heads():
    with pytest.raises(ValueError, match="even"):
        causal_sparse_mask(8, "strided", 2, component="heads", num_heads=3)
    with pytest.raises(ValueError, match="even"):
        SparseMultiHeadAttention(num_heads=3, key_dim=4, pattern="fixed", stride=2,
                                 component="heads")


# --------------------------------------------------------------------------- computation


@pytest.mark.parametrize("pattern,component", CASES)
def test_blocked_sparse_equals_masked_dense(pattern, component):
    for length, l, c in ((12, 3, 1), (13, 4, 2), (7, 8, 3), (30, 5, 2), (1, 2, 1)):
        q, k, v = _inputs(2, length, 4, 8, seed=length)
        key_mask = np.ones((2, length), bool)
        key_mask[1, max(1, length - 3):] = False  # right padding in the second row
        mask = causal_sparse_mask(length, pattern, l, c, component, 4)
        dense = np.asarray(masked_dense_attention(q, k, v, mask, key_mask=key_mask))
        sparse = np.asarray(blocked_sparse_attention(q, k, v, pattern, l, c, component,
                                                     key_mask=key_mask))
        # Compare the queries that have at least one key (padding queries may have none).
        per_head = np.broadcast_to(np.asarray(mask), (4, length, length))
        has_key = (per_head[None] & key_mask[:, None, None, :]).any(-1)  # [B, H, T]
        error = np.abs(dense - sparse).transpose(0, 2, 1, 3).max(-1)[has_key]
        assert error.max(initial=0.0) < 1e-5, (pattern, component, length, l, c, error.max())


@pytest.mark.parametrize("pattern", ["strided", "fixed"])
def test_blocked_sparse_gradients_equal_masked_dense(pattern):
    q, k, v = _inputs(1, 20, 2, 8, seed=3)
    mask = causal_sparse_mask(20, pattern, 4, 2)
    weights = tf.constant(np.random.default_rng(0).normal(size=(1, 20, 2, 8)), tf.float32)

    def grads(fn):
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            loss = tf.reduce_sum(fn() * weights)
        return tape.gradient(loss, [q, k, v])

    dense = grads(lambda: masked_dense_attention(q, k, v, mask))
    sparse = grads(lambda: blocked_sparse_attention(q, k, v, pattern, 4, 2))
    for a, b in zip(dense, sparse):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


def _largest_intermediate(fn, length, heads=2, depth=8):
    """Number of elements of the largest tensor in the traced graph of `fn(q, k, v)`."""
    spec = tf.TensorSpec([1, length, heads, depth], tf.float32)
    graph = tf.function(fn).get_concrete_function(spec, spec, spec).graph
    sizes = [t.shape.num_elements() or 0 for op in graph.get_operations() for t in op.outputs]
    return max(sizes)


@pytest.mark.parametrize("pattern", ["strided", "fixed", "local"])
def test_blocked_sparse_never_builds_a_t_by_t_score_matrix(pattern):
    length, l, heads = 256, 16, 2
    dense = _largest_intermediate(
        lambda q, k, v: masked_dense_attention(q, k, v, causal_sparse_mask(length, pattern, l)),
        length)
    sparse = _largest_intermediate(
        lambda q, k, v: blocked_sparse_attention(q, k, v, pattern, l), length)
    assert dense >= heads * length * length
    # O(T (l + T / l)) per head: here at most 2 * l or T / l keys per query.
    assert sparse <= heads * length * 2 * l, (pattern, sparse)
    assert sparse * 4 <= dense


# --------------------------------------------------------------------------- Keras layer


def _layer_pair(**kwargs):
    sparse = SparseMultiHeadAttention(num_heads=4, key_dim=6, implementation="sparse", **kwargs)
    dense = SparseMultiHeadAttention(num_heads=4, key_dim=6, implementation="masked_dense",
                                     **kwargs)
    sparse.build((None, None, 16))
    dense.build((None, None, 16))
    dense.set_weights(sparse.get_weights())
    return sparse, dense


@pytest.mark.parametrize("kwargs", [
    {"pattern": "strided", "stride": 3},
    {"pattern": "fixed", "stride": 4, "summary": 2},
    {"pattern": "fixed", "stride": 4, "summary": 1, "component": "heads"},
    {"pattern": "strided", "stride": 3, "component": "A2"},
    {"pattern": "local", "stride": 5},
])
def test_layer_sparse_equals_masked_dense_and_is_causal(kwargs):
    keras.utils.set_random_seed(0)
    sparse, dense = _layer_pair(**kwargs)
    x = np.random.default_rng(1).normal(size=(2, 14, 16)).astype("float32")
    padding = np.ones((2, 14), "int32")
    padding[1, 11:] = 0
    a = np.asarray(sparse(x, padding_mask=padding))
    b = np.asarray(dense(x, padding_mask=padding))
    assert np.abs(a[0] - b[0]).max() < 1e-5 and np.abs(a[1, :11] - b[1, :11]).max() < 1e-5
    # Changing position 9 leaves every earlier output unchanged.
    changed = x.copy()
    changed[:, 9] += 1.0
    c = np.asarray(sparse(changed, padding_mask=padding))
    np.testing.assert_allclose(c[:, :9], a[:, :9], atol=1e-6)
    assert not np.allclose(c[0, 9:], a[0, 9:])


def test_layer_pattern_restricts_what_each_position_sees():
    keras.utils.set_random_seed(0)
    layer = SparseMultiHeadAttention(num_heads=2, key_dim=4, pattern="local", stride=3)
    x = np.random.default_rng(2).normal(size=(1, 10, 8)).astype("float32")
    changed = x.copy()
    changed[:, 2] += 1.0
    diff = np.abs(np.asarray(layer(changed)) - np.asarray(layer(x))).max(-1)[0]
    # Position 2 is seen by queries 2, 3, 4 only (band of 3).
    assert (diff[[2, 3, 4]] > 1e-6).all() and (diff[[0, 1, 5, 6, 7, 8, 9]] == 0).all()


@pytest.mark.parametrize("kwargs", [
    {"pattern": "strided", "stride": 3},
    {"pattern": "local", "stride": 4},
    {"pattern": "fixed", "stride": 3, "summary": 1, "component": "heads"},
])
def test_layer_cached_decoding_equals_full_computation(kwargs):
    keras.utils.set_random_seed(0)
    layer, _ = _layer_pair(**kwargs)
    x = np.random.default_rng(3).normal(size=(2, 11, 16)).astype("float32")
    full = np.asarray(layer(x))
    cache = tf.zeros([2, 2, 11, 4, 6])
    # The first 5 positions at once, then one position per call.
    out, cache = layer(x[:, :5], cache=cache, cache_update_index=0)
    steps = [np.asarray(out)]
    for index in range(5, 11):
        out, cache = layer(x[:, index:index + 1], cache=cache, cache_update_index=index)
        steps.append(np.asarray(out))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)
    with pytest.raises(ValueError, match="cache_update_index"):
        layer(x[:, :1], cache=cache)


def test_layer_dropout_only_in_training_and_rejects_dense_mask_in_sparse_mode():
    layer = SparseMultiHeadAttention(num_heads=2, key_dim=4, pattern="strided", stride=2,
                                     dropout=0.5)
    x = np.random.default_rng(4).normal(size=(1, 8, 8)).astype("float32")
    np.testing.assert_array_equal(np.asarray(layer(x)), np.asarray(layer(x)))
    assert not np.allclose(np.asarray(layer(x, training=True)), np.asarray(layer(x)))
    with pytest.raises(ValueError, match="padding_mask"):
        layer(x, attention_mask=np.ones((1, 8, 8), bool))
    with pytest.raises(ValueError, match="Unknown implementation"):
        SparseMultiHeadAttention(num_heads=2, key_dim=4, implementation="flash")


def test_layer_and_block_config_round_trip():
    layer = SparseMultiHeadAttention(num_heads=2, key_dim=4, pattern="fixed", stride=4,
                                     summary=2, component="A2", implementation="masked_dense")
    clone = SparseMultiHeadAttention.from_config(layer.get_config())
    for name in ("pattern", "stride", "summary", "component", "implementation"):
        assert getattr(clone, name) == getattr(layer, name)

    keras.utils.set_random_seed(0)
    block = SparseTransformerDecoder(intermediate_dim=32, num_heads=2, head_dim=12,
                                     pattern="strided", stride=3, dropout=0.0)
    x = np.random.default_rng(5).normal(size=(2, 9, 16)).astype("float32")
    y = np.asarray(block(x))
    restored = keras.layers.deserialize(keras.layers.serialize(block))
    restored(x)
    restored.set_weights(block.get_weights())
    np.testing.assert_allclose(np.asarray(restored(x)), y, atol=1e-6)
    # head_dim is independent of the width: Q/K/V project 16 -> 2 heads x 12.
    assert tuple(block._self_attention_layer._query_dense.kernel.shape) == (16, 2, 12)
    assert tuple(block._self_attention_layer._output_dense.kernel.shape) == (2, 12, 16)


def test_sparse_decoder_stack_trains():
    """A small interleaved (A1, A2) Sparse Transformer learns a copy-from-l-back task."""
    keras.utils.set_random_seed(7)
    length, stride, vocab = 16, 4, 8
    inputs = keras.Input((length,), dtype="int32")
    x = keras.layers.Embedding(vocab, 16)(inputs)
    x = x + keras.layers.Embedding(length, 16)(tf.range(length))[None]
    for component in interleaved_components("interleaved", 2):
        x = SparseTransformerDecoder(intermediate_dim=32, num_heads=2, pattern="strided",
                                     stride=stride, component=component)(x)
    model = keras.Model(inputs, keras.layers.Dense(vocab)(x))
    rng = np.random.default_rng(0)
    ids = rng.integers(0, vocab, (64, length)).astype("int32")
    target = np.roll(ids, stride, axis=1)  # the token l positions back
    weights = (np.arange(length) >= stride)[None].repeat(64, 0).astype("float32")
    model.compile(keras.optimizers.Adam(1e-2),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = model.evaluate(ids, target, sample_weight=weights, verbose=0)
    model.fit(ids, target, sample_weight=weights, epochs=30, batch_size=16, verbose=0)
    after = model.evaluate(ids, target, sample_weight=weights, verbose=0)
    assert after < before - 0.5, (before, after)
