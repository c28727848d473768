"""Loading published GPT-2 checkpoints (Hugging Face format) into a `GPT2Backbone`.

A Hugging Face GPT-2 folder holds ``config.json`` (``model_type: "gpt2"``) and
``model.safetensors``. Weight names are bare (``wte.weight``, ``h.0.attn.c_attn.weight``,
as the published ``gpt2`` checkpoints ship them) or nested under ``transformer.``
(``GPT2LMHeadModel``). The OpenAI code's projections are "Conv1D" layers whose weight is
``[in, out]`` (a Keras kernel already), not torch Linear's ``[out, in]``; ``c_attn`` holds
the query, key and value projections side by side (``[H, 3H]``).

The mapping follows GPT-2 §2.3 (pre-LN blocks): per block ``ln_1`` -> attention ->
``attn.c_proj`` -> residual, ``ln_2`` -> ``mlp.c_fc`` -> GELU -> ``mlp.c_proj`` ->
residual; ``ln_f`` after the last block. The output layer is the token embedding
(``lm_head.weight``, when a checkpoint stores it, must equal ``wte.weight``). Every backbone
weight of the checkpoint must be read; ``attn.bias`` / ``attn.masked_bias`` are the causal
mask buffers older checkpoints saved, not weights.

The pieces shared with GPT-1's converter (same Conv1D layout and block weight names;
``models/gpt1/gpt1_converters.py``) are `conv1d`, `set_decoder_block`, `set_decoder`,
`check_tied_output`, `check_all_read` and `decoder_dimensions`.
"""

from __future__ import annotations

import os

import numpy as np

from lmfactory.models import hf_utils
from lmfactory.models.gpt2.gpt2_backbone import GPT2Backbone

PREFIXES = ("", "transformer.")
BACKBONE_SCOPES = ("wte.", "wpe.", "h.", "ln_f.")
# Registered buffers (the causal mask and its fill value) that older checkpoints saved.
BUFFER_SUFFIXES = (".attn.bias", ".attn.masked_bias")
OUTPUT_WEIGHT = "lm_head.weight"
# Hugging Face activation names that are GELU's tanh approximation (GPT2Backbone's).
TANH_GELU = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")
REQUIRED_CONFIG_KEYS = ("vocab_size", "n_embd", "n_layer", "n_head", "n_positions")


def conv1d(read: hf_utils.WeightReader, name: str) -> tuple:
    """``(weight, bias)`` of the Conv1D ``name`` in torch Linear layout (``[out, in]``), the
    layout the `hf_utils.set_*` helpers take."""
    return np.asarray(read(f"{name}.weight")).T, read(f"{name}.bias")


def set_decoder_block(block, read: hf_utils.WeightReader, layer: str) -> None:
    """A keras-nlp `TransformerDecoder` (no cross-attention) from the weights of the OpenAI
    block ``layer`` (e.g. ``"h.3"``): ``attn.c_attn`` (query, key, value side by side),
    ``attn.c_proj``, ``ln_1`` (the attention sub-layer's LayerNorm), ``mlp.c_fc``,
    ``mlp.c_proj`` and ``ln_2`` (the MLP sub-layer's LayerNorm). Whether the LayerNorms sit
    before (GPT-2) or after (GPT-1) their sub-layer is the block's `normalize_first`."""
    weight, bias = conv1d(read, f"{layer}.attn.c_attn")
    hidden = weight.shape[1]
    if weight.shape[0] != 3 * hidden:
        raise ValueError(f"{layer}.attn.c_attn.weight has shape {weight.shape[::-1]}, "
                         f"expected [{hidden}, {3 * hidden}]")
    query, key, value = (
        (weight[i * hidden:(i + 1) * hidden], bias[i * hidden:(i + 1) * hidden])
        for i in range(3))
    hf_utils.set_attention(block._self_attention_layer, query, key, value,
                           conv1d(read, f"{layer}.attn.c_proj"))
    hf_utils.set_layer_norm(block._self_attention_layer_norm,
                            *hf_utils.layer_norm(read, f"{layer}.ln_1"))
    hf_utils.set_dense(block._feedforward_intermediate_dense, *conv1d(read, f"{layer}.mlp.c_fc"))
    hf_utils.set_dense(block._feedforward_output_dense, *conv1d(read, f"{layer}.mlp.c_proj"))
    hf_utils.set_layer_norm(block._feedforward_layer_norm,
                            *hf_utils.layer_norm(read, f"{layer}.ln_2"))


def check_tied_output(read: hf_utils.WeightReader, token_embedding: np.ndarray) -> None:
    """The backbones tie the output layer to the token embedding (GPT-1 §3.1:
    P(u) = softmax(h_n W_e^T)); a stored ``lm_head.weight`` must be that matrix."""
    if read.has(OUTPUT_WEIGHT):
        output = read(OUTPUT_WEIGHT)
        if output.shape != token_embedding.shape or not np.array_equal(output, token_embedding):
            raise ValueError(f"{OUTPUT_WEIGHT} differs from the token embedding; untied "
                             f"output layers are not supported (the output layer is the "
                             f"transposed token embedding)")


