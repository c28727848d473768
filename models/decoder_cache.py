"""The decoding state of a stack of Transformer decoder blocks: its key/value cache, shared by
every Transformer decoder (GPT-2, GPT-1, GPT-3, the character Transformer, and the decoders
of the Transformer and T5 encoder-decoders). This is the Transformer's implementation of the
decoding-state protocol of `models/generation.py` (``initial_state`` / ``call_with_state``),
which `CausalLMGeneration.generate_ids` decodes with.

Left-to-right decoding computes the keys and values of a position once. The state of the
stack is one (keys, values) pair per block, each a buffer

    [batch, num_heads, max_length, head_dim]   (heads first, then positions),

a tuple of pairs whose leaves all have the batch axis first (protocol rule 1). It is
position-addressed, as the protocol asks: a call at ``index`` reads the keys/values of
positions < ``index`` and overwrites those of ``index, ...``, so running a position again
replaces its entries.

A step of one block (`cached_block_call`) projects the keys and values of the new positions,
writes them into the block's two buffers in place (`write_positions`, one
`TensorStridedSliceUpdate` per buffer, which reuses the buffer a `while_loop` hands it) and
attends over the whole buffer with a causal mask relative to ``index``
(`buffer_attention_mask`): the query·keys product and the weights·values product are two
batched matmuls straight on the buffers, the layout a head-batched matmul reads (mechanism
keras-nlp lacks: its `CachedMultiHeadAttention` takes one [batch, 2, length, heads,
head_dim] cache and `einsum`s over it). Per generated token a block thus writes one
position and reads each buffer once; no step slices, splits, transposes, stacks or
concatenates a buffer. The previous layouts (one [batch, layers, 2, max_length, heads,
head_dim] tensor; keras-nlp's update index into it, later the slice of the filled prefix)
copied the cache about three times per layer and step, so the time per token grew 3.4x
from 32 to 512 generated tokens at batch 8 (`benchmarks/generation.py`). Attending over
all ``max_length`` positions, the masked ones too, costs what reading the buffer costs,
less than slicing the filled prefix out of it (a copy, then a read).

Blocks are run three ways (`cached_block_call`):

* keras-nlp's `TransformerDecoder` with its stock attention (GPT-2, GPT-1, the character
  Transformer, the Transformer's decoder): the block's sub-layers (LayerNorms, projections,
  cross-attention, feed-forward), in its order, around the attention on the buffers
  (`transformer_decoder_step`);
* a block with a ``call_with_buffers`` hook (T5's): the block itself attends over its
  buffers (`write_positions`, `buffer_logits`, `buffer_mix`);
* a block with a ``call_with_filled_cache(x, cache, index, **kwargs)`` hook (GPT-3's sparse
  blocks): given the filled prefix in keras-nlp's layout, [batch, 2, index + n,
  heads, head_dim] (`filled_cache`, a copy);
* any other keras-nlp-like decoder block (the quaternion Transformer's, whose attention
  scores differ): called as keras-nlp's `TransformerDecoder` on that filled prefix.

A backbone implements the protocol by inheriting `KeyValueCacheDecoding`, built on the
helpers below:

* ``initial_state(batch_size, max_length)``: zero buffers (this module's `initial_state`);
* ``call_with_state(token_ids, state, index) -> (hidden, state)``: embeds the tokens at
  positions ``index, ...`` and runs them through the blocks (`call_blocks_with_state`).
"""

import keras
import keras_nlp
from keras import ops

from lmfactory.models.backend import tf

# keras' `dot_product_attention` (TensorFlow backend) fills masked logits with this.
_MASKED_LOGIT = -0.7 * 3.38953e38


def initial_state(blocks, batch_size, max_length, num_heads, head_dim):
    """Zero buffers, one (keys, values) pair per block, each [batch, num_heads, max_length,
    head_dim] in the blocks' compute dtype. ``batch_size`` and ``max_length`` may be scalar
    tensors. Creates no weights."""
    shape = [batch_size, num_heads, max_length, head_dim]
    dtype = blocks[0].compute_dtype
    return tuple((ops.zeros(shape, dtype=dtype), ops.zeros(shape, dtype=dtype))
                 for _ in blocks)


