"""The decoding state of a stack of Transformer decoder blocks: its key/value cache, shared by
every Transformer decoder (GPT-2, GPT-1, GPT-3, the character Transformer, and the decoders
of the Transformer and T5 encoder-decoders). This is the Transformer's implementation of the
decoding-state protocol of `models/generation.py` (``initial_state`` / ``call_with_state``),
which `CausalLMGeneration.generate_ids` decodes with.

Left-to-right decoding computes the keys and values of a position once. The state of the
whole stack is one tensor

    [batch, num_layers, 2 (key, value), max_length, num_heads, head_dim],

a single leaf with the batch axis first. It is position-addressed, as the protocol asks:
a call at ``index`` reads the keys/values of positions < ``index`` and overwrites those of
``index, ...``, so running a position again replaces its entries.

A step of one block (`cached_block_call`) computes the keys/values of the new positions
from the block's input, writes them into the state in place (`write_positions`, one
`TensorStridedSliceUpdate`, which reuses the buffer a `while_loop` hands it), and runs the
block over the positions filled so far as a read-only cache (keras-nlp's
`TransformerDecoder` with ``self_attention_cache`` and no update index, the causal mask
relative to ``index``; the project's own blocks through a ``call_with_filled_cache``
hook). Per generated token it thus reads the filled prefix and writes one position. The
keras-nlp way (the cached attention's update index into the whole buffer, each layer's
cache sliced out of the state and the layers stacked back) copies the whole max_length
buffer several times per token, and its `ops.slice_update` runs as an XLA computation
outside XLA: the time per token grew about 3.5x from 32 to 512 generated tokens at batch 8
(`benchmarks/generation.py`).

A backbone implements the protocol by inheriting `KeyValueCacheDecoding`, built on the
helpers below:

* ``initial_state(batch_size, max_length)``: a zero cache (this module's `initial_state`);
* ``call_with_state(token_ids, state, index) -> (hidden, state)``: embeds the tokens at
  positions ``index, ...`` and runs them through the blocks (`call_blocks_with_state`).
"""

import tensorflow as tf
from keras import ops


def initial_state(blocks, batch_size, max_length, num_heads, head_dim):
    """A zero cache [batch, len(blocks), 2, max_length, num_heads, head_dim] in the blocks'
    compute dtype. ``batch_size`` and ``max_length`` may be scalar tensors. Creates no
    weights."""
    shape = [batch_size, len(blocks), 2, max_length, num_heads, head_dim]
    return ops.zeros(shape, dtype=blocks[0].compute_dtype)


def write_positions(state, layer, columns, index):
    """``state`` with ``columns`` [batch, 2, n, num_heads, head_dim] (keys, values) written
    at positions ``index, ..., index + n - 1`` of layer ``layer``, the rest as it was.

    TensorFlow's `TensorStridedSliceUpdate` reuses the input's buffer when nothing else
    holds it (the case of a decoding state carried by a `while_loop`), so this writes n
    positions instead of copying the whole buffer. keras-nlp's cached attention writes with
    `ops.slice_update`, an XLA op that, run outside XLA, copies the cache into and out of
    an XLA computation at every call (mechanism keras-nlp lacks: an in-place cache write in
    TensorFlow graphs)."""
    index = tf.cast(index, "int32")
    n = tf.shape(columns)[2]
    begin = tf.stack([0, layer, 0, index, 0, 0])
    end = tf.stack([0, layer + 1, 0, index + n, 0, 0])
    every = 0b110101  # axes 0, 2, 4, 5 (batch, key/value, heads, head_dim) in full
    return tf.raw_ops.TensorStridedSliceUpdate(
        input=state, begin=begin, end=end, strides=tf.ones([6], "int32"),
        value=ops.expand_dims(ops.cast(columns, state.dtype), 1), begin_mask=every,
        end_mask=every)


def self_attention_keys_values(block, x):
    """The keys and values [batch, 2, n, num_heads, head_dim] a decoder block's
    self-attention computes from its input ``x`` [batch, n, hidden]: its key and value
    projections of ``x`` (after the block's first LayerNorm in a pre-LN block). Works for
    keras-nlp's `TransformerDecoder` and blocks with the same sub-layers
    (``_self_attention_layer_norm``, ``_self_attention_layer``, ``normalize_first``); a
    block with a ``self_attention_keys_values(x)`` method (T5's) computes them itself."""
    if hasattr(block, "self_attention_keys_values"):
        return block.self_attention_keys_values(x)
    if block.normalize_first:
        x = block._self_attention_layer_norm(x)
    attention = block._self_attention_layer
    return ops.stack([attention._key_dense(x), attention._value_dense(x)], axis=1)


