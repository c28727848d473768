"""Loading Hugging Face T5 checkpoints (``T5ForConditionalGeneration`` / ``T5Model``,
``model_type: "t5"``) into a `T5Backbone`: T5 v1.0 (ReLU, output tied to ``shared``) and
T5.1.1 (``feed_forward_proj: "gated-gelu"``, ``tie_word_embeddings: false``, a separate
``lm_head``).

Layout (torch Linear weights are [out, in], Keras kernels [in, out]): ``shared`` is the
token embedding; per encoder block ``layer.0`` is self-attention (``SelfAttention.q/k/v/o``
and its ``layer_norm``, the RMS scale), ``layer.1`` the feed-forward (``DenseReluDense.wi``
or ``wi_0`` / ``wi_1``, ``wo``); a decoder block has ``layer.1`` = cross-attention
(``EncDecAttention``) and ``layer.2`` = feed-forward. Only block 0 of each stack holds
``relative_attention_bias`` [buckets, heads] (shared by the stack's layers, §2.1);
``final_layer_norm`` ends each stack. Every weight of the checkpoint must be read.
"""

from __future__ import annotations

import os

import numpy as np

from lmfactory.models import hf_utils
from lmfactory.models.t5.t5_backbone import T5Backbone

REQUIRED_CONFIG_KEYS = ("vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_heads")
FEED_FORWARD = {"relu": "relu", "gated-gelu": "gated-gelu"}
# Copies of ``shared`` that tied checkpoints may store.
TIED_COPIES = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")


def backbone_config(config: dict, source: str) -> dict:
    """`T5Backbone` kwargs from a Hugging Face T5 ``config.json``; ValueError for what the
    backbone cannot represent."""
    hf_utils.check_config(config, source, required_keys=REQUIRED_CONFIG_KEYS, what="T5",
                          model_type="t5", converter="T5")
    projection = config.get("feed_forward_proj", "relu")
    if projection not in FEED_FORWARD:
        raise ValueError(f"{source}: feed_forward_proj {projection!r} is not supported; "
                         f"T5Backbone has {sorted(FEED_FORWARD)}")
    return {
        "vocabulary_size": int(config["vocab_size"]),
        "num_layers": int(config["num_layers"]),
        "num_decoder_layers": int(config.get("num_decoder_layers") or config["num_layers"]),
        "num_heads": int(config["num_heads"]),
        "hidden_dim": int(config["d_model"]),
        "intermediate_dim": int(config["d_ff"]),
        "head_dim": int(config["d_kv"]),
        "feed_forward": FEED_FORWARD[projection],
        "tie_embeddings": bool(config.get("tie_word_embeddings", True)),
        "relative_attention_num_buckets": int(config.get("relative_attention_num_buckets",
                                                         32)),
        "relative_attention_max_distance": int(config.get("relative_attention_max_distance",
                                                          128)),
        "dropout": float(config.get("dropout_rate", 0.1)),
        "layer_norm_epsilon": float(config.get("layer_norm_epsilon", 1e-6)),
    }


def _kernel(read, name):
    return np.asarray(read(f"{name}.weight")).T


def _set_attention(attention, read, name):
    for layer, part in ((attention.query_dense, "q"), (attention.key_dense, "k"),
                        (attention.value_dense, "v"), (attention.output_dense, "o")):
        hf_utils.assign(layer.kernel, _kernel(read, f"{name}.{part}"), f"{name}.{part}")


def _set_norm(norm, read, name):
    hf_utils.assign(norm.scale, read(f"{name}.weight"), name)


def _set_feed_forward(feed_forward, read, name):
    if feed_forward.gate_dense is None:
        hf_utils.assign(feed_forward.input_dense.kernel, _kernel(read, f"{name}.wi"), name)
    else:
        hf_utils.assign(feed_forward.input_dense.kernel, _kernel(read, f"{name}.wi_0"), name)
        hf_utils.assign(feed_forward.gate_dense.kernel, _kernel(read, f"{name}.wi_1"), name)
    hf_utils.assign(feed_forward.output_dense.kernel, _kernel(read, f"{name}.wo"), name)


def _set_stack(stack, read, prefix):
    attention = "SelfAttention"
    hf_utils.assign(stack.relative_position_bias.embeddings,
                    read(f"{prefix}.block.0.layer.0.{attention}.relative_attention_bias.weight"),
                    f"{prefix} relative_attention_bias")
    for i, block in enumerate(stack.transformer_layers):
        name = f"{prefix}.block.{i}.layer"
        _set_attention(block.self_attention, read, f"{name}.0.{attention}")
        _set_norm(block.self_attention_layer_norm, read, f"{name}.0.layer_norm")
        feed_forward = 1
        if stack.is_decoder:
            _set_attention(block.cross_attention, read, f"{name}.1.EncDecAttention")
            _set_norm(block.cross_attention_layer_norm, read, f"{name}.1.layer_norm")
            feed_forward = 2
        _set_feed_forward(block.feed_forward, read, f"{name}.{feed_forward}.DenseReluDense")
        _set_norm(block.feed_forward_layer_norm, read, f"{name}.{feed_forward}.layer_norm")
    _set_norm(stack.final_layer_norm, read, f"{prefix}.final_layer_norm")


def load_weights(backbone: T5Backbone, weights: dict, source: str) -> T5Backbone:
    """Copies Hugging Face-named T5 weights into ``backbone``; fails on a missing or unread
    weight and on any shape mismatch."""
    read = hf_utils.WeightReader(weights)
    with hf_utils.reading(source):
        shared = read("shared.weight")
        hf_utils.assign(backbone.token_embedding.embeddings, shared, "shared")
        for copy in TIED_COPIES:
            if read.has(copy) and not np.array_equal(read(copy), shared):
                raise ValueError(f"{copy} differs from shared.weight")
        _set_stack(backbone.encoder, read, "encoder")
        _set_stack(backbone.decoder, read, "decoder")
        if backbone.tie_embeddings:
            if read.has("lm_head.weight") and not np.array_equal(read("lm_head.weight"),
                                                                  shared):
                raise ValueError("lm_head.weight differs from shared.weight although "
                                 "tie_word_embeddings is true")
        else:
            hf_utils.assign(backbone.token_embedding.reverse_embeddings,
                            np.asarray(read("lm_head.weight")).T, "lm_head")
        unread = read.unread()
        if unread:
            raise ValueError(f"checkpoint weights the T5 backbone did not read (config and "
                             f"checkpoint disagree?): {unread[:10]}")
    return backbone


def from_huggingface(path, dtype=None) -> T5Backbone:
    """A `T5Backbone` with the weights of the Hugging Face T5 folder ``path``
    (``config.json`` + ``model.safetensors``)."""
    path = os.fspath(path)
    config = hf_utils.read_config(path)
    backbone = T5Backbone(**backbone_config(config, path), dtype=dtype)
    return load_weights(backbone, hf_utils.read_weights(path), path)


__all__ = ["backbone_config", "from_huggingface", "load_weights"]