def check_all_read(read: hf_utils.WeightReader, scopes, what: str) -> None:
    """Fails when a backbone weight (a name under one of ``scopes``, after an optional
    ``transformer.`` prefix) was not read: config and checkpoint disagree."""
    unread = []
    for name in read.unread():
        bare = next((name[len(p):] for p in PREFIXES if name.startswith(p)
                     and name[len(p):].startswith(tuple(scopes))), None)
        if bare is not None and not bare.endswith(BUFFER_SUFFIXES):
            unread.append(name)
    if unread:
        raise ValueError(f"checkpoint weights the {what} backbone did not read (config and "
                         f"checkpoint disagree?): {unread[:10]}"
                         f"{' ...' if len(unread) > 10 else ''}")


def backbone_config(config: dict, source: str) -> dict:
    """`GPT2Backbone` constructor kwargs from a Hugging Face GPT-2 ``config.json``; raises
    ValueError for what `GPT2Backbone` cannot represent."""
    hf_utils.check_config(config, source, required_keys=REQUIRED_CONFIG_KEYS, what="GPT-2",
                          model_type="gpt2", converter="GPT-2")
    activation = config.get("activation_function", "gelu_new")
    if activation not in TANH_GELU:
        raise ValueError(f"{source}: activation_function is {activation!r}; GPT2Backbone "
                         f"uses GELU's tanh approximation ({' / '.join(TANH_GELU)})")
    if not config.get("scale_attn_weights", True):
        raise ValueError(f"{source}: scale_attn_weights=false is not supported (attention "
                         f"scores are scaled by 1/sqrt(head_dim))")
    if config.get("scale_attn_by_inverse_layer_idx"):
        raise ValueError(f"{source}: scale_attn_by_inverse_layer_idx=true is not supported")
    if config.get("add_cross_attention"):
        raise ValueError(f"{source}: a GPT-2 with cross-attention is not a GPT2Backbone")
    return decoder_dimensions(config, int(config.get("n_inner") or 4 * int(config["n_embd"])))


def decoder_dimensions(config: dict, intermediate_dim: int) -> dict:
    """The backbone constructor kwargs of an OpenAI-layout Hugging Face config (GPT-2,
    GPT-1), with the feed-forward width ``intermediate_dim``: sizes, positions, the
    LayerNorm epsilon, and one dropout rate for embeddings, attention and residuals (the
    published configs use 0.1 for all three)."""
    return {
        "vocabulary_size": int(config["vocab_size"]),
        "num_layers": int(config["n_layer"]),
        "num_heads": int(config["n_head"]),
        "hidden_dim": int(config["n_embd"]),
        "intermediate_dim": intermediate_dim,
        "dropout": float(config.get("resid_pdrop", 0.1)),
        "max_sequence_length": int(config["n_positions"]),
        "layer_norm_epsilon": float(config.get("layer_norm_epsilon", 1e-5)),
    }


def set_decoder(backbone, read: hf_utils.WeightReader, *, token_embedding: str,
                position_embedding: str, final_layer_norm: str | None = None) -> None:
    """A GPT backbone (`add_token_and_position_embeddings` + keras-nlp decoder blocks) from
    an OpenAI-layout checkpoint: the token and position tables named ``token_embedding``
    and ``position_embedding``, the blocks ``h.{i}`` (`set_decoder_block`) and, for a pre-LN
    model, the LayerNorm after the last block; a stored output layer must be the token
    embedding (`check_tied_output`)."""
    tokens = read(token_embedding)
    hf_utils.set_embedding(backbone.token_embedding, tokens)
    hf_utils.set_embedding(backbone.embeddings.position_embedding, read(position_embedding))
    for i, block in enumerate(backbone.transformer_layers):
        set_decoder_block(block, read, f"h.{i}")
    if final_layer_norm is not None:
        hf_utils.set_layer_norm(backbone.layer_norm,
                                *hf_utils.layer_norm(read, final_layer_norm))
    check_tied_output(read, tokens)


def load_weights(backbone: GPT2Backbone, weights: dict, source: str) -> GPT2Backbone:
    """Copies Hugging Face-named GPT-2 weights into ``backbone``; fails on a missing or
    unread backbone weight and on any shape mismatch."""
    read = hf_utils.WeightReader(weights, prefixes=PREFIXES)
    with hf_utils.reading(source):
        set_decoder(backbone, read, token_embedding="wte.weight",
                    position_embedding="wpe.weight", final_layer_norm="ln_f")
        check_all_read(read, BACKBONE_SCOPES, "GPT-2")
    return backbone


def from_huggingface(path, dtype=None) -> GPT2Backbone:
    """A `GPT2Backbone` with the weights of the Hugging Face GPT-2 folder ``path``
    (``config.json`` + ``model.safetensors``)."""
    path = os.fspath(path)
    config = hf_utils.read_config(path)
    backbone = GPT2Backbone(**backbone_config(config, path), dtype=dtype)
    return load_weights(backbone, hf_utils.read_weights(path), path)


__all__ = ["backbone_config", "check_all_read", "check_tied_output", "conv1d",
           "from_huggingface", "load_weights", "set_decoder", "set_decoder_block"]