def causal_cache_mask(batch_size, n, index):
    """[batch, n, index + n] int: query i (at position ``index + i``) sees keys 0, ...,
    ``index + i``."""
    keys = ops.arange(index + n, dtype="int32")
    queries = ops.arange(n, dtype="int32") + ops.cast(index, "int32")
    mask = ops.cast(keys[None, :] <= queries[:, None], "int32")
    return ops.broadcast_to(mask[None], (batch_size, n, index + n))


def cached_block_call(block, x, state, layer, index, **block_kwargs):
    """Runs decoder block ``block`` (the ``layer``-th of the stack) on ``x`` [batch, n,
    hidden], the inputs of positions ``index, ...``, over the key/value cache ``state``.

    The block's keys and values of the new positions are computed first
    (`self_attention_keys_values`) and written into ``state`` in place
    (`write_positions`); the block then attends over the positions filled so far,
    ``state[:, layer, :, :index + n]``, as a read-only cache (no update index) with the
    causal mask relative to ``index`` (`causal_cache_mask`). So a step copies the
    ``index + n`` positions it attends over, once, and never the ``max_length`` positions
    of the whole buffer: keras-nlp's cached attention, given the buffer, copies it several
    times a step (slicing the layer out, splitting keys from values, the update,
    re-stacking the layer, then the layers) and attends over every buffered position,
    masked or not, which made the time per token grow with the buffer's length
    (`benchmarks/generation.py`). Same keys, values, mask and outputs.

    A block with a ``call_with_filled_cache(x, cache, index, **kwargs)`` method (the
    project's own blocks) is called through it; any other is called as keras-nlp's
    `TransformerDecoder` (``self_attention_cache``, ``decoder_attention_mask``,
    ``use_causal_mask=False``).

    Args:
        block: the decoder block.
        x: float [batch, n, hidden], the block's input.
        state: float [batch, num_layers, 2, max_length, num_heads, head_dim].
        layer: int, the block's slot in ``state``.
        index: int scalar (may be a tensor), the position of ``x[:, 0]``.
        **block_kwargs: passed to the block (e.g. its encoder outputs and cross-attention
            cache).

    Returns:
        (the block's outputs, a tuple whose first item is its output [batch, n, hidden],
        the updated state).
    """
    n = ops.shape(x)[1]
    state = write_positions(state, layer, self_attention_keys_values(block, x), index)
    cache = state[:, layer, :, :index + n]
    if hasattr(block, "call_with_filled_cache"):
        outputs = block.call_with_filled_cache(x, cache, index, **block_kwargs)
    else:
        outputs = block(x, self_attention_cache=cache, self_attention_cache_update_index=None,
                        decoder_attention_mask=causal_cache_mask(ops.shape(x)[0], n, index),
                        use_causal_mask=False, **block_kwargs)
    return outputs, state


def call_blocks_with_state(blocks, x, state, index, block_input=None):
    """Runs ``x`` [batch, n, hidden] (the inputs of positions ``index``, ...) through
    ``blocks``, block ``i`` reading and updating its key/value cache ``state[:, i]``
    (`cached_block_call`).

    Args:
        blocks: the decoder blocks (keras-nlp `TransformerDecoder`s or blocks with
            ``call_with_filled_cache``, see `cached_block_call`).
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
    for i, block in enumerate(blocks):
        if block_input is not None:
            x = block_input(i, x)
        outputs, state = cached_block_call(block, x, state, i, index)
        x = outputs[0]
    return x, state


class KeyValueCacheDecoding:
    """The decoding-state protocol of a Transformer decoder backbone over this module's
    key/value cache. Put it before `Backbone` in the bases. The host has
    ``transformer_layers`` (blocks `cached_block_call` runs: keras-nlp
    `TransformerDecoder`s or blocks with its hooks) and ``num_heads``, and may override three hooks:

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


__all__ = ["KeyValueCacheDecoding", "cached_block_call", "call_blocks_with_state",
           "causal_cache_mask", "initial_state", "self_attention_keys_values",
           "write_positions"]