def write_positions(buffer, columns, index):
    """``buffer`` [batch, heads, max_length, head_dim] with ``columns`` [batch, heads, n,
    head_dim] written at positions ``index, ..., index + n - 1``, the rest as it was.

    TensorFlow's `TensorStridedSliceUpdate` reuses the input's buffer when nothing else
    holds it (the case of a decoding state carried by a `while_loop`), so this writes n
    positions instead of copying the whole buffer. keras-nlp's cached attention writes with
    `ops.slice_update`, an XLA op that, run outside XLA, copies the cache into and out of
    an XLA computation at every call (mechanism keras-nlp lacks: an in-place cache write in
    TensorFlow graphs)."""
    index = tf.cast(index, "int32")
    n = tf.shape(columns)[2]
    every = 0b1011  # axes 0, 1, 3 (batch, heads, head_dim) in full
    return tf.raw_ops.TensorStridedSliceUpdate(
        input=buffer, begin=tf.stack([0, 0, index, 0]), end=tf.stack([0, 0, index + n, 0]),
        strides=tf.ones([4], "int32"), value=ops.cast(columns, buffer.dtype),
        begin_mask=every, end_mask=every)


def heads_first(x):
    """[batch, n, heads, head_dim] -> [batch, heads, n, head_dim]."""
    return ops.transpose(x, (0, 2, 1, 3))


def buffer_attention_mask(n, index, max_length):
    """Bool [1, 1, n, max_length]: query i (at position ``index + i``) sees the buffered
    positions 0, ..., ``index + i`` (causal), not the later ones."""
    keys = ops.arange(max_length, dtype="int32")
    queries = ops.arange(n, dtype="int32") + ops.cast(index, "int32")
    return (keys[None, :] <= queries[:, None])[None, None]


def causal_cache_mask(batch_size, n, index):
    """[batch, n, index + n] int: query i (at position ``index + i``) sees keys 0, ...,
    ``index + i`` (the mask over a filled prefix, `filled_cache`)."""
    keys = ops.arange(index + n, dtype="int32")
    queries = ops.arange(n, dtype="int32") + ops.cast(index, "int32")
    mask = ops.cast(keys[None, :] <= queries[:, None], "int32")
    return ops.broadcast_to(mask[None], (batch_size, n, index + n))


def filled_cache(keys, values, end):
    """The positions < ``end`` of a block's buffers in keras-nlp's cache layout, [batch, 2,
    end, heads, head_dim] (a copy), for blocks that take their cache that way."""
    return ops.stack([heads_first(keys[:, :, :end]), heads_first(values[:, :, :end])],
                     axis=1)


def self_attention_keys_values(block, x):
    """The keys and values [batch, 2, n, num_heads, head_dim] a decoder block's
    self-attention computes from its input ``x`` [batch, n, hidden]: its key and value
    projections of ``x`` (after the block's first LayerNorm in a pre-LN block). Works for
    keras-nlp's `TransformerDecoder` and blocks with the same sub-layers
    (``_self_attention_layer_norm``, ``_self_attention_layer``, ``normalize_first``); a
    block with a ``self_attention_keys_values(x)`` method computes them itself."""
    if hasattr(block, "self_attention_keys_values"):
        return block.self_attention_keys_values(x)
    if block.normalize_first:
        x = block._self_attention_layer_norm(x)
    attention = block._self_attention_layer
    return ops.stack([attention._key_dense(x), attention._value_dense(x)], axis=1)


def attend_over_buffers(attention, x, keys, values, index, mask):
    """Self-attention of keras' `MultiHeadAttention` ``attention`` (a keras-nlp
    `CachedMultiHeadAttention`, stock scores) for ``x`` [batch, n, hidden] at positions
    ``index, ...`` over a block's buffers: writes the keys/values of ``x`` into ``keys`` /
    ``values`` [batch, heads, max_length, head_dim] (`write_positions`), then
    softmax(q k^T / sqrt(head_dim)) v with ``mask`` (`buffer_attention_mask`) as two
    batched matmuls on the buffers. The arithmetic is keras' own (Vaswani et al. 2017
    §3.2.1): with attention dropout the query is scaled first and the layer's masked
    `Softmax` normalises, without it (`ops.dot_product_attention`'s path) the logits are
    scaled, masked and normalised in float32. Returns (output [batch, n, hidden], keys,
    values)."""
    keys = write_positions(keys, heads_first(attention._key_dense(x)), index)
    values = write_positions(values, heads_first(attention._value_dense(x)), index)
    query = heads_first(attention._query_dense(x))
    scale = attention._inverse_sqrt_key_dim
    if attention._dropout > 0.0:  # inference: the dropout itself is the identity
        query = query * ops.cast(scale, query.dtype)
        weights = attention._softmax(buffer_logits(query, keys), mask=mask)
    else:
        logits = ops.cast(buffer_logits(query, keys), "float32") * scale
        logits = ops.where(mask, logits, _MASKED_LOGIT)
        weights = ops.cast(ops.softmax(logits, axis=-1), values.dtype)
    return attention._output_dense(buffer_mix(weights, values)), keys, values


