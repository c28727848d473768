"""Sparse attention computed without the T x T score matrix (Child et al. 2019 §4.2-4.3,
§5.5 "efficient block-sparse attention kernels").

`masked_dense_attention` is the reference: full scaled dot-product attention with a
[T, T] pattern mask (the FLOPs and memory of dense attention). `blocked_sparse_attention`
computes the same outputs from only the allowed (query, key) pairs, regrouped into dense
blocks the way the paper's kernels do ("the attention patterns can be efficiently computed
by slicing out blocks"):

- a local window of at most l + 1 positions (strided A^(1), the "local" band): each block
  of l queries against its own block and the previous one, scores [T/l, l, 2l];
- the same block (fixed A^(1)): scores [T/l, l, l];
- every l-th position (strided A^(2)): position b * l + r is regrouped by its residue r,
  and each residue class is a causal attention over T/l positions, scores [l, T/l, T/l];
- the summary columns (fixed A^(2)): every query against the c last positions of every
  block, scores [T, c * T/l].

A merged head ("union") runs both of its pattern's parts over disjoint key sets (the
second part keeps only keys the first does not reach) and normalises them with one
softmax: each part's scores are shifted by the shared per-query maximum, exponentiated,
and divided by the sum over all parts, exactly softmax over the union. Memory for scores
is therefore O(T * (l + T / l)) per head instead of O(T^2): with l ~ sqrt(T), O(T sqrt(T)).
The sequence is padded to a multiple of l inside (padding keys masked, padding queries
dropped), so any T works.

keras-nlp has no sparse attention: its `CachedMultiHeadAttention` / `TransformerDecoder`
take at most a dense [T, S] mask, which is the masked-dense computation. These kernels are
the mechanism it lacks. They are written on `keras.ops`, so the same code runs on the
TensorFlow and the JAX backend; on TensorFlow the shapes may be unknown until run time (a
serving signature's batch and length), which `ops.shape` then gives as scalar tensors.
"""

import math

from keras import ops

from lmfactory.models.attention import sparse_patterns

# Score given to masked pairs before the softmax (finite: -inf would turn the gradients of
# rows with masked entries into NaN through the where).
_MASKED_SCORE = -1e9


def _static_or_dynamic(tensor):
    """The shape, with a scalar tensor for each axis unknown until run time (TensorFlow)."""
    return list(ops.shape(tensor))


def masked_dense_attention(query, key, value, mask, key_mask=None, dropout_fn=None):
    """Scaled dot-product attention (Vaswani et al. 2017 §3.2.1) with a pattern mask.

    A query with no allowed key (e.g. fixed A^(2) before the first summary cell) gets a
    zero output, as in `blocked_sparse_attention`, rather than the uniform average over all
    keys that a softmax over fully masked scores would give (which would leak future
    positions).

    Args:
        query, key, value: [B, T, H, D] (query) and [B, S, H, D] (key/value), projected.
        mask: bool [T, S], [H, T, S] (per head) or [B or 1, H or 1, T, S].
        key_mask: optional bool [B, S], False on padding keys.
        dropout_fn: optional callable applied to the attention probabilities.

    Returns: [B, T, H, D].
    """
    depth = query.shape[-1]
    query = query * ops.cast(1.0 / math.sqrt(depth), query.dtype)
    scores = ops.cast(ops.einsum("bqhd,bkhd->bhqk", query, key), "float32")
    mask = ops.cast(mask, "bool")
    for _ in range(4 - len(mask.shape)):
        mask = mask[None]
    if key_mask is not None:
        mask = ops.logical_and(mask, ops.cast(key_mask, "bool")[:, None, None, :])
    scores = ops.where(mask, scores, _MASKED_SCORE)
    probs = ops.softmax(scores, axis=-1)
    probs = probs * ops.cast(ops.any(mask, axis=-1, keepdims=True), probs.dtype)
    if dropout_fn is not None:
        probs = dropout_fn(probs)
    return ops.einsum("bhqk,bkhd->bqhd", ops.cast(probs, value.dtype), value)


class _Part:
    """One group of allowed (query, key) pairs laid out as dense blocks.

    `scores` (float32) and `mask` (bool, broadcastable to `scores`) share a layout whose last
    axis runs over keys; `to_queries` maps a per-query reduction (the layout without its
    key axis) to [B, Tp, H], `from_queries` maps [B, Tp, H] back (with a trailing key axis
    of 1), and `attend` turns probabilities in the layout into outputs [B, Tp, H, D].
    """

    def __init__(self, scores, mask, to_queries, from_queries, attend):
        self.scores = scores
        self.mask = mask
        self.to_queries = to_queries
        self.from_queries = from_queries
        self.attend = attend


