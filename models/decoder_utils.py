"""Pieces shared by the decoder-only backbones (GPT-1, GPT-2, GPT-3, the character
Transformer of Al-Rfou et al.), the counterpart of `encoder_utils.py`.

The layers stay attributes of each backbone, under the names its converters and saved
files use; these helpers only create them in one place (in the order each backbone always
created them, so seeded initial values do not move) or run them:

* `add_token_and_position_embeddings` / `embed_tokens_and_positions`: GPT-1's input
  representation h_0 = U W_e + W_p (Radford et al. 2018 §3.1), then dropout; GPT-2 and
  GPT-3 keep it;
* `decoder_blocks`: the stack of L Transformer decoder blocks (self-attention only),
  ``transformer_layer_{i}``;
* `decoder_states`: the block loop of the functional graph and of `call_with_states`;
* `decoder_graph`: the functional graph token ids -> embeddings -> blocks (-> final
  LayerNorm), the inputs and outputs a decoder backbone hands to `Backbone`;
* `scale_residual_projections`: GPT-2's initialisation of the layers that write into the
  residual stream (GPT-2 §2.3, kept by GPT-3 §2.1).
"""

import math

import keras
import keras_nlp

from lmfactory.models.folded_dense import TransformerDecoder

# The inputs of every decoder backbone: int32 [batch, seq_len] each.
DECODER_INPUTS = ("token_ids", "padding_mask")

# GPT-1 §4.1: "a simple weight initialization of N(0, 0.02) was sufficient".
GPT_INITIALIZER_STDDEV = 0.02


def gpt_kernel_initializer(stddev=GPT_INITIALIZER_STDDEV):
    """Normal, stddev 0.02 (GPT-1 §4.1, kept by GPT-2 and GPT-3). A fresh instance per
    call: an unseeded Keras initializer fixes its seed when created."""
    return keras.initializers.RandomNormal(stddev=stddev)


# --------------------------------------------------------------------------- embeddings


def add_token_and_position_embeddings(model, *, vocabulary_size, max_sequence_length,
                                      hidden_dim, dropout, dtype) -> None:
    """Gives ``model`` GPT's input layers: `embeddings` (keras-nlp
    `TokenAndPositionEmbedding`, the token matrix W_e plus learned positions W_p, N(0, 0.02)),
    `token_embedding` (its `ReversibleEmbedding`, to which the output layer is tied:
    P(u) = softmax(h_n W_e^T)) and `embeddings_dropout`. Run them with
    `embed_tokens_and_positions`."""
    model.embeddings = keras_nlp.layers.TokenAndPositionEmbedding(
        vocabulary_size=vocabulary_size,
        sequence_length=max_sequence_length,
        embedding_dim=hidden_dim,
        tie_weights=True,
        embeddings_initializer=gpt_kernel_initializer(),
        dtype=dtype,
        name="embeddings",
    )
    model.token_embedding = model.embeddings.token_embedding
    model.embeddings_dropout = keras.layers.Dropout(
        dropout, dtype=dtype, name="embeddings_dropout"
    )


def embed_tokens_and_positions(model, token_ids, training=None):
    """h_0 = U W_e + W_p after dropout ([B, T, H]), from the layers of
    `add_token_and_position_embeddings`."""
    return model.embeddings_dropout(model.embeddings(token_ids), training=training)


# --------------------------------------------------------------------------- blocks


def decoder_blocks(num_layers, *, block=TransformerDecoder,
                   kernel_initializer=None, layer_args=None, **block_args):
    """L decoder blocks named ``transformer_layer_{i}``: ``block(**block_args)`` (keras-nlp's
    `TransformerDecoder` with folded feed-forward and attention projections by default,
    models/folded_dense.py; used without cross-attention).

    ``kernel_initializer``, if given, is a zero-argument factory called once per block, so
    every block gets its own seed (otherwise the block's default initializer is used);
    ``layer_args(i)``, if given, returns the arguments that differ from block to block (e.g.
    GPT-3's alternating attention patterns)."""
    blocks = []
    for i in range(num_layers):
        args = dict(block_args)
        if layer_args is not None:
            args.update(layer_args(i))
        if kernel_initializer is not None:
            args["kernel_initializer"] = kernel_initializer()
        blocks.append(block(**args, name=f"transformer_layer_{i}"))
    return blocks


def decoder_states(blocks, x, padding_mask, training=None, block_input=None) -> dict:
    """Runs the embedding output ``x`` [B, T, H] through the decoder ``blocks`` (causal
    self-attention; ``padding_mask`` [B, T], 1 = real token), keeping every block's output.

    ``block_input(i, x)``, if given, transforms the input of block i (the character
    Transformer adds its per-layer position embeddings there).

    Returns a dict: `sequence_output` [B, T, H] (the last block's output, before any final
    LayerNorm) and `hidden_states` (L + 1 tensors [B, T, H]: ``x``, then each block's
    output)."""
    hidden_states = [x]
    for i, block in enumerate(blocks):
        if block_input is not None:
            x = block_input(i, x)
        x = block(x, decoder_padding_mask=padding_mask, training=training)
        hidden_states.append(x)
    return {"sequence_output": x, "hidden_states": hidden_states}


def decoder_graph(model, *, embed=None, block_input=None, final_layer_norm=None):
    """The functional graph of a decoder backbone ``model`` (its `transformer_layers`):
    `DECODER_INPUTS` -> ``embed(token_ids)`` (default `embed_tokens_and_positions`) ->
    the blocks (``block_input`` as in `decoder_states`) -> ``final_layer_norm`` if given
    (GPT-2 §2.3's LayerNorm after the final block).

    Returns (inputs, outputs): dicts of symbolic tensors; `sequence_output` [B, T, H]."""
    inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name)
              for name in DECODER_INPUTS}
    if embed is None:
        x = embed_tokens_and_positions(model, inputs["token_ids"])
    else:
        x = embed(inputs["token_ids"])
    x = decoder_states(model.transformer_layers, x, inputs["padding_mask"],
                       block_input=block_input)["sequence_output"]
    if final_layer_norm is not None:
        x = final_layer_norm(x)
    return inputs, {"sequence_output": x}


def residual_projection_kernels(blocks) -> list:
    """The kernels that write into the residual stream: per block, the attention output
    projection and the second MLP layer."""
    kernels = []
    for block in blocks:
        kernels.append(block._self_attention_layer._output_dense.kernel)
        kernels.append(block._feedforward_output_dense.kernel)
    return kernels


def scale_residual_projections(blocks) -> None:
    """GPT-2 §2.3: "We scale the weights of residual layers at initialization by a factor of
    1/sqrt(N) where N is the number of residual layers". Each block adds two residuals
    (attention and MLP), so N = 2 L and those kernels are re-drawn from
    N(0, 0.02 / sqrt(2 L)) (keras-nlp's blocks take a single kernel initializer)."""
    stddev = GPT_INITIALIZER_STDDEV / math.sqrt(2 * len(blocks))
    for kernel in residual_projection_kernels(blocks):
        # A fresh initializer per kernel: an unseeded Keras initializer repeats its
        # draw on every call.
        initializer = keras.initializers.RandomNormal(stddev=stddev)
        kernel.assign(initializer(kernel.shape, kernel.dtype))


__all__ = ["DECODER_INPUTS", "add_token_and_position_embeddings", "decoder_blocks",
           "decoder_graph", "decoder_states", "embed_tokens_and_positions",
           "gpt_kernel_initializer", "residual_projection_kernels", "scale_residual_projections"]
