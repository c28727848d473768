"""The attention masks and the relative shift of Transformer-XL (Dai et al. 2019, §3.3 and
Appendix B), as functions of tensors (used by `TransformerXLContext`, the decoding state and
the tests)."""

from __future__ import annotations

from keras import ops


def relative_shift(scores):
    """Appendix B's shift: turns scores against relative distances into scores against keys.

    ``scores`` [..., T, K] holds, for query i and relative-encoding row m, the term (b)+(d)
    against R_{K-1-m} (the rows of R run from distance K - 1 down to 0). The result holds at
    [i, j] the score against distance ``i + (K - T) - j`` (i.e. ``scores[i, j + T - 1 - i]``)
    wherever that index lies in [0, K), which covers every key a query may see
    (j <= i + K - T); other entries hold other values and are masked.

    Done as the paper describes: pad a zero column on the left, view the [T, K + 1] matrix
    as [K + 1, T], drop its first row and view the rest as [T, K] (a reshape, no gather).
    """
    shape = ops.shape(scores)
    lead, query_length, key_length = shape[:-2], shape[-2], shape[-1]
    padded = ops.pad(scores, [[0, 0]] * (len(scores.shape) - 1) + [[1, 0]])
    padded = ops.reshape(padded, (*lead, key_length + 1, query_length))
    return ops.reshape(padded[..., 1:, :], (*lead, query_length, key_length))


def attention_mask(query_length, memory_length, valid_memory_length=None, padding_mask=None,
                   mem_len=None, same_length=False):
    """Which keys each query may attend to: bool [B or 1, T, M + T] (True = attend).

    Keys are the M memory slots, then the T positions of the segment; query i sits at key
    index M + i. A query sees:

    * the memory slots that hold a state: the last ``valid_memory_length`` of the M
      (all M when None);
    * the segment causally (keys j <= M + i, §3.2: a decoder);
    * with ``same_length`` (the reference's evaluation option), only its last ``mem_len``
      positions (j > M + i - mem_len), so every query sees contexts of the same length;
    * no padded position of the segment (``padding_mask`` [B, T], 1 = real token), so left
      padding does not change real positions (relative positions are shift-invariant).
    """
    query = ops.arange(query_length)[:, None]
    key = ops.arange(memory_length + query_length)[None, :]
    allowed = key <= query + memory_length
    if valid_memory_length is not None:
        allowed = ops.logical_and(allowed, key >= memory_length - valid_memory_length)
    if same_length:
        allowed = ops.logical_and(allowed, key > query + memory_length - mem_len)
    allowed = allowed[None]
    if padding_mask is not None:
        batch = ops.shape(padding_mask)[0]
        keys = ops.concatenate([ops.ones((batch, memory_length), "bool"),
                                ops.cast(padding_mask, "bool")], axis=1)
        allowed = ops.logical_and(allowed, keys[:, None, :])
    return allowed


def relative_positions(key_length, clamp_len=0):
    """The relative distances K - 1, ..., 1, 0 (float) of the rows of R, each clamped to
    ``clamp_len`` when it is > 0 (the reference's ``clamp_len``: distances beyond it share
    the encoding of ``clamp_len``)."""
    positions = ops.arange(key_length - 1, -1, -1, dtype="float32")
    if clamp_len and clamp_len > 0:
        positions = ops.minimum(positions, float(clamp_len))
    return positions


__all__ = ["attention_mask", "relative_positions", "relative_shift"]
