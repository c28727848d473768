"""The key/value cache of a stack of Transformer decoder blocks, shared by every decoder
backbone (GPT-2, GPT-1, GPT-3, the character Transformer) and what
`generation.CausalLMGeneration.generate_ids` decodes with.

Left-to-right decoding computes the keys and values of a position once: each block's
cached attention (keras-nlp's `CachedMultiHeadAttention`, or the banded
`SparseMultiHeadAttention` of GPT-3) writes those of the new positions into its slice of
the cache and attends over everything cached so far (keras-nlp's `self_attention_cache` /
`self_attention_cache_update_index` arguments of `TransformerDecoder.call`, with the causal
mask taken relative to the update index). The cache of the whole stack is one tensor

    [batch, num_layers, 2 (key, value), max_length, num_heads, head_dim],

so a sampler's `while_loop` carries it as a single loop variable (and a beam search
reorders it along the batch axis like any other loop variable).

A backbone exposes the cache through two methods, built on the helpers below:

* ``initial_cache(batch_size, max_length)``: a zero cache (`initial_cache`);
* ``call_with_cache(token_ids, cache, cache_update_index) -> (hidden, cache)``: embeds the
  tokens at positions ``cache_update_index, ...`` and runs them through the blocks
  (`call_blocks_with_cache`).
"""

from keras import ops


def initial_cache(blocks, batch_size, max_length, num_heads, head_dim):
    """A zero cache [batch, len(blocks), 2, max_length, num_heads, head_dim] in the blocks'
    compute dtype. ``batch_size`` and ``max_length`` may be scalar tensors."""
    shape = [batch_size, len(blocks), 2, max_length, num_heads, head_dim]
    return ops.zeros(shape, dtype=blocks[0].compute_dtype)


def call_blocks_with_cache(blocks, x, cache, cache_update_index, block_input=None):
    """Runs ``x`` [batch, n, hidden] (the inputs of positions ``cache_update_index``, ...)
    through ``blocks``, block ``i`` reading and updating ``cache[:, i]``.

    Args:
        blocks: the decoder blocks, called as ``block(x, self_attention_cache=...,
            self_attention_cache_update_index=...) -> (x, layer_cache)``.
        x: float [batch, n, hidden], the embedded inputs.
        cache: float [batch, len(blocks), 2, max_length, num_heads, head_dim].
        cache_update_index: int scalar (may be a tensor), the position of ``x[:, 0]``.
        block_input: optional ``fn(i, x) -> x`` applied to the input of block ``i``, for
            networks that add something before every block (the character Transformer's
            per-layer position embeddings).

    Returns:
        (the last block's output [batch, n, hidden], the updated cache).
    """
    next_cache = []
    for i, block in enumerate(blocks):
        if block_input is not None:
            x = block_input(i, x)
        x, layer_cache = block(
            x,
            self_attention_cache=cache[:, i, ...],
            self_attention_cache_update_index=cache_update_index,
        )
        next_cache.append(layer_cache)
    return x, ops.stack(next_cache, axis=1)


__all__ = ["call_blocks_with_cache", "initial_cache"]
