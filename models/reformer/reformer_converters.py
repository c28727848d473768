"""Loading Hugging Face Reformer checkpoints (``ReformerModelWithLMHead``, ``model_type:
"reformer"``) into a `ReformerBackbone` / `ReformerCausalLM`.

Weight names (under ``reformer.``): ``embeddings.word_embeddings``, the axial tables
``embeddings.position_embeddings.weights.{0,1}`` ([n1, 1, d1] and [1, n2, d2]),
per layer ``encoder.layers.{i}.attention.layer_norm``, ``attention.self_attention.query /
key / value`` (local) or ``query_key / value`` (LSH), ``attention.output.dense``,
``feed_forward.layer_norm``, ``feed_forward.dense.dense``, ``feed_forward.output.dense``,
then ``encoder.layer_norm`` over the two streams; the LM head ``lm_head.decoder.weight`` /
``lm_head.bias``. Torch Linear weights are [out, in], Keras kernels [in, out].

Only what `ReformerBackbone` implements is accepted: a decoder (``is_decoder``), axial
positions, a single-factor ``num_buckets`` (the reference's factorised buckets and its
automatic choice when ``num_buckets`` is null are refused with a ValueError). The LSH
rotations are not weights (drawn at run time, §2): see `ReformerBackbone.call_with_rotations`.
"""

from __future__ import annotations

import os

import numpy as np

from lmfactory.models import hf_utils
from lmfactory.models.reformer.reformer_backbone import ReformerBackbone

PREFIXES = ("reformer.", "")
REQUIRED_CONFIG_KEYS = ("vocab_size", "hidden_size", "num_attention_heads",
                        "attention_head_size", "attn_layers", "feed_forward_size",
                        "axial_pos_shape", "axial_pos_embds_dim", "max_position_embeddings")
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "silu": "silu", "swish": "silu"}


def backbone_config(config: dict, source: str) -> dict:
    """`ReformerBackbone` kwargs of a Hugging Face ReformerConfig (ValueError on what the
    backbone does not implement)."""
    hf_utils.check_config(config, source, required_keys=REQUIRED_CONFIG_KEYS, what="Reformer",
                          model_type="reformer", converter="Reformer")
    if not config.get("is_decoder", False):
        raise ValueError(f"{source}: is_decoder is false; ReformerBackbone is the causal LM "
                         f"(is_decoder=true)")
    if not config.get("axial_pos_embds", True):
        raise ValueError(f"{source}: axial_pos_embds=false is not supported")
    buckets = config.get("num_buckets")
    if isinstance(buckets, list) and len(buckets) == 1:
        buckets = buckets[0]
    if not isinstance(buckets, int):
        raise ValueError(f"{source}: num_buckets={buckets!r}; only a single int is supported")
    activation = config.get("hidden_act", "relu")
    if activation not in ACTIVATIONS:
        raise ValueError(f"{source}: hidden_act {activation!r} is not supported "
                         f"({sorted(ACTIVATIONS)})")
    layers = list(config["attn_layers"])
    return {
        "vocabulary_size": int(config["vocab_size"]),
        "num_layers": int(config.get("num_hidden_layers", len(layers))),
        "num_heads": int(config["num_attention_heads"]),
        "hidden_dim": int(config["hidden_size"]),
        "head_dim": int(config["attention_head_size"]),
        "intermediate_dim": int(config["feed_forward_size"]),
        "attention_layers": layers,
        "max_sequence_length": int(config["max_position_embeddings"]),
        "axial_pos_shape": [int(n) for n in config["axial_pos_shape"]],
        "axial_pos_embds_dim": [int(d) for d in config["axial_pos_embds_dim"]],
        "lsh_attn_chunk_length": int(config.get("lsh_attn_chunk_length", 64)),
        "local_attn_chunk_length": int(config.get("local_attn_chunk_length", 64)),
        "num_hashes": int(config.get("num_hashes", 1)),
        "num_buckets": buckets,
        "lsh_num_chunks_before": int(config.get("lsh_num_chunks_before", 1)),
        "lsh_num_chunks_after": int(config.get("lsh_num_chunks_after", 0)),
        "local_num_chunks_before": int(config.get("local_num_chunks_before", 1)),
        "local_num_chunks_after": int(config.get("local_num_chunks_after", 0)),
        "chunk_size_feed_forward": int(config.get("chunk_size_feed_forward", 0)),
        "activation": ACTIVATIONS[activation],
        "dropout": float(config.get("hidden_dropout_prob", 0.05)),
        "lsh_attention_dropout": float(config.get("lsh_attention_probs_dropout_prob", 0.0)),
        "local_attention_dropout": float(
            config.get("local_attention_probs_dropout_prob", 0.05)),
        "layer_norm_epsilon": float(config.get("layer_norm_eps", 1e-12)),
    }