def _local_part(q, k, v, valid, stride, window, previous_block, shapes):
    """Keys at distance 0 <= i - j < window, window <= stride + 1 (previous_block=True),
    or the query's own block (previous_block=False, window = stride)."""
    batch, blocks, heads, depth = shapes
    padded = blocks * stride
    qb = ops.reshape(q, [batch, blocks, stride, heads, depth])
    kb = ops.reshape(k, [batch, blocks, stride, heads, depth])
    vb = ops.reshape(v, [batch, blocks, stride, heads, depth])
    valid_b = ops.reshape(valid, [batch, blocks, stride])
    offset = 0
    if previous_block:
        def with_previous(x):
            # Block b sees blocks b - 1 and b; block 0's "previous" block is all zeros and
            # masked through `valid`.
            shifted = ops.concatenate([ops.zeros_like(x[:, :1]), x[:, :-1]], axis=1)
            return ops.concatenate([shifted, x], axis=2)

        kb, vb, valid_b = with_previous(kb), with_previous(vb), with_previous(valid_b)
        offset = stride
    scores = ops.cast(ops.einsum("bnqhd,bnkhd->bnhqk", qb, kb), "float32")
    query_index = ops.arange(stride)[:, None] + offset
    key_index = ops.arange(ops.shape(kb)[2])[None, :]
    distance = query_index - key_index
    relative = ops.logical_and(distance >= 0, distance < window)  # [l, keys]
    mask = ops.logical_and(relative[None, None, None], valid_b[:, :, None, None, :])

    def to_queries(x):  # [B, nb, H, l] -> [B, Tp, H]
        return ops.reshape(ops.transpose(x, [0, 1, 3, 2]), [batch, padded, heads])

    def from_queries(x):  # [B, Tp, H] -> [B, nb, H, l, 1]
        x = ops.transpose(ops.reshape(x, [batch, blocks, stride, heads]), [0, 1, 3, 2])
        return x[..., None]

    def attend(probs):
        out = ops.einsum("bnhqk,bnkhd->bnqhd", ops.cast(probs, vb.dtype), vb)
        return ops.reshape(out, [batch, padded, heads, depth])

    return _Part(scores, mask, to_queries, from_queries, attend)


def _strided_part(q, k, v, valid, stride, strict, shapes):
    """Keys with (i - j) mod l = 0 and j <= i (strict: j <= i - l). Position b * l + r
    goes to residue class r, block b; within a class attention is causal over blocks."""
    batch, blocks, heads, depth = shapes
    padded = blocks * stride
    qg = ops.reshape(q, [batch, blocks, stride, heads, depth])
    kg = ops.reshape(k, [batch, blocks, stride, heads, depth])
    vg = ops.reshape(v, [batch, blocks, stride, heads, depth])
    scores = ops.cast(ops.einsum("bnrhd,bmrhd->brhnm", qg, kg), "float32")  # [B,l,H,nb,nb]
    block = ops.arange(blocks)
    order = block[None, :] < block[:, None] if strict else block[None, :] <= block[:, None]
    valid_g = ops.transpose(ops.reshape(valid, [batch, blocks, stride]), [0, 2, 1])
    mask = ops.logical_and(order[None, None, None], valid_g[:, :, None, None, :])

    def to_queries(x):  # [B, l, H, nb] -> [B, Tp, H]
        return ops.reshape(ops.transpose(x, [0, 3, 1, 2]), [batch, padded, heads])

    def from_queries(x):  # [B, Tp, H] -> [B, l, H, nb, 1]
        x = ops.transpose(ops.reshape(x, [batch, blocks, stride, heads]), [0, 2, 3, 1])
        return x[..., None]

    def attend(probs):
        out = ops.einsum("brhnm,bmrhd->bnrhd", ops.cast(probs, vg.dtype), vg)
        return ops.reshape(out, [batch, padded, heads, depth])

    return _Part(scores, mask, to_queries, from_queries, attend)


