"""The key/value cache of a stack of keras-nlp `TransformerDecoder` blocks, shared by the
decoder backbones (GPT-2, GPT-1) and what `GPT2CausalLM.generate_ids` decodes with.

Left-to-right decoding computes the keys and values of a position once: each block's
`CachedMultiHeadAttention` writes those of the new positions into its slice of the cache
and attends over everything cached so far (keras-nlp's `self_attention_cache` /
`self_attention_cache_update_index`, with the causal mask taken relative to the update
index). The cache of the whole stack is one tensor

    [batch, num_layers, 2 (key, value), max_length, num_heads, head_dim],

so a sampler's `while_loop` carries it as a single loop variable.
"""

from keras import ops


def initial_cache(blocks, batch_size, max_length, num_heads, head_dim):
    """A zero cache [batch, len(blocks), 2, max_length, num_heads, head_dim] in the blocks'
    compute dtype."""
    shape = [batch_size, len(blocks), 2, max_length, num_heads, head_dim]
    return ops.zeros(shape, dtype=blocks[0].compute_dtype)


def call_blocks_with_cache(blocks, x, cache, cache_update_index):
    """Runs ``x`` [batch, n, hidden] (the inputs of positions ``cache_update_index``, ...)
    through ``blocks``, block ``i`` reading and updating ``cache[:, i]``.

    Returns (the last block's output [batch, n, hidden], the updated cache)."""
    next_cache = []
    for i, block in enumerate(blocks):
        x, layer_cache = block(
            x,
            self_attention_cache=cache[:, i, ...],
            self_attention_cache_update_index=cache_update_index,
        )
        next_cache.append(layer_cache)
    return x, ops.stack(next_cache, axis=1)


__all__ = ["call_blocks_with_cache", "initial_cache"]