def load_weights(backbone: ReformerBackbone, read: hf_utils.WeightReader) -> None:
    """Copies every backbone weight of the checkpoint into ``backbone``."""
    hf_utils.set_embedding(backbone.token_embedding, read("embeddings.word_embeddings.weight"))
    for i, table in enumerate(backbone.position_embedding.tables):
        stored = read(f"embeddings.position_embeddings.weights.{i}")
        hf_utils.assign(table, np.reshape(stored, (stored.shape[i], stored.shape[-1])),
                        f"axial position table {i}")
    stack = backbone.reversible_stack
    for i, (attention, feed_forward) in enumerate(zip(stack.attention_blocks,
                                                      stack.feed_forward_blocks)):
        layer = f"encoder.layers.{i}"
        hf_utils.set_layer_norm(attention.layer_norm,
                                *hf_utils.layer_norm(read, f"{layer}.attention.layer_norm"))
        projections = ("query_key", "value") if hasattr(attention, "query_key") \
            else ("query", "key", "value")
        for name in projections:
            hf_utils.set_dense(getattr(attention, name),
                               read(f"{layer}.attention.self_attention.{name}.weight"))
        hf_utils.set_dense(attention.output_dense, read(f"{layer}.attention.output.dense.weight"))
        hf_utils.set_layer_norm(feed_forward.layer_norm, *hf_utils.layer_norm(
            read, f"{layer}.feed_forward.layer_norm"))
        hf_utils.set_dense(feed_forward.dense,
                           *hf_utils.linear(read, f"{layer}.feed_forward.dense.dense"))
        hf_utils.set_dense(feed_forward.output_dense,
                           *hf_utils.linear(read, f"{layer}.feed_forward.output.dense"))
    hf_utils.set_layer_norm(backbone.layer_norm,
                            *hf_utils.layer_norm(read, "encoder.layer_norm"))


def _load(path, dtype=None):
    path = os.fspath(path)
    config = hf_utils.read_config(path)
    backbone = ReformerBackbone(**backbone_config(config, path), dtype=dtype)
    read = hf_utils.WeightReader(hf_utils.read_weights(path), prefixes=PREFIXES)
    with hf_utils.reading(path):
        load_weights(backbone, read)
    return backbone, read, path


def from_huggingface(path, dtype=None) -> ReformerBackbone:
    """A `ReformerBackbone` with the weights of the Hugging Face folder ``path``; fails on
    a missing or unread backbone weight and on any shape mismatch."""
    backbone, read, path = _load(path, dtype)
    unread = read.unread(ignore_prefixes=("lm_head.",))
    if unread:
        raise ValueError(f"{path}: Reformer weights not read: {unread}")
    return backbone


def causal_lm_from_huggingface(path, dtype=None):
    """A `ReformerCausalLM` (backbone and LM head) from a ReformerModelWithLMHead folder."""
    from lmfactory.models.reformer.reformer_causal_lm import ReformerCausalLM

    backbone, read, path = _load(path, dtype)
    lm = ReformerCausalLM(backbone)
    with hf_utils.reading(path):
        hf_utils.set_dense(lm.lm_head, read("lm_head.decoder.weight"), read("lm_head.bias"))
    if read.unread():
        raise ValueError(f"{path}: Reformer weights not read: {read.unread()}")
    return lm


__all__ = ["backbone_config", "causal_lm_from_huggingface", "from_huggingface",
           "load_weights"]