def buffer_logits(query, keys):
    """q k^T of queries [batch, heads, n, head_dim] against a keys buffer [batch, heads,
    max_length, head_dim]: [batch, heads, n, max_length], one batched matmul that reads the
    buffer as it lies (no transposed copy)."""
    return tf.matmul(query, keys, transpose_b=True)


def buffer_mix(weights, values):
    """The attention weights [batch, heads, n, max_length] applied to a values buffer
    [batch, heads, max_length, head_dim]: [batch, n, heads, head_dim]."""
    return heads_first(tf.matmul(weights, values))


def _stock_transformer_decoder(block):
    """Whether ``block`` is keras-nlp's `TransformerDecoder` with its own ``call`` and stock
    attention scores (what `transformer_decoder_step` reproduces)."""
    decoder = keras_nlp.layers.TransformerDecoder
    if not isinstance(block, decoder) or type(block).call is not decoder.call:
        return False
    attention = getattr(block, "_self_attention_layer", None)
    return (attention is not None and type(attention)._compute_attention
            is keras.layers.MultiHeadAttention._compute_attention)


def transformer_decoder_step(block, x, keys, values, index, mask, encoder_sequence=None,
                             encoder_padding_mask=None, cross_attention_cache=None):
    """keras-nlp's `TransformerDecoder.call` at inference for ``x`` [batch, n, hidden] at
    positions ``index, ...``, its self-attention over the block's buffers
    (`attend_over_buffers`): the same sub-layers in the same order (LayerNorm before or
    after each residual sub-block per ``normalize_first``, the cross-attention over
    ``encoder_sequence`` with its precomputed ``cross_attention_cache`` [batch, 2, S,
    heads, head_dim] if the block has one, the feed-forward network); dropout is the
    identity. Returns (output, keys, values)."""
    residual = x
    if block.normalize_first:
        x = block._self_attention_layer_norm(x)
    x, keys, values = attend_over_buffers(block._self_attention_layer, x, keys, values,
                                          index, mask)
    x = x + residual
    if not block.normalize_first:
        x = block._self_attention_layer_norm(x)
    if block._cross_attention_layer is not None:
        residual = x
        if block.normalize_first:
            x = block._cross_attention_layer_norm(x)
        cross_mask = None if encoder_padding_mask is None else \
            ops.cast(encoder_padding_mask, "int32")[:, None, :]
        x, _ = block._cross_attention_layer(
            query=x, value=encoder_sequence, attention_mask=cross_mask,
            cache=cross_attention_cache, cache_update_index=None, training=False)
        x = x + residual
        if not block.normalize_first:
            x = block._cross_attention_layer_norm(x)
    residual = x
    if block.normalize_first:
        x = block._feedforward_layer_norm(x)
    x = block._feedforward_output_dense(block._feedforward_intermediate_dense(x)) + residual
    if not block.normalize_first:
        x = block._feedforward_layer_norm(x)
    return x, keys, values


