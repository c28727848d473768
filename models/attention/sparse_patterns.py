"""Factorised sparse attention patterns (Child et al. 2019, "Generating Long Sequences with
Sparse Transformers", §4.2-4.3) as boolean masks.

A pattern says which keys j each query i may attend to. §4.2 factorises full causal
self-attention into p = 2 connectivity sets A^(1), A^(2) whose composition still reaches
every earlier position in two steps:

- ``"strided"`` (§4.3, for data with a periodic structure such as images):
  A^(1)_i = {t, t+1, ..., i} with t = max(0, i - l): the previous l positions and i itself;
  A^(2)_i = {j : (i - j) mod l = 0}: every l-th position back from i.
- ``"fixed"`` (§4.3, for text): A^(1)_i = {j : floor(j / l) = floor(i / l)}: the positions
  of i's own block of length l; A^(2)_i = {j : j mod l in {l - c, ..., l - 1}}: the last c
  positions ("summary" cells) of every block.
- ``"local"``: a causal band, {j : 0 <= i - j < l}: the l most recent positions, i itself
  included. This is the "locally banded" attention GPT-3 alternates with dense layers
  (Brown et al. 2020 §2.1); it is the strided pattern's A^(1) alone (one position
  narrower: the paper's A^(1) has l + 1 positions).
- ``"dense"``: ordinary causal attention, {j : j <= i}.

Every pattern is intersected with causality (j <= i): these are autoregressive models.

§4.3 lists three ways to use the two sets in a network; `component` picks one per layer:
``"union"`` is the merged head, every head attends to A^(1) ∪ A^(2); ``"A1"`` / ``"A2"``
give a layer one set, so ``interleaved_components`` alternates them across residual blocks
(attention(X) = W_p · attend(X, A^(r mod p)), r the block index); ``"heads"`` splits the
heads of one layer, the first half attending to A^(1) and the second half to A^(2)
(a multi-head variant of the factorised attention).

The masks are built from integer position vectors with `keras.ops` (broadcast comparisons,
no per-element Python loop), so the length may be a tensor known only at run time, and the
query positions may be offset (cached decoding: queries at positions cache_index, ...).
"""

from keras import ops

PATTERNS = ("dense", "local", "strided", "fixed")
COMPONENTS = ("union", "A1", "A2", "heads")
COMBINATIONS = ("union", "interleaved", "heads")


def check_pattern(pattern, stride=None, summary=1, component="union"):
    """Validates a pattern's settings; raises ValueError with the offending value."""
    if pattern not in PATTERNS:
        raise ValueError(f"Unknown sparse attention pattern {pattern!r}; known: {PATTERNS}")
    if component not in COMPONENTS:
        raise ValueError(f"Unknown pattern component {component!r}; known: {COMPONENTS}")
    if pattern == "dense":
        return
    if not isinstance(stride, int) or isinstance(stride, bool) or stride < 1:
        raise ValueError(f"Pattern {pattern!r} needs a positive integer stride (the block "
                         f"length l), got {stride!r}")
    if pattern == "fixed":
        if not isinstance(summary, int) or isinstance(summary, bool) \
                or not 1 <= summary <= stride:
            raise ValueError(f"Pattern 'fixed' needs 1 <= summary (c) <= stride (l) = "
                             f"{stride}, got {summary!r}")
    if pattern == "local" and component not in ("union", "A1"):
        raise ValueError("Pattern 'local' is a single band: component must be 'union' or "
                         f"'A1', got {component!r}")


def pattern_components(query_positions, key_positions, pattern, stride=None, summary=1):
    """(A^(1), A^(2)) for queries at `query_positions` [Tq] and keys at `key_positions`
    [Tk]: two bool [Tq, Tk] masks, each already intersected with causality. For "dense"
    and "local" A^(2) is None (a single set)."""
    check_pattern(pattern, stride, summary)
    i = ops.expand_dims(ops.cast(query_positions, "int32"), 1)
    j = ops.expand_dims(ops.cast(key_positions, "int32"), 0)
    distance = i - j
    causal = distance >= 0
    if pattern == "dense":
        return causal, None
    if pattern == "local":
        return ops.logical_and(causal, distance < stride), None
    if pattern == "strided":
        first = ops.logical_and(causal, distance <= stride)
        second = ops.logical_and(causal, ops.equal(ops.mod(distance, stride), 0))
        return first, second
    # "fixed"
    same_block = ops.equal(ops.floor_divide(i, stride), ops.floor_divide(j, stride))
    first = ops.logical_and(causal, same_block)
    summary_cell = ops.mod(j, stride) >= stride - summary
    second = ops.logical_and(causal, ops.broadcast_to(summary_cell, ops.shape(distance)))
    return first, second


def sparse_attention_mask(query_positions, key_positions, pattern, stride=None, summary=1,
                          component="union", num_heads=None):
    """Bool mask of which key each query attends to under `pattern` and `component`.

    Returns [Tq, Tk], or [num_heads, Tq, Tk] for ``component="heads"`` (first half of the
    heads A^(1), second half A^(2)).
    """
    check_pattern(pattern, stride, summary, component)
    first, second = pattern_components(query_positions, key_positions, pattern, stride,
                                       summary)
    if second is None:
        if component == "heads":
            raise ValueError(f"Pattern {pattern!r} has a single set; component 'heads' "
                             f"needs 'strided' or 'fixed'")
        return first
    if component == "union":
        return ops.logical_or(first, second)
    if component == "A1":
        return first
    if component == "A2":
        return second
    # "heads"
    if not num_heads or num_heads % 2:
        raise ValueError(f"component='heads' splits the heads in two halves: num_heads must "
                         f"be even, got {num_heads!r}")
    half = num_heads // 2
    return ops.stack([first] * half + [second] * half, axis=0)


def causal_sparse_mask(length, pattern, stride=None, summary=1, component="union",
                       num_heads=None):
    """The [length, length] (or [num_heads, length, length]) self-attention mask of a
    sequence of `length` positions (an int or a scalar tensor)."""
    positions = ops.arange(length, dtype="int32")
    return sparse_attention_mask(positions, positions, pattern, stride, summary, component,
                                 num_heads)


def interleaved_components(combination, num_layers):
    """Per-layer `component` for the §4.3 ways of combining the factorised heads:
    ``"union"`` (merged head in every layer), ``"interleaved"`` (A^(1) in even blocks,
    A^(2) in odd blocks: A^(r mod 2)) or ``"heads"`` (half the heads on each set)."""
    if combination not in COMBINATIONS:
        raise ValueError(f"Unknown combination {combination!r}; known: {COMBINATIONS}")
    if combination == "interleaved":
        return ["A1" if r % 2 == 0 else "A2" for r in range(num_layers)]
    return [combination] * num_layers