def _summary_part(q, k, v, valid, stride, summary, strict, shapes):
    """Keys in the last `summary` positions of each block, j <= i (strict: in a block
    before the query's block)."""
    batch, blocks, heads, depth = shapes
    padded = blocks * stride

    def summary_cells(x):
        shape = _static_or_dynamic(x)
        x = ops.reshape(x, [batch, blocks, stride] + shape[2:])[:, :, stride - summary:]
        return ops.reshape(x, [batch, blocks * summary] + shape[2:])

    ks, vs, valid_s = summary_cells(k), summary_cells(v), summary_cells(valid)
    scores = ops.cast(ops.einsum("bqhd,bkhd->bhqk", q, ks), "float32")  # [B, H, Tp, nb*c]
    query_position = ops.arange(padded)
    key_position = ops.reshape(
        ops.arange(blocks)[:, None] * stride + ops.arange(stride - summary, stride)[None, :], [-1])
    if strict:
        order = (key_position[None, :] // stride) < (query_position[:, None] // stride)
    else:
        order = key_position[None, :] <= query_position[:, None]
    mask = ops.logical_and(order[None, None], valid_s[:, None, None, :])

    def to_queries(x):  # [B, H, Tp] -> [B, Tp, H]
        return ops.transpose(x, [0, 2, 1])

    def from_queries(x):  # [B, Tp, H] -> [B, H, Tp, 1]
        return ops.transpose(x, [0, 2, 1])[..., None]

    def attend(probs):
        return ops.einsum("bhqk,bkhd->bqhd", ops.cast(probs, vs.dtype), vs)

    return _Part(scores, mask, to_queries, from_queries, attend)


def _parts(pattern, component, q, k, v, valid, stride, summary, shapes):
    if pattern == "local":
        return [_local_part(q, k, v, valid, stride, stride, True, shapes)]
    if pattern == "strided":
        if component == "A1":
            return [_local_part(q, k, v, valid, stride, stride + 1, True, shapes)]
        if component == "A2":
            return [_strided_part(q, k, v, valid, stride, False, shapes)]
        # union: distance < l from the window, the multiples of l >= l from the grid.
        return [_local_part(q, k, v, valid, stride, stride, True, shapes),
                _strided_part(q, k, v, valid, stride, True, shapes)]
    # "fixed"
    if component == "A1":
        return [_local_part(q, k, v, valid, stride, stride, False, shapes)]
    if component == "A2":
        return [_summary_part(q, k, v, valid, stride, summary, False, shapes)]
    # union: the own block, plus the summary cells of earlier blocks.
    return [_local_part(q, k, v, valid, stride, stride, False, shapes),
            _summary_part(q, k, v, valid, stride, summary, True, shapes)]


def blocked_sparse_attention(query, key, value, pattern, stride=None, summary=1,
                             component="union", key_mask=None, dropout_fn=None):
    """Self-attention restricted to a sparse pattern, without a T x T score matrix.

    Equals `masked_dense_attention(query, key, value, causal_sparse_mask(T, ...))` on every
    query that can attend to at least one key (a query with none gets zeros).

    Args:
        query, key, value: [B, T, H, D] projected self-attention inputs (same T).
        pattern: "local", "strided", "fixed" (see `sparse_patterns`); "dense" falls back to
            masked-dense causal attention.
        stride: block length l.
        summary: c, the summary positions per block of "fixed".
        component: "union", "A1", "A2" or "heads" (first half of the heads A^(1), second
            half A^(2)).
        key_mask: optional bool [B, T], False on padding keys.
        dropout_fn: optional callable applied to the attention probabilities.

    Returns: [B, T, H, D].
    """
    sparse_patterns.check_pattern(pattern, stride, summary, component)
    if pattern == "dense":
        length = ops.shape(query)[1]
        return masked_dense_attention(
            query, key, value, sparse_patterns.causal_sparse_mask(length, "dense"),
            key_mask=key_mask, dropout_fn=dropout_fn)
    if component == "heads":
        heads = query.shape[2]
        if heads is None or heads % 2:
            raise ValueError(f"component='heads' needs an even, known number of heads, "
                             f"got {heads}")
        half = heads // 2
        outputs = [
            blocked_sparse_attention(query[:, :, s], key[:, :, s], value[:, :, s], pattern,
                                     stride, summary, part, key_mask, dropout_fn)
            for part, s in (("A1", slice(0, half)), ("A2", slice(half, heads)))
        ]
        return ops.concatenate(outputs, axis=2)

    batch, length = ops.shape(query)[0], ops.shape(query)[1]
    heads, depth = _static_or_dynamic(query)[2:]
    blocks = (length + stride - 1) // stride
    padding = blocks * stride - length
    query = query * ops.cast(1.0 / math.sqrt(query.shape[-1]), query.dtype)
    pad = [[0, 0], [0, padding], [0, 0], [0, 0]]
    q, k, v = ops.pad(query, pad), ops.pad(key, pad), ops.pad(value, pad)
    valid = ops.logical_and(ops.ones((batch, 1), dtype="bool"),
                            ops.arange(blocks * stride)[None, :] < length)
    if key_mask is not None:
        valid = ops.logical_and(valid, ops.pad(ops.cast(key_mask, "bool"),
                                               [[0, 0], [0, padding]]))

    parts = _parts(pattern, component, q, k, v, valid, stride, summary,
                   (batch, blocks, heads, depth))
    # One softmax over all parts: shift by the per-query maximum over every part.
    maximum = None
    for part in parts:
        part.scores = ops.where(part.mask, part.scores, _MASKED_SCORE)
        part_max = part.to_queries(ops.max(part.scores, axis=-1))
        maximum = part_max if maximum is None else ops.maximum(maximum, part_max)
    maximum = ops.stop_gradient(maximum)  # any shift gives the same softmax
    total = 0.0
    for part in parts:
        part.exp = ops.exp(part.scores - part.from_queries(maximum))
        part.exp = part.exp * ops.cast(part.mask, part.exp.dtype)
        total = total + part.to_queries(ops.sum(part.exp, axis=-1))
    total = ops.maximum(total, 1e-30)  # a query with no allowed key gets zeros, not NaN
    output = 0.0
    for part in parts:
        probs = part.exp / part.from_queries(total)
        if dropout_fn is not None:
            probs = dropout_fn(probs)
        output = output + part.attend(probs)
    return output[:, :length]