def cached_block_call(block, x, layer_state, index, mask=None, **block_kwargs):
    """Runs decoder block ``block`` on ``x`` [batch, n, hidden], the inputs of positions
    ``index, ...``, over its buffers ``layer_state`` = (keys, values), each [batch, heads,
    max_length, head_dim].

    keras-nlp's `TransformerDecoder` (stock attention) runs as `transformer_decoder_step`:
    the new keys/values written in place, attention over the whole buffer with ``mask``
    (default `buffer_attention_mask`; `call_blocks_with_state` makes it once for all
    blocks). A block with a ``call_with_buffers(x, keys, values, index, **kwargs) -> (x,
    keys, values)`` hook (T5's) does the same itself (``mask`` is not passed: the block
    gets its own in ``kwargs``). A block with a ``call_with_filled_cache(x, cache, index,
    **kwargs)`` hook (GPT-3's sparse blocks) and any other keras-nlp-like block get the
    filled prefix in keras-nlp's layout (`filled_cache`) after the keys/values of the new
    positions (`self_attention_keys_values`) are written; the latter is called as keras-nlp's
    `TransformerDecoder` (``self_attention_cache``, ``decoder_attention_mask``,
    ``use_causal_mask=False``). Same keys, values and outputs every way.

    Args:
        block: the decoder block.
        x: float [batch, n, hidden], the block's input.
        layer_state: (keys, values), float [batch, heads, max_length, head_dim] each.
        index: int scalar (may be a tensor), the position of ``x[:, 0]``.
        mask: optional bool [1, 1, n, max_length] (`buffer_attention_mask`).
        **block_kwargs: passed to the block (e.g. its encoder outputs and cross-attention
            cache; ``training`` and ``cross_attention_cache_update_index``, keras-nlp's
            inference values, are accepted and dropped on the first way).

    Returns:
        (the block's output [batch, n, hidden], the updated (keys, values)).
    """
    keys, values = layer_state
    n = ops.shape(x)[1]
    if _stock_transformer_decoder(block):
        block_kwargs.pop("training", None)
        block_kwargs.pop("cross_attention_cache_update_index", None)
        if mask is None:
            mask = buffer_attention_mask(n, index, ops.shape(keys)[2])
        x, keys, values = transformer_decoder_step(block, x, keys, values, index, mask,
                                                   **block_kwargs)
        return x, (keys, values)
    if hasattr(block, "call_with_buffers"):
        x, keys, values = block.call_with_buffers(x, keys, values, index, **block_kwargs)
        return x, (keys, values)
    columns = self_attention_keys_values(block, x)  # [batch, 2, n, heads, head_dim]
    keys = write_positions(keys, heads_first(columns[:, 0]), index)
    values = write_positions(values, heads_first(columns[:, 1]), index)
    cache = filled_cache(keys, values, index + n)
    if hasattr(block, "call_with_filled_cache"):
        outputs = block.call_with_filled_cache(x, cache, index, **block_kwargs)
    else:
        outputs = block(x, self_attention_cache=cache, self_attention_cache_update_index=None,
                        decoder_attention_mask=causal_cache_mask(ops.shape(x)[0], n, index),
                        use_causal_mask=False, **block_kwargs)
    return outputs[0], (keys, values)


def call_blocks_with_state(blocks, x, state, index, block_input=None):
    """Runs ``x`` [batch, n, hidden] (the inputs of positions ``index``, ...) through
    ``blocks``, block ``i`` reading and updating its buffers ``state[i]``
    (`cached_block_call`; the attention mask is made once for all blocks).

    Args:
        blocks: the decoder blocks (see `cached_block_call`).
        x: float [batch, n, hidden], the embedded inputs.
        state: one (keys, values) pair per block, [batch, heads, max_length, head_dim] each,
            from `initial_state` or an earlier call.
        index: int scalar (may be a tensor), the position of ``x[:, 0]``.
        block_input: optional ``fn(i, x) -> x`` applied to the input of block ``i``, for
            networks that add something before every block (the character Transformer's
            per-layer position embeddings).

    Returns:
        (the last block's output [batch, n, hidden], the updated state).
    """
    mask = buffer_attention_mask(ops.shape(x)[1], index, ops.shape(state[0][0])[2])
    updated = []
    for i, (block, layer_state) in enumerate(zip(blocks, state)):
        if block_input is not None:
            x = block_input(i, x)
        x, layer_state = cached_block_call(block, x, layer_state, index, mask=mask)
        updated.append(layer_state)
    return x, tuple(updated)


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
        (keys, values) pair of zero buffers [batch, num_heads, max_length, head_dim] per block."""
        return initial_state(self.transformer_layers, batch_size, max_length, self.num_heads,
                             self.state_head_dim)

    def call_with_state(self, token_ids, state, index):
        """Runs ``token_ids`` (the tokens at positions ``index``, ...) through the network at
        inference, reusing the keys/values of earlier positions from ``state``; the
        decoding-state protocol `CausalLMGeneration.generate_ids` decodes with.

        Args:
            token_ids: int [batch, n] (n = 1 while generating, or the whole padded prompt
                with ``index = 0`` to fill the cache).
            state: one (keys, values) pair per block, [batch, num_heads, max_length,
                head_dim] each, e.g. from `initial_state`.
            index: int scalar (may be a tensor), position of ``token_ids[:, 0]``.

        Returns:
            (hidden [batch, n, hidden_dim], the backbone's output at those positions; the
            updated state).
        """
        x = self.embed_positions(token_ids, index)
        x, state = call_blocks_with_state(self.transformer_layers, x, state, index,
                                          block_input=self.block_input_at(index))
        return self.final_output(x), state


__all__ = ["KeyValueCacheDecoding", "attend_over_buffers", "buffer_attention_mask",
           "buffer_logits", "buffer_mix",
           "cached_block_call", "call_blocks_with_state", "causal_cache_mask", "filled_cache",
           "heads_first", "initial_state", "self_attention_keys_values",
           "transformer_decoder_step", "write_positions"]
