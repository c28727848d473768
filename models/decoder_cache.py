"""The decoding state of a stack of Transformer decoder blocks: its key/value cache, shared by
every Transformer decoder backbone (GPT-2, GPT-1, GPT-3, the character Transformer). This is
the Transformer's implementation of the decoding-state protocol of `models/generation.py`
(``initial_state`` / ``call_with_state``), which `CausalLMGeneration.generate_ids` decodes
with.

Left-to-right decoding computes the keys and values of a position once: each block's
cached attention (keras-nlp's `CachedMultiHeadAttention`, or the banded
`SparseMultiHeadAttention` of GPT-3) writes those of the new positions into its slice of
the cache and attends over everything cached so far (keras-nlp's `self_attention_cache` /
`self_attention_cache_update_index` arguments of `TransformerDecoder.call`, with the causal
mask taken relative to the update index). The state of the whole stack is one tensor

    [batch, num_layers, 2 (key, value), max_length, num_heads, head_dim],

a single leaf with the batch axis first. It is position-addressed, as the protocol asks:
a call at ``index`` reads the keys/values of positions < ``index`` and overwrites those of
``index, ...``, so running a position again replaces its entries.

A backbone implements the protocol by inheriting `KeyValueCacheDecoding`, built on the
helpers below:

* ``initial_state(batch_size, max_length)``: a zero cache (this module's `initial_state`);
* ``call_with_state(token_ids, state, index) -> (hidden, state)``: embeds the tokens at
  positions ``index, ...`` and runs them through the blocks (`call_blocks_with_state`).
"""

from keras import ops


def initial_state(blocks, batch_size, max_length, num_heads, head_dim):
    """A zero cache [batch, len(blocks), 2, max_length, num_heads, head_dim] in the blocks'
    compute dtype. ``batch_size`` and ``max_length`` may be scalar tensors. Creates no
    weights."""
    shape = [batch_size, len(blocks), 2, max_length, num_heads, head_dim]
    return ops.zeros(shape, dtype=blocks[0].compute_dtype)


def call_blocks_with_state(blocks, x, state, index, block_input=None):
    """Runs ``x`` [batch, n, hidden] (the inputs of positions ``index``, ...) through
    ``blocks``, block ``i`` reading and updating its key/value cache ``state[:, i]``.

    Args:
        blocks: the decoder blocks, called as ``block(x, self_attention_cache=...,
            self_attention_cache_update_index=...) -> (x, layer_cache)``.
        x: float [batch, n, hidden], the embedded inputs.
        state: float [batch, len(blocks), 2, max_length, num_heads, head_dim], from
            `initial_state` or an earlier call.
        index: int scalar (may be a tensor), the position of ``x[:, 0]``.
        block_input: optional ``fn(i, x) -> x`` applied to the input of block ``i``, for
            networks that add something before every block (the character Transformer's
            per-layer position embeddings).

    Returns:
        (the last block's output [batch, n, hidden], the updated state).
    """
    next_state = []
    for i, block in enumerate(blocks):
        if block_input is not None:
            x = block_input(i, x)
        x, layer_cache = block(
            x,
            self_attention_cache=state[:, i, ...],
            self_attention_cache_update_index=index,
        )
        next_state.append(layer_cache)
    return x, ops.stack(next_state, axis=1)


class KeyValueCacheDecoding:
    """The decoding-state protocol of a Transformer decoder backbone over this module's
    key/value cache. Put it before `Backbone` in the bases. The host has
    ``transformer_layers`` (blocks taking ``self_attention_cache`` /
    ``self_attention_cache_update_index``) and ``num_heads``, and may override three hooks:

    * ``state_head_dim``: the per-head width of the keys/values (``hidden_dim // num_heads``);
    * ``embed_positions(token_ids, index)``: the block inputs of the tokens at positions
      ``index, ...`` (default: ``embeddings(token_ids, start_index=index)``, a keras-nlp
      token-and-position embedding);
    * ``block_input_at(index)``: ``fn(i, x) -> x`` applied to block ``i``'s input, or None;
    * ``final_output(x)``: the backbone's output of the last block's (default: the final
      ``layer_norm``, pre-LN stacks).
    """

    @property
    def state_head_dim(self) -> int:
        return self.hidden_dim // self.num_heads

    def embed_positions(self, token_ids, index):
        return self.embeddings(token_ids, start_index=index)

    def block_input_at(self, index):
        del index
        return None

    def final_output(self, x):
        return self.layer_norm(x)

    def initial_state(self, batch_size, max_length):
        """The decoding state before any token (the protocol of `models/generation.py`): a
        zero key/value cache [batch, num_layers, 2, max_length, num_heads, head_dim]."""
        return initial_state(self.transformer_layers, batch_size, max_length, self.num_heads,
                             self.state_head_dim)

    def call_with_state(self, token_ids, state, index):
        """Runs ``token_ids`` (the tokens at positions ``index``, ...) through the network at
        inference, reusing the keys/values of earlier positions from ``state``; the
        decoding-state protocol `CausalLMGeneration.generate_ids` decodes with.

        Args:
            token_ids: int [batch, n] (n = 1 while generating, or the whole padded prompt
                with ``index = 0`` to fill the cache).
            state: float [batch, num_layers, 2, max_length, num_heads, head_dim], e.g. from
                `initial_state`.
            index: int scalar (may be a tensor), position of ``token_ids[:, 0]``.

        Returns:
            (hidden [batch, n, hidden_dim], the backbone's output at those positions; the
            updated state).
        """
        x = self.embed_positions(token_ids, index)
        x, state = call_blocks_with_state(self.transformer_layers, x, state, index,
                                          block_input=self.block_input_at(index))
        return self.final_output(x), state


__all__ = ["KeyValueCacheDecoding", "call_blocks_with_state", "initial_state"]
