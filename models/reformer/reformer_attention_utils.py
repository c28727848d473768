"""Helpers shared by Reformer's two attention layers (Kitaev et al. 2020 §2-§3): head
splitting, chunking of the (sorted) sequence, attending to the previous chunk(s), the masked
softmax with its logsumexp, and dropout / random draws with explicit seeds so that the
reversible layers' backward pass can replay them exactly (§3, "Reversible Transformer").

Functions only (no layer lives here); both attention layers and the reversible stack use
them. TensorFlow ops, since the reversible backward pass is a `tf.custom_gradient`.
"""

from lmfactory.models.backend import tf

# Scores of masked keys (causal / padding) and of a query's own position (§2: "a token
# attends to itself only when no other target is available"): the reference values.
MASK_VALUE = -1e9
SELF_MASK_VALUE = -1e5


def fold_seed(seed, salt):
    """A stateless seed [2] derived from ``seed`` [2] and the int ``salt``."""
    return tf.random.experimental.stateless_fold_in(tf.cast(seed, "int64"), salt)


def seeded_dropout(x, rate, seed, training):
    """Inverted dropout whose mask is a function of ``seed`` only (replayable)."""
    if not training or not rate:
        return x
    keep = tf.random.stateless_uniform(tf.shape(x), seed=tf.cast(seed, "int64")) >= rate
    return tf.where(keep, x / (1.0 - rate), tf.zeros_like(x))


def split_heads(x, num_heads, head_dim):
    """[B, T, heads * d] -> [B, heads, T, d]."""
    shape = tf.shape(x)
    x = tf.reshape(x, [shape[0], shape[1], num_heads, head_dim])
    return tf.transpose(x, [0, 2, 1, 3])


def merge_heads(x):
    """[B, heads, T, d] -> [B, T, heads * d]."""
    shape = tf.shape(x)
    x = tf.transpose(x, [0, 2, 1, 3])
    return tf.reshape(x, [shape[0], shape[2], shape[1] * shape[3]])


def chunk(x, chunk_length):
    """Splits axis 2 (the sequence, a multiple of ``chunk_length``) into
    [num_chunks, chunk_length]."""
    shape = tf.shape(x)
    new_shape = tf.concat([shape[:2], [-1, chunk_length], shape[3:]], axis=0)
    return tf.reshape(x, new_shape)


def unchunk(x):
    """Inverse of `chunk`: merges axes 2 and 3."""
    shape = tf.shape(x)
    return tf.reshape(x, tf.concat([shape[:2], [-1], shape[4:]], axis=0))


def look_adjacent(x, before, after):
    """x [B, h, chunks, chunk_length, ...] -> each chunk's ``before`` previous chunks,
    itself and its ``after`` next chunks concatenated along axis 3 (§2: "attend within a
    chunk and one chunk back"). Chunk indices wrap around (as the reference's); the causal
    mask removes what wrapped from later positions."""
    if not before and not after:
        return x
    pieces = []
    for shift in range(-before, after + 1):
        pieces.append(x if shift == 0 else tf.roll(x, shift=-shift, axis=2))
    return tf.concat(pieces, axis=3)


def pad_to_multiple(x, length, multiple, axis):
    """Pads ``x`` with zeros along ``axis`` from ``length`` to the next multiple."""
    padded = (length + multiple - 1) // multiple * multiple
    paddings = [[0, 0]] * len(x.shape)
    paddings[axis] = [0, padded - length]
    return tf.pad(x, paddings)


def masked_softmax_attend(dots, allowed, values, self_positions=None, *, dropout_rate,
                          seed, training):
    """softmax over the last axis of ``dots`` where ``allowed`` (else MASK_VALUE), with a
    query's own key set to SELF_MASK_VALUE where ``self_positions`` is True, then the
    weighted sum of ``values``. Returns (output, logsumexp of the masked scores [..., 1])."""
    dots = tf.where(allowed, dots, tf.cast(MASK_VALUE, dots.dtype))
    if self_positions is not None:
        dots = tf.where(self_positions, tf.cast(SELF_MASK_VALUE, dots.dtype), dots)
    logsumexp = tf.reduce_logsumexp(dots, axis=-1, keepdims=True)
    probabilities = tf.exp(dots - logsumexp)
    probabilities = seeded_dropout(probabilities, dropout_rate, seed, training)
    return tf.matmul(probabilities, values), logsumexp
